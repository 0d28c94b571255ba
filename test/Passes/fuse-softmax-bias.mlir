// RUN: cdp-opt %s -split-input-file -cdp-fuse-softmax-bias | FileCheck %s

// Tests that attention's mask add before its softmax becomes the softmax's
// bias, the mask on either side of the add; that a sum read elsewhere too,
// or one whose operands both broadcast, stays as it is.

// CHECK-LABEL: func.func @mask
// CHECK-SAME: (%[[S:[a-z0-9]+]]: tensor<2x4x8x8xf32>, %[[M:[a-z0-9]+]]: tensor<2x1x8x8xf32>
// CHECK-NEXT: %[[P:.+]] = cdp.softmax %[[S]], %[[M]] {zero_nan_rows = true} : (tensor<2x4x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT: %[[Q:.+]] = cdp.softmax %[[S]], %[[M]] : (tensor<2x4x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT: return %[[P]], %[[Q]]
func.func @mask(%s: tensor<2x4x8x8xf32>, %m: tensor<2x1x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) {
  %a = cdp.add %s, %m : (tensor<2x4x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = cdp.softmax %a {zero_nan_rows = true} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %b = cdp.add %m, %s : (tensor<2x1x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %q = cdp.softmax %b : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %p, %q : tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>
}

// -----

// CHECK-LABEL: func.func @sum_read_elsewhere
// CHECK: %[[A:.+]] = cdp.add
// CHECK-NEXT: cdp.softmax %[[A]] :
func.func @sum_read_elsewhere(%s: tensor<4x8xf32>, %m: tensor<1x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %a = cdp.add %s, %m : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %p = cdp.softmax %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %p, %a : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Neither operand is the sum's shape: there is no input to read in place.
// CHECK-LABEL: func.func @both_broadcast
// CHECK: %[[A:.+]] = cdp.add
// CHECK-NEXT: cdp.softmax %[[A]] :
func.func @both_broadcast(%s: tensor<4x1xf32>, %m: tensor<1x8xf32>) -> tensor<4x8xf32> {
  %a = cdp.add %s, %m : (tensor<4x1xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %p = cdp.softmax %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %p : tensor<4x8xf32>
}
