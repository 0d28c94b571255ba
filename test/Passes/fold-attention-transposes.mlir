// RUN: cdp-opt %s -split-input-file -cdp-fold-attention-transposes | FileCheck %s

// Tests that attention reads the heads where the projections wrote them:
// q, the keys and v as (B, S, H, D) and the result written so (layout
// "bshd"), the four transposes gone (the dynamo exporter's keys too, moved
// in two steps); the scalings and roundings between a
// transpose and the attention (GPT-2's under autocast) now act on the
// untransposed values, and the result's rounding and identity reshape on
// the stored result. And that nothing folds where one transpose does not:
// another permutation, a transpose read elsewhere too, a result read by
// something else first.

// CHECK-LABEL: func.func @float32
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<2x8x4x3xf32>, %[[K:[a-z0-9]+]]: tensor<2x6x4x3xf32>, %[[V:[a-z0-9]+]]: tensor<2x6x4x5xf32>)
// CHECK-NOT: cdp.transpose
// CHECK: %[[O:.+]], %{{.+}} = cdp.attention %[[Q]], %[[K]], %[[V]] {layout = "bshd"} : (tensor<2x8x4x3xf32>, tensor<2x6x4x3xf32>, tensor<2x6x4x5xf32>) -> (tensor<2x8x4x5xf32>, tensor<2x4x8x2xf32>)
// CHECK-NEXT: %[[R:.+]] = cdp.reshape %[[O]] {shape = array<i64: 2, 8, 20>}
// CHECK-NEXT: return %[[R]]
func.func @float32(%q: tensor<2x8x4x3xf32>, %k: tensor<2x6x4x3xf32>, %v: tensor<2x6x4x5xf32>) -> tensor<2x8x20xf32> {
  %qt = cdp.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x3xf32>) -> tensor<2x4x8x3xf32>
  %kt = cdp.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x6x4x3xf32>) -> tensor<2x4x3x6xf32>
  %vt = cdp.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x6x4x5xf32>) -> tensor<2x4x6x5xf32>
  %o, %stats = cdp.attention %qt, %kt, %vt : (tensor<2x4x8x3xf32>, tensor<2x4x3x6xf32>, tensor<2x4x6x5xf32>) -> (tensor<2x4x8x5xf32>, tensor<2x4x8x2xf32>)
  %ot = cdp.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x5xf32>) -> tensor<2x8x4x5xf32>
  %r = cdp.reshape %ot {shape = array<i64: 2, 8, 20>} : (tensor<2x8x4x5xf32>) -> tensor<2x8x20xf32>
  return %r : tensor<2x8x20xf32>
}

// -----

// CHECK-LABEL: func.func @autocast
// CHECK-NOT: cdp.transpose
// CHECK: %[[QS:.+]] = cdp.mul %arg0, %{{.+}} : (tensor<2x8x4x4xf32>, tensor<f32>) -> tensor<2x8x4x4xf32>
// CHECK-NEXT: %[[QR:.+]] = cdp.round_to %[[QS]] {format = "bf16"} : tensor<2x8x4x4xf32>
// CHECK: %[[KS:.+]] = cdp.mul %{{.+}}, %arg1 : (tensor<f32>, tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32>
// CHECK-NEXT: %[[KR:.+]] = cdp.round_to %[[KS]] {format = "bf16"} : tensor<2x8x4x4xf32>
// CHECK-NEXT: %[[O:.+]], %{{.+}} = cdp.attention %[[QR]], %[[KR]], %arg2, %arg3 {layout = "bshd", narrow_operands = "bf16"} : (tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>, tensor<2x1x8x8xf32>) -> (tensor<2x8x4x4xf32>, tensor<2x4x8x2xf32>)
// CHECK-NEXT: %[[OR:.+]] = cdp.round_to %[[O]] {format = "bf16"} : tensor<2x8x4x4xf32>
// CHECK-NEXT: return %[[OR]] : tensor<2x8x4x4xf32>
func.func @autocast(%q: tensor<2x8x4x4xf32>, %k: tensor<2x8x4x4xf32>, %v: tensor<2x8x4x4xf32>, %mask: tensor<2x1x8x8xf32>) -> tensor<2x8x4x4xf32> {
  %c = cdp.constant dense<0.594603539> : tensor<f32>
  %qt = cdp.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x4xf32>) -> tensor<2x4x8x4xf32>
  %qs = cdp.mul %qt, %c : (tensor<2x4x8x4xf32>, tensor<f32>) -> tensor<2x4x8x4xf32>
  %qr = cdp.round_to %qs {format = "bf16"} : tensor<2x4x8x4xf32>
  %kt = cdp.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x8x4x4xf32>) -> tensor<2x4x4x8xf32>
  %ks = cdp.mul %c, %kt : (tensor<f32>, tensor<2x4x4x8xf32>) -> tensor<2x4x4x8xf32>
  %kr = cdp.round_to %ks {format = "bf16"} : tensor<2x4x4x8xf32>
  %vt = cdp.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x4xf32>) -> tensor<2x4x8x4xf32>
  %o, %stats = cdp.attention %qr, %kr, %vt, %mask {narrow_operands = "bf16"} : (tensor<2x4x8x4xf32>, tensor<2x4x4x8xf32>, tensor<2x4x8x4xf32>, tensor<2x1x8x8xf32>) -> (tensor<2x4x8x4xf32>, tensor<2x4x8x2xf32>)
  %or = cdp.round_to %o {format = "bf16"} : tensor<2x4x8x4xf32>
  %same = cdp.reshape %or {shape = array<i64: 2, 4, 8, 4>} : (tensor<2x4x8x4xf32>) -> tensor<2x4x8x4xf32>
  %ot = cdp.transpose %same {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x4xf32>) -> tensor<2x8x4x4xf32>
  return %ot : tensor<2x8x4x4xf32>
}

