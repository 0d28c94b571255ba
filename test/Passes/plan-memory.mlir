// RUN: cdp-opt %s -split-input-file -cdp-plan-memory | FileCheck %s

// Tests first-fit reuse: %0 is dead after %1, so %2 takes %0's offset; an
// op never writes over its own operand (%1 does not reuse %0's block);
// inputs live all step; parameters get no offset; the arena is the peak.
// CHECK-LABEL: func.func @main(%arg0: tensor<16xf32> {cdp.offset = 0 : i64})
// CHECK-SAME: attributes {cdp.arena_bytes = 256 : i64}
// CHECK: %[[W:.+]] = cdp.param "w" : tensor<16xf32>
// CHECK: %[[A:.+]] = cdp.relu %arg0 {cdp.offsets = array<i64: 64>}
// CHECK: %[[B:.+]] = cdp.relu %[[A]] {cdp.offsets = array<i64: 128>}
// CHECK: %[[C:.+]] = cdp.relu %[[B]] {cdp.offsets = array<i64: 64>}
// CHECK: %[[D:.+]] = cdp.add %[[C]], %[[W]] {cdp.offsets = array<i64: 128>}
// CHECK: cdp.gradient "w" %[[D]]
// CHECK: cdp.relu %[[C]] {cdp.offsets = array<i64: 192>}
func.func @main(%x: tensor<16xf32>) -> tensor<16xf32> {
  %w = cdp.param "w" : tensor<16xf32>
  %0 = cdp.relu %x : tensor<16xf32>
  %1 = cdp.relu %0 : tensor<16xf32>
  %2 = cdp.relu %1 : tensor<16xf32>
  // Held for --dump-grads: lives to the end of the step.
  %3 = cdp.add %2, %w : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  cdp.gradient "w" %3 : tensor<16xf32>
  %4 = cdp.relu %2 : tensor<16xf32>
  return %4 : tensor<16xf32>
}

// -----

// Tests that a training function (cdp.loss_index) holds only its loss to
// the end of the step: the returned scores %s end at their last reader (the
// loss), so %late reuses their block; cdp-run copies them for
// --save-outputs as they are written.
// CHECK-LABEL: func.func @main(%arg0: tensor<16xf32> {cdp.offset = 0 : i64}
// CHECK-SAME: cdp.arena_bytes = 192 : i64
// CHECK: %[[S:.+]] = cdp.relu %arg0 {cdp.offsets = array<i64: 64>}
// CHECK: cdp.reduce_sum %[[S]] {{.*}}cdp.offsets = array<i64: 128>
// CHECK: cdp.relu %arg0 {cdp.offsets = array<i64: 64>}
func.func @main(%x: tensor<16xf32>) -> (tensor<16xf32>, tensor<f32>)
    attributes {cdp.loss_index = 1 : i64} {
  %s = cdp.relu %x : tensor<16xf32>
  %loss = cdp.reduce_sum %s {axes = array<i64>, keepdims = false} : (tensor<16xf32>) -> tensor<f32>
  %late = cdp.relu %x : tensor<16xf32>
  cdp.gradient "x" %late : tensor<16xf32>
  return %s, %loss : tensor<16xf32>, tensor<f32>
}
