// RUN: cdp-opt %s -cdp-attach-loss="loss=none loss-output=own" | FileCheck %s
// RUN: not cdp-opt %s -cdp-attach-loss="loss=none loss-output=missing" 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not cdp-opt %s -cdp-attach-loss="loss=none loss-output=y" 2>&1 | FileCheck %s --check-prefix=NOTSCALAR

// Tests that loss=none takes the model's own scalar output as the loss,
// adds no input, and refuses a missing or non-scalar output by name.
// CHECK-LABEL: func.func @main(%arg0: tensor<4xf32> {cdp.name = "x"})
// CHECK-SAME: attributes {cdp.loss_index = 1 : i64}
// MISSING: error: --loss=none needs --loss-output naming a graph output; no output is named 'missing'
// NOTSCALAR: error: loss output 'y' must be a float32 scalar, got 'tensor<4xf32>'
func.func @main(%x: tensor<4xf32> {cdp.name = "x"}) -> (tensor<4xf32> {cdp.name = "y"}, tensor<f32> {cdp.name = "own"}) {
  %l = cdp.reduce_sum %x {axes = array<i64>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  return %x, %l : tensor<4xf32>, tensor<f32>
}