// -----

// The dynamo exporter's keys: the heads' transpose, then the last two
// dimensions swapped on a 3-D view with the batch and heads merged.
// CHECK-LABEL: func.func @dynamo_keys
// CHECK-NOT: cdp.transpose
// CHECK-NOT: cdp.reshape
// CHECK: cdp.attention %arg0, %arg1, %arg2 {layout = "bshd"}
// CHECK-NOT: cdp.transpose
func.func @dynamo_keys(%q: tensor<2x8x4x3xf32>, %k: tensor<2x6x4x3xf32>, %v: tensor<2x6x4x5xf32>) -> tensor<2x8x4x5xf32> {
  %qt = cdp.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x3xf32>) -> tensor<2x4x8x3xf32>
  %kt = cdp.transpose %k {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x6x4x3xf32>) -> tensor<2x4x6x3xf32>
  %k3 = cdp.reshape %kt {shape = array<i64: 8, 6, 3>} : (tensor<2x4x6x3xf32>) -> tensor<8x6x3xf32>
  %k3t = cdp.transpose %k3 {perm = array<i64: 0, 2, 1>} : (tensor<8x6x3xf32>) -> tensor<8x3x6xf32>
  %kk = cdp.reshape %k3t {shape = array<i64: 2, 4, 3, 6>} : (tensor<8x3x6xf32>) -> tensor<2x4x3x6xf32>
  %vt = cdp.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x6x4x5xf32>) -> tensor<2x4x6x5xf32>
  %o, %stats = cdp.attention %qt, %kk, %vt : (tensor<2x4x8x3xf32>, tensor<2x4x3x6xf32>, tensor<2x4x6x5xf32>) -> (tensor<2x4x8x5xf32>, tensor<2x4x8x2xf32>)
  %ot = cdp.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x5xf32>) -> tensor<2x8x4x5xf32>
  return %ot : tensor<2x8x4x5xf32>
}

// -----

// CHECK-LABEL: func.func @kept
// CHECK-COUNT-3: cdp.transpose
// CHECK: cdp.attention
// CHECK-NOT: layout
// CHECK: cdp.transpose
// CHECK-COUNT-3: cdp.transpose
// CHECK: cdp.attention
// CHECK-NOT: layout
// CHECK: cdp.transpose
// CHECK-COUNT-3: cdp.transpose
// CHECK: cdp.attention
// CHECK-NOT: layout
// CHECK: return
func.func @kept(%q: tensor<2x8x4x3xf32>, %k: tensor<2x8x4x3xf32>, %v: tensor<2x8x4x3xf32>, %k1: tensor<2x3x4x8xf32>) -> (tensor<2x8x4x3xf32>, tensor<2x4x8x3xf32>, tensor<2x8x4x3xf32>, tensor<2x4x8x3xf32>) {
  // The keys under another permutation.
  %qt = cdp.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x3xf32>) -> tensor<2x4x8x3xf32>
  %kt = cdp.transpose %k1 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x3x4x8xf32>) -> tensor<2x4x3x8xf32>
  %vt = cdp.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x3xf32>) -> tensor<2x4x8x3xf32>
  %o, %s = cdp.attention %qt, %kt, %vt : (tensor<2x4x8x3xf32>, tensor<2x4x3x8xf32>, tensor<2x4x8x3xf32>) -> (tensor<2x4x8x3xf32>, tensor<2x4x8x2xf32>)
  %ot = cdp.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x3xf32>) -> tensor<2x8x4x3xf32>
  // q's transpose read by the return too.
  %qt2 = cdp.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x3xf32>) -> tensor<2x4x8x3xf32>
  %kt2 = cdp.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x8x4x3xf32>) -> tensor<2x4x3x8xf32>
  %vt2 = cdp.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x3xf32>) -> tensor<2x4x8x3xf32>
  %o2, %s2 = cdp.attention %qt2, %kt2, %vt2 : (tensor<2x4x8x3xf32>, tensor<2x4x3x8xf32>, tensor<2x4x8x3xf32>) -> (tensor<2x4x8x3xf32>, tensor<2x4x8x2xf32>)
  %ot2 = cdp.transpose %o2 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x3xf32>) -> tensor<2x8x4x3xf32>
  // The result read as it is.
  %qt3 = cdp.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x3xf32>) -> tensor<2x4x8x3xf32>
  %kt3 = cdp.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x8x4x3xf32>) -> tensor<2x4x3x8xf32>
  %vt3 = cdp.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x3xf32>) -> tensor<2x4x8x3xf32>
  %o3, %s3 = cdp.attention %qt3, %kt3, %vt3 : (tensor<2x4x8x3xf32>, tensor<2x4x3x8xf32>, tensor<2x4x8x3xf32>) -> (tensor<2x4x8x3xf32>, tensor<2x4x8x2xf32>)
  return %ot, %qt2, %ot2, %o3 : tensor<2x8x4x3xf32>, tensor<2x4x8x3xf32>, tensor<2x8x4x3xf32>, tensor<2x4x8x3xf32>
}

