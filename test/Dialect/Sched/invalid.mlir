// Tests that the verifier refuses a malformed instance of every step
// program op.
// RUN: cdp-opt %s -split-input-file -verify-diagnostics

// A strategy outside the registry does not parse.
// expected-error@+1 {{'zero' is not a strategy (single, dp, cdp, gpipe, 1f1b, 2bw, cdp-mp, interleaved-1f1b, zb-h1, laysa or zb-v)}}
sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"zero">, weight_versions = 1} {
}

// -----

// expected-error@+1 {{'sched.step_program' op weight_versions must be 1 or 2, got 3}}
sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"2bw">, weight_versions = 3} {
}

// -----

// expected-error@+1 {{'sched.step_program' op stages, micro_batches and cycle must be positive}}
sched.step_program attributes {cycle = 0, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  // expected-error@+1 {{'sched.stage_device' op has index 1 where 0 is expected (devices are numbered in order)}}
  sched.stage_device attributes {index = 1, micro_batches = array<i64: 0>, replica = 0, slots = 1, stage = 1} {
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  // expected-error@+1 {{'sched.stage_device' op runs stage 3 of a program with 2}}
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0>, replica = 0, slots = 1, stage = 3} {
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  // expected-error@+1 {{'sched.stage_device' op lists micro-batch 2 twice or outside 0..1}}
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0, 2>, replica = 0, slots = 1, stage = 1} {
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0, 1>, replica = 0, slots = 1, stage = 1} {
    // expected-error@+1 {{'sched.compute' op uses stash slot 1 of a device that has 1}}
    sched.compute {kind = #sched.work<forward>, micro_batch = 1, slot = 1, step = 0, time_step = 0, version = #sched.version<latest>}
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0, 1>, replica = 0, slots = 2, stage = 1} {
    // expected-error@+1 {{'sched.compute' op runs micro-batch 2 of a device that has 2}}
    sched.compute {kind = #sched.work<backward>, micro_batch = 2, slot = 0, step = 0, time_step = 0, version = #sched.version<latest>}
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0, 1>, replica = 0, slots = 2, stage = 1} {
    // expected-error@+1 {{'sched.compute' op reads a previous version in a program that keeps one}}
    sched.compute {kind = #sched.work<backward>, micro_batch = 0, slot = 0, step = 0, time_step = 0, version = #sched.version<previous>}
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"2bw">, weight_versions = 2} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0, 1>, replica = 0, slots = 2, stage = 1} {
    // expected-error@+1 {{'sched.compute' op step must be 0 (this step) or -1 (the previous step), got -2}}
    sched.compute {kind = #sched.work<backward>, micro_batch = 0, slot = 0, step = -2, time_step = 0, version = #sched.version<previous>}
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"2bw">, weight_versions = 2} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0, 1>, replica = 0, slots = 2, stage = 1} {
    // expected-error@+1 {{'sched.apply_update' op has a negative time_step}}
    sched.apply_update {micro_batch = 0, param = "w", step = 0, time_step = -1}
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"2bw">, weight_versions = 2} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0, 1>, replica = 0, slots = 2, stage = 1} {
    // expected-error@+2 {{expected ::cdp::sched::WorkKind to be one of: forward, backward}}
    // expected-error@+1 {{failed to parse Sched_WorkKindAttr parameter 'value'}}
    sched.compute {kind = #sched.work<sideways>, micro_batch = 0, slot = 0, step = 0, time_step = 0, version = #sched.version<latest>}
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0, 1>, replica = 0, slots = 2, stage = 1} {
    // expected-error@+1 {{'sched.keep_previous' op keeps a previous version in a program that keeps one}}
    sched.keep_previous {micro_batch = 0, param = "w", step = 0, time_step = 0}
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 1, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0>, replica = 0, slots = 1, stage = 1} {
    // expected-error@+1 {{'sched.exchange_gradients' op needs two or more peers with this device at peers[replica]}}
    sched.exchange_gradients {micro_batch = 0, param = "w", peers = array<i64: 1, 0>, replica = 0, step = 0, time_step = 0}
  }
  sched.stage_device attributes {index = 1, micro_batches = array<i64: 1>, replica = 1, slots = 1, stage = 1} {
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0, 1>, replica = 0, slots = 2, stage = 1} {
    // expected-error@+1 {{'sched.param_send' op names its own device as the peer}}
    sched.param_send {micro_batch = 0, param = "w", step = 0, time_step = 0, to = 0}
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0, 1>, replica = 0, slots = 2, stage = 1} {
    // expected-error@+1 {{'sched.param_recv' op names device 5; the program has 1}}
    sched.param_recv {from = 5, micro_batch = 0, param = "w", step = 0, time_step = 0}
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 1, rule = "", stages = 2, strategy = #sched.strategy<"dp">, weight_versions = 1} {
  sched.slot_device attributes {index = 0, offset = 0} {
    // expected-error@+1 {{'sched.slot_compute' op runs stage 3 of a program with 2}}
    sched.slot_compute {kind = #sched.work<forward>, stage = 3, time_step = 0}
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 1, rule = "", stages = 2, strategy = #sched.strategy<"cdp">, weight_versions = 1} {
  sched.slot_device attributes {index = 0, offset = 0} {
    // expected-error@+1 {{'sched.wait_reduction' op waits from step 1 with delay 1; a delay d >= 0 waits from step 1 + d}}
    sched.wait_reduction {delay = 1, min_step = 1, stage = 1, time_step = 0}
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"dp">, weight_versions = 1} {
  sched.slot_device attributes {index = 0, offset = 0} {
  }
  // expected-error@+1 {{'sched.slot_device' op has index 0 where 1 is expected (devices are numbered in order)}}
  sched.slot_device attributes {index = 0, offset = 0} {
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0>, replica = 0, slots = 1, stage = 1} {
    // expected-error@+1 {{'sched.clip_stages' op needs one device per stage, the stages in order and this device's stage among them}}
    sched.clip_stages {devices = array<i64: 1>, micro_batch = 0, stages = array<i64: 2>, step = 0, time_step = 1}
  }
}

// -----

sched.step_program attributes {cycle = 4, micro_batches = 2, rule = "", stages = 2, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0>, replica = 0, slots = 1, stage = 1} {
    // expected-error@+1 {{'sched.clip_stages' op names stage 3 of a program with 2}}
    sched.clip_stages {devices = array<i64: 0, 1>, micro_batch = 0, stages = array<i64: 1, 3>, step = 0, time_step = 1}
  }
}

// -----

// A program of alike replicas spells the first replica only.
sched.step_program attributes {cycle = 4, micro_batches = 2, replicas = 2, rule = "", stages = 1, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0>, replica = 0, slots = 1, stage = 1} {
  }
  // expected-error@+1 {{'sched.stage_device' op spells replica 1 in a program of 2 alike replicas (only the first is spelled)}}
  sched.stage_device attributes {index = 1, micro_batches = array<i64: 1>, replica = 1, slots = 1, stage = 1} {
  }
}

// -----

// expected-error@+1 {{'sched.step_program' op replicas must be positive, got 0}}
sched.step_program attributes {cycle = 4, micro_batches = 2, replicas = 0, rule = "", stages = 1, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
}

// -----

// Peers may name the unspelled replicas' devices, but no further.
sched.step_program attributes {cycle = 4, micro_batches = 4, replicas = 2, rule = "", stages = 1, strategy = #sched.strategy<"gpipe">, weight_versions = 1} {
  sched.stage_device attributes {index = 0, micro_batches = array<i64: 0, 1>, replica = 0, slots = 1, stage = 1} {
    sched.exchange_gradients {micro_batch = 0, param = "w", peers = array<i64: 0, 1>, replica = 0, step = 0, time_step = 0}
    // expected-error@+1 {{'sched.param_recv' op names device 2; the program has 2}}
    sched.param_recv {from = 2, micro_batch = 0, param = "w", step = 0, time_step = 0}
  }
}
