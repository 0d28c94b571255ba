// RUN: cdp-opt %s -split-input-file -cdp-fuse-silu | FileCheck %s

// Tests that x * sigmoid(x), as torch exports nn.SiLU (Llama's MLP), becomes
// one cdp.silu with the product's location, in either operand order; and
// that nothing fuses where the sigmoid is read elsewhere too, multiplies
// another value, or the product is rounded.

// CHECK-LABEL: func.func @silu
// CHECK-NEXT: %[[A:.+]] = cdp.silu %arg0 : tensor<2x8xf32>
// CHECK-NEXT: %[[B:.+]] = cdp.silu %arg1 : tensor<2x8xf32>
// CHECK-NEXT: return %[[A]], %[[B]]
func.func @silu(%x: tensor<2x8xf32>, %z: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %s = cdp.sigmoid %x : tensor<2x8xf32>
  %y = cdp.mul %x, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %t = cdp.sigmoid %z : tensor<2x8xf32>
  %w = cdp.mul %t, %z : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y, %w : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// CHECK-LABEL: func.func @sigmoid_read_elsewhere
// CHECK: cdp.sigmoid
// CHECK: cdp.mul
// CHECK-NOT: cdp.silu
func.func @sigmoid_read_elsewhere(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %s = cdp.sigmoid %x : tensor<2x8xf32>
  %y = cdp.mul %x, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y, %s : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// CHECK-LABEL: func.func @gated
// CHECK: cdp.sigmoid
// CHECK: cdp.mul
// CHECK-NOT: cdp.silu
func.func @gated(%x: tensor<2x8xf32>, %g: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = cdp.sigmoid %g : tensor<2x8xf32>
  %y = cdp.mul %x, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// CHECK-LABEL: func.func @rounded
// CHECK: cdp.sigmoid
// CHECK: cdp.mul {{.*}}round_result = "bf16"
// CHECK-NOT: cdp.silu
func.func @rounded(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = cdp.sigmoid %x : tensor<2x8xf32>
  %y = cdp.mul %x, %s {round_result = "bf16"} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
