// RUN: cdp-opt %s -cdp-set-strategy=strategy=cdp -cdp-build-schedule="devices=4" -cdp-delay-updates="rule=v2 table=timing" -cdp-stagger-collectives | FileCheck %s --check-prefix=V2
// RUN: cdp-opt %s -cdp-set-strategy=strategy=cdp -cdp-build-schedule="devices=4" -cdp-delay-updates="rule=v1" -cdp-stagger-collectives | FileCheck %s --check-prefix=V1
// RUN: cdp-opt %s -cdp-set-strategy=strategy=dp -cdp-build-schedule="devices=4" -cdp-delay-updates -cdp-stagger-collectives | FileCheck %s --check-prefix=DP
// RUN: cdp-opt %s -cdp-set-strategy=strategy=cdp -cdp-build-schedule="devices=8" -cdp-delay-updates="rule=v2 table=timing" | FileCheck %s --check-prefix=N8T
// RUN: cdp-opt %s -cdp-set-strategy=strategy=cdp -cdp-build-schedule="devices=8" -cdp-delay-updates="rule=v2 table=code" | FileCheck %s --check-prefix=N8C
// RUN: cdp-opt %s -cdp-set-strategy=strategy=cdp -cdp-build-schedule="devices=16" | FileCheck %s --check-prefix=N16
// RUN: cdp-opt %s -cdp-set-strategy=strategy=dp -cdp-build-schedule="devices=4 zero=2" | FileCheck %s --check-prefix=ZERO
// RUN: not cdp-opt %s -cdp-set-strategy=strategy=cdp -cdp-build-schedule="devices=4 zero=1" 2>&1 | FileCheck %s --check-prefix=ZEROCDP
// RUN: not cdp-opt %s -cdp-build-schedule="devices=4" 2>&1 | FileCheck %s --check-prefix=NOSTRATEGY
// RUN: not cdp-opt %s -cdp-set-strategy=strategy=bogus 2>&1 | FileCheck %s --check-prefix=BOGUS
// A pipeline is not this pass's: refused, naming the strategies it takes.
// RUN: not cdp-opt %s -cdp-set-strategy=strategy=1f1b -cdp-build-schedule="devices=4" 2>&1 | FileCheck %s --check-prefix=PIPELINE
// PIPELINE: error: build-schedule handles dp, cdp and laysa, not '1f1b'
// The strategy is typed IR on the module (cdp-set-strategy), not an option
// of the schedule passes.
// NOSTRATEGY: error: the module names no strategy (sched.strategy); run cdp-set-strategy first
// BOGUS: error: cdp-set-strategy: 'bogus' is not a strategy (single, dp, cdp, gpipe, 1f1b, 2bw, cdp-mp, interleaved-1f1b, zb-h1, laysa or zb-v)

// Tests the decisions of the data-parallel schedule for L = 4 stages
// (algorithms.md 2.2-2.4): start offsets s_i = floor(2Li/N), the version
// each (slot, stage) reads, the reduction time tau*_l(0) = s_{N-1} + 2L - l,
// and each op's time within a cycle (F_l at l-1, B_l at 2L-l).

