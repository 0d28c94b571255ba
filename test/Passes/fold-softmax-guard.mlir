// RUN: cdp-opt %s -cdp-fold-softmax-guard | FileCheck %s

// Tests that the NaN guard torch's exporters write after an attention
// softmax, where(isnan(s), 0, s), becomes the softmax's zero_nan_rows: with
// TorchScript's zero (tensor<1xf32>) and dynamo's (a scalar shared by
// several guards, kept while another still reads it); and that a softmax
// read elsewhere too, a guard whose other branch is not zero, or whose
// branches are swapped, stays as it is.

// CHECK-LABEL: func.func @torchscript_guard
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x4x8x8xf32>
// CHECK-NEXT: %[[S:[a-z0-9]+]] = cdp.softmax %[[X]] {zero_nan_rows = true}
// CHECK-NEXT: return %[[S]]
func.func @torchscript_guard(%x: tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %s = cdp.softmax %x : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %n = cdp.is_nan %s : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xi1>
  %zero = cdp.constant dense<0.0> : tensor<1xf32>
  %y = cdp.where %n, %zero, %s : (tensor<2x4x8x8xi1>, tensor<1xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %y : tensor<2x4x8x8xf32>
}

// CHECK-LABEL: func.func @dynamo_shared_zero
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x4x8x8xf32>, %[[Z:[a-z0-9]+]]: tensor<2x4x8x8xf32>
// CHECK-NEXT: %[[ZERO:[a-z0-9]+]] = cdp.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[S:[a-z0-9]+]] = cdp.softmax %[[X]] {zero_nan_rows = true}
// CHECK-NEXT: %[[M:[a-z0-9]+]] = cdp.max %[[Z]], %[[ZERO]]
// CHECK-NEXT: %[[T:[a-z0-9]+]] = cdp.softmax %[[M]] {zero_nan_rows = true}
// CHECK-NEXT: return %[[S]], %[[T]]
func.func @dynamo_shared_zero(%x: tensor<2x4x8x8xf32>, %z: tensor<2x4x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) {
  %zero = cdp.constant dense<0.0> : tensor<f32>
  %s = cdp.softmax %x : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %n = cdp.is_nan %s : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xi1>
  %y = cdp.where %n, %zero, %s : (tensor<2x4x8x8xi1>, tensor<f32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %m = cdp.max %z, %zero : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %t = cdp.softmax %m : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %tn = cdp.is_nan %t : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xi1>
  %w = cdp.where %tn, %zero, %t : (tensor<2x4x8x8xi1>, tensor<f32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %y, %w : tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>
}

// The unguarded softmax is returned too: its NaN rows must stay NaN.
// CHECK-LABEL: func.func @softmax_read_elsewhere
// CHECK: cdp.softmax
// CHECK-NOT: zero_nan_rows
// CHECK: cdp.is_nan
// CHECK: cdp.where
func.func @softmax_read_elsewhere(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %s = cdp.softmax %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %n = cdp.is_nan %s : (tensor<4x8xf32>) -> tensor<4x8xi1>
  %zero = cdp.constant dense<0.0> : tensor<f32>
  %y = cdp.where %n, %zero, %s : (tensor<4x8xi1>, tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y, %s : tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @not_zero
// CHECK: cdp.softmax
// CHECK-NOT: zero_nan_rows
// CHECK: cdp.where
func.func @not_zero(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = cdp.softmax %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %n = cdp.is_nan %s : (tensor<4x8xf32>) -> tensor<4x8xi1>
  %half = cdp.constant dense<0.5> : tensor<f32>
  %y = cdp.where %n, %half, %s : (tensor<4x8xi1>, tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// where(isnan(s), s, 0) keeps the NaNs and zeroes the rest: not the guard.
// CHECK-LABEL: func.func @branches_swapped
// CHECK: cdp.softmax
// CHECK-NOT: zero_nan_rows
// CHECK: cdp.where
func.func @branches_swapped(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = cdp.softmax %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %n = cdp.is_nan %s : (tensor<4x8xf32>) -> tensor<4x8xi1>
  %zero = cdp.constant dense<0.0> : tensor<4x8xf32>
  %y = cdp.where %n, %s, %zero : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
