// Tests that every cdp op parses, verifies and prints back unchanged.
// RUN: cdp-opt %s | cdp-opt | FileCheck %s

// CHECK-LABEL: func.func @add(%arg0: tensor<2x3x4xf32> {cdp.name = "a"}, %arg1: tensor<3x1xf32> {cdp.name = "b"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.add %arg0, %arg1 : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: return %0 : tensor<2x3x4xf32>
func.func @add(%arg0: tensor<2x3x4xf32> {cdp.name = "a"}, %arg1: tensor<3x1xf32> {cdp.name = "b"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
  %0 = cdp.add %arg0, %arg1 : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @averagepool(%arg0: tensor<2x3x4x4xf32> {cdp.name = "x"}) -> (tensor<2x3x5x5xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.average_pool %arg0 {count_include_pad = true, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<2x3x4x4xf32>) -> tensor<2x3x5x5xf32>
// CHECK-NEXT: return %0 : tensor<2x3x5x5xf32>
func.func @averagepool(%arg0: tensor<2x3x4x4xf32> {cdp.name = "x"}) -> (tensor<2x3x5x5xf32> {cdp.name = "y"}) {
  %0 = cdp.average_pool %arg0 {count_include_pad = true, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<2x3x4x4xf32>) -> tensor<2x3x5x5xf32>
  return %0 : tensor<2x3x5x5xf32>
}

// CHECK-LABEL: func.func @batchnormalization(%arg0: tensor<2x3x4x4xf32> {cdp.name = "x"}) -> (tensor<2x3x4x4xf32> {cdp.name = "y"}, tensor<3xf32> {cdp.name = "rm"}, tensor<3xf32> {cdp.name = "rv"}) {
// CHECK-NEXT: %0 = cdp.param "s" : tensor<3xf32>
// CHECK-NEXT: %1 = cdp.param "b" : tensor<3xf32>
// CHECK-NEXT: %2 = cdp.param "m" buffer : tensor<3xf32>
// CHECK-NEXT: %3 = cdp.param "v" buffer : tensor<3xf32>
// CHECK-NEXT: %output, %running_mean, %running_var = cdp.batch_norm %arg0, %0, %1, %2, %3 {training_mode = true} : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
// CHECK-NEXT: return %output, %running_mean, %running_var : tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>
func.func @batchnormalization(%arg0: tensor<2x3x4x4xf32> {cdp.name = "x"}) -> (tensor<2x3x4x4xf32> {cdp.name = "y"}, tensor<3xf32> {cdp.name = "rm"}, tensor<3xf32> {cdp.name = "rv"}) {
  %0 = cdp.param "s" : tensor<3xf32>
  %1 = cdp.param "b" : tensor<3xf32>
  %2 = cdp.param "m" buffer : tensor<3xf32>
  %3 = cdp.param "v" buffer : tensor<3xf32>
  %output, %running_mean, %running_var = cdp.batch_norm %arg0, %0, %1, %2, %3 {training_mode = true} : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  return %output, %running_mean, %running_var : tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>
}

// CHECK-LABEL: func.func @cast(%arg0: tensor<3xf32> {cdp.name = "x"}) -> (tensor<3xi64> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.cast %arg0 {to = i64} : (tensor<3xf32>) -> tensor<3xi64>
// CHECK-NEXT: return %0 : tensor<3xi64>
func.func @cast(%arg0: tensor<3xf32> {cdp.name = "x"}) -> (tensor<3xi64> {cdp.name = "y"}) {
  %0 = cdp.cast %arg0 {to = i64} : (tensor<3xf32>) -> tensor<3xi64>
  return %0 : tensor<3xi64>
}

// CHECK-LABEL: func.func @concat(%arg0: tensor<2x3xf32> {cdp.name = "a"}, %arg1: tensor<2x5xf32> {cdp.name = "b"}) -> (tensor<2x8xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.concat %arg0, %arg1 {axis = -1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: return %0 : tensor<2x8xf32>
func.func @concat(%arg0: tensor<2x3xf32> {cdp.name = "a"}, %arg1: tensor<2x5xf32> {cdp.name = "b"}) -> (tensor<2x8xf32> {cdp.name = "y"}) {
  %0 = cdp.concat %arg0, %arg1 {axis = -1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @constant(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<3xf32>
// CHECK-NEXT: %1 = cdp.mul %arg0, %0 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: return %1 : tensor<2x3xf32>
func.func @constant(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
  %0 = cdp.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<3xf32>
  %1 = cdp.mul %arg0, %0 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %1 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @constantofshape(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.constant_of_shape {shape = array<i64: 2, 3>, value = dense<1.500000e+00> : tensor<1xf32>} : tensor<2x3xf32>
// CHECK-NEXT: %1 = cdp.add %arg0, %0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: return %1 : tensor<2x3xf32>
func.func @constantofshape(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
  %0 = cdp.constant_of_shape {shape = array<i64: 2, 3>, value = dense<1.500000e+00> : tensor<1xf32>} : tensor<2x3xf32>
  %1 = cdp.add %arg0, %0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return %1 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @conv(%arg0: tensor<1x4x7x7xf32> {cdp.name = "x"}) -> (tensor<1x6x4x4xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.param "w" : tensor<6x2x3x3xf32>
// CHECK-NEXT: %1 = cdp.param "b" : tensor<6xf32>
// CHECK-NEXT: %2 = cdp.conv %arg0, %0, %1 {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x4x7x7xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<1x6x4x4xf32>
// CHECK-NEXT: return %2 : tensor<1x6x4x4xf32>
func.func @conv(%arg0: tensor<1x4x7x7xf32> {cdp.name = "x"}) -> (tensor<1x6x4x4xf32> {cdp.name = "y"}) {
  %0 = cdp.param "w" : tensor<6x2x3x3xf32>
  %1 = cdp.param "b" : tensor<6xf32>
  %2 = cdp.conv %arg0, %0, %1 {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x4x7x7xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<1x6x4x4xf32>
  return %2 : tensor<1x6x4x4xf32>
}

// CHECK-LABEL: func.func @div(%arg0: tensor<2x3x4xf32> {cdp.name = "a"}, %arg1: tensor<3x1xf32> {cdp.name = "b"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.div %arg0, %arg1 : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: return %0 : tensor<2x3x4xf32>
func.func @div(%arg0: tensor<2x3x4xf32> {cdp.name = "a"}, %arg1: tensor<3x1xf32> {cdp.name = "b"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
  %0 = cdp.div %arg0, %arg1 : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @dropout(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}, tensor<2x3xi1> {cdp.name = "mask"}) {
// CHECK-NEXT: %output, %mask = cdp.dropout %arg0 {ratio = 2.500000e-01 : f32, seed = 7 : i64, training_mode = true} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
// CHECK-NEXT: return %output, %mask : tensor<2x3xf32>, tensor<2x3xi1>
func.func @dropout(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}, tensor<2x3xi1> {cdp.name = "mask"}) {
  %output, %mask = cdp.dropout %arg0 {ratio = 2.500000e-01 : f32, seed = 7 : i64, training_mode = true} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
  return %output, %mask : tensor<2x3xf32>, tensor<2x3xi1>
}

// CHECK-LABEL: func.func @erf(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.erf %arg0 : tensor<2x3xf32>
// CHECK-NEXT: return %0 : tensor<2x3xf32>
func.func @erf(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
  %0 = cdp.erf %arg0 : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @expand(%arg0: tensor<3x1xf32> {cdp.name = "x"}) -> (tensor<2x3x6xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.expand %arg0 {shape = array<i64: 2, 1, 6>} : (tensor<3x1xf32>) -> tensor<2x3x6xf32>
// CHECK-NEXT: return %0 : tensor<2x3x6xf32>
func.func @expand(%arg0: tensor<3x1xf32> {cdp.name = "x"}) -> (tensor<2x3x6xf32> {cdp.name = "y"}) {
  %0 = cdp.expand %arg0 {shape = array<i64: 2, 1, 6>} : (tensor<3x1xf32>) -> tensor<2x3x6xf32>
  return %0 : tensor<2x3x6xf32>
}

// CHECK-LABEL: func.func @flatten(%arg0: tensor<2x3x4x5xf32> {cdp.name = "x"}) -> (tensor<6x20xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.flatten %arg0 {axis = 2 : i64} : (tensor<2x3x4x5xf32>) -> tensor<6x20xf32>
// CHECK-NEXT: return %0 : tensor<6x20xf32>
func.func @flatten(%arg0: tensor<2x3x4x5xf32> {cdp.name = "x"}) -> (tensor<6x20xf32> {cdp.name = "y"}) {
  %0 = cdp.flatten %arg0 {axis = 2 : i64} : (tensor<2x3x4x5xf32>) -> tensor<6x20xf32>
  return %0 : tensor<6x20xf32>
}

// CHECK-LABEL: func.func @gather(%arg0: tensor<2x5xi64> {cdp.name = "ids"}) -> (tensor<2x5x4xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.param "emb" : tensor<10x4xf32>
// CHECK-NEXT: %1 = cdp.gather %0, %arg0 : (tensor<10x4xf32>, tensor<2x5xi64>) -> tensor<2x5x4xf32>
// CHECK-NEXT: return %1 : tensor<2x5x4xf32>
func.func @gather(%arg0: tensor<2x5xi64> {cdp.name = "ids"}) -> (tensor<2x5x4xf32> {cdp.name = "y"}) {
  %0 = cdp.param "emb" : tensor<10x4xf32>
  %1 = cdp.gather %0, %arg0 : (tensor<10x4xf32>, tensor<2x5xi64>) -> tensor<2x5x4xf32>
  return %1 : tensor<2x5x4xf32>
}

// CHECK-LABEL: func.func @gelu(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.gelu %arg0 {approximate = "tanh"} : tensor<2x3xf32>
// CHECK-NEXT: return %0 : tensor<2x3xf32>
func.func @gelu(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
  %0 = cdp.gelu %arg0 {approximate = "tanh"} : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @gemm(%arg0: tensor<4x8xf32> {cdp.name = "a"}) -> (tensor<4x16xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.param "w" : tensor<16x8xf32>
// CHECK-NEXT: %1 = cdp.param "c" : tensor<16xf32>
// CHECK-NEXT: %2 = cdp.gemm %arg0, %0, %1 {alpha = 5.000000e-01 : f32, trans_b = true} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: return %2 : tensor<4x16xf32>
func.func @gemm(%arg0: tensor<4x8xf32> {cdp.name = "a"}) -> (tensor<4x16xf32> {cdp.name = "y"}) {
  %0 = cdp.param "w" : tensor<16x8xf32>
  %1 = cdp.param "c" : tensor<16xf32>
  %2 = cdp.gemm %arg0, %0, %1 {alpha = 5.000000e-01 : f32, trans_b = true} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return %2 : tensor<4x16xf32>
}

// CHECK-LABEL: func.func @globalaveragepool(%arg0: tensor<2x3x5x5xf32> {cdp.name = "x"}) -> (tensor<2x3x1x1xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.global_average_pool %arg0 : (tensor<2x3x5x5xf32>) -> tensor<2x3x1x1xf32>
// CHECK-NEXT: return %0 : tensor<2x3x1x1xf32>
func.func @globalaveragepool(%arg0: tensor<2x3x5x5xf32> {cdp.name = "x"}) -> (tensor<2x3x1x1xf32> {cdp.name = "y"}) {
  %0 = cdp.global_average_pool %arg0 : (tensor<2x3x5x5xf32>) -> tensor<2x3x1x1xf32>
  return %0 : tensor<2x3x1x1xf32>
}

// CHECK-LABEL: func.func @identity(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.identity %arg0 : tensor<2x3xf32>
// CHECK-NEXT: return %0 : tensor<2x3xf32>
func.func @identity(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
  %0 = cdp.identity %arg0 : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @layernormalization(%arg0: tensor<2x5x8xf32> {cdp.name = "x"}) -> (tensor<2x5x8xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.param "s" : tensor<8xf32>
// CHECK-NEXT: %1 = cdp.param "b" : tensor<8xf32>
// CHECK-NEXT: %output, %mean, %inv_std_dev = cdp.layer_norm %arg0, %0, %1 : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x1xf32>, tensor<2x5x1xf32>)
// CHECK-NEXT: return %output : tensor<2x5x8xf32>
func.func @layernormalization(%arg0: tensor<2x5x8xf32> {cdp.name = "x"}) -> (tensor<2x5x8xf32> {cdp.name = "y"}) {
  %0 = cdp.param "s" : tensor<8xf32>
  %1 = cdp.param "b" : tensor<8xf32>
  %output, %mean, %inv_std_dev = cdp.layer_norm %arg0, %0, %1 : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x1xf32>, tensor<2x5x1xf32>)
  return %output : tensor<2x5x8xf32>
}

// CHECK-LABEL: func.func @logsoftmax(%arg0: tensor<2x10xf32> {cdp.name = "x"}) -> (tensor<2x10xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.log_softmax %arg0 : (tensor<2x10xf32>) -> tensor<2x10xf32>
// CHECK-NEXT: return %0 : tensor<2x10xf32>
func.func @logsoftmax(%arg0: tensor<2x10xf32> {cdp.name = "x"}) -> (tensor<2x10xf32> {cdp.name = "y"}) {
  %0 = cdp.log_softmax %arg0 : (tensor<2x10xf32>) -> tensor<2x10xf32>
  return %0 : tensor<2x10xf32>
}

// CHECK-LABEL: func.func @matmul(%arg0: tensor<5x1x2x3xf32> {cdp.name = "a"}, %arg1: tensor<4x3x6xf32> {cdp.name = "b"}) -> (tensor<5x4x2x6xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.matmul %arg0, %arg1 : (tensor<5x1x2x3xf32>, tensor<4x3x6xf32>) -> tensor<5x4x2x6xf32>
// CHECK-NEXT: return %0 : tensor<5x4x2x6xf32>
func.func @matmul(%arg0: tensor<5x1x2x3xf32> {cdp.name = "a"}, %arg1: tensor<4x3x6xf32> {cdp.name = "b"}) -> (tensor<5x4x2x6xf32> {cdp.name = "y"}) {
  %0 = cdp.matmul %arg0, %arg1 : (tensor<5x1x2x3xf32>, tensor<4x3x6xf32>) -> tensor<5x4x2x6xf32>
  return %0 : tensor<5x4x2x6xf32>
}

// CHECK-LABEL: func.func @maxpool(%arg0: tensor<1x1x6x6xf32> {cdp.name = "x"}) -> (tensor<1x1x3x3xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.max_pool %arg0 {ceil_mode = true, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x1x6x6xf32>) -> tensor<1x1x3x3xf32>
// CHECK-NEXT: return %0 : tensor<1x1x3x3xf32>
func.func @maxpool(%arg0: tensor<1x1x6x6xf32> {cdp.name = "x"}) -> (tensor<1x1x3x3xf32> {cdp.name = "y"}) {
  %0 = cdp.max_pool %arg0 {ceil_mode = true, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x1x6x6xf32>) -> tensor<1x1x3x3xf32>
  return %0 : tensor<1x1x3x3xf32>
}

// CHECK-LABEL: func.func @mul(%arg0: tensor<2x3x4xf32> {cdp.name = "a"}, %arg1: tensor<3x1xf32> {cdp.name = "b"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.mul %arg0, %arg1 : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: return %0 : tensor<2x3x4xf32>
func.func @mul(%arg0: tensor<2x3x4xf32> {cdp.name = "a"}, %arg1: tensor<3x1xf32> {cdp.name = "b"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
  %0 = cdp.mul %arg0, %arg1 : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @negativeloglikelihoodloss(%arg0: tensor<4x5x2xf32> {cdp.name = "x"}, %arg1: tensor<4x2xi64> {cdp.name = "t"}) -> (tensor<4x2xf32> {cdp.name = "loss"}) {
// CHECK-NEXT: %0 = cdp.param "w" : tensor<5xf32>
// CHECK-NEXT: %1 = cdp.nll_loss %arg0, %arg1, %0 {reduction = "none"} : (tensor<4x5x2xf32>, tensor<4x2xi64>, tensor<5xf32>) -> tensor<4x2xf32>
// CHECK-NEXT: return %1 : tensor<4x2xf32>
func.func @negativeloglikelihoodloss(%arg0: tensor<4x5x2xf32> {cdp.name = "x"}, %arg1: tensor<4x2xi64> {cdp.name = "t"}) -> (tensor<4x2xf32> {cdp.name = "loss"}) {
  %0 = cdp.param "w" : tensor<5xf32>
  %1 = cdp.nll_loss %arg0, %arg1, %0 {reduction = "none"} : (tensor<4x5x2xf32>, tensor<4x2xi64>, tensor<5xf32>) -> tensor<4x2xf32>
  return %1 : tensor<4x2xf32>
}

// CHECK-LABEL: func.func @pow(%arg0: tensor<2x3x4xf32> {cdp.name = "a"}, %arg1: tensor<3x1xf32> {cdp.name = "b"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.pow %arg0, %arg1 : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: return %0 : tensor<2x3x4xf32>
func.func @pow(%arg0: tensor<2x3x4xf32> {cdp.name = "a"}, %arg1: tensor<3x1xf32> {cdp.name = "b"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
  %0 = cdp.pow %arg0, %arg1 : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @reducemean(%arg0: tensor<2x3x4xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.reduce_mean %arg0 {axes = array<i64: 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: return %0 : tensor<2x3xf32>
func.func @reducemean(%arg0: tensor<2x3x4xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
  %0 = cdp.reduce_mean %arg0 {axes = array<i64: 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @reducesum(%arg0: tensor<2x3x4xf32> {cdp.name = "x"}) -> (tensor<1x3x1xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.reduce_sum %arg0 {axes = array<i64: 0, 2>} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
// CHECK-NEXT: return %0 : tensor<1x3x1xf32>
func.func @reducesum(%arg0: tensor<2x3x4xf32> {cdp.name = "x"}) -> (tensor<1x3x1xf32> {cdp.name = "y"}) {
  %0 = cdp.reduce_sum %arg0 {axes = array<i64: 0, 2>} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
  return %0 : tensor<1x3x1xf32>
}

// CHECK-LABEL: func.func @relu(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.relu %arg0 : tensor<2x3xf32>
// CHECK-NEXT: return %0 : tensor<2x3xf32>
func.func @relu(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
  %0 = cdp.relu %arg0 : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @reshape(%arg0: tensor<2x3x4xf32> {cdp.name = "x"}) -> (tensor<2x12xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.reshape %arg0 {shape = array<i64: 2, 12>} : (tensor<2x3x4xf32>) -> tensor<2x12xf32>
// CHECK-NEXT: return %0 : tensor<2x12xf32>
func.func @reshape(%arg0: tensor<2x3x4xf32> {cdp.name = "x"}) -> (tensor<2x12xf32> {cdp.name = "y"}) {
  %0 = cdp.reshape %arg0 {shape = array<i64: 2, 12>} : (tensor<2x3x4xf32>) -> tensor<2x12xf32>
  return %0 : tensor<2x12xf32>
}

// CHECK-LABEL: func.func @shape(%arg0: tensor<2x3x4xf32> {cdp.name = "x"}) -> (tensor<2xi64> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.shape %arg0 {start = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2xi64>
// CHECK-NEXT: return %0 : tensor<2xi64>
func.func @shape(%arg0: tensor<2x3x4xf32> {cdp.name = "x"}) -> (tensor<2xi64> {cdp.name = "y"}) {
  %0 = cdp.shape %arg0 {start = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// CHECK-LABEL: func.func @sigmoid(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.sigmoid %arg0 : tensor<2x3xf32>
// CHECK-NEXT: return %0 : tensor<2x3xf32>
func.func @sigmoid(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
  %0 = cdp.sigmoid %arg0 : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @slice(%arg0: tensor<2x6x4xf32> {cdp.name = "x"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.slice %arg0 {axes = array<i64: 1, 2>, ends = array<i64: 9223372036854775807, -9223372036854775807>, starts = array<i64: 1, -1>, steps = array<i64: 2, -1>} : (tensor<2x6x4xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: return %0 : tensor<2x3x4xf32>
func.func @slice(%arg0: tensor<2x6x4xf32> {cdp.name = "x"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
  %0 = cdp.slice %arg0 {axes = array<i64: 1, 2>, ends = array<i64: 9223372036854775807, -9223372036854775807>, starts = array<i64: 1, -1>, steps = array<i64: 2, -1>} : (tensor<2x6x4xf32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// Steps near +-2^63 keep one element (the shape rule counts without overflow).
// CHECK-LABEL: func.func @slice_extreme_steps
// CHECK-NEXT: cdp.slice {{.*}} -> tensor<1x1x0xf32>
func.func @slice_extreme_steps(%arg0: tensor<2x6x4xf32> {cdp.name = "x"}) -> (tensor<1x1x0xf32> {cdp.name = "y"}) {
  %0 = cdp.slice %arg0 {axes = array<i64: 0, 1, 2>, ends = array<i64: 9223372036854775807, -9223372036854775808, 0>, starts = array<i64: 0, 5, 0>, steps = array<i64: 9223372036854775807, -9223372036854775806, -9223372036854775808>} : (tensor<2x6x4xf32>) -> tensor<1x1x0xf32>
  return %0 : tensor<1x1x0xf32>
}

// CHECK-LABEL: func.func @softmax(%arg0: tensor<2x3x4xf32> {cdp.name = "x"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.softmax %arg0 {axis = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: return %0 : tensor<2x3x4xf32>
func.func @softmax(%arg0: tensor<2x3x4xf32> {cdp.name = "x"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
  %0 = cdp.softmax %arg0 {axis = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @softmaxcrossentropyloss(%arg0: tensor<4x10xf32> {cdp.name = "x"}, %arg1: tensor<4xi64> {cdp.name = "labels"}) -> (tensor<f32> {cdp.name = "loss"}, tensor<4x10xf32> {cdp.name = "logp"}) {
// CHECK-NEXT: %loss, %log_prob = cdp.softmax_cross_entropy_loss %arg0, %arg1 {ignore_index = -1 : i64} : (tensor<4x10xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x10xf32>)
// CHECK-NEXT: return %loss, %log_prob : tensor<f32>, tensor<4x10xf32>
func.func @softmaxcrossentropyloss(%arg0: tensor<4x10xf32> {cdp.name = "x"}, %arg1: tensor<4xi64> {cdp.name = "labels"}) -> (tensor<f32> {cdp.name = "loss"}, tensor<4x10xf32> {cdp.name = "logp"}) {
  %loss, %log_prob = cdp.softmax_cross_entropy_loss %arg0, %arg1 {ignore_index = -1 : i64} : (tensor<4x10xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x10xf32>)
  return %loss, %log_prob : tensor<f32>, tensor<4x10xf32>
}

// GELU reading 2-byte values prints both types; a product may store its
// rounded result in 2 bytes; the loss may read 2-byte scores; mul and
// dropout may read and store 2-byte values under round_result, add read
// them whatever it rounds to.
// CHECK-LABEL: func.func @narrow_forms
// CHECK-NEXT: %0 = cdp.gelu %arg0 {round_result = "bf16"} : (tensor<4x10xbf16>) -> tensor<4x10xf32>
// CHECK-NEXT: %1 = cdp.matmul %arg0, %arg2 {narrow_operands = "bf16", round_result = "bf16"} : (tensor<4x10xbf16>, tensor<10x10xbf16>) -> tensor<4x10xbf16>
// CHECK-NEXT: %loss = cdp.softmax_cross_entropy_loss %1, %arg1 : (tensor<4x10xbf16>, tensor<4xi64>) -> tensor<f32>
// CHECK-NEXT: %2 = cdp.mul %1, %arg3 {round_result = "bf16"} : (tensor<4x10xbf16>, tensor<f32>) -> tensor<4x10xbf16>
// CHECK-NEXT: %3 = cdp.mul %1, %arg3 {round_result = "bf16"} : (tensor<4x10xbf16>, tensor<f32>) -> tensor<4x10xf32>
// CHECK-NEXT: %output, %mask = cdp.dropout %2 {ratio = 1.000000e-01 : f32, round_result = "bf16", training_mode = true} : (tensor<4x10xbf16>) -> (tensor<4x10xbf16>, tensor<4x10xi1>)
// CHECK-NEXT: %4 = cdp.add %output, %0 : (tensor<4x10xbf16>, tensor<4x10xf32>) -> tensor<4x10xf32>
func.func @narrow_forms(%arg0: tensor<4x10xbf16>, %arg1: tensor<4xi64>, %arg2: tensor<10x10xbf16>, %arg3: tensor<f32>) -> (tensor<4x10xf32>, tensor<f32>, tensor<4x10xbf16>, tensor<4x10xf32>, tensor<4x10xf32>) {
  %0 = cdp.gelu %arg0 {approximate = "none", round_result = "bf16"} : (tensor<4x10xbf16>) -> tensor<4x10xf32>
  %1 = cdp.matmul %arg0, %arg2 {narrow_operands = "bf16", round_result = "bf16"} : (tensor<4x10xbf16>, tensor<10x10xbf16>) -> tensor<4x10xbf16>
  %loss = cdp.softmax_cross_entropy_loss %1, %arg1 : (tensor<4x10xbf16>, tensor<4xi64>) -> tensor<f32>
  %2 = cdp.mul %1, %arg3 {round_result = "bf16"} : (tensor<4x10xbf16>, tensor<f32>) -> tensor<4x10xbf16>
  %3 = cdp.mul %1, %arg3 {round_result = "bf16"} : (tensor<4x10xbf16>, tensor<f32>) -> tensor<4x10xf32>
  %output, %mask = cdp.dropout %2 {ratio = 0.1 : f32, round_result = "bf16", training_mode = true} : (tensor<4x10xbf16>) -> (tensor<4x10xbf16>, tensor<4x10xi1>)
  %4 = cdp.add %output, %0 : (tensor<4x10xbf16>, tensor<4x10xf32>) -> tensor<4x10xf32>
  return %0, %loss, %2, %3, %4 : tensor<4x10xf32>, tensor<f32>, tensor<4x10xbf16>, tensor<4x10xf32>, tensor<4x10xf32>
}

// The log-probabilities are optional (cdp-recompute-log-probabilities).
// CHECK-LABEL: func.func @softmaxcrossentropyloss_without_log_prob
// CHECK-NEXT: %loss = cdp.softmax_cross_entropy_loss %arg0, %arg1 : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
func.func @softmaxcrossentropyloss_without_log_prob(%arg0: tensor<4x10xf32>, %arg1: tensor<4xi64>) -> tensor<f32> {
  %loss = cdp.softmax_cross_entropy_loss %arg0, %arg1 : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @split(%arg0: tensor<2x4xf32> {cdp.name = "x"}) -> (tensor<2x1xf32> {cdp.name = "y0"}, tensor<2x3xf32> {cdp.name = "y1"}) {
// CHECK-NEXT: %0:2 = cdp.split %arg0 {axis = 1 : i64, split = array<i64: 1, 3>} : (tensor<2x4xf32>) -> (tensor<2x1xf32>, tensor<2x3xf32>)
// CHECK-NEXT: return %0#0, %0#1 : tensor<2x1xf32>, tensor<2x3xf32>
func.func @split(%arg0: tensor<2x4xf32> {cdp.name = "x"}) -> (tensor<2x1xf32> {cdp.name = "y0"}, tensor<2x3xf32> {cdp.name = "y1"}) {
  %0:2 = cdp.split %arg0 {axis = 1 : i64, split = array<i64: 1, 3>} : (tensor<2x4xf32>) -> (tensor<2x1xf32>, tensor<2x3xf32>)
  return %0#0, %0#1 : tensor<2x1xf32>, tensor<2x3xf32>
}

// CHECK-LABEL: func.func @sqrt(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.sqrt %arg0 : tensor<2x3xf32>
// CHECK-NEXT: return %0 : tensor<2x3xf32>
func.func @sqrt(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
  %0 = cdp.sqrt %arg0 : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @squeeze(%arg0: tensor<2x1x4xf32> {cdp.name = "x"}) -> (tensor<2x4xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.squeeze %arg0 {axes = array<i64: 1>} : (tensor<2x1x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT: return %0 : tensor<2x4xf32>
func.func @squeeze(%arg0: tensor<2x1x4xf32> {cdp.name = "x"}) -> (tensor<2x4xf32> {cdp.name = "y"}) {
  %0 = cdp.squeeze %arg0 {axes = array<i64: 1>} : (tensor<2x1x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// CHECK-LABEL: func.func @sub(%arg0: tensor<2x3x4xf32> {cdp.name = "a"}, %arg1: tensor<3x1xf32> {cdp.name = "b"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.sub %arg0, %arg1 : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: return %0 : tensor<2x3x4xf32>
func.func @sub(%arg0: tensor<2x3x4xf32> {cdp.name = "a"}, %arg1: tensor<3x1xf32> {cdp.name = "b"}) -> (tensor<2x3x4xf32> {cdp.name = "y"}) {
  %0 = cdp.sub %arg0, %arg1 : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @tanh(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.tanh %arg0 : tensor<2x3xf32>
// CHECK-NEXT: return %0 : tensor<2x3xf32>
func.func @tanh(%arg0: tensor<2x3xf32> {cdp.name = "x"}) -> (tensor<2x3xf32> {cdp.name = "y"}) {
  %0 = cdp.tanh %arg0 : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @transpose(%arg0: tensor<2x3x4xf32> {cdp.name = "x"}) -> (tensor<4x2x3xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.transpose %arg0 {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK-NEXT: return %0 : tensor<4x2x3xf32>
func.func @transpose(%arg0: tensor<2x3x4xf32> {cdp.name = "x"}) -> (tensor<4x2x3xf32> {cdp.name = "y"}) {
  %0 = cdp.transpose %arg0 {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  return %0 : tensor<4x2x3xf32>
}

// CHECK-LABEL: func.func @unsqueeze(%arg0: tensor<2x4xf32> {cdp.name = "x"}) -> (tensor<1x2x4x1xf32> {cdp.name = "y"}) {
// CHECK-NEXT: %0 = cdp.unsqueeze %arg0 {axes = array<i64: 0, -1>} : (tensor<2x4xf32>) -> tensor<1x2x4x1xf32>
// CHECK-NEXT: return %0 : tensor<1x2x4x1xf32>
func.func @unsqueeze(%arg0: tensor<2x4xf32> {cdp.name = "x"}) -> (tensor<1x2x4x1xf32> {cdp.name = "y"}) {
  %0 = cdp.unsqueeze %arg0 {axes = array<i64: 0, -1>} : (tensor<2x4xf32>) -> tensor<1x2x4x1xf32>
  return %0 : tensor<1x2x4x1xf32>
}

// CHECK-LABEL: func.func @param_kinds
// CHECK-NEXT: cdp.param "fc.weight" {value = dense<1.000000e+00> : tensor<2xf32>} : tensor<2xf32>
// CHECK-NEXT: cdp.param "bn.running_mean" buffer : tensor<2xf32>
func.func @param_kinds() -> (tensor<2xf32>, tensor<2xf32>) {
  %0 = cdp.param "fc.weight" {value = dense<1.0> : tensor<2xf32>} : tensor<2xf32>
  %1 = cdp.param "bn.running_mean" buffer : tensor<2xf32>
  return %0, %1 : tensor<2xf32>, tensor<2xf32>
}
