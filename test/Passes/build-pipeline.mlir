// RUN: cdp-opt %s -cdp-set-strategy=strategy=gpipe -cdp-build-pipeline="stages=4 micro-batches=4 steps=1" -cdp-check-deadlock | FileCheck %s --check-prefix=GPIPE
// RUN: cdp-opt %s -cdp-set-strategy=strategy=1f1b -cdp-build-pipeline="stages=4 micro-batches=4 steps=3" -cdp-check-deadlock | FileCheck %s --check-prefix=FLUSH
// RUN: cdp-opt %s -cdp-set-strategy=strategy=2bw -cdp-build-pipeline="stages=4 micro-batches=4 steps=3" -cdp-check-deadlock | FileCheck %s --check-prefix=TWOBW
// RUN: not cdp-opt %s -cdp-set-strategy=strategy=2bw -cdp-build-pipeline="stages=4 micro-batches=3" 2>&1 | FileCheck %s --check-prefix=SHORT
// A tabled schedule's timeline is not this pass's to build (it would have
// been 1F1B's order, silently): refused.
// RUN: not cdp-opt %s -cdp-set-strategy=strategy=zb-h1 -cdp-build-pipeline="stages=4 micro-batches=4" 2>&1 | FileCheck %s --check-prefix=TABLED
// TABLED: error: pipeline strategy must be gpipe, 1f1b or 2bw, got 'zb-h1'

// Tests the pipeline schedules of algorithms.md 3.2 with d = m = 4, one
// time step per stage op: makespans (14 per flushed step: 42 for three;
// 30 for three 2BW steps), peak stashed activations per stage (GPipe m;
// 1F1B and 2BW d - s + 1), live weight versions (1; 2 for 2BW), table
// placements, 2BW's version rule v(k) = max(floor((k-1)/m) - 1, 0), and
// that every schedule passes the deadlock check.

// GPIPE: live_versions = array<i64: 1, 1, 1, 1>, makespan = 14
// GPIPE-SAME: stash_peak = array<i64: 4, 4, 4, 4>
// Table 3.2.1: stage 4 runs B1 at t = 7, stage 1 B4 at t = 13.
// GPIPE: sched.device attributes {idle = 0 : i64, index = 0
// GPIPE: sched.run {at = 13 : i64, kind = "B", slot = 4 : i64, stage = 1
// GPIPE: sched.device attributes {idle = 0 : i64, index = 3
// GPIPE: sched.run {at = 7 : i64, kind = "B", slot = 1 : i64, stage = 4

// FLUSH: live_versions = array<i64: 1, 1, 1, 1>, makespan = 42
// FLUSH-SAME: stash_peak = array<i64: 4, 3, 2, 1>
// Table 3.2.2: stage 3 alternates F3 at 6, B2 at 7; the next step starts at 14.
// FLUSH: sched.device attributes {idle = 0 : i64, index = 0
// FLUSH: sched.run {at = 14 : i64, kind = "F", slot = 5 : i64, stage = 1
// FLUSH: sched.device attributes {idle = 0 : i64, index = 2
// FLUSH: sched.run {at = 6 : i64, kind = "F", slot = 3 : i64, stage = 3
// FLUSH: sched.run {at = 7 : i64, kind = "B", slot = 2 : i64, stage = 3

// TWOBW: live_versions = array<i64: 2, 2, 2, 2>, makespan = 30
// TWOBW-SAME: stash_peak = array<i64: 4, 3, 2, 1>
// Table 3.2.3: stage 1 makes version 1 after B4 at t = 13; F9 reads it at 16,
// while B5..B8 still read version 0.
// TWOBW: sched.device attributes {idle = 0 : i64, index = 0
// TWOBW: sched.run {at = 13 : i64, kind = "B", slot = 4 : i64, stage = 1 : i64, step = 0 : i64, version = 0 : i64}
// TWOBW-NEXT: sched.update {at = 14 : i64, stage = 1 : i64, version = 1 : i64}
// TWOBW: sched.run {at = 16 : i64, kind = "F", slot = 9 : i64, stage = 1 : i64, step = 2 : i64, version = 1 : i64}
// TWOBW: sched.run {at = 17 : i64, kind = "B", slot = 6 : i64, stage = 1 : i64, step = 1 : i64, version = 0 : i64}
// TWOBW: sched.run {at = 29 : i64, kind = "B", slot = 12 : i64, stage = 1 : i64, step = 2 : i64, version = 1 : i64}

// SHORT: error: 2bw needs at least as many micro-batches as stages (m >= d): got m = 3, d = 4
module {}
