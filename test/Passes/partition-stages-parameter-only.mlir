// RUN: cdp-opt %s -cdp-partition-stages=stages=2 | FileCheck %s
// RUN: cdp-opt %s -cdp-partition-stages=boundaries=first | FileCheck %s

// Tests that an op computed from parameters alone (a Linear weight's
// Transpose, which torch's export and the importer put at the front of the
// graph) takes no part in the cut and lands on the stage of its consumer,
// beside the layer's bias, whether the cut comes from the cost model or
// from --stage-boundaries. Before, it was cut in graph order: stage 1.
// CHECK: cdp.stages = 2
// CHECK: %[[W2T:.*]] = cdp.transpose %{{.*}} {cdp.stage = 2 : i64
// CHECK: cdp.matmul {{.*}}cdp.stage = 1
// CHECK: cdp.matmul %{{.*}}, %[[W2T]] {cdp.stage = 2
// CHECK: cdp.add {{.*}}cdp.stage = 2
func.func @main(%x: tensor<16x64xf32>) -> (tensor<f32> {cdp.name = "loss"}) {
  %w1 = cdp.param "w1" : tensor<64x64xf32>
  %w2 = cdp.param "w2" : tensor<2x64xf32>
  %b2 = cdp.param "b2" : tensor<2xf32>
  %w2t = cdp.transpose %w2 {perm = array<i64: 1, 0>} : (tensor<2x64xf32>) -> tensor<64x2xf32> loc("w2t")
  %a = cdp.matmul %x, %w1 : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32> loc("first")
  %b = cdp.relu %a : tensor<16x64xf32> loc("second")
  %c = cdp.matmul %b, %w2t : (tensor<16x64xf32>, tensor<64x2xf32>) -> tensor<16x2xf32> loc("third")
  %d = cdp.add %c, %b2 : (tensor<16x2xf32>, tensor<2xf32>) -> tensor<16x2xf32> loc("bias")
  %l = cdp.reduce_sum %d {axes = array<i64>, keepdims = false} : (tensor<16x2xf32>) -> tensor<f32> loc("fourth")
  return %l : tensor<f32>
}
