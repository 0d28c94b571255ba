// RUN: cdp-opt %s -cdp-attach-loss=class-axis=last | FileCheck %s
// RUN: cdp-opt %s -cdp-attach-loss=class-axis=1 | FileCheck %s --check-prefix=AXIS1

// Tests that a language model's logits (N, S, V) with class-axis last are
// read by the loss in place (classes_last, labels (N, S)), with no
// transpose of the batch x sequence x vocabulary scores; and that
// class-axis 1 reads the same output as (N, C, L), labels (N, L).
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg1: tensor<2x8xi64> {cdp.batch_axis = 0 : i64, cdp.name = "labels"}
// CHECK-NOT: cdp.transpose
// CHECK: %[[LOSS:.+]], %[[LOGP:.+]] = cdp.softmax_cross_entropy_loss %arg0, %arg1 {classes_last = true, ignore_index = -100 : i64} : (tensor<2x8x96xf32>, tensor<2x8xi64>) -> (tensor<f32>, tensor<2x8x96xf32>)
// CHECK: return %arg0, %[[LOSS]]
// AXIS1: %arg1: tensor<2x96xi64>
// AXIS1: cdp.softmax_cross_entropy_loss %arg0, %arg1 {ignore_index = -100 : i64} : (tensor<2x8x96xf32>, tensor<2x96xi64>)
func.func @main(%x: tensor<2x8x96xf32> {cdp.name = "x"}) -> (tensor<2x8x96xf32> {cdp.name = "logits"}) {
  return %x : tensor<2x8x96xf32>
}
