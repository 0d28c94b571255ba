// RUN: cdp-opt %s -cdp-set-strategy=strategy=cdp -cdp-build-schedule="devices=4" -cdp-delay-updates="rule=v2 table=timing" -cdp-stagger-collectives -cdp-materialize-schedule=steps=2 | FileCheck %s
// RUN: cdp-opt %s -cdp-set-strategy=strategy=cdp -cdp-build-schedule="devices=4" -cdp-delay-updates="rule=v1" -cdp-stagger-collectives -cdp-materialize-schedule=steps=3 | FileCheck %s --check-prefix=V1

// Tests the schedule written out for N = L = 4 (algorithms.md 2.3.1 and
// 2.3.4): device i starts at time step 2i; the stage-4 reduction of step t
// is ready at tau*_4(t) = 6 + 8t + 4; under v2 slot 0 runs F4 of step 1 at
// time step 11 on version 1, right after taking the reduction of step 0,
// while its B3 of step 1 still reads version 0; under v1 every run of step t
// reads version t - 1 (steps 0 and 1 both read version 0).
// CHECK: sched.program attributes {devices = 4 : i64, rule = "v2-timing", stages = 4 : i64, steps = 2 : i64, strategy = #sched.strategy<"cdp">}
// CHECK: sched.device attributes {idle = 0 : i64, index = 0 : i64, offset = 0 : i64}
// CHECK: sched.run {at = 0 : i64, kind = "F", slot = 0 : i64, stage = 1 : i64, step = 0 : i64, version = 0 : i64}
// CHECK: sched.reduce_start {at = 4 : i64, ready_at = 10 : i64, stage = 4 : i64, step = 0 : i64}
// CHECK: sched.reduce_wait {at = 11 : i64, stage = 4 : i64, step = 0 : i64}
// CHECK-NEXT: sched.update {at = 11 : i64, stage = 4 : i64, version = 1 : i64}
// CHECK-NEXT: sched.run {at = 11 : i64, kind = "F", slot = 0 : i64, stage = 4 : i64, step = 1 : i64, version = 1 : i64}
// CHECK: sched.run {at = 13 : i64, kind = "B", slot = 0 : i64, stage = 3 : i64, step = 1 : i64, version = 0 : i64}
// CHECK: sched.device attributes {idle = 0 : i64, index = 1 : i64, offset = 2 : i64}
// CHECK-NEXT: sched.load {at = 2 : i64, slot = 1 : i64, step = 0 : i64}
// CHECK-NEXT: sched.run {at = 2 : i64, kind = "F", slot = 1 : i64, stage = 1 : i64, step = 0 : i64, version = 0 : i64}
// CHECK: sched.reduce_start {at = 6 : i64, ready_at = 10 : i64, stage = 4 : i64, step = 0 : i64}
// CHECK: sched.device attributes {idle = 0 : i64, index = 3 : i64, offset = 6 : i64}
// CHECK: sched.reduce_start {at = 10 : i64, ready_at = 10 : i64, stage = 4 : i64, step = 0 : i64}
// V1: sched.device attributes {idle = 0 : i64, index = 0 : i64, offset = 0 : i64}
// V1: sched.run {at = 11 : i64, kind = "F", slot = 0 : i64, stage = 4 : i64, step = 1 : i64, version = 0 : i64}
// V1: sched.reduce_wait {at = 19 : i64, stage = 4 : i64, step = 0 : i64}
// V1-NEXT: sched.update {at = 19 : i64, stage = 4 : i64, version = 1 : i64}
// V1-NEXT: sched.run {at = 19 : i64, kind = "F", slot = 0 : i64, stage = 4 : i64, step = 2 : i64, version = 1 : i64}
func.func @main(%x: tensor<4xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64, cdp.stages = 4 : i64} {
  %w = cdp.param "w" : tensor<4xf32>
  %a = cdp.tanh %x {cdp.stage = 1 : i64} : tensor<4xf32>
  %b = cdp.tanh %a {cdp.stage = 2 : i64} : tensor<4xf32>
  %c = cdp.tanh %b {cdp.stage = 3 : i64} : tensor<4xf32>
  %d = cdp.mul %c, %w {cdp.stage = 4 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = cdp.reduce_sum %d {axes = array<i64>, keepdims = false, cdp.stage = 4 : i64} : (tensor<4xf32>) -> tensor<f32>
  %g = cdp.mul %c, %x {cdp.stage = 4 : i64, cdp.phase = "backward"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  cdp.gradient "w" %g {cdp.stage = 4 : i64, cdp.phase = "backward"} : tensor<4xf32>
  return %l : tensor<f32>
}