// -----

// Llama: the rotary embedding between q's and k's transposes and the
// attention (grouped keys and v: 2 heads for 4): each transpose moves below
// its rotary, whose tables are laid out for (B, S, H, D) (the constant
// (1, 1, S, D) tables as (1, S, 1, D), made once for q and k), then folds.
// CHECK-LABEL: func.func @llama_rotary
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<2x8x4x8xf32>, %[[K:[a-z0-9]+]]: tensor<2x8x2x8xf32>, %[[V:[a-z0-9]+]]: tensor<2x8x2x8xf32>)
// CHECK-NOT: cdp.transpose
// CHECK-DAG: %[[COS:.+]] = cdp.constant dense<5.000000e-01> : tensor<1x8x1x8xf32>
// CHECK-DAG: %[[SIN:.+]] = cdp.constant dense<2.500000e-01> : tensor<1x8x1x8xf32>
// CHECK: %[[QR:.+]] = cdp.rotary %[[Q]], %[[COS]], %[[SIN]] : (tensor<2x8x4x8xf32>, tensor<1x8x1x8xf32>, tensor<1x8x1x8xf32>) -> tensor<2x8x4x8xf32>
// CHECK-NEXT: %[[KR:.+]] = cdp.rotary %[[K]], %[[COS]], %[[SIN]] : (tensor<2x8x2x8xf32>
// CHECK-NEXT: cdp.attention %[[QR]], %[[KR]], %[[V]] {layout = "bshd", scale = 3.500000e-01 : f32} : (tensor<2x8x4x8xf32>, tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>) -> (tensor<2x8x4x8xf32>, tensor<2x4x8x2xf32>)
// CHECK-NOT: cdp.transpose
// CHECK-NOT: tensor<1x1x8x8xf32>
func.func @llama_rotary(%q: tensor<2x8x4x8xf32>, %k: tensor<2x8x2x8xf32>, %v: tensor<2x8x2x8xf32>) -> tensor<2x8x32xf32> {
  %cos = cdp.constant dense<0.5> : tensor<1x1x8x8xf32>
  %sin = cdp.constant dense<0.25> : tensor<1x1x8x8xf32>
  %qt = cdp.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %kt = cdp.transpose %k {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
  %vt = cdp.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
  %qr = cdp.rotary %qt, %cos, %sin : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %kr = cdp.rotary %kt, %cos, %sin : (tensor<2x2x8x8xf32>, tensor<1x1x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x2x8x8xf32>
  %kT = cdp.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x2x8x8xf32>) -> tensor<2x2x8x8xf32>
  %o, %stats = cdp.attention %qr, %kT, %vt {scale = 0.35 : f32} : (tensor<2x4x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x2xf32>)
  %ot = cdp.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x8xf32>) -> tensor<2x8x4x8xf32>
  %r = cdp.reshape %ot {shape = array<i64: 2, 8, 32>} : (tensor<2x8x4x8xf32>) -> tensor<2x8x32xf32>
  return %r : tensor<2x8x32xf32>
}

// -----

// A table that is no mere reshape once laid out (its heads and sequence
// above 1 swap places) is transposed for the rotary, which then folds too.
// CHECK-LABEL: func.func @rotary_per_head_table
// CHECK: %[[T:.+]] = cdp.transpose %{{.+}} {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x8xf32>) -> tensor<1x8x4x8xf32>
// CHECK: cdp.rotary %{{.+}}, %[[T]], %[[T]]
// CHECK: cdp.attention {{.*}}layout = "bshd"
func.func @rotary_per_head_table(%q: tensor<2x8x4x8xf32>, %k: tensor<2x8x4x8xf32>, %v: tensor<2x8x4x8xf32>, %table: tensor<1x4x8x8xf32>) -> tensor<2x8x4x8xf32> {
  %qt = cdp.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %kt = cdp.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %vt = cdp.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %qr = cdp.rotary %qt, %table, %table : (tensor<2x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o, %stats = cdp.attention %qr, %kt, %vt : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x2xf32>)
  %ot = cdp.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x8xf32>) -> tensor<2x8x4x8xf32>
  return %ot : tensor<2x8x4x8xf32>
}
