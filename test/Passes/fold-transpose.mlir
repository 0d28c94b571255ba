// RUN: cdp-opt %s -cdp-fold-transpose | FileCheck %s

// Tests that a Transpose of the last two dimensions becomes the trans flag
// of the MatMul or Gemm operand it feeds, that a Transpose of a Transpose
// composes (and vanishes when the composition is the identity), that the
// Transpose of a product becomes the product of the swapped operands; and
// that Transposes of other dimensions, across stages, or of a product
// something else reads, stay.

// torch's Linear over a sequence: x @ W^T.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.+]]: tensor<6x8x32xf32>, %[[W:.+]]: tensor<96x32xf32>)
// CHECK-NOT: cdp.transpose
// CHECK: cdp.matmul %[[X]], %[[W]] {trans_b = true}
func.func @linear(%x: tensor<6x8x32xf32>, %w: tensor<96x32xf32>) -> tensor<6x8x96xf32> {
  %wt = cdp.transpose %w {perm = array<i64: 1, 0>} : (tensor<96x32xf32>) -> tensor<32x96xf32>
  %y = cdp.matmul %x, %wt : (tensor<6x8x32xf32>, tensor<32x96xf32>) -> tensor<6x8x96xf32>
  return %y : tensor<6x8x96xf32>
}

// The gradient's transpose of the forward's transpose is W itself; a flag
// already set is toggled off.
// CHECK-LABEL: func.func @double_transpose
// CHECK-SAME: (%[[DY:.+]]: tensor<6x8x96xf32>, %[[W:.+]]: tensor<96x32xf32>)
// CHECK-NOT: cdp.transpose
// CHECK: cdp.matmul %[[DY]], %[[W]] :
// CHECK: cdp.matmul %[[DY]], %[[W]] :
func.func @double_transpose(%dy: tensor<6x8x96xf32>, %w: tensor<96x32xf32>) -> (tensor<6x8x32xf32>, tensor<6x8x32xf32>) {
  %wt = cdp.transpose %w {perm = array<i64: 1, 0>} : (tensor<96x32xf32>) -> tensor<32x96xf32>
  %wtt = cdp.transpose %wt {perm = array<i64: 1, 0>} : (tensor<32x96xf32>) -> tensor<96x32xf32>
  %dx = cdp.matmul %dy, %wtt : (tensor<6x8x96xf32>, tensor<96x32xf32>) -> tensor<6x8x32xf32>
  %dx2 = cdp.matmul %dy, %wt {trans_b = true} : (tensor<6x8x96xf32>, tensor<32x96xf32>) -> tensor<6x8x32xf32>
  return %dx, %dx2 : tensor<6x8x32xf32>, tensor<6x8x32xf32>
}

// Attention's batched operands and a Gemm's.
// CHECK-LABEL: func.func @batched_and_gemm
// CHECK-SAME: (%[[Q:.+]]: tensor<32x6x8xf32>, %[[K:.+]]: tensor<32x6x8xf32>, %[[A:.+]]: tensor<5x7xf32>, %[[B:.+]]: tensor<5x4xf32>)
// CHECK-NOT: cdp.transpose
// CHECK: cdp.matmul %[[Q]], %[[K]] {trans_b = true}
// CHECK: cdp.gemm %[[A]], %[[B]] {trans_a = true}
func.func @batched_and_gemm(%q: tensor<32x6x8xf32>, %k: tensor<32x6x8xf32>, %a: tensor<5x7xf32>, %b: tensor<5x4xf32>) -> (tensor<32x6x6xf32>, tensor<7x4xf32>) {
  %kt = cdp.transpose %k {perm = array<i64: 0, 2, 1>} : (tensor<32x6x8xf32>) -> tensor<32x8x6xf32>
  %s = cdp.matmul %q, %kt : (tensor<32x6x8xf32>, tensor<32x8x6xf32>) -> tensor<32x6x6xf32>
  %at = cdp.transpose %a {perm = array<i64: 1, 0>} : (tensor<5x7xf32>) -> tensor<7x5xf32>
  %g = cdp.gemm %at, %b : (tensor<7x5xf32>, tensor<5x4xf32>) -> tensor<7x4xf32>
  return %s, %g : tensor<32x6x6xf32>, tensor<7x4xf32>
}

