// RUN: cdp-opt %s -cdp-partition-stages=stages=2 | FileCheck %s --check-prefix=COST
// RUN: cdp-opt %s -cdp-partition-stages=boundaries=first,second | FileCheck %s --check-prefix=PINNED
// RUN: not cdp-opt %s -cdp-partition-stages=boundaries=nowhere 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not cdp-opt %s -cdp-partition-stages=stages=9 2>&1 | FileCheck %s --check-prefix=TOOMANY

// Tests that the cost model (multiply-adds) cuts where the running cost
// reaches half: the 16x64x64 matmul outweighs everything else, so it ends
// stage 1 alone; and that pinned boundaries cut after the named nodes.
// COST: cdp.stages = 2
// COST: cdp.matmul {{.*}}cdp.stage = 1
// COST: cdp.relu {{.*}}cdp.stage = 2
// COST: cdp.matmul {{.*}}cdp.stage = 2
// COST: cdp.reduce_sum {{.*}}cdp.stage = 2
// PINNED: cdp.stages = 3
// PINNED: cdp.matmul {{.*}}cdp.stage = 1
// PINNED: cdp.relu {{.*}}cdp.stage = 2
// PINNED: cdp.matmul {{.*}}cdp.stage = 3
// PINNED: cdp.reduce_sum {{.*}}cdp.stage = 3
// UNKNOWN: error: --stage-boundaries names 'nowhere', which is not a node of the model
// TOOMANY: error: cannot cut 4 ops into 9 stages
func.func @main(%x: tensor<16x64xf32>) -> (tensor<f32> {cdp.name = "loss"}) {
  %w1 = cdp.param "w1" : tensor<64x64xf32>
  %w2 = cdp.param "w2" : tensor<64x2xf32>
  %a = cdp.matmul %x, %w1 : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32> loc("first")
  %b = cdp.relu %a : tensor<16x64xf32> loc("second")
  %c = cdp.matmul %b, %w2 : (tensor<16x64xf32>, tensor<64x2xf32>) -> tensor<16x2xf32> loc("third")
  %l = cdp.reduce_sum %c {axes = array<i64>, keepdims = false} : (tensor<16x2xf32>) -> tensor<f32> loc("fourth")
  return %l : tensor<f32>
}
