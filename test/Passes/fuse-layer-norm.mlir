// RUN: cdp-opt %s -cdp-fuse-layer-norm -mlir-print-debuginfo -mlir-print-local-scope | FileCheck %s

// Tests that the nine ops torch exports for nn.LayerNorm below opset 17
// become one cdp.layer_norm over the trailing axis, with the epsilon of
// the add and gamma and beta as scale and bias, keeping the final add's
// location; and that a chain with an intermediate value used elsewhere,
// or normalising a leading axis, stays as it is.

// CHECK-LABEL: func.func @fused
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<6x8x32xf32> {{.*}}, %[[G:[a-z0-9]+]]: tensor<32xf32> {{.*}}, %[[B:[a-z0-9]+]]: tensor<32xf32>
// CHECK-NEXT: %[[Y:[a-z_0-9]+]], %{{.+}}, %{{.+}} = cdp.layer_norm %[[X]], %[[G]], %[[B]] {axis = 2 : i64, epsilon = 9.99999997E-7 : f32} : (tensor<6x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<6x8x32xf32>, tensor<6x8x1xf32>, tensor<6x8x1xf32>) loc("/norm1/Add_1")
// CHECK-NEXT: return %[[Y]]
func.func @fused(%x: tensor<6x8x32xf32>, %gamma: tensor<32xf32>, %beta: tensor<32xf32>) -> tensor<6x8x32xf32> {
  %m = cdp.reduce_mean %x {axes = array<i64: 2>} : (tensor<6x8x32xf32>) -> tensor<6x8x1xf32>
  %d = cdp.sub %x, %m : (tensor<6x8x32xf32>, tensor<6x8x1xf32>) -> tensor<6x8x32xf32>
  %two = cdp.constant dense<2.0> : tensor<f32>
  %p = cdp.pow %d, %two : (tensor<6x8x32xf32>, tensor<f32>) -> tensor<6x8x32xf32>
  %v = cdp.reduce_mean %p {axes = array<i64: 2>} : (tensor<6x8x32xf32>) -> tensor<6x8x1xf32>
  %eps = cdp.constant dense<1.0E-6> : tensor<f32>
  %e = cdp.add %v, %eps : (tensor<6x8x1xf32>, tensor<f32>) -> tensor<6x8x1xf32>
  %s = cdp.sqrt %e : tensor<6x8x1xf32>
  %n = cdp.div %d, %s : (tensor<6x8x32xf32>, tensor<6x8x1xf32>) -> tensor<6x8x32xf32>
  %g = cdp.mul %n, %gamma : (tensor<6x8x32xf32>, tensor<32xf32>) -> tensor<6x8x32xf32>
  %y = cdp.add %g, %beta : (tensor<6x8x32xf32>, tensor<32xf32>) -> tensor<6x8x32xf32> loc("/norm1/Add_1")
  return %y : tensor<6x8x32xf32>
}

// The centred value d is also returned: the chain must stay.
// CHECK-LABEL: func.func @shared_intermediate
// CHECK-NOT: cdp.layer_norm
// CHECK: cdp.sqrt
func.func @shared_intermediate(%x: tensor<6x8x32xf32>, %gamma: tensor<32xf32>, %beta: tensor<32xf32>) -> (tensor<6x8x32xf32>, tensor<6x8x32xf32>) {
  %m = cdp.reduce_mean %x {axes = array<i64: 2>} : (tensor<6x8x32xf32>) -> tensor<6x8x1xf32>
  %d = cdp.sub %x, %m : (tensor<6x8x32xf32>, tensor<6x8x1xf32>) -> tensor<6x8x32xf32>
  %two = cdp.constant dense<2.0> : tensor<f32>
  %p = cdp.pow %d, %two : (tensor<6x8x32xf32>, tensor<f32>) -> tensor<6x8x32xf32>
  %v = cdp.reduce_mean %p {axes = array<i64: 2>} : (tensor<6x8x32xf32>) -> tensor<6x8x1xf32>
  %eps = cdp.constant dense<9.99999974E-6> : tensor<f32>
  %e = cdp.add %v, %eps : (tensor<6x8x1xf32>, tensor<f32>) -> tensor<6x8x1xf32>
  %s = cdp.sqrt %e : tensor<6x8x1xf32>
  %n = cdp.div %d, %s : (tensor<6x8x32xf32>, tensor<6x8x1xf32>) -> tensor<6x8x32xf32>
  %g = cdp.mul %n, %gamma : (tensor<6x8x32xf32>, tensor<32xf32>) -> tensor<6x8x32xf32>
  %y = cdp.add %g, %beta : (tensor<6x8x32xf32>, tensor<32xf32>) -> tensor<6x8x32xf32>
  return %y, %d : tensor<6x8x32xf32>, tensor<6x8x32xf32>
}

// Normalising over the first axis is not a LayerNorm over trailing ones.
// CHECK-LABEL: func.func @leading_axis
// CHECK-NOT: cdp.layer_norm
// CHECK: cdp.sqrt
func.func @leading_axis(%x: tensor<6x8xf32>, %gamma: tensor<8xf32>, %beta: tensor<8xf32>) -> tensor<6x8xf32> {
  %m = cdp.reduce_mean %x {axes = array<i64: 0>} : (tensor<6x8xf32>) -> tensor<1x8xf32>
  %d = cdp.sub %x, %m : (tensor<6x8xf32>, tensor<1x8xf32>) -> tensor<6x8xf32>
  %two = cdp.constant dense<2.0> : tensor<f32>
  %p = cdp.pow %d, %two : (tensor<6x8xf32>, tensor<f32>) -> tensor<6x8xf32>
  %v = cdp.reduce_mean %p {axes = array<i64: 0>} : (tensor<6x8xf32>) -> tensor<1x8xf32>
  %eps = cdp.constant dense<9.99999974E-6> : tensor<f32>
  %e = cdp.add %v, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %s = cdp.sqrt %e : tensor<1x8xf32>
  %n = cdp.div %d, %s : (tensor<6x8xf32>, tensor<1x8xf32>) -> tensor<6x8xf32>
  %g = cdp.mul %n, %gamma : (tensor<6x8xf32>, tensor<8xf32>) -> tensor<6x8xf32>
  %y = cdp.add %g, %beta : (tensor<6x8xf32>, tensor<8xf32>) -> tensor<6x8xf32>
  return %y : tensor<6x8xf32>
}
