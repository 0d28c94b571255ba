// RUN: cdp-opt %s -split-input-file -verify-diagnostics -cdp-fuse-relu | FileCheck %s

// Tests that a float32 gemm or a training batch norm (rounded or not)
// applies the ReLU that reads its result when the ReLU is its result's only
// reader (its gradient reads the ReLU's output, as autodiff makes it): the
// ReLU is gone, its readers read the op's result. And that nothing fuses
// where the result has another reader (a ReLU gradient reading the
// pre-activation included), is read as a gradient's incoming gradient, is a
// rounded product's, where the ReLU runs in another stage, or after an
// inference batch norm.

// CHECK-LABEL: func.func @linear_relu
// CHECK: %[[Y:.+]] = cdp.gemm %arg0, %arg1, %arg2 {activation = "relu", cdp.stage = 1 : i64, trans_b = true}
// CHECK-NOT: cdp.relu
// CHECK: %[[DX:.+]] = cdp.unary_grad %arg3, %[[Y]] {kind = "relu"}
// CHECK: return %[[Y]], %[[DX]]
func.func @linear_relu(%x: tensor<4x8xf32>, %w: tensor<6x8xf32>, %b: tensor<6xf32>, %dy: tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>) {
  %pre = cdp.gemm %x, %w, %b {trans_b = true, cdp.stage = 1 : i64} : (tensor<4x8xf32>, tensor<6x8xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  %y = cdp.relu %pre {cdp.stage = 1 : i64} : tensor<4x6xf32>
  %dx = cdp.unary_grad %dy, %y {kind = "relu"} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  return %y, %dx : tensor<4x6xf32>, tensor<4x6xf32>
}

// -----

// A Linear on tokens (cdp-fuse-matmul-bias): the ReLU reads the gemm's
// reshape, which then reshapes the ReLU's values.
// CHECK-LABEL: func.func @linear_tokens_relu
// CHECK: %[[P:.+]] = cdp.gemm %arg0, %arg1, %arg2 {activation = "relu"
// CHECK-NEXT: %[[Y:.+]] = cdp.reshape %[[P]]
// CHECK-NOT: cdp.relu
// CHECK: %[[DX:.+]] = cdp.unary_grad %arg3, %[[Y]] {kind = "relu"}
// CHECK: return %[[Y]], %[[DX]]
func.func @linear_tokens_relu(%x: tensor<8x8xf32>, %w: tensor<6x8xf32>, %b: tensor<6xf32>, %dy: tensor<2x4x6xf32>) -> (tensor<2x4x6xf32>, tensor<2x4x6xf32>) {
  %p = cdp.gemm %x, %w, %b {trans_b = true, cdp.stage = 1 : i64} : (tensor<8x8xf32>, tensor<6x8xf32>, tensor<6xf32>) -> tensor<8x6xf32>
  %pre = cdp.reshape %p {shape = array<i64: 2, 4, 6>, cdp.stage = 1 : i64} : (tensor<8x6xf32>) -> tensor<2x4x6xf32>
  %y = cdp.relu %pre {cdp.stage = 1 : i64} : tensor<2x4x6xf32>
  %dx = cdp.unary_grad %dy, %y {kind = "relu"} : (tensor<2x4x6xf32>, tensor<2x4x6xf32>) -> tensor<2x4x6xf32>
  return %y, %dx : tensor<2x4x6xf32>, tensor<2x4x6xf32>
}

// -----

// CHECK-LABEL: func.func @read_elsewhere
// CHECK: cdp.gemm
// CHECK-NOT: activation
// CHECK: cdp.relu
func.func @read_elsewhere(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>) {
  %pre = cdp.gemm %x, %w : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %y = cdp.relu %pre : tensor<4x6xf32>
  %z = cdp.add %pre, %y : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  return %y, %z : tensor<4x6xf32>, tensor<4x6xf32>
}

// -----

// CHECK-LABEL: func.func @gradient_reads_input
// CHECK: cdp.gemm
// CHECK-NOT: activation
// CHECK: cdp.relu
func.func @gradient_reads_input(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>, %dy: tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>) {
  %pre = cdp.gemm %x, %w : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %y = cdp.relu %pre : tensor<4x6xf32>
  %dx = cdp.unary_grad %dy, %pre {kind = "relu"} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  return %y, %dx : tensor<4x6xf32>, tensor<4x6xf32>
}

// -----

// CHECK-LABEL: func.func @incoming_gradient
// CHECK: cdp.gemm
// CHECK-NOT: activation
// CHECK: cdp.relu
func.func @incoming_gradient(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>, %s: tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>) {
  %pre = cdp.gemm %x, %w : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %y = cdp.relu %pre : tensor<4x6xf32>
  %dx = cdp.unary_grad %pre, %s {kind = "relu"} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  return %y, %dx : tensor<4x6xf32>, tensor<4x6xf32>
}

// -----

// CHECK-LABEL: func.func @rounded
// CHECK: cdp.gemm %arg0, %arg1 {narrow_operands = "bf16", round_result = "bf16"}
// CHECK: cdp.relu
func.func @rounded(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>) -> tensor<4x6xf32> {
  %pre = cdp.gemm %x, %w {narrow_operands = "bf16", round_result = "bf16"} : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %y = cdp.relu %pre : tensor<4x6xf32>
  return %y : tensor<4x6xf32>
}

// -----

// CHECK-LABEL: func.func @other_stage
// CHECK: cdp.gemm
// CHECK-NOT: activation
// CHECK: cdp.relu
func.func @other_stage(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>) -> tensor<4x6xf32> {
  %pre = cdp.gemm %x, %w {cdp.stage = 1 : i64} : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %y = cdp.relu %pre {cdp.stage = 2 : i64} : tensor<4x6xf32>
  return %y : tensor<4x6xf32>
}

// -----

// CHECK-LABEL: func.func @batch_norm_relu
// CHECK: %[[Y:.+]], %{{.+}}, %{{.+}} = cdp.batch_norm %arg0, %arg1, %arg1, %arg1, %arg1 {activation = "relu", training_mode = true}
// CHECK-NOT: cdp.relu
// CHECK: %[[DX:.+]] = cdp.unary_grad %arg2, %[[Y]] {kind = "relu"}
// CHECK: return %[[Y]], %[[DX]]
func.func @batch_norm_relu(%x: tensor<2x3x4x4xf32>, %p: tensor<3xf32>, %dy: tensor<2x3x4x4xf32>) -> (tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>) {
  %pre, %m, %v = cdp.batch_norm %x, %p, %p, %p, %p {training_mode = true} : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  %y = cdp.relu %pre : tensor<2x3x4x4xf32>
  %dx = cdp.unary_grad %dy, %y {kind = "relu"} : (tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  return %y, %dx : tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>
}

// -----

// A rounded batch norm (autocast's, bf16 out) applies the ReLU too: its
// kernels apply it before the rounding, which commutes with it.
// CHECK-LABEL: func.func @rounded_batch_norm_relu
// CHECK: %[[Y:.+]], %{{.+}}, %{{.+}} = cdp.batch_norm %arg0, %arg1, %arg1, %arg1, %arg1 {activation = "relu", round_result = "bf16", training_mode = true}
// CHECK-NOT: cdp.relu
// CHECK: return %[[Y]]
func.func @rounded_batch_norm_relu(%x: tensor<2x3x4x4xf32>, %p: tensor<3xf32>) -> tensor<2x3x4x4xf32> {
  %pre, %m, %v = cdp.batch_norm %x, %p, %p, %p, %p {round_result = "bf16", training_mode = true} : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  %y = cdp.relu %pre : tensor<2x3x4x4xf32>
  return %y : tensor<2x3x4x4xf32>
}

// -----

// CHECK-LABEL: func.func @inference_batch_norm
// CHECK: cdp.batch_norm
// CHECK-NOT: activation
// CHECK: cdp.relu
func.func @inference_batch_norm(%x: tensor<2x3x4x4xf32>, %p: tensor<3xf32>) -> tensor<2x3x4x4xf32> {
  %pre, %m, %v = cdp.batch_norm %x, %p, %p, %p, %p : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  %y = cdp.relu %pre : tensor<2x3x4x4xf32>
  return %y : tensor<2x3x4x4xf32>
}

// -----

// The verifier: relu only, and on float32 products.
func.func @bad_activation(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>) -> tensor<4x6xf32> {
  // expected-error@+1 {{activation must be "relu", not "gelu"}}
  %y = cdp.gemm %x, %w {activation = "gelu"} : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  return %y : tensor<4x6xf32>
}
