// RUN: cdp-opt %s -split-input-file -cdp-fuse-roundings | FileCheck %s

// A round_to of element-wise arithmetic read by the rounding alone, in the
// same stage and phase, becomes the op's round_result; one whose input has
// another reader, comes from another stage or phase, or from an op that is
// not arithmetic stays.
// CHECK-LABEL: func.func @main
// CHECK: %[[M:.+]] = cdp.mul %arg0, %arg1 {cdp.stage = 1 : i64, round_result = "bf16"}
// CHECK-NEXT: %[[A:.+]] = cdp.add %[[M]], %arg1 {cdp.phase = "backward", cdp.stage = 1 : i64, round_result = "f16"}
// CHECK-NEXT: %[[S:.+]] = cdp.sub %arg0, %arg1 {cdp.stage = 1 : i64}
// CHECK-NEXT: %[[SR:.+]] = cdp.round_to %[[S]] {cdp.stage = 1 : i64, format = "bf16"}
// CHECK-NEXT: %[[D:.+]] = cdp.div %arg0, %arg1 {cdp.stage = 1 : i64}
// CHECK-NEXT: %[[DR:.+]] = cdp.round_to %[[D]] {cdp.stage = 2 : i64, format = "bf16"}
// CHECK-NEXT: %[[T:.+]] = cdp.tanh %arg0
// CHECK-NEXT: %[[TR:.+]] = cdp.round_to %[[T]] {format = "bf16"}
// CHECK-NEXT: return %[[A]], %[[SR]], %[[S]], %[[DR]], %[[TR]]
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %m = cdp.mul %x, %y {cdp.stage = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %mr = cdp.round_to %m {cdp.stage = 1 : i64, format = "bf16"} : tensor<4xf32>
  %a = cdp.add %mr, %y {cdp.phase = "backward", cdp.stage = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %ar = cdp.round_to %a {cdp.phase = "backward", cdp.stage = 1 : i64, format = "f16"} : tensor<4xf32>
  %s = cdp.sub %x, %y {cdp.stage = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %sr = cdp.round_to %s {cdp.stage = 1 : i64, format = "bf16"} : tensor<4xf32>
  %d = cdp.div %x, %y {cdp.stage = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %dr = cdp.round_to %d {cdp.stage = 2 : i64, format = "bf16"} : tensor<4xf32>
  %t = cdp.tanh %x : tensor<4xf32>
  %tr = cdp.round_to %t {format = "bf16"} : tensor<4xf32>
  return %ar, %sr, %s, %dr, %tr : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// A product's rounding becomes its round_result too, gemm's and matmul's
// (their marks kept); a product another op also reads keeps its round_to.
// CHECK-LABEL: func.func @main
// CHECK-NEXT: %[[G:.+]] = cdp.gemm %arg0, %arg1 {narrow_operands = "bf16", round_result = "bf16"}
// CHECK-NEXT: %[[M:.+]] = cdp.matmul %arg0, %arg1 {round_result = "f16"}
// CHECK-NEXT: %[[N:.+]] = cdp.matmul %arg0, %arg1 :
// CHECK-NEXT: %[[NR:.+]] = cdp.round_to %[[N]] {format = "bf16"}
// CHECK-NEXT: return %[[G]], %[[M]], %[[NR]], %[[N]]
func.func @main(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) {
  %g = cdp.gemm %a, %b {narrow_operands = "bf16"} : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %gr = cdp.round_to %g {format = "bf16"} : tensor<4x2xf32>
  %m = cdp.matmul %a, %b : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %mr = cdp.round_to %m {format = "f16"} : tensor<4x2xf32>
  %n = cdp.matmul %a, %b : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %nr = cdp.round_to %n {format = "bf16"} : tensor<4x2xf32>
  return %gr, %mr, %nr, %n : tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
}

// -----

// GELU's rounding, and those of the gradients of an activation, a softmax
// and the cross-entropy loss (the loss's log-probabilities stay float32).
// CHECK-LABEL: func.func @activations_and_gradients
// CHECK-NEXT: %[[G:.+]] = cdp.gelu %arg0 {approximate = "tanh", round_result = "bf16"}
// CHECK-NEXT: %[[U:.+]] = cdp.unary_grad %arg0, %arg1 {kind = "gelu_tanh", round_result = "bf16"}
// CHECK-NEXT: %[[S:.+]] = cdp.softmax_grad %arg0, %arg1 {round_result = "bf16"}
// CHECK-NEXT: %[[L:.+]] = cdp.softmax_cross_entropy_loss_grad %arg2, %arg0, %arg3 {round_result = "bf16"}
// CHECK-NEXT: return %[[G]], %[[U]], %[[S]], %[[L]]
func.func @activations_and_gradients(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %dl: tensor<f32>, %labels: tensor<4xi64>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %g = cdp.gelu %x {approximate = "tanh"} : tensor<4x8xf32>
  %gr = cdp.round_to %g {format = "bf16"} : tensor<4x8xf32>
  %u = cdp.unary_grad %x, %y {kind = "gelu_tanh"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %ur = cdp.round_to %u {format = "bf16"} : tensor<4x8xf32>
  %s = cdp.softmax_grad %x, %y : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %sr = cdp.round_to %s {format = "bf16"} : tensor<4x8xf32>
  %l = cdp.softmax_cross_entropy_loss_grad %dl, %x, %labels : (tensor<f32>, tensor<4x8xf32>, tensor<4xi64>) -> tensor<4x8xf32>
  %lr = cdp.round_to %l {format = "bf16"} : tensor<4x8xf32>
  return %gr, %ur, %sr, %lr : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// A bias's gradient under autocast: the reduce_to rounds its sums.
// CHECK-LABEL: func.func @bias_gradient
// CHECK-NEXT: %[[B:.+]] = cdp.reduce_to %arg0 {round_result = "bf16", shape = array<i64: 8>}
// CHECK-NEXT: return %[[B]]
func.func @bias_gradient(%dy: tensor<4x8xf32>) -> tensor<8xf32> {
  %b = cdp.reduce_to %dy {shape = array<i64: 8>} : (tensor<4x8xf32>) -> tensor<8xf32>
  %br = cdp.round_to %b {format = "bf16"} : tensor<8xf32>
  return %br : tensor<8xf32>
}

// -----

// A batch norm's rounded output and its gradient's rounded dx become their
// round_result (ResNet's under autocast); a rounding of the running mean, a
// statistic, stays.
// CHECK-LABEL: func.func @batch_norm
// CHECK-NEXT: %[[Y:.+]], %[[M:.+]], %[[V:.+]] = cdp.batch_norm %arg0, %arg1, %arg1, %arg1, %arg1 {round_result = "bf16", training_mode = true}
// CHECK-NEXT: %[[MR:.+]] = cdp.round_to %[[M]] {format = "bf16"}
// CHECK-NEXT: %[[DX:.+]], %{{.+}}, %{{.+}} = cdp.batch_norm_grad %arg2, %arg0, %arg1, %arg1, %arg1 {round_result = "bf16", training_mode = true}
// CHECK-NEXT: return %[[Y]], %[[MR]], %[[DX]]
func.func @batch_norm(%x: tensor<2x3x4x4xf32>, %p: tensor<3xf32>, %dy: tensor<2x3x4x4xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<2x3x4x4xf32>) {
  %y, %m, %v = cdp.batch_norm %x, %p, %p, %p, %p {training_mode = true} : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  %yr = cdp.round_to %y {format = "bf16"} : tensor<2x3x4x4xf32>
  %mr = cdp.round_to %m {format = "bf16"} : tensor<3xf32>
  %dx, %ds, %db = cdp.batch_norm_grad %dy, %x, %p, %p, %p {training_mode = true} : (tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  %dxr = cdp.round_to %dx {format = "bf16"} : tensor<2x3x4x4xf32>
  return %yr, %mr, %dxr : tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<2x3x4x4xf32>
}
