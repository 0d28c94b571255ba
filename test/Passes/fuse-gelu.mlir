// RUN: cdp-opt %s -cdp-fuse-gelu -mlir-print-debuginfo -mlir-print-local-scope | FileCheck %s

// Tests that the ops torch exports for nn.GELU below opset 20 (erf form:
// Div, Erf, Add, Mul, Mul; tanh form: nine ops with x^3 as two Muls) become
// one cdp.gelu with the final multiply's location, also with Pow(x, 3) and
// the constants on the other side; and that a chain whose intermediate is
// read elsewhere, or with another constant, stays as it is.

// CHECK-LABEL: func.func @erf_form
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x8xf32>
// CHECK-NEXT: %[[Y:[a-z0-9]+]] = cdp.gelu %[[X]] : tensor<4x8xf32> loc("/mlp/act/Mul_1")
// CHECK-NEXT: return %[[Y]]
func.func @erf_form(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c0 = cdp.constant dense<1.41421354> : tensor<f32>
  %d = cdp.div %x, %c0 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %e = cdp.erf %d : tensor<4x8xf32>
  %c1 = cdp.constant dense<1.0> : tensor<f32>
  %a = cdp.add %e, %c1 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %m = cdp.mul %x, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %c2 = cdp.constant dense<5.0E-1> : tensor<f32>
  %y = cdp.mul %m, %c2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32> loc("/mlp/act/Mul_1")
  return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @tanh_form
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x8xf32>
// CHECK-NEXT: %[[Y:[a-z0-9]+]] = cdp.gelu %[[X]] {approximate = "tanh"} : tensor<4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @tanh_form(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %sq = cdp.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %cube = cdp.mul %x, %sq : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %kappa = cdp.constant dense<4.471500e-02> : tensor<f32>
  %k = cdp.mul %kappa, %cube : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %p = cdp.add %x, %k : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %beta = cdp.constant dense<0.797884583> : tensor<f32>
  %s = cdp.mul %beta, %p : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %t = cdp.tanh %s : tensor<4x8xf32>
  %one = cdp.constant dense<1.0> : tensor<f32>
  %a = cdp.add %one, %t : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = cdp.mul %x, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %half = cdp.constant dense<5.0E-1> : tensor<f32>
  %y = cdp.mul %half, %m : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @tanh_form_pow
// CHECK-NEXT: cdp.gelu %{{.+}} {approximate = "tanh"}
// CHECK-NEXT: return
func.func @tanh_form_pow(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %three = cdp.constant dense<3.0> : tensor<f32>
  %cube = cdp.pow %x, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %kappa = cdp.constant dense<4.471500e-02> : tensor<f32>
  %k = cdp.mul %cube, %kappa : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %p = cdp.add %k, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %beta = cdp.constant dense<0.797884583> : tensor<f32>
  %s = cdp.mul %p, %beta : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %t = cdp.tanh %s : tensor<4x8xf32>
  %one = cdp.constant dense<1.0> : tensor<f32>
  %a = cdp.add %t, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %m = cdp.mul %a, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %half = cdp.constant dense<5.0E-1> : tensor<f32>
  %y = cdp.mul %m, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// Hugging Face's NewGELUActivation (GPT-2's gelu_new) halves x first:
// 0.5 * x * (1.0 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3.0)))).
// CHECK-LABEL: func.func @halved_first
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x8xf32>
// CHECK-NEXT: %[[Y:[a-z0-9]+]] = cdp.gelu %[[X]] {approximate = "tanh"} : tensor<4x8xf32> loc("/h.0/mlp/act/Mul_3")
// CHECK-NEXT: return %[[Y]]
func.func @halved_first(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %half = cdp.constant dense<5.0E-1> : tensor<f32>
  %h = cdp.mul %half, %x : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %three = cdp.constant dense<3.0> : tensor<f32>
  %cube = cdp.pow %x, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %kappa = cdp.constant dense<4.471500e-02> : tensor<f32>
  %k = cdp.mul %kappa, %cube : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %p = cdp.add %x, %k : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %beta = cdp.constant dense<0.797884583> : tensor<f32>
  %s = cdp.mul %beta, %p : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %t = cdp.tanh %s : tensor<4x8xf32>
  %one = cdp.constant dense<1.0> : tensor<f32>
  %a = cdp.add %one, %t : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = cdp.mul %h, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc("/h.0/mlp/act/Mul_3")
  return %y : tensor<4x8xf32>
}

// The halving reads another value than the polynomial: no GELU.
// CHECK-LABEL: func.func @halved_other_value
// CHECK-NOT: cdp.gelu
// CHECK: cdp.tanh
func.func @halved_other_value(%x: tensor<4x8xf32>, %z: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %half = cdp.constant dense<5.0E-1> : tensor<f32>
  %h = cdp.mul %half, %z : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %three = cdp.constant dense<3.0> : tensor<f32>
  %cube = cdp.pow %x, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %kappa = cdp.constant dense<4.471500e-02> : tensor<f32>
  %k = cdp.mul %kappa, %cube : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %p = cdp.add %x, %k : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %beta = cdp.constant dense<0.797884583> : tensor<f32>
  %s = cdp.mul %beta, %p : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %t = cdp.tanh %s : tensor<4x8xf32>
  %one = cdp.constant dense<1.0> : tensor<f32>
  %a = cdp.add %one, %t : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = cdp.mul %h, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// The erf's result is also returned: the chain must stay.
// CHECK-LABEL: func.func @shared_intermediate
// CHECK-NOT: cdp.gelu
// CHECK: cdp.erf
func.func @shared_intermediate(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %c0 = cdp.constant dense<1.41421354> : tensor<f32>
  %d = cdp.div %x, %c0 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %e = cdp.erf %d : tensor<4x8xf32>
  %c1 = cdp.constant dense<1.0> : tensor<f32>
  %a = cdp.add %e, %c1 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %m = cdp.mul %x, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %c2 = cdp.constant dense<5.0E-1> : tensor<f32>
  %y = cdp.mul %m, %c2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %y, %e : tensor<4x8xf32>, tensor<4x8xf32>
}

// x / 2 instead of x / sqrt(2) is not GELU; neither is a product with
// another tensor than the erf's argument.
// CHECK-LABEL: func.func @not_gelu
// CHECK-NOT: cdp.gelu
// CHECK: return
func.func @not_gelu(%x: tensor<4x8xf32>, %z: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %c0 = cdp.constant dense<2.0> : tensor<f32>
  %d = cdp.div %x, %c0 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %e = cdp.erf %d : tensor<4x8xf32>
  %c1 = cdp.constant dense<1.0> : tensor<f32>
  %a = cdp.add %e, %c1 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %m = cdp.mul %x, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %c2 = cdp.constant dense<5.0E-1> : tensor<f32>
  %y = cdp.mul %m, %c2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %c3 = cdp.constant dense<1.41421354> : tensor<f32>
  %d2 = cdp.div %x, %c3 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %e2 = cdp.erf %d2 : tensor<4x8xf32>
  %a2 = cdp.add %e2, %c1 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %m2 = cdp.mul %z, %a2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y2 = cdp.mul %m2, %c2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %y, %y2 : tensor<4x8xf32>, tensor<4x8xf32>
}
