// RUN: not cdp-opt %s -cdp-check-deadlock 2>&1 | FileCheck %s

// Tests that a hand-written schedule that would hang is refused, naming the
// op each stuck device waits at and the rounds before it: both devices
// first wait for the other's activation.
// CHECK: error: the schedule would hang: no device can move after round 1 (sends buffered, receives blocking).
// CHECK-NEXT: stuck:
// CHECK-NEXT: device 0 at op 1: sched.recv at=1 from=1 kind=activation slot=2 step=0
// CHECK-NEXT: device 1 at op 1: sched.recv at=1 from=0 kind=activation slot=1 step=0
// CHECK-NEXT: round x device (the last op each device completed in the round):
// CHECK-NEXT: 0: run run
sched.program attributes {devices = 2 : i64, rule = "hand-written", stages = 2 : i64, steps = 1 : i64, strategy = #sched.strategy<"gpipe">} {
  sched.device attributes {idle = 0 : i64, index = 0 : i64, offset = 0 : i64} {
    sched.run {at = 0 : i64, kind = "F", slot = 1 : i64, stage = 1 : i64, step = 0 : i64, version = 0 : i64}
    sched.recv {at = 1 : i64, from = 1 : i64, kind = "activation", slot = 2 : i64, step = 0 : i64}
    sched.send {at = 2 : i64, to = 1 : i64, kind = "activation", slot = 1 : i64, step = 0 : i64}
  }
  sched.device attributes {idle = 0 : i64, index = 1 : i64, offset = 0 : i64} {
    sched.run {at = 0 : i64, kind = "F", slot = 2 : i64, stage = 2 : i64, step = 0 : i64, version = 0 : i64}
    sched.recv {at = 1 : i64, from = 0 : i64, kind = "activation", slot = 1 : i64, step = 0 : i64}
    sched.send {at = 2 : i64, to = 0 : i64, kind = "activation", slot = 2 : i64, step = 0 : i64}
  }
}
