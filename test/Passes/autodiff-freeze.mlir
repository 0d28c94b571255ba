// RUN: cdp-opt %s -cdp-autodiff=freeze=w1 | FileCheck %s
// RUN: not cdp-opt %s -cdp-autodiff=freeze=nope 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// Tests that a frozen parameter gets no gradient and does not propagate one
// into its consumers beyond what other parameters need.
// CHECK-NOT: cdp.gradient "w1"
// CHECK: cdp.gradient "w2"
// UNKNOWN: error: --freeze names 'nope', which is not a parameter
func.func @main(%x: tensor<4xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %w1 = cdp.param "w1" : tensor<4xf32>
  %w2 = cdp.param "w2" : tensor<4xf32>
  %a = cdp.mul %x, %w1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %b = cdp.mul %a, %w2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = cdp.reduce_sum %b {axes = array<i64>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
