// RUN: cdp-opt %s -cdp-fuse-rms-norm -mlir-print-debuginfo -mlir-print-local-scope | FileCheck %s

// Tests that the RMSNorm chains the exporters write for Llama and T5
// become one cdp.layer_norm {rms} over the trailing axis, gamma as its
// scale and no bias, keeping the final product's location: TorchScript's
// (Div(1, .), a float32-to-float32 Cast between the products, gamma on the
// left) and dynamo's (Reciprocal, the input read by other ops too, gamma on
// the right); and that a chain whose inverse is read elsewhere, or whose
// square is not of the normalised input, stays as it is.

// CHECK-LABEL: func.func @torchscript
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x8x32xf32> {{.*}}, %[[G:[a-z0-9]+]]: tensor<32xf32>
// CHECK-NEXT: %[[Y:[a-z_0-9]+]], %{{.+}}, %{{.+}} = cdp.layer_norm %[[X]], %[[G]] {axis = 2 : i64, epsilon = 9.99999997E-7 : f32, rms = true} : (tensor<2x8x32xf32>, tensor<32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x1xf32>, tensor<2x8x1xf32>) loc("/norm/Mul_1")
// CHECK-NEXT: return %[[Y]]
func.func @torchscript(%x: tensor<2x8x32xf32>, %gamma: tensor<32xf32>) -> tensor<2x8x32xf32> {
  %two = cdp.constant dense<2.0> : tensor<f32>
  %p = cdp.pow %x, %two : (tensor<2x8x32xf32>, tensor<f32>) -> tensor<2x8x32xf32>
  %m = cdp.reduce_mean %p {axes = array<i64: 2>} : (tensor<2x8x32xf32>) -> tensor<2x8x1xf32>
  %eps = cdp.constant dense<1.0E-6> : tensor<f32>
  %e = cdp.add %m, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %s = cdp.sqrt %e : tensor<2x8x1xf32>
  %one = cdp.constant dense<1.0> : tensor<f32>
  %r = cdp.div %one, %s : (tensor<f32>, tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %n = cdp.mul %x, %r : (tensor<2x8x32xf32>, tensor<2x8x1xf32>) -> tensor<2x8x32xf32>
  %c = cdp.cast %n {to = f32} : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  %y = cdp.mul %gamma, %c : (tensor<32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32> loc("/norm/Mul_1")
  return %y : tensor<2x8x32xf32>
}

// The epsilon is shared with another norm's sum: it stays for that one.
// CHECK-LABEL: func.func @dynamo
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x8x32xf32> {{.*}}, %[[G:[a-z0-9]+]]: tensor<32xf32>
// CHECK: %[[EPS:.+]] = cdp.constant dense<9.99999997E-7>
// CHECK-NEXT: %[[Y:[a-z_0-9]+]], %{{.+}}, %{{.+}} = cdp.layer_norm %[[X]], %[[G]] {axis = 2 : i64, epsilon = 9.99999997E-7 : f32, rms = true}
// CHECK-NEXT: %[[R:.+]] = cdp.add %[[X]], %[[Y]]
// CHECK-NEXT: cdp.add %{{.+}}, %[[EPS]]
// CHECK-NOT: cdp.reciprocal
// CHECK: return %[[R]]
func.func @dynamo(%x: tensor<2x8x32xf32>, %gamma: tensor<32xf32>, %other: tensor<2x8x1xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x1xf32>) {
  %two = cdp.constant dense<2.0> : tensor<f32>
  %p = cdp.pow %x, %two : (tensor<2x8x32xf32>, tensor<f32>) -> tensor<2x8x32xf32>
  %m = cdp.reduce_mean %p {axes = array<i64: 2>} : (tensor<2x8x32xf32>) -> tensor<2x8x1xf32>
  %eps = cdp.constant dense<1.0E-6> : tensor<f32>
  %e = cdp.add %m, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %s = cdp.sqrt %e : tensor<2x8x1xf32>
  %r = cdp.reciprocal %s : tensor<2x8x1xf32>
  %n = cdp.mul %x, %r : (tensor<2x8x32xf32>, tensor<2x8x1xf32>) -> tensor<2x8x32xf32>
  %y = cdp.mul %n, %gamma : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %residual = cdp.add %x, %y : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  %o = cdp.add %other, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  return %residual, %o : tensor<2x8x32xf32>, tensor<2x8x1xf32>
}

// The inverse is returned too: the chain must stay.
// CHECK-LABEL: func.func @shared_inverse
// CHECK-NOT: cdp.layer_norm
// CHECK: cdp.reciprocal
func.func @shared_inverse(%x: tensor<2x8x32xf32>, %gamma: tensor<32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x1xf32>) {
  %two = cdp.constant dense<2.0> : tensor<f32>
  %p = cdp.pow %x, %two : (tensor<2x8x32xf32>, tensor<f32>) -> tensor<2x8x32xf32>
  %m = cdp.reduce_mean %p {axes = array<i64: 2>} : (tensor<2x8x32xf32>) -> tensor<2x8x1xf32>
  %eps = cdp.constant dense<1.0E-6> : tensor<f32>
  %e = cdp.add %m, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %s = cdp.sqrt %e : tensor<2x8x1xf32>
  %r = cdp.reciprocal %s : tensor<2x8x1xf32>
  %n = cdp.mul %x, %r : (tensor<2x8x32xf32>, tensor<2x8x1xf32>) -> tensor<2x8x32xf32>
  %y = cdp.mul %n, %gamma : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  return %y, %r : tensor<2x8x32xf32>, tensor<2x8x1xf32>
}

// The mean of another tensor's squares is no RMSNorm of x.
// CHECK-LABEL: func.func @other_square
// CHECK-NOT: cdp.layer_norm
// CHECK: cdp.sqrt
func.func @other_square(%x: tensor<2x8x32xf32>, %z: tensor<2x8x32xf32>, %gamma: tensor<32xf32>) -> tensor<2x8x32xf32> {
  %two = cdp.constant dense<2.0> : tensor<f32>
  %p = cdp.pow %z, %two : (tensor<2x8x32xf32>, tensor<f32>) -> tensor<2x8x32xf32>
  %m = cdp.reduce_mean %p {axes = array<i64: 2>} : (tensor<2x8x32xf32>) -> tensor<2x8x1xf32>
  %eps = cdp.constant dense<1.0E-6> : tensor<f32>
  %e = cdp.add %m, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %s = cdp.sqrt %e : tensor<2x8x1xf32>
  %r = cdp.reciprocal %s : tensor<2x8x1xf32>
  %n = cdp.mul %x, %r : (tensor<2x8x32xf32>, tensor<2x8x1xf32>) -> tensor<2x8x32xf32>
  %y = cdp.mul %n, %gamma : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}
