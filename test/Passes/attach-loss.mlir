// RUN: cdp-opt %s -cdp-attach-loss | FileCheck %s
// RUN: cdp-opt %s -cdp-attach-loss=loss=mse | FileCheck %s --check-prefix=MSE

// Tests that softmax-cross-entropy adds an int64 labels input with batch
// axis 0 and a mean loss on the first output, and records where both are.
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg1: tensor<4xi64> {cdp.batch_axis = 0 : i64, cdp.name = "labels"}
// CHECK-SAME: -> (tensor<4x10xf32> {cdp.name = "logits"}, tensor<f32> {cdp.name = "loss"})
// CHECK-SAME: attributes {cdp.labels_index = 1 : i64, cdp.loss_index = 1 : i64}
// CHECK: %[[LOSS:.+]], %{{.+}} = cdp.softmax_cross_entropy_loss %arg0, %arg1
// CHECK: return %arg0, %[[LOSS]]

// Tests that mse adds float32 targets shaped like the output and the mean
// of the squared difference.
// MSE-LABEL: func.func @main
// MSE-SAME: %arg1: tensor<4x10xf32> {cdp.batch_axis = 0 : i64, cdp.name = "labels"}
// MSE: %[[D:.+]] = cdp.sub %arg0, %arg1
// MSE: %[[S:.+]] = cdp.mul %[[D]], %[[D]]
// MSE: %[[L:.+]] = cdp.reduce_mean %[[S]] {axes = array<i64>, keepdims = false}
// MSE: return %arg0, %[[L]]
func.func @main(%x: tensor<4x10xf32> {cdp.name = "x"}) -> (tensor<4x10xf32> {cdp.name = "logits"}) {
  return %x : tensor<4x10xf32>
}
