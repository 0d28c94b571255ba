// RUN: cdp-opt %s -cdp-insert-optimizer="optimizer=momentum lr=0.5 weight-decay=0.01" | FileCheck %s
// RUN: cdp-opt %s -cdp-insert-optimizer="optimizer=adam lr=0.001" | FileCheck %s --check-prefix=ADAM
// RUN: not cdp-opt %s -cdp-insert-optimizer="optimizer=lion" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: cdp-opt %s -cdp-insert-optimizer="optimizer=adamw lr=0.001 weight-decay=0.01 lr-schedule=cosine lr-period=10 lr-min=0.0001" | FileCheck %s --check-prefix=ADAMW
// RUN: not cdp-opt %s -cdp-insert-optimizer="lr-schedule=exponential" 2>&1 | FileCheck %s --check-prefix=SCHEDULE
// RUN: cdp-opt %s -cdp-insert-optimizer="clip-grad-norm=2.5" | FileCheck %s --check-prefix=CLIP
// RUN: not cdp-opt %s -cdp-insert-optimizer="clip-grad-norm=-1" 2>&1 | FileCheck %s --check-prefix=NEGATIVE

// Tests that each gradient becomes one update after every use of the old
// value (the last ops before return), with momentum defaulting to 0.9.
// CHECK: %[[W:.+]] = cdp.param "w"
// CHECK: cdp.gradient "w" %[[G:.+]] :
// CHECK-NEXT: cdp.update "w" %[[W]], %[[G]] {lr = 5.000000e-01 : f32, momentum = 0.899999976 : f32, optimizer = "sgd", weight_decay = 0.00999999977 : f32} : tensor<4xf32>
// CHECK-NEXT: return
// ADAM: cdp.update "w" {{.*}}optimizer = "adam"
// BAD: error: optimizer must be sgd, momentum, adam or adamw, got 'lion'
// AdamW keeps its name (the decay is decoupled); a schedule is carried by
// every update.
// ADAMW: cdp.update "w" {{.*}}lr_min = 9.99999974E-5 : f32, lr_period = 10 : i64, lr_schedule = "cosine", optimizer = "adamw", weight_decay = 0.00999999977 : f32}
// SCHEDULE: error: lr-schedule must be constant, step, cosine or linear, got 'exponential'
// Clipping: one clip of every gradient, after the last gradient and before
// the first update; none without the option.
// CLIP: cdp.gradient "w" %[[G:.+]] :
// CLIP-NEXT: cdp.clip_grad_norm %[[G]] {cdp.phase = "update", max_norm = 2.500000e+00 : f32} : tensor<4xf32>
// CLIP-NEXT: cdp.update "w"
// CHECK-NOT: clip_grad_norm
// NEGATIVE: error: clip-grad-norm must be positive (0: off), got -1
func.func @main(%x: tensor<4xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %w = cdp.param "w" : tensor<4xf32>
  %a = cdp.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = cdp.reduce_sum %a {axes = array<i64>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  %g = cdp.reduce_to %x {shape = array<i64: 4>} : (tensor<4xf32>) -> tensor<4xf32>
  cdp.gradient "w" %g : tensor<4xf32>
  return %l : tensor<f32>
}
