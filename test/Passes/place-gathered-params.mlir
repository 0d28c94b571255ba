// Tests cdp-place-gathered-params: every sched.gather_params gets its
// stage's byte offset in the gather region. Stage sizes over 4 devices:
// stage 1 has 10 elements (padded to 12: 48 bytes), stage 2 7 (8: 32
// bytes), stage 3 5 (8: 32 bytes). Stages 1 and 2 are gathered at the same
// time (a tied weight), so stage 2 goes after stage 1 at the next 64-byte
// boundary; stage 3 is only gathered alone and shares offset 0 (the
// printer leaves the default 0 out). A gather of a stage without trained
// parameters is an error.
// RUN: cdp-opt %s -split-input-file -verify-diagnostics -cdp-place-gathered-params | FileCheck %s

// CHECK: sched.gather_params {stage = 1 : i64, time_step = 0 : i64}
// CHECK-NEXT: sched.gather_params {offset = 64 : i64, stage = 2 : i64, time_step = 0 : i64}
// CHECK: sched.gather_params {stage = 3 : i64, time_step = 1 : i64}
// CHECK: sched.gather_params {stage = 1 : i64, time_step = 2 : i64}
// CHECK: sched.gather_params {offset = 64 : i64, stage = 2 : i64, time_step = 3 : i64}

func.func @main(%g1: tensor<10xf32>, %g2: tensor<7xf32>, %g3: tensor<5xf32>) {
  cdp.gradient "a" %g1 {cdp.stage = 1 : i64} : tensor<10xf32>
  cdp.gradient "b" %g2 {cdp.stage = 2 : i64} : tensor<7xf32>
  cdp.gradient "c" %g3 {cdp.stage = 3 : i64} : tensor<5xf32>
  return
}

sched.step_program attributes {cycle = 6 : i64, live_versions = array<i64: 1, 1, 1>, micro_batches = 4 : i64, reduce_at = array<i64: 5, 4, 3>, reduction = #sched.reduction<all_reduce>, rule = "dp", stages = 3 : i64, strategy = #sched.strategy<"dp">, version_delay = [array<i64: 0, 0, 0>], weight_versions = 1 : i64} {
  sched.slot_device attributes {index = 0 : i64, offset = 0 : i64} {
    sched.gather_params {stage = 1 : i64, time_step = 0 : i64}
    sched.gather_params {stage = 2 : i64, time_step = 0 : i64}
    sched.release_params {stage = 1 : i64, time_step = 0 : i64}
    sched.release_params {stage = 2 : i64, time_step = 0 : i64}
    sched.gather_params {stage = 3 : i64, time_step = 1 : i64}
    sched.release_params {stage = 3 : i64, time_step = 1 : i64}
    sched.gather_params {stage = 1 : i64, time_step = 2 : i64}
    sched.release_params {stage = 1 : i64, time_step = 2 : i64}
    sched.gather_params {stage = 2 : i64, time_step = 3 : i64}
    sched.release_params {stage = 2 : i64, time_step = 3 : i64}
  }
}

// -----

func.func @main(%g1: tensor<10xf32>) {
  cdp.gradient "a" %g1 {cdp.stage = 1 : i64} : tensor<10xf32>
  return
}

sched.step_program attributes {cycle = 4 : i64, live_versions = array<i64: 1, 1>, micro_batches = 4 : i64, reduce_at = array<i64: 3, 2>, reduction = #sched.reduction<all_reduce>, rule = "dp", stages = 2 : i64, strategy = #sched.strategy<"dp">, version_delay = [array<i64: 0, 0>], weight_versions = 1 : i64} {
  sched.slot_device attributes {index = 0 : i64, offset = 0 : i64} {
    // expected-error @+1 {{gathers a stage without trained parameters}}
    sched.gather_params {stage = 2 : i64, time_step = 1 : i64}
    sched.release_params {stage = 2 : i64, time_step = 1 : i64}
  }
}
