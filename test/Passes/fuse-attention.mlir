// RUN: cdp-opt %s -split-input-file -cdp-fuse-attention | FileCheck %s

// Tests that attention's two products and softmax become one cdp.attention,
// in float32 and in the form cdp-autocast leaves (its roundings kept as
// narrow_operands, the result's round_to left for cdp-fuse-roundings); and
// that chains the op cannot stand for stay as they are: probabilities read
// elsewhere, a softmax along another axis, broadcast batch dimensions,
// operands not exact in the roundings' format, a trained bias that
// broadcasts along the keys.

// CHECK-LABEL: func.func @float32
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<2x4x8x16xf32>, %[[K:[a-z0-9]+]]: tensor<2x4x16x8xf32>, %[[V:[a-z0-9]+]]: tensor<2x4x8x16xf32>, %[[M:[a-z0-9]+]]: tensor<2x1x8x8xf32>
// CHECK-NEXT: %[[O:.+]], %{{.+}} = cdp.attention %[[Q]], %[[K]], %[[V]], %[[M]] {zero_nan_rows = true} : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>, tensor<2x4x8x16xf32>, tensor<2x1x8x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x2xf32>)
// CHECK-NEXT: return %[[O]]
func.func @float32(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x16x8xf32>, %v: tensor<2x4x8x16xf32>, %m: tensor<2x1x8x8xf32>) -> tensor<2x4x8x16xf32> {
  %s = cdp.matmul %q, %k : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %p = cdp.softmax %s, %m {zero_nan_rows = true} : (tensor<2x4x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o = cdp.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// CHECK-LABEL: func.func @autocast
// CHECK: %[[Q:.+]] = cdp.round_to %arg0
// CHECK-NEXT: %[[K:.+]] = cdp.round_to %arg1
// CHECK-NEXT: %[[V:.+]] = cdp.round_to %arg2
// CHECK-NEXT: %[[O:.+]], %{{.+}} = cdp.attention %[[Q]], %[[K]], %[[V]] {narrow_operands = "bf16"} : (tensor<3x8x4xf32>, tensor<3x4x8xf32>, tensor<3x8x4xf32>) -> (tensor<3x8x4xf32>, tensor<3x8x2xf32>)
// CHECK-NEXT: %[[R:.+]] = cdp.round_to %[[O]] {format = "bf16"}
// CHECK-NEXT: return %[[R]]
func.func @autocast(%q0: tensor<3x8x4xf32>, %k0: tensor<3x4x8xf32>, %v0: tensor<3x8x4xf32>) -> tensor<3x8x4xf32> {
  %q = cdp.round_to %q0 {format = "bf16"} : tensor<3x8x4xf32>
  %k = cdp.round_to %k0 {format = "bf16"} : tensor<3x4x8xf32>
  %v = cdp.round_to %v0 {format = "bf16"} : tensor<3x8x4xf32>
  %s = cdp.matmul %q, %k : (tensor<3x8x4xf32>, tensor<3x4x8xf32>) -> tensor<3x8x8xf32>
  %sr = cdp.round_to %s {format = "bf16"} : tensor<3x8x8xf32>
  %p = cdp.softmax %sr : (tensor<3x8x8xf32>) -> tensor<3x8x8xf32>
  %pr = cdp.round_to %p {format = "bf16"} : tensor<3x8x8xf32>
  %o = cdp.matmul %pr, %v : (tensor<3x8x8xf32>, tensor<3x8x4xf32>) -> tensor<3x8x4xf32>
  %or = cdp.round_to %o {format = "bf16"} : tensor<3x8x4xf32>
  return %or : tensor<3x8x4xf32>
}

// -----

// CHECK-LABEL: func.func @not_exact
// CHECK-NOT: cdp.attention
func.func @not_exact(%q: tensor<3x8x4xf32>, %k0: tensor<3x4x8xf32>, %v0: tensor<3x8x4xf32>) -> tensor<3x8x4xf32> {
  %k = cdp.round_to %k0 {format = "bf16"} : tensor<3x4x8xf32>
  %v = cdp.round_to %v0 {format = "bf16"} : tensor<3x8x4xf32>
  %s = cdp.matmul %q, %k : (tensor<3x8x4xf32>, tensor<3x4x8xf32>) -> tensor<3x8x8xf32>
  %sr = cdp.round_to %s {format = "bf16"} : tensor<3x8x8xf32>
  %p = cdp.softmax %sr : (tensor<3x8x8xf32>) -> tensor<3x8x8xf32>
  %pr = cdp.round_to %p {format = "bf16"} : tensor<3x8x8xf32>
  %o = cdp.matmul %pr, %v : (tensor<3x8x8xf32>, tensor<3x8x4xf32>) -> tensor<3x8x4xf32>
  return %o : tensor<3x8x4xf32>
}

// -----

// CHECK-LABEL: func.func @probabilities_read_elsewhere
// CHECK-NOT: cdp.attention
func.func @probabilities_read_elsewhere(%q: tensor<3x8x4xf32>, %k: tensor<3x4x8xf32>, %v: tensor<3x8x4xf32>) -> (tensor<3x8x4xf32>, tensor<3x8x8xf32>) {
  %s = cdp.matmul %q, %k : (tensor<3x8x4xf32>, tensor<3x4x8xf32>) -> tensor<3x8x8xf32>
  %p = cdp.softmax %s : (tensor<3x8x8xf32>) -> tensor<3x8x8xf32>
  %o = cdp.matmul %p, %v : (tensor<3x8x8xf32>, tensor<3x8x4xf32>) -> tensor<3x8x4xf32>
  return %o, %p : tensor<3x8x4xf32>, tensor<3x8x8xf32>
}

// -----

// CHECK-LABEL: func.func @other_axis
// CHECK-NOT: cdp.attention
func.func @other_axis(%q: tensor<3x8x4xf32>, %k: tensor<3x4x8xf32>, %v: tensor<3x8x4xf32>) -> tensor<3x8x4xf32> {
  %s = cdp.matmul %q, %k : (tensor<3x8x4xf32>, tensor<3x4x8xf32>) -> tensor<3x8x8xf32>
  %p = cdp.softmax %s {axis = 1 : i64} : (tensor<3x8x8xf32>) -> tensor<3x8x8xf32>
  %o = cdp.matmul %p, %v : (tensor<3x8x8xf32>, tensor<3x8x4xf32>) -> tensor<3x8x4xf32>
  return %o : tensor<3x8x4xf32>
}

// -----

// CHECK-LABEL: func.func @broadcast_batch
// CHECK-NOT: cdp.attention
func.func @broadcast_batch(%q: tensor<3x8x4xf32>, %k: tensor<1x4x8xf32>, %v: tensor<3x8x4xf32>) -> tensor<3x8x4xf32> {
  %s = cdp.matmul %q, %k : (tensor<3x8x4xf32>, tensor<1x4x8xf32>) -> tensor<3x8x8xf32>
  %p = cdp.softmax %s : (tensor<3x8x8xf32>) -> tensor<3x8x8xf32>
  %o = cdp.matmul %p, %v : (tensor<3x8x8xf32>, tensor<3x8x4xf32>) -> tensor<3x8x4xf32>
  return %o : tensor<3x8x4xf32>
}

// -----

// A trained bias the GPU kernel could not sum (one per query row, not per
// score) stays with the softmax; a mask of that shape fuses.
// CHECK-LABEL: func.func @trained_row_bias
// CHECK: cdp.softmax
// CHECK-NOT: cdp.attention
func.func @trained_row_bias(%q: tensor<3x8x4xf32>, %k: tensor<3x4x8xf32>, %v: tensor<3x8x4xf32>) -> tensor<3x8x4xf32> {
  %b = cdp.param "row_bias" : tensor<8x1xf32>
  %s = cdp.matmul %q, %k : (tensor<3x8x4xf32>, tensor<3x4x8xf32>) -> tensor<3x8x8xf32>
  %p = cdp.softmax %s, %b : (tensor<3x8x8xf32>, tensor<8x1xf32>) -> tensor<3x8x8xf32>
  %o = cdp.matmul %p, %v : (tensor<3x8x8xf32>, tensor<3x8x4xf32>) -> tensor<3x8x4xf32>
  return %o : tensor<3x8x4xf32>
}

// CHECK-LABEL: func.func @row_mask
// CHECK: cdp.attention
func.func @row_mask(%q: tensor<3x8x4xf32>, %k: tensor<3x4x8xf32>, %v: tensor<3x8x4xf32>, %m: tensor<1x8xf32>) -> tensor<3x8x4xf32> {
  %s = cdp.matmul %q, %k : (tensor<3x8x4xf32>, tensor<3x4x8xf32>) -> tensor<3x8x8xf32>
  %p = cdp.softmax %s, %m : (tensor<3x8x8xf32>, tensor<1x8xf32>) -> tensor<3x8x8xf32>
  %o = cdp.matmul %p, %v : (tensor<3x8x8xf32>, tensor<3x8x4xf32>) -> tensor<3x8x4xf32>
  return %o : tensor<3x8x4xf32>
}
