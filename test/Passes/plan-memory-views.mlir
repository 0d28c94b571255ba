// RUN: cdp-opt %s -split-input-file -cdp-plan-memory | FileCheck %s
// RUN: cdp-opt %s -split-input-file -cdp-reuse-layer-memory | FileCheck %s --check-prefix=REUSE

// Tests that a view lies over its input: the reshape, flatten, unsqueeze,
// squeeze and identity of %0 take %0's offset (64) and %0's block lives
// until the last of them is read, so %6 cannot take it; the reshape of the
// graph input %arg0 (filled per step) and of the parameter (not in the
// arena) get blocks of their own.
// CHECK: func.func @main(%arg0: tensor<16xf32> {cdp.offset = 0 : i64}) -> (tensor<1x16xf32>
// CHECK: %[[A:.+]] = cdp.relu %arg0 {cdp.offsets = array<i64: 64>}
// CHECK-NEXT: cdp.reshape %[[A]] {cdp.offsets = array<i64: 64>
// CHECK-NEXT: cdp.flatten %{{.+}} {cdp.offsets = array<i64: 64>}
// CHECK-NEXT: cdp.unsqueeze %{{.+}} {axes = array<i64: 0>, cdp.offsets = array<i64: 64>}
// CHECK-NEXT: cdp.squeeze %{{.+}} {axes = array<i64: 0>, cdp.offsets = array<i64: 64>}
// CHECK-NEXT: cdp.identity %{{.+}} {cdp.offsets = array<i64: 64>}
// CHECK-NEXT: cdp.relu %arg0 {cdp.offsets = array<i64: 128>}
// CHECK-NEXT: cdp.reshape %arg0 {cdp.offsets = array<i64: 192>
// CHECK-NEXT: cdp.reshape %{{.+}} {cdp.offsets = array<i64: 256>
// CHECK-NEXT: cdp.reshape %{{.+}} {cdp.offsets = array<i64: 64>
func.func @main(%x: tensor<16xf32>) -> (tensor<1x16xf32>, tensor<16xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
  %w = cdp.param "w" : tensor<16xf32>
  %0 = cdp.relu %x : tensor<16xf32>
  %1 = cdp.reshape %0 {shape = array<i64: 4, 4>} : (tensor<16xf32>) -> tensor<4x4xf32>
  %2 = cdp.flatten %1 {axis = 1 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %3 = cdp.unsqueeze %2 {axes = array<i64: 0>} : (tensor<4x4xf32>) -> tensor<1x4x4xf32>
  %4 = cdp.squeeze %3 {axes = array<i64: 0>} : (tensor<1x4x4xf32>) -> tensor<4x4xf32>
  %5 = cdp.identity %4 : tensor<4x4xf32>
  %6 = cdp.relu %x : tensor<16xf32>
  %7 = cdp.reshape %x {shape = array<i64: 4, 4>} : (tensor<16xf32>) -> tensor<4x4xf32>
  %8 = cdp.reshape %w {shape = array<i64: 4, 4>} : (tensor<16xf32>) -> tensor<4x4xf32>
  %9 = cdp.reshape %5 {shape = array<i64: 1, 16>} : (tensor<4x4xf32>) -> tensor<1x16xf32>
  return %9, %6, %7, %8 : tensor<1x16xf32>, tensor<16xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// Tests that a gradient that unscale_grads divides in place is no view:
// the write through one name would change the other.
// CHECK: func.func @main(%arg0: tensor<8xf32>
// CHECK: %[[B:.+]] = cdp.relu %arg0 {cdp.offsets = array<i64: 64>}
// CHECK-NEXT: cdp.reshape %[[B]] {cdp.offsets = array<i64: 128>
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %s = cdp.param "cdp.loss_scale" : tensor<3xf32>
  %0 = cdp.relu %x : tensor<8xf32>
  %1 = cdp.reshape %0 {shape = array<i64: 2, 4>} : (tensor<8xf32>) -> tensor<2x4xf32>
  cdp.unscale_grads %s, %1 : tensor<3xf32>, tensor<2x4xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that an op writes its result over an operand only where no view of
// it is read later: the tanh may not overwrite %0, whose reshape %1 the add
// reads after it; the add may overwrite %1, read last there with %0.
// REUSE: func.func @main(%arg0: tensor<4xf32>
// REUSE: %[[C:.+]] = cdp.relu %arg0 : tensor<4xf32>
// REUSE-NEXT: cdp.reshape %[[C]]
// REUSE-NEXT: cdp.tanh %[[C]] : tensor<4xf32>
// REUSE: cdp.add %{{.+}}, %{{.+}} {cdp.in_place = 0 : i64}
func.func @main(%x: tensor<4xf32>) -> tensor<2x2xf32> {
  %0 = cdp.relu %x : tensor<4xf32>
  %1 = cdp.reshape %0 {shape = array<i64: 2, 2>} : (tensor<4xf32>) -> tensor<2x2xf32>
  %2 = cdp.tanh %0 : tensor<4xf32>
  %3 = cdp.reshape %2 {shape = array<i64: 2, 2>} : (tensor<4xf32>) -> tensor<2x2xf32>
  %4 = cdp.add %1, %3 : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return %4 : tensor<2x2xf32>
}

// -----

// Tests that cdp-plan-memory drops an in-place permission a later pass
// made stale: the tanh may not write over %0 while its view %1 is still to
// be read.
// CHECK: func.func @main(%arg0: tensor<12xf32>
// CHECK: cdp.relu %arg0 {cdp.offsets = array<i64: 64>}
// CHECK-NEXT: cdp.reshape %{{.+}} {cdp.offsets = array<i64: 64>
// CHECK-NEXT: cdp.tanh %{{.+}} {cdp.in_place = 0 : i64, cdp.offsets = array<i64: 128>}
func.func @main(%x: tensor<12xf32>) -> tensor<3x4xf32> {
  %0 = cdp.relu %x : tensor<12xf32>
  %1 = cdp.reshape %0 {shape = array<i64: 3, 4>} : (tensor<12xf32>) -> tensor<3x4xf32>
  %2 = cdp.tanh %0 {cdp.in_place = 0 : i64} : tensor<12xf32>
  %3 = cdp.reshape %2 {shape = array<i64: 3, 4>} : (tensor<12xf32>) -> tensor<3x4xf32>
  %4 = cdp.add %1, %3 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %4 : tensor<3x4xf32>
}
