// RUN: cdp-opt %s -cdp-fold-identity-dropout | FileCheck %s

// Tests that a dropout at ratio 0 in training mode, and one outside training
// mode, are replaced by their inputs (their masks unread); that a dropout
// that drops something, or one whose mask is read, stays.

// CHECK-LABEL: func.func @identities
// CHECK-NOT: cdp.dropout
// CHECK: %[[A:.+]] = cdp.relu %arg0
// CHECK: %[[B:.+]] = cdp.tanh %[[A]]
// CHECK: return %[[B]]
func.func @identities(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y, %m = cdp.dropout %x {ratio = 0.0 : f32, training_mode = true} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
  %a = cdp.relu %y : tensor<4x8xf32>
  %z, %n = cdp.dropout %a {ratio = 0.5 : f32, training_mode = false} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
  %b = cdp.tanh %z : tensor<4x8xf32>
  return %b : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @kept
// CHECK: cdp.dropout %arg0 {ratio = 1.000000e-01 : f32, training_mode = true}
// CHECK: %{{.+}}, %[[M:.+]] = cdp.dropout %arg0 {ratio = 0.000000e+00 : f32, training_mode = true}
// CHECK: return {{.*}}, %[[M]]
func.func @kept(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xi1>) {
  %y, %m = cdp.dropout %x {ratio = 0.1 : f32, training_mode = true} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
  %z, %n = cdp.dropout %x {ratio = 0.0 : f32, training_mode = true} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
  return %y, %z, %n : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xi1>
}
