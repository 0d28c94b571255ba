// RUN: cdp-opt %s -cdp-autodiff="loss-scale=1024" -cdp-insert-optimizer="optimizer=momentum clip-grad-norm=1 loss-scale-interval=3" | FileCheck %s
// RUN: cdp-opt %s -cdp-autodiff -cdp-insert-optimizer | FileCheck %s --check-prefix=NONE
// RUN: not cdp-opt %s -cdp-autodiff="loss-scale=-1" 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: cdp-opt %s -cdp-autodiff="loss-scale=8" -cdp-insert-optimizer="lr-schedule=cosine" | FileCheck %s --check-prefix=SCHEDULE
// RUN: not cdp-opt %s -cdp-set-strategy=strategy=cdp-mp -cdp-autodiff="loss-scale=8" -cdp-insert-optimizer 2>&1 | FileCheck %s --check-prefix=STRATEGY

// Dynamic loss scaling (--precision fp16): autodiff seeds the backward with
// the scale held in a new buffer [S, clean steps, overflow] instead of 1;
// the optimizer pass unscales every gradient before the clip reads them,
// and each update names the buffer, so it skips an overflowed step.
// CHECK: %[[STATE:.+]] = cdp.param "cdp.loss_scale" buffer {value = dense<[1.024000e+03, 0.000000e+00, 0.000000e+00]> : tensor<3xf32>} : tensor<3xf32>
// CHECK: %[[SEED:.+]] = cdp.loss_scale %[[STATE]] : tensor<3xf32> -> tensor<f32>
// CHECK: cdp.reshape %[[SEED]]
// CHECK: cdp.gradient "w" %[[G:.+]] :
// CHECK-NEXT: cdp.unscale_grads %[[STATE]], %[[G]] {cdp.phase = "update", growth_interval = 3 : i64} : tensor<3xf32>, tensor<4xf32>
// CHECK-NEXT: cdp.clip_grad_norm %[[G]]
// CHECK-NEXT: cdp.update "w" %{{.+}}, %[[G]] unless_overflow(%[[STATE]] : tensor<3xf32>)
// Without the option: the constant seed, no buffer, no unscaling.
// NONE-NOT: cdp.loss_scale
// NONE: cdp.constant dense<1.000000e+00> : tensor<f32>
// NONE-NOT: unscale_grads
// NONE-NOT: unless_overflow
// NEGATIVE: error: loss-scale must be a positive number (0: off), got -1
// A schedule composes with it: the update keeps its schedule and names the
// buffer (its kernel advances the schedule on a skipped step too, as
// PyTorch's scheduler steps on, but not the update count).
// SCHEDULE: cdp.update "w" {{.*}}unless_overflow({{.*}}) {{.*}}lr_schedule = "cosine"
// STRATEGY: error: dynamic loss scaling (--precision fp16) runs under single, dp, cdp, gpipe, 1f1b, 2bw, interleaved-1f1b, zb-h1 or zb-v only so far, not cdp-mp; use --precision bf16, which needs no scaling
func.func @main(%x: tensor<4xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %w = cdp.param "w" : tensor<4xf32>
  %a = cdp.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = cdp.reduce_sum %a {axes = array<i64>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

