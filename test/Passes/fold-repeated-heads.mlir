// RUN: cdp-opt %s -split-input-file -cdp-fold-repeated-heads | FileCheck %s

// Tests that grouped-query attention reads its 2 key/value heads
// unrepeated (4 query heads, each key/value head repeated for a group of
// 2 by transformers' repeat_kv: unsqueeze, expand, reshape): the
// repetitions go, and what lay between them and the attention (the keys'
// transpose; the dynamo exporter's identity and its transpose on a 3-D
// view of merged batch and heads, whose shapes take 2 heads; a scaling
// and a rounding) is rebuilt on the unrepeated heads. Nothing folds where
// only the keys are repeated, where the groups differ, or where a
// repetition is read elsewhere too.

// CHECK-LABEL: func.func @torchscript
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<2x4x8x8xf32>, %[[K:[a-z0-9]+]]: tensor<2x2x8x8xf32>, %[[V:[a-z0-9]+]]: tensor<2x2x8x8xf32>)
// CHECK-NOT: cdp.expand
// CHECK: %[[KT:.+]] = cdp.transpose %[[K]] {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x2x8x8xf32>) -> tensor<2x2x8x8xf32>
// CHECK-NEXT: cdp.attention %[[Q]], %[[KT]], %[[V]] : (tensor<2x4x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x2xf32>)
// CHECK-NOT: cdp.unsqueeze
func.func @torchscript(%q: tensor<2x4x8x8xf32>, %k: tensor<2x2x8x8xf32>, %v: tensor<2x2x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %ku = cdp.unsqueeze %k {axes = array<i64: 2>} : (tensor<2x2x8x8xf32>) -> tensor<2x2x1x8x8xf32>
  %ke = cdp.expand %ku {shape = array<i64: 2, 2, 2, 8, 8>} : (tensor<2x2x1x8x8xf32>) -> tensor<2x2x2x8x8xf32>
  %kr = cdp.reshape %ke {shape = array<i64: 2, 4, 8, 8>} : (tensor<2x2x2x8x8xf32>) -> tensor<2x4x8x8xf32>
  %kt = cdp.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %vu = cdp.unsqueeze %v {axes = array<i64: 2>} : (tensor<2x2x8x8xf32>) -> tensor<2x2x1x8x8xf32>
  %ve = cdp.expand %vu {shape = array<i64: 2, 2, 2, 8, 8>} : (tensor<2x2x1x8x8xf32>) -> tensor<2x2x2x8x8xf32>
  %vr = cdp.reshape %ve {shape = array<i64: 2, 4, 8, 8>} : (tensor<2x2x2x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o, %stats = cdp.attention %q, %kt, %vr : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x2xf32>)
  return %o : tensor<2x4x8x8xf32>
}

// -----

// CHECK-LABEL: func.func @dynamo_bf16
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<2x4x8x8xf32>, %[[K:[a-z0-9]+]]: tensor<2x2x8x8xf32>, %[[V:[a-z0-9]+]]: tensor<2x2x8x8xf32>)
// CHECK-NOT: cdp.expand
// CHECK: %[[M:.+]] = cdp.reshape %[[K]] {shape = array<i64: 4, 8, 8>} : (tensor<2x2x8x8xf32>) -> tensor<4x8x8xf32>
// CHECK-NEXT: %[[T:.+]] = cdp.transpose %[[M]] {perm = array<i64: 0, 2, 1>} : (tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
// CHECK-NEXT: %[[U:.+]] = cdp.reshape %[[T]] {shape = array<i64: 2, 2, 8, 8>} : (tensor<4x8x8xf32>) -> tensor<2x2x8x8xf32>
// CHECK-NEXT: %[[S:.+]] = cdp.mul %[[U]], %{{.+}} : (tensor<2x2x8x8xf32>, tensor<f32>) -> tensor<2x2x8x8xf32>
// CHECK-NEXT: %[[KR:.+]] = cdp.round_to %[[S]] {format = "bf16"} : tensor<2x2x8x8xf32>
// CHECK-NEXT: cdp.attention %[[Q]], %[[KR]], %[[V]] {narrow_operands = "bf16"} : (tensor<2x4x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>)
// CHECK-NOT: cdp.identity
func.func @dynamo_bf16(%q: tensor<2x4x8x8xf32>, %k: tensor<2x2x8x8xf32>, %v: tensor<2x2x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %c = cdp.constant dense<0.594603539> : tensor<f32>
  %ku = cdp.unsqueeze %k {axes = array<i64: 2>} : (tensor<2x2x8x8xf32>) -> tensor<2x2x1x8x8xf32>
  %ke = cdp.expand %ku {shape = array<i64: 2, 2, 2, 8, 8>} : (tensor<2x2x1x8x8xf32>) -> tensor<2x2x2x8x8xf32>
  %ki = cdp.identity %ke : tensor<2x2x2x8x8xf32>
  %kr = cdp.reshape %ki {shape = array<i64: 2, 4, 8, 8>} : (tensor<2x2x2x8x8xf32>) -> tensor<2x4x8x8xf32>
  %km = cdp.reshape %kr {shape = array<i64: 8, 8, 8>} : (tensor<2x4x8x8xf32>) -> tensor<8x8x8xf32>
  %kt = cdp.transpose %km {perm = array<i64: 0, 2, 1>} : (tensor<8x8x8xf32>) -> tensor<8x8x8xf32>
  %ku2 = cdp.reshape %kt {shape = array<i64: 2, 4, 8, 8>} : (tensor<8x8x8xf32>) -> tensor<2x4x8x8xf32>
  %ks = cdp.mul %ku2, %c : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %kb = cdp.round_to %ks {format = "bf16"} : tensor<2x4x8x8xf32>
  %vu = cdp.unsqueeze %v {axes = array<i64: 2>} : (tensor<2x2x8x8xf32>) -> tensor<2x2x1x8x8xf32>
  %ve = cdp.expand %vu {shape = array<i64: 2, 2, 2, 8, 8>} : (tensor<2x2x1x8x8xf32>) -> tensor<2x2x2x8x8xf32>
  %vi = cdp.identity %ve : tensor<2x2x2x8x8xf32>
  %vr = cdp.reshape %vi {shape = array<i64: 2, 4, 8, 8>} : (tensor<2x2x2x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o, %stats = cdp.attention %q, %kb, %vr {narrow_operands = "bf16"} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x2xf32>)
  return %o : tensor<2x4x8x8xf32>
}