// (A^T dY)^T = dY^T A: the weight gradient written transposed.
// CHECK-LABEL: func.func @transposed_product
// CHECK-SAME: (%[[A:.+]]: tensor<48x32xf32>, %[[DY:.+]]: tensor<48x96xf32>)
// CHECK-NOT: cdp.transpose
// CHECK: cdp.matmul %[[DY]], %[[A]] {trans_a = true} : (tensor<48x96xf32>, tensor<48x32xf32>) -> tensor<96x32xf32>
func.func @transposed_product(%a: tensor<48x32xf32>, %dy: tensor<48x96xf32>) -> tensor<96x32xf32> {
  %g = cdp.matmul %a, %dy {trans_a = true} : (tensor<48x32xf32>, tensor<48x96xf32>) -> tensor<32x96xf32>
  %gt = cdp.transpose %g {perm = array<i64: 1, 0>} : (tensor<32x96xf32>) -> tensor<96x32xf32>
  return %gt : tensor<96x32xf32>
}

// Through the rounding autodiff puts on a gradient reaching a bf16 tensor
// (the tied LM head's weight): the swapped product, then the rounding.
// CHECK-LABEL: func.func @rounded_transposed_product
// CHECK-SAME: (%[[A:.+]]: tensor<48x32xf32>, %[[DY:.+]]: tensor<48x96xf32>)
// CHECK-NOT: cdp.transpose
// CHECK: %[[P:.+]] = cdp.matmul %[[DY]], %[[A]] {cdp.phase = "backward", trans_a = true} : (tensor<48x96xf32>, tensor<48x32xf32>) -> tensor<96x32xf32>
// CHECK: %[[R:.+]] = cdp.round_to %[[P]] {cdp.phase = "backward", format = "bf16"} : tensor<96x32xf32>
// CHECK: return %[[R]]
func.func @rounded_transposed_product(%a: tensor<48x32xf32>, %dy: tensor<48x96xf32>) -> tensor<96x32xf32> {
  %g = cdp.matmul %a, %dy {cdp.phase = "backward", trans_a = true} : (tensor<48x32xf32>, tensor<48x96xf32>) -> tensor<32x96xf32>
  %r = cdp.round_to %g {cdp.phase = "backward", format = "bf16"} : tensor<32x96xf32>
  %gt = cdp.transpose %r {perm = array<i64: 1, 0>} : (tensor<32x96xf32>) -> tensor<96x32xf32>
  return %gt : tensor<96x32xf32>
}

// Must not fold: a head permutation (not the last two dimensions), a
// Transpose in another stage, and a product whose result is also returned.
// CHECK-LABEL: func.func @kept
// CHECK: cdp.transpose %{{.+}} {perm = array<i64: 1, 0, 2>}
// CHECK: cdp.matmul
// CHECK: cdp.transpose %{{.+}} {cdp.stage = 0 : i64, perm = array<i64: 1, 0>}
// CHECK: cdp.matmul %{{.+}}, %{{.+}} {cdp.stage = 1 : i64}
// CHECK: cdp.matmul
// CHECK: cdp.transpose
func.func @kept(%x: tensor<6x32x8xf32>, %y: tensor<32x8x6xf32>, %w: tensor<96x32xf32>, %z: tensor<6x8x32xf32>, %a: tensor<4x5xf32>, %b: tensor<5x3xf32>) -> (tensor<32x6x6xf32>, tensor<6x8x96xf32>, tensor<4x3xf32>, tensor<3x4xf32>) {
  %xt = cdp.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<6x32x8xf32>) -> tensor<32x6x8xf32>
  %s = cdp.matmul %xt, %y : (tensor<32x6x8xf32>, tensor<32x8x6xf32>) -> tensor<32x6x6xf32>
  %wt = cdp.transpose %w {perm = array<i64: 1, 0>, cdp.stage = 0 : i64} : (tensor<96x32xf32>) -> tensor<32x96xf32>
  %l = cdp.matmul %z, %wt {cdp.stage = 1 : i64} : (tensor<6x8x32xf32>, tensor<32x96xf32>) -> tensor<6x8x96xf32>
  %p = cdp.matmul %a, %b : (tensor<4x5xf32>, tensor<5x3xf32>) -> tensor<4x3xf32>
  %pt = cdp.transpose %p {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  return %s, %l, %p, %pt : tensor<32x6x6xf32>, tensor<6x8x96xf32>, tensor<4x3xf32>, tensor<3x4xf32>
}
