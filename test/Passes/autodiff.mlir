// RUN: cdp-opt %s -split-input-file -cdp-autodiff | FileCheck %s

// Tests that a tied weight used by two matmuls gets one gradient: the sum
// of both contributions, and that buffers and frozen-free int tensors get
// none. The products' gradients read their operands transposed through
// the trans flags (dH = dY W^T, dW = H^T dY), with no Transpose op.
// CHECK-LABEL: cdp.param "w" : tensor<3x3xf32>
// CHECK: cdp.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DY:.+]] = cdp.expand
// CHECK: %[[DH:.+]] = cdp.matmul %[[DY]], %[[W:.+]] {trans_b = true}
// CHECK: %[[DW2:.+]] = cdp.matmul %[[H:.+]], %[[DY]] {trans_a = true}
// CHECK: %[[DW1:.+]] = cdp.matmul %arg0, %[[DH]] {trans_a = true}
// CHECK: %[[SUM:.+]] = cdp.add %[[DW2]], %[[DW1]]
// CHECK: cdp.gradient "w" %[[SUM]] : tensor<3x3xf32>
// CHECK-NOT: cdp.gradient
func.func @main(%x: tensor<2x3xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %w = cdp.param "w" : tensor<3x3xf32>
  %h = cdp.matmul %x, %w : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
  %y = cdp.matmul %h, %w : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
  %l = cdp.reduce_sum %y {axes = array<i64>, keepdims = false} : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests a Linear over a sequence, x @ W^T read through trans_b: the weight
// gradient is one product of the stacked rows, dW = dY_rows^T x_rows, with
// no batch of products and no reduction over the sequence.
// CHECK-LABEL: cdp.param "w" : tensor<5x3xf32>
// CHECK-DAG: %[[XR:.+]] = cdp.reshape %arg0 {shape = array<i64: 8, 3>}
// CHECK-DAG: %[[DYR:.+]] = cdp.reshape %{{.+}} {shape = array<i64: 8, 5>}
// CHECK: %[[DW:.+]] = cdp.matmul %[[DYR]], %[[XR]] {trans_a = true} : (tensor<8x5xf32>, tensor<8x3xf32>) -> tensor<5x3xf32>
// CHECK-NOT: cdp.reduce_to
// CHECK: cdp.gradient "w" %[[DW]] : tensor<5x3xf32>
func.func @main(%x: tensor<4x2x3xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %w = cdp.param "w" : tensor<5x3xf32>
  %y = cdp.matmul %x, %w {trans_b = true} : (tensor<4x2x3xf32>, tensor<5x3xf32>) -> tensor<4x2x5xf32>
  %l = cdp.reduce_sum %y {axes = array<i64>, keepdims = false} : (tensor<4x2x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests the rules of a conv + relu + max_pool chain: conv_grad_weight for the
// weight, a reduce_sum over (N, H, W) for the bias, no conv_grad_input since
// the input is not trainable. The ReLU's gradient reads the ReLU's output (as
// PyTorch's does), which max_pool's gradient keeps anyway, not its input.
// CHECK-LABEL: cdp.param "w" : tensor<4x1x3x3xf32>
// CHECK: %[[R:.+]] = cdp.relu
// CHECK: cdp.max_pool_grad
// CHECK: cdp.unary_grad %{{.+}}, %[[R]] {kind = "relu"}
// CHECK-NOT: cdp.conv_grad_input
// CHECK: %[[DW:.+]] = cdp.conv_grad_weight {{.*}}weight_shape = array<i64: 4, 1, 3, 3>
// CHECK: %[[DB:.+]] = cdp.reduce_sum {{.*}}{axes = array<i64: 0, 2, 3>, keepdims = false}
// CHECK: cdp.gradient "w" %[[DW]]
// CHECK: cdp.gradient "b" %[[DB]]
func.func @main(%x: tensor<2x1x6x6xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %w = cdp.param "w" : tensor<4x1x3x3xf32>
  %b = cdp.param "b" : tensor<4xf32>
  %c = cdp.conv %x, %w, %b {pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>} : (tensor<2x1x6x6xf32>, tensor<4x1x3x3xf32>, tensor<4xf32>) -> tensor<2x4x6x6xf32>
  %r = cdp.relu %c : tensor<2x4x6x6xf32>
  %p = cdp.max_pool %r {kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>} : (tensor<2x4x6x6xf32>) -> tensor<2x4x3x3xf32>
  %l = cdp.reduce_mean %p {axes = array<i64>, keepdims = false} : (tensor<2x4x3x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that training-mode BatchNorm gets batch_norm_grad and writes its
// running statistics back into its buffers, with the unbiased variance.
// CHECK-LABEL: cdp.param "scale" : tensor<3xf32>
// CHECK: cdp.batch_norm {{.*}}{training_mode = true, unbiased_running_var = true}
// CHECK: %{{.+}}, %[[DS:.+]], %[[DB:.+]] = cdp.batch_norm_grad {{.*}}{training_mode = true}
// CHECK: cdp.gradient "scale" %[[DS]]
// CHECK: cdp.gradient "bias" %[[DB]]
// CHECK: cdp.assign "mean" %{{.+}}, %running_mean
// CHECK: cdp.assign "var" %{{.+}}, %running_var
func.func @main(%x: tensor<2x3x2x2xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %s = cdp.param "scale" : tensor<3xf32>
  %b = cdp.param "bias" : tensor<3xf32>
  %m = cdp.param "mean" buffer : tensor<3xf32>
  %v = cdp.param "var" buffer : tensor<3xf32>
  %y, %rm, %rv = cdp.batch_norm %x, %s, %b, %m, %v {training_mode = true} : (tensor<2x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>)
  %l = cdp.reduce_sum %y {axes = array<i64>, keepdims = false} : (tensor<2x3x2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests a skip connection: the input of the residual block gets both the
// direct and the transformed contribution.
// CHECK-LABEL: cdp.param "w" : tensor<4xf32>
// CHECK: %[[DT:.+]] = cdp.unary_grad {{.*}}kind = "tanh"
// CHECK: %[[SUM:.+]] = cdp.add %{{.+}}, %[[DT]]
// CHECK: cdp.gradient "w" %[[SUM]]
func.func @main() -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %w = cdp.param "w" : tensor<4xf32>
  %t = cdp.tanh %w : tensor<4xf32>
  %y = cdp.add %w, %t : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = cdp.reduce_sum %y {axes = array<i64>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a gradient no operand takes is not computed: the scores'
// addend is a mask-derived constant (as attention's), so the add's rule
// must leave no reduce_to of the gradient to the addend's broadcast shape.
// CHECK-LABEL: cdp.param "w" : tensor<4x4xf32>
// CHECK-NOT: cdp.reduce_to
// CHECK: cdp.gradient "w"
func.func @main(%x: tensor<2x4x4xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %w = cdp.param "w" : tensor<4x4xf32>
  %mask = cdp.constant dense<0.0> : tensor<1x4x4xf32>
  %s = cdp.matmul %x, %w : (tensor<2x4x4xf32>, tensor<4x4xf32>) -> tensor<2x4x4xf32>
  %a = cdp.add %s, %mask : (tensor<2x4x4xf32>, tensor<1x4x4xf32>) -> tensor<2x4x4xf32>
  %p = cdp.softmax %a : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %l = cdp.reduce_sum %p {axes = array<i64>, keepdims = false} : (tensor<2x4x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
