// RUN: cdp-opt %s -cdp-fuse-matmul-bias | FileCheck %s

// Tests that nn.Linear on tokens as torch exports it (MatMul by the
// weight's Transpose, Add of the bias) becomes one cdp.gemm over the rows
// between reshapes, the Transpose taken as trans_b; that a 2-D product
// needs no reshapes; and that a rounded product, a product read elsewhere
// and a bias that is not a vector of the last dimension stay.

// CHECK-LABEL: func.func @tokens
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<6x8x32xf32>, %[[W:[a-z0-9]+]]: tensor<96x32xf32>, %[[B:[a-z0-9]+]]: tensor<96xf32>)
// CHECK-NEXT: %[[ROWS:.+]] = cdp.reshape %[[X]] {shape = array<i64: 48, 32>}
// CHECK-NEXT: %[[Y:.+]] = cdp.gemm %[[ROWS]], %[[W]], %[[B]] {trans_b = true} : (tensor<48x32xf32>, tensor<96x32xf32>, tensor<96xf32>) -> tensor<48x96xf32>
// CHECK-NEXT: %[[T:.+]] = cdp.reshape %[[Y]] {shape = array<i64: 6, 8, 96>}
// CHECK-NEXT: return %[[T]]
func.func @tokens(%x: tensor<6x8x32xf32>, %w: tensor<96x32xf32>, %b: tensor<96xf32>) -> tensor<6x8x96xf32> {
  %wt = cdp.transpose %w {perm = array<i64: 1, 0>} : (tensor<96x32xf32>) -> tensor<32x96xf32>
  %p = cdp.matmul %x, %wt : (tensor<6x8x32xf32>, tensor<32x96xf32>) -> tensor<6x8x96xf32>
  %y = cdp.add %b, %p : (tensor<96xf32>, tensor<6x8x96xf32>) -> tensor<6x8x96xf32>
  return %y : tensor<6x8x96xf32>
}

// A 2-D product with a [1, n] bias: one gemm, no reshapes; the weight
// read as it is.
// CHECK-LABEL: func.func @rows
// CHECK-NEXT: %[[Y:.+]] = cdp.gemm %arg0, %arg1, %arg2 : (tensor<8x32xf32>, tensor<32x16xf32>, tensor<1x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @rows(%x: tensor<8x32xf32>, %w: tensor<32x16xf32>, %b: tensor<1x16xf32>) -> tensor<8x16xf32> {
  %p = cdp.matmul %x, %w : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %y = cdp.add %p, %b : (tensor<8x16xf32>, tensor<1x16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

// The product is returned too: it stays, and so does the add.
// CHECK-LABEL: func.func @product_read_elsewhere
// CHECK-NOT: cdp.gemm
// CHECK: cdp.add
func.func @product_read_elsewhere(%x: tensor<8x32xf32>, %w: tensor<32x16xf32>, %b: tensor<16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %p = cdp.matmul %x, %w : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %y = cdp.add %p, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  return %y, %p : tensor<8x16xf32>, tensor<8x16xf32>
}

// A rounded product (bf16 autocast) keeps the exported rounding points.
// CHECK-LABEL: func.func @rounded
// CHECK-NOT: cdp.gemm
// CHECK: cdp.add
func.func @rounded(%x: tensor<8x32xf32>, %w: tensor<32x16xf32>, %b: tensor<16xf32>) -> tensor<8x16xf32> {
  %p = cdp.matmul %x, %w {round_result = "bf16"} : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %y = cdp.add %p, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

// A bias per row, not per column, is no Linear's.
// CHECK-LABEL: func.func @column_bias
// CHECK-NOT: cdp.gemm
// CHECK: cdp.add
func.func @column_bias(%x: tensor<8x32xf32>, %w: tensor<32x16xf32>, %b: tensor<8x1xf32>) -> tensor<8x16xf32> {
  %p = cdp.matmul %x, %w : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %y = cdp.add %p, %b : (tensor<8x16xf32>, tensor<8x1xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}
