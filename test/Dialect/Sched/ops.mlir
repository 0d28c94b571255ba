// Tests that every sched op parses, verifies and prints back unchanged: a
// hand-written step program of two stages on three devices (stage 1 has two
// replicas) with a tied weight, and the time-step timeline ops.
// RUN: cdp-opt %s | cdp-opt | FileCheck %s

// CHECK: sched.step_program attributes {cycle = 4 : i64, live_versions = array<i64: 2, 2>, micro_batches = 2 : i64, rule = "v1", stages = 2 : i64, strategy = #sched.strategy<"cdp-mp">, version_delay = [array<i64: 1, 1>, array<i64: 1, 1>], weight_versions = 2 : i64} {
// CHECK-NEXT: sched.place_param {param = "w", replicas = array<i64: 2>, stage = 1 : i64}
// CHECK-NEXT: sched.stage_device attributes {index = 0 : i64, micro_batches = array<i64: 0>, replica = 0 : i64, slots = 1 : i64, stage = 1 : i64} {
// CHECK-NEXT: sched.compute {kind = #sched.work<forward>, micro_batch = 0 : i64, slot = 0 : i64, step = 0 : i64, tied_previous = ["w"], time_step = 0 : i64, version = #sched.version<latest>}
// CHECK-NEXT: sched.keep_previous {micro_batch = 0 : i64, param = "w", step = -1 : i64, time_step = 1 : i64}
// CHECK-NEXT: sched.exchange_gradients {micro_batch = 0 : i64, param = "w", peers = array<i64: 0, 2>, replica = 0 : i64, step = -1 : i64, time_step = 1 : i64}
// CHECK-NEXT: sched.clip_stages {devices = array<i64: 0, 1>, micro_batch = 0 : i64, stages = array<i64: 1, 2>, step = -1 : i64, time_step = 1 : i64}
// CHECK-NEXT: sched.apply_update {micro_batch = 0 : i64, param = "w", step = -1 : i64, time_step = 1 : i64}
// CHECK-NEXT: sched.param_send {micro_batch = 0 : i64, param = "w", step = -1 : i64, time_step = 1 : i64, to = 1 : i64}
// CHECK-NEXT: sched.compute {kind = #sched.work<backward>, micro_batch = 0 : i64, slot = 0 : i64, step = 0 : i64, time_step = 3 : i64, version = #sched.version<previous>}
// CHECK-NEXT: }
// CHECK-NEXT: sched.stage_device attributes {index = 1 : i64
// CHECK-NEXT: sched.param_recv {from = 0 : i64, micro_batch = 0 : i64, param = "w", step = 0 : i64, time_step = 0 : i64}
// CHECK-NEXT: sched.param_refresh {from = 2 : i64, param = "w"}
sched.step_program attributes {cycle = 4 : i64, live_versions = array<i64: 2, 2>, micro_batches = 2 : i64, rule = "v1", stages = 2 : i64, strategy = #sched.strategy<"cdp-mp">, version_delay = [array<i64: 1, 1>, array<i64: 1, 1>], weight_versions = 2 : i64} {
  sched.place_param {param = "w", replicas = array<i64: 2>, stage = 1 : i64}
  sched.stage_device attributes {index = 0 : i64, micro_batches = array<i64: 0>, replica = 0 : i64, slots = 1 : i64, stage = 1 : i64} {
    sched.compute {kind = #sched.work<forward>, micro_batch = 0 : i64, slot = 0 : i64, step = 0 : i64, tied_previous = ["w"], time_step = 0 : i64, version = #sched.version<latest>}
    sched.keep_previous {micro_batch = 0 : i64, param = "w", step = -1 : i64, time_step = 1 : i64}
    sched.exchange_gradients {micro_batch = 0 : i64, param = "w", peers = array<i64: 0, 2>, replica = 0 : i64, step = -1 : i64, time_step = 1 : i64}
    sched.clip_stages {devices = array<i64: 0, 1>, micro_batch = 0 : i64, stages = array<i64: 1, 2>, step = -1 : i64, time_step = 1 : i64}
    sched.apply_update {micro_batch = 0 : i64, param = "w", step = -1 : i64, time_step = 1 : i64}
    sched.param_send {micro_batch = 0 : i64, param = "w", step = -1 : i64, time_step = 1 : i64, to = 1 : i64}
    sched.compute {kind = #sched.work<backward>, micro_batch = 0 : i64, slot = 0 : i64, step = 0 : i64, time_step = 3 : i64, version = #sched.version<previous>}
  }
  sched.stage_device attributes {index = 1 : i64, micro_batches = array<i64: 0, 1>, replica = 0 : i64, slots = 2 : i64, stage = 2 : i64} {
    sched.param_recv {from = 0 : i64, micro_batch = 0 : i64, param = "w", step = 0 : i64, time_step = 0 : i64}
    sched.param_refresh {from = 2 : i64, param = "w"}
  }
  sched.stage_device attributes {index = 2 : i64, micro_batches = array<i64: 1>, replica = 1 : i64, slots = 1 : i64, stage = 1 : i64} {
  }
}

// CHECK: sched.step_program attributes {cycle = 2 : i64, live_versions = array<i64: 2>, micro_batches = 2 : i64, reduce_at = array<i64: 2>, reduction = #sched.reduction<chain>, rule = "v1", stages = 1 : i64, strategy = #sched.strategy<"cdp">, version_delay = [array<i64: 1>, array<i64: 1>], weight_versions = 1 : i64} {
// CHECK-NEXT: sched.slot_device attributes {index = 0 : i64, offset = 0 : i64} {
// CHECK-NEXT: sched.wait_reduction {delay = 1 : i64, min_step = 2 : i64, stage = 1 : i64, time_step = 0 : i64}
// CHECK-NEXT: sched.slot_compute {kind = #sched.work<forward>, stage = 1 : i64, time_step = 0 : i64}
// CHECK-NEXT: sched.slot_compute {kind = #sched.work<backward>, stage = 1 : i64, time_step = 1 : i64}
// CHECK-NEXT: sched.start_reduction {stage = 1 : i64, time_step = 1 : i64}
// CHECK-NEXT: sched.chain_relay {stage = 1 : i64, step_offset = 1 : i64, time_step = 1 : i64}
// CHECK: sched.slot_device attributes {index = 1 : i64, offset = 1 : i64} {
// CHECK-NEXT: sched.clip_means {min_step = 1 : i64, time_step = 0 : i64}
// CHECK-NEXT: sched.clip_own {time_step = 1 : i64}
sched.step_program attributes {cycle = 2 : i64, live_versions = array<i64: 2>, micro_batches = 2 : i64, reduce_at = array<i64: 2>, reduction = #sched.reduction<chain>, rule = "v1", stages = 1 : i64, strategy = #sched.strategy<"cdp">, version_delay = [array<i64: 1>, array<i64: 1>], weight_versions = 1 : i64} {
  sched.slot_device attributes {index = 0 : i64, offset = 0 : i64} {
    sched.wait_reduction {delay = 1 : i64, min_step = 2 : i64, stage = 1 : i64, time_step = 0 : i64}
    sched.slot_compute {kind = #sched.work<forward>, stage = 1 : i64, time_step = 0 : i64}
    sched.slot_compute {kind = #sched.work<backward>, stage = 1 : i64, time_step = 1 : i64}
    sched.start_reduction {stage = 1 : i64, time_step = 1 : i64}
    sched.chain_relay {stage = 1 : i64, step_offset = 1 : i64, time_step = 1 : i64}
  }
  sched.slot_device attributes {index = 1 : i64, offset = 1 : i64} {
    sched.clip_means {min_step = 1 : i64, time_step = 0 : i64}
    sched.clip_own {time_step = 1 : i64}
  }
}

// CHECK: sched.program attributes {devices = 2 : i64, rule = "synchronous", stages = 1 : i64, steps = 1 : i64, strategy = #sched.strategy<"gpipe">} {
// CHECK-NEXT: sched.device attributes {idle = 0 : i64, index = 0 : i64, offset = 0 : i64} {
// CHECK-NEXT: sched.load {at = 0 : i64, slot = 0 : i64, step = 0 : i64}
// CHECK-NEXT: sched.run {at = 0 : i64, kind = "F", slot = 0 : i64, stage = 1 : i64, step = 0 : i64, version = 0 : i64}
// CHECK-NEXT: sched.send {at = 0 : i64, kind = "activation", slot = 0 : i64, step = 0 : i64, to = 1 : i64}
// CHECK-NEXT: sched.reduce_start {at = 1 : i64, ready_at = 2 : i64, stage = 1 : i64, step = 0 : i64}
// CHECK-NEXT: sched.reduce_wait {at = 2 : i64, stage = 1 : i64, step = 0 : i64}
// CHECK-NEXT: sched.update {at = 2 : i64, stage = 1 : i64, version = 1 : i64}
// CHECK: sched.recv {at = 1 : i64, from = 0 : i64, kind = "activation", slot = 0 : i64, step = 0 : i64}
sched.program attributes {devices = 2 : i64, rule = "synchronous", stages = 1 : i64, steps = 1 : i64, strategy = #sched.strategy<"gpipe">} {
  sched.device attributes {idle = 0 : i64, index = 0 : i64, offset = 0 : i64} {
    sched.load {at = 0 : i64, slot = 0 : i64, step = 0 : i64}
    sched.run {at = 0 : i64, kind = "F", slot = 0 : i64, stage = 1 : i64, step = 0 : i64, version = 0 : i64}
    sched.send {at = 0 : i64, kind = "activation", slot = 0 : i64, step = 0 : i64, to = 1 : i64}
    sched.reduce_start {at = 1 : i64, ready_at = 2 : i64, stage = 1 : i64, step = 0 : i64}
    sched.reduce_wait {at = 2 : i64, stage = 1 : i64, step = 0 : i64}
    sched.update {at = 2 : i64, stage = 1 : i64, version = 1 : i64}
  }
  sched.device attributes {idle = 0 : i64, index = 1 : i64, offset = 0 : i64} {
    sched.recv {at = 1 : i64, from = 0 : i64, kind = "activation", slot = 0 : i64, step = 0 : i64}
  }
}
