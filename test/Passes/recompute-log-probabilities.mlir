// RUN: cdp-opt %s -split-input-file -cdp-recompute-log-probabilities | FileCheck %s

// Tests that a loss whose log-probabilities only its gradient reads stops
// writing them and its gradient reads the scores (from_scores), keeping
// its attributes; and that log-probabilities something else reads (the
// function's result), or a gradient of another stage reads, stay.

// CHECK-LABEL: func.func @only_the_gradient_reads
// CHECK: %[[LOSS:.+]] = cdp.softmax_cross_entropy_loss %arg0, %arg1 {cdp.stage = 0 : i64, classes_last = true, ignore_index = -100 : i64} : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
// CHECK: cdp.softmax_cross_entropy_loss_grad %arg2, %arg0, %arg1 {cdp.stage = 0 : i64, classes_last = true, from_scores = true, ignore_index = -100 : i64} : (tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
// CHECK: return %[[LOSS]]
func.func @only_the_gradient_reads(%scores: tensor<2x4x16xf32>, %labels: tensor<2x4xi64>, %dl: tensor<f32>) -> (tensor<f32>, tensor<2x4x16xf32>) {
  %loss, %logp = cdp.softmax_cross_entropy_loss %scores, %labels {cdp.stage = 0 : i64, classes_last = true, ignore_index = -100 : i64} : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> (tensor<f32>, tensor<2x4x16xf32>)
  %d = cdp.softmax_cross_entropy_loss_grad %dl, %logp, %labels {cdp.stage = 0 : i64, classes_last = true, ignore_index = -100 : i64} : (tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
  return %loss, %d : tensor<f32>, tensor<2x4x16xf32>
}

// -----

// CHECK-LABEL: func.func @returned
// CHECK: %[[LOSS:.+]], %[[LOGP:.+]] = cdp.softmax_cross_entropy_loss %arg0, %arg1
// CHECK: cdp.softmax_cross_entropy_loss_grad %arg2, %[[LOGP]], %arg1 :
func.func @returned(%scores: tensor<4x8xf32>, %labels: tensor<4xi64>, %dl: tensor<f32>) -> (tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %loss, %logp = cdp.softmax_cross_entropy_loss %scores, %labels : (tensor<4x8xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x8xf32>)
  %d = cdp.softmax_cross_entropy_loss_grad %dl, %logp, %labels : (tensor<f32>, tensor<4x8xf32>, tensor<4xi64>) -> tensor<4x8xf32>
  return %loss, %logp, %d : tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @another_stage
// CHECK: %[[LOSS:.+]], %[[LOGP:.+]] = cdp.softmax_cross_entropy_loss %arg0, %arg1
// CHECK: cdp.softmax_cross_entropy_loss_grad %arg2, %[[LOGP]], %arg1 {cdp.stage = 1 : i64}
func.func @another_stage(%scores: tensor<4x8xf32>, %labels: tensor<4xi64>, %dl: tensor<f32>) -> (tensor<f32>, tensor<4x8xf32>) {
  %loss, %logp = cdp.softmax_cross_entropy_loss %scores, %labels {cdp.stage = 0 : i64} : (tensor<4x8xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x8xf32>)
  %d = cdp.softmax_cross_entropy_loss_grad %dl, %logp, %labels {cdp.stage = 1 : i64} : (tensor<f32>, tensor<4x8xf32>, tensor<4xi64>) -> tensor<4x8xf32>
  return %loss, %d : tensor<f32>, tensor<4x8xf32>
}