// V2: cdp.live_versions = array<i64: 2, 2, 2, 1>
// V2-SAME: cdp.offsets = array<i64: 0, 2, 4, 6>
// V2-SAME: cdp.reduce = "allreduce", cdp.reduce_at = array<i64: 13, 12, 11, 10>
// V2-SAME: cdp.rule = "v2-timing"
// V2-SAME: cdp.schedule = {devices = 4 : i64, slots = 4 : i64, stages = 4 : i64, strategy = #sched.strategy<"cdp">}
// V2-SAME: cdp.version_delay = [array<i64: 1, 1, 1, 0>, array<i64: 1, 1, 0, 0>, array<i64: 1, 0, 0, 0>, array<i64: 0, 0, 0, 0>]
// V1: cdp.live_versions = array<i64: 2, 2, 2, 2>
// V1-SAME: cdp.version_delay = [array<i64: 1, 1, 1, 1>, array<i64: 1, 1, 1, 1>, array<i64: 1, 1, 1, 1>, array<i64: 1, 1, 1, 1>]
// DP: cdp.live_versions = array<i64: 1, 1, 1, 1>
// DP-SAME: cdp.offsets = array<i64: 0, 0, 0, 0>
// DP-SAME: cdp.reduce_at = array<i64: 7, 6, 5, 4>
// DP-SAME: cdp.version_delay = [array<i64: 0, 0, 0, 0>, array<i64: 0, 0, 0, 0>, array<i64: 0, 0, 0, 0>, array<i64: 0, 0, 0, 0>]
// N8T: cdp.idle = array<i64: 0, 0, 0, 0, 0, 0, 0, 0>
// N8T-SAME: cdp.offsets = array<i64: 0, 1, 2, 3, 4, 5, 6, 7>
// N8T-SAME: cdp.version_delay = [array<i64: 1, 1, 1, 1>, array<i64: 1, 1, 1, 0>, array<i64: 1, 1, 1, 0>, array<i64: 1, 1, 0, 0>, array<i64: 1, 1, 0, 0>, array<i64: 1, 0, 0, 0>, array<i64: 1, 0, 0, 0>, array<i64: 0, 0, 0, 0>]
// The code table with N = 8, L = 4 makes slots 0..6 fresh where the
// version is not there yet: they wait (algorithms.md 2.4.3, cli.md).
// N8C: cdp.idle = array<i64: 1, 2, 3, 4, 3, 2, 1, 0>
// N8C-SAME: cdp.offsets = array<i64: 1, 3, 5, 7, 7, 7, 7, 7>
// N8C-SAME: cdp.version_delay = [array<i64: 1, 1, 1, 0>, array<i64: 1, 1, 0, 0>, array<i64: 1, 0, 0, 0>, array<i64: 0, 0, 0, 0>, array<i64: 0, 0, 0, 0>, array<i64: 0, 0, 0, 0>, array<i64: 0, 0, 0, 0>, array<i64: 0, 0, 0, 0>]
// N16: cdp.offsets = array<i64: 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7>

// The ops are ordered F_1 .. F_L, B_L .. B_1, with their cycle times.
// V2: cdp.tanh %{{.+}} {cdp.stage = 1 : i64, cdp.time = 0 : i64}
// V2: cdp.tanh %{{.+}} {cdp.stage = 2 : i64, cdp.time = 1 : i64}
// V2: cdp.tanh %{{.+}} {cdp.stage = 3 : i64, cdp.time = 2 : i64}
// V2: cdp.reduce_sum %{{.+}} {axes = array<i64>, cdp.stage = 4 : i64, cdp.time = 3 : i64
// V2: cdp.unary_grad {{.+}} {cdp.phase = "backward", cdp.stage = 3 : i64, cdp.time = 5 : i64
// V2: cdp.unary_grad {{.+}} {cdp.phase = "backward", cdp.stage = 2 : i64, cdp.time = 6 : i64
// V2: cdp.unary_grad {{.+}} {cdp.phase = "backward", cdp.stage = 1 : i64, cdp.time = 7 : i64
func.func @main(%x: tensor<4xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64, cdp.stages = 4 : i64} {
  %w = cdp.param "w" : tensor<4xf32>
  %a = cdp.tanh %x {cdp.stage = 1 : i64} : tensor<4xf32>
  %b = cdp.tanh %a {cdp.stage = 2 : i64} : tensor<4xf32>
  %c = cdp.tanh %b {cdp.stage = 3 : i64} : tensor<4xf32>
  %d = cdp.mul %c, %w {cdp.stage = 4 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = cdp.reduce_sum %d {axes = array<i64>, keepdims = false, cdp.stage = 4 : i64} : (tensor<4xf32>) -> tensor<f32>
  // Backward ops written out of order: the pass sorts them by stage.
  %g1 = cdp.unary_grad %x, %a {kind = "tanh", cdp.stage = 1 : i64, cdp.phase = "backward"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %g3 = cdp.unary_grad %x, %c {kind = "tanh", cdp.stage = 3 : i64, cdp.phase = "backward"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %g2 = cdp.unary_grad %x, %b {kind = "tanh", cdp.stage = 2 : i64, cdp.phase = "backward"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %l : tensor<f32>
}

// ZeRO (dp only): the schedule records the stage for the slot programs.
// ZERO: cdp.schedule = {devices = 4 : i64, slots = 4 : i64, stages = 4 : i64, strategy = #sched.strategy<"dp">, zero = 2 : i64}
// ZEROCDP: error: ZeRO stage 1 with cdp is not supported (stages 1 to 3 with dp and 3 with cdp are)