// -----

// CHECK-LABEL: func.func @only_keys
// CHECK: cdp.expand
// CHECK: cdp.attention %{{.+}}, %{{.+}}, %{{.+}} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>)
func.func @only_keys(%q: tensor<2x4x8x8xf32>, %k: tensor<2x2x8x8xf32>, %v: tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %ku = cdp.unsqueeze %k {axes = array<i64: 2>} : (tensor<2x2x8x8xf32>) -> tensor<2x2x1x8x8xf32>
  %ke = cdp.expand %ku {shape = array<i64: 2, 2, 2, 8, 8>} : (tensor<2x2x1x8x8xf32>) -> tensor<2x2x2x8x8xf32>
  %kr = cdp.reshape %ke {shape = array<i64: 2, 4, 8, 8>} : (tensor<2x2x2x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o, %stats = cdp.attention %q, %kr, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x2xf32>)
  return %o : tensor<2x4x8x8xf32>
}

// -----

// CHECK-LABEL: func.func @groups_differ
// CHECK-COUNT-2: cdp.expand
// CHECK: cdp.attention %{{.+}}, %{{.+}}, %{{.+}} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>)
func.func @groups_differ(%q: tensor<2x4x8x8xf32>, %k: tensor<2x2x8x8xf32>, %v: tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %ku = cdp.unsqueeze %k {axes = array<i64: 2>} : (tensor<2x2x8x8xf32>) -> tensor<2x2x1x8x8xf32>
  %ke = cdp.expand %ku {shape = array<i64: 2, 2, 2, 8, 8>} : (tensor<2x2x1x8x8xf32>) -> tensor<2x2x2x8x8xf32>
  %kr = cdp.reshape %ke {shape = array<i64: 2, 4, 8, 8>} : (tensor<2x2x2x8x8xf32>) -> tensor<2x4x8x8xf32>
  %vu = cdp.unsqueeze %v {axes = array<i64: 2>} : (tensor<2x1x8x8xf32>) -> tensor<2x1x1x8x8xf32>
  %ve = cdp.expand %vu {shape = array<i64: 2, 1, 4, 8, 8>} : (tensor<2x1x1x8x8xf32>) -> tensor<2x1x4x8x8xf32>
  %vr = cdp.reshape %ve {shape = array<i64: 2, 4, 8, 8>} : (tensor<2x1x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o, %stats = cdp.attention %q, %kr, %vr : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x2xf32>)
  return %o : tensor<2x4x8x8xf32>
}

// -----

// CHECK-LABEL: func.func @read_elsewhere
// CHECK-COUNT-2: cdp.expand
// CHECK: cdp.attention %{{.+}}, %{{.+}}, %{{.+}} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>)
func.func @read_elsewhere(%q: tensor<2x4x8x8xf32>, %k: tensor<2x2x8x8xf32>, %v: tensor<2x2x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) {
  %ku = cdp.unsqueeze %k {axes = array<i64: 2>} : (tensor<2x2x8x8xf32>) -> tensor<2x2x1x8x8xf32>
  %ke = cdp.expand %ku {shape = array<i64: 2, 2, 2, 8, 8>} : (tensor<2x2x1x8x8xf32>) -> tensor<2x2x2x8x8xf32>
  %kr = cdp.reshape %ke {shape = array<i64: 2, 4, 8, 8>} : (tensor<2x2x2x8x8xf32>) -> tensor<2x4x8x8xf32>
  %vu = cdp.unsqueeze %v {axes = array<i64: 2>} : (tensor<2x2x8x8xf32>) -> tensor<2x2x1x8x8xf32>
  %ve = cdp.expand %vu {shape = array<i64: 2, 2, 2, 8, 8>} : (tensor<2x2x1x8x8xf32>) -> tensor<2x2x2x8x8xf32>
  %vr = cdp.reshape %ve {shape = array<i64: 2, 4, 8, 8>} : (tensor<2x2x2x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o, %stats = cdp.attention %q, %kr, %vr : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x2xf32>)
  return %o, %kr : tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>
}
