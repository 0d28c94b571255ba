// RUN: cdp-opt %s -split-input-file -cdp-narrow-results | FileCheck %s

// Tests that a rounded softmax gradient read only by products marked
// narrow_operands (attention's backward) is stored in bf16 and read so;
// that an activation gradient read by a product and a pack is stored in
// bf16 and the pack replaced by it; and that one read by float32 readers
// (a relu), or by a product of another stage, stays float32.

// CHECK-LABEL: func.func @attention_backward
// CHECK: %[[DS:.+]] = cdp.softmax_grad %arg0, %arg1 {round_result = "bf16"} : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xbf16>
// CHECK: cdp.matmul %[[DS]], %arg2 {narrow_operands = "bf16"} : (tensor<2x8x8xbf16>, tensor<2x8x4xbf16>)
// CHECK: cdp.matmul %[[DS]], %arg3 {narrow_operands = "bf16", trans_a = true} : (tensor<2x8x8xbf16>, tensor<2x8x4xbf16>)
func.func @attention_backward(%dp: tensor<2x8x8xf32>, %p: tensor<2x8x8xf32>, %k: tensor<2x8x4xbf16>, %q: tensor<2x8x4xbf16>) -> (tensor<2x8x4xf32>, tensor<2x8x4xf32>) {
  %ds = cdp.softmax_grad %dp, %p {round_result = "bf16"} : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %dq = cdp.matmul %ds, %k {narrow_operands = "bf16"} : (tensor<2x8x8xf32>, tensor<2x8x4xbf16>) -> tensor<2x8x4xf32>
  %dk = cdp.matmul %ds, %q {narrow_operands = "bf16", trans_a = true} : (tensor<2x8x8xf32>, tensor<2x8x4xbf16>) -> tensor<2x8x4xf32>
  return %dq, %dk : tensor<2x8x4xf32>, tensor<2x8x4xf32>
}

// -----

// CHECK-LABEL: func.func @packed
// CHECK: %[[DX:.+]] = cdp.unary_grad %arg0, %arg1 {kind = "gelu", round_result = "bf16"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK-NOT: cdp.pack_narrow
// CHECK: cdp.gemm %[[DX]], %arg2 {narrow_operands = "bf16"}
// CHECK: return %[[DX]]
func.func @packed(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %w: tensor<8x3xbf16>) -> (tensor<4x8xbf16>, tensor<4x3xf32>) {
  %dx = cdp.unary_grad %dy, %x {kind = "gelu", round_result = "bf16"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %packed = cdp.pack_narrow %dx {format = "bf16"} : tensor<4x8xf32> -> tensor<4x8xbf16>
  %g = cdp.gemm %dx, %w {narrow_operands = "bf16"} : (tensor<4x8xf32>, tensor<8x3xbf16>) -> tensor<4x3xf32>
  return %packed, %g : tensor<4x8xbf16>, tensor<4x3xf32>
}

// -----

// CHECK-LABEL: func.func @float32_readers
// CHECK: cdp.softmax_grad %arg0, %arg1 {round_result = "bf16"} : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
// CHECK: cdp.unary_grad %arg0, %arg1 {cdp.stage = 1 : i64, kind = "relu", round_result = "bf16"} : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
func.func @float32_readers(%dp: tensor<2x8x8xf32>, %p: tensor<2x8x8xf32>, %k: tensor<2x8x4xbf16>) -> (tensor<2x8x8xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) {
  %ds = cdp.softmax_grad %dp, %p {round_result = "bf16"} : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %dq = cdp.matmul %ds, %k {narrow_operands = "bf16"} : (tensor<2x8x8xf32>, tensor<2x8x4xbf16>) -> tensor<2x8x4xf32>
  %r = cdp.relu %ds : tensor<2x8x8xf32>
  %dx = cdp.unary_grad %dp, %p {cdp.stage = 1 : i64, kind = "relu", round_result = "bf16"} : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %other = cdp.matmul %dx, %k {cdp.stage = 2 : i64, narrow_operands = "bf16"} : (tensor<2x8x8xf32>, tensor<2x8x4xbf16>) -> tensor<2x8x4xf32>
  return %r, %dq, %other : tensor<2x8x8xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>
}

// -----

// A linear layer's backward reads GELU's gradient through a reshape (the
// rows stacked): the reshape views the 2-byte result, which the two
// products and the bias gradient's reduce_to read.
// CHECK-LABEL: func.func @through_reshape
// CHECK: %[[DX:.+]] = cdp.unary_grad %arg0, %arg1 {kind = "gelu_tanh", round_result = "bf16"} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
// CHECK: %[[R:.+]] = cdp.reshape %[[DX]] {shape = array<i64: 8, 8>} : (tensor<2x4x8xbf16>) -> tensor<8x8xbf16>
// CHECK: cdp.gemm %[[R]], %arg2 {narrow_operands = "bf16"}
// CHECK: cdp.gemm %[[R]], %arg3 {narrow_operands = "bf16", trans_a = true}
// CHECK: cdp.reduce_to %[[R]] {shape = array<i64: 8>} : (tensor<8x8xbf16>) -> tensor<8xf32>
func.func @through_reshape(%dy: tensor<2x4x8xf32>, %x: tensor<2x4x8xf32>, %w: tensor<8x3xbf16>, %h: tensor<8x3xbf16>) -> (tensor<8x3xf32>, tensor<8x3xf32>, tensor<8xf32>) {
  %dx = cdp.unary_grad %dy, %x {kind = "gelu_tanh", round_result = "bf16"} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %r = cdp.reshape %dx {shape = array<i64: 8, 8>} : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
  %a = cdp.gemm %r, %w {narrow_operands = "bf16"} : (tensor<8x8xf32>, tensor<8x3xbf16>) -> tensor<8x3xf32>
  %b = cdp.gemm %r, %h {narrow_operands = "bf16", trans_a = true} : (tensor<8x8xf32>, tensor<8x3xbf16>) -> tensor<8x3xf32>
  %db = cdp.reduce_to %r {shape = array<i64: 8>} : (tensor<8x8xf32>) -> tensor<8xf32>
  return %a, %b, %db : tensor<8x3xf32>, tensor<8x3xf32>, tensor<8xf32>
}

// -----

// The loss's gradient (the logits', read by the LM head's two products)
// is stored in bf16 likewise.
// CHECK-LABEL: func.func @loss_gradient
// CHECK: %[[D:.+]] = cdp.softmax_cross_entropy_loss_grad %arg0, %arg1, %arg2 {classes_last = true, round_result = "bf16"} : (tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xbf16>
// CHECK: cdp.matmul %[[D]], %arg3 {narrow_operands = "bf16"} : (tensor<2x4x16xbf16>, tensor<16x8xbf16>)
func.func @loss_gradient(%dl: tensor<f32>, %logp: tensor<2x4x16xf32>, %labels: tensor<2x4xi64>, %w: tensor<16x8xbf16>) -> tensor<2x4x8xf32> {
  %d = cdp.softmax_cross_entropy_loss_grad %dl, %logp, %labels {classes_last = true, round_result = "bf16"} : (tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
  %dh = cdp.matmul %d, %w {narrow_operands = "bf16"} : (tensor<2x4x16xf32>, tensor<16x8xbf16>) -> tensor<2x4x8xf32>
  return %dh : tensor<2x4x8xf32>
}

// -----

// A product's rounded result read only by 2-byte readers is stored in
// bf16: an MLP's first product, read by the pack the backward keeps, by
// GELU and by GELU's gradient (as cdp-read-narrow-operands left them: the
// pack goes, they read the product); the LM head's logits, read by the loss
// and its gradient from the scores. A product without narrow_operands, or
// whose result a function without a loss (an inference plan) returns, stays
// float32.
// CHECK-LABEL: func.func @products
// CHECK: %[[H:.+]] = cdp.gemm %arg0, %arg1, %arg2 {narrow_operands = "bf16", round_result = "bf16"} : (tensor<8x4xbf16>, tensor<4x16xbf16>, tensor<16xf32>) -> tensor<8x16xbf16>
// CHECK-NOT: cdp.pack_narrow
// CHECK: cdp.gelu %[[H]] {approximate = "tanh", round_result = "bf16"} : (tensor<8x16xbf16>) -> tensor<8x16xf32>
// CHECK: cdp.unary_grad %arg3, %[[H]] {kind = "gelu_tanh", round_result = "bf16"} : (tensor<8x16xf32>, tensor<8x16xbf16>) -> tensor<8x16xf32>
// CHECK: %[[L:.+]] = cdp.matmul %arg0, %arg1 {narrow_operands = "bf16", round_result = "bf16"} : (tensor<8x4xbf16>, tensor<4x16xbf16>) -> tensor<8x16xbf16>
// CHECK: cdp.softmax_cross_entropy_loss %[[L]], %arg4 : (tensor<8x16xbf16>, tensor<8xi64>) -> tensor<f32>
// CHECK: cdp.softmax_cross_entropy_loss_grad %arg5, %[[L]], %arg4 {from_scores = true, round_result = "bf16"} : (tensor<f32>, tensor<8x16xbf16>, tensor<8xi64>) -> tensor<8x16xf32>
// CHECK: cdp.matmul %arg6, %arg7 {round_result = "bf16"} : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
// CHECK: cdp.matmul %arg0, %arg1 {narrow_operands = "bf16", round_result = "bf16"} : (tensor<8x4xbf16>, tensor<4x16xbf16>) -> tensor<8x16xf32>
func.func @products(%x: tensor<8x4xbf16>, %w: tensor<4x16xbf16>, %b: tensor<16xf32>, %dy: tensor<8x16xf32>, %labels: tensor<8xi64>, %dl: tensor<f32>, %xf: tensor<8x4xf32>, %wf: tensor<4x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<f32>, tensor<8x16xf32>, tensor<f32>, tensor<8x16xf32>) {
  %h = cdp.gemm %x, %w, %b {narrow_operands = "bf16", round_result = "bf16"} : (tensor<8x4xbf16>, tensor<4x16xbf16>, tensor<16xf32>) -> tensor<8x16xf32>
  %p = cdp.pack_narrow %h {format = "bf16"} : tensor<8x16xf32> -> tensor<8x16xbf16>
  %a = cdp.gelu %p {approximate = "tanh", round_result = "bf16"} : (tensor<8x16xbf16>) -> tensor<8x16xf32>
  %da = cdp.unary_grad %dy, %p {kind = "gelu_tanh", round_result = "bf16"} : (tensor<8x16xf32>, tensor<8x16xbf16>) -> tensor<8x16xf32>
  %logits = cdp.matmul %x, %w {narrow_operands = "bf16", round_result = "bf16"} : (tensor<8x4xbf16>, tensor<4x16xbf16>) -> tensor<8x16xf32>
  %loss = cdp.softmax_cross_entropy_loss %logits, %labels : (tensor<8x16xf32>, tensor<8xi64>) -> tensor<f32>
  %dlogits = cdp.softmax_cross_entropy_loss_grad %dl, %logits, %labels {from_scores = true, round_result = "bf16"} : (tensor<f32>, tensor<8x16xf32>, tensor<8xi64>) -> tensor<8x16xf32>
  %unmarked = cdp.matmul %xf, %wf {round_result = "bf16"} : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %packed = cdp.pack_narrow %unmarked {format = "bf16"} : tensor<8x16xf32> -> tensor<8x16xbf16>
  %returned = cdp.matmul %x, %w {narrow_operands = "bf16", round_result = "bf16"} : (tensor<8x4xbf16>, tensor<4x16xbf16>) -> tensor<8x16xf32>
  %loss2 = cdp.softmax_cross_entropy_loss %returned, %labels : (tensor<8x16xf32>, tensor<8xi64>) -> tensor<f32>
  %u = cdp.unpack_narrow %packed {format = "bf16"} : tensor<8x16xbf16> -> tensor<8x16xf32>
  return %a, %da, %loss, %dlogits, %loss2, %returned : tensor<8x16xf32>, tensor<8x16xf32>, tensor<f32>, tensor<8x16xf32>, tensor<f32>, tensor<8x16xf32>
}

// -----

// GELU's rounded result read only by the pack for the next product is
// stored in bf16 (the pack goes, the product reads GELU's result); one
// that a float32 op also reads stays.
// CHECK-LABEL: func.func @gelu_result
// CHECK: %[[A:.+]] = cdp.gelu %arg0 {round_result = "bf16"} : tensor<8x16xbf16>
// CHECK-NEXT: cdp.gemm %[[A]], %arg1 {narrow_operands = "bf16"} : (tensor<8x16xbf16>, tensor<16x4xbf16>) -> tensor<8x4xf32>
// CHECK: %[[B:.+]] = cdp.gelu %arg0 {round_result = "bf16"} : (tensor<8x16xbf16>) -> tensor<8x16xf32>
// CHECK-NEXT: cdp.pack_narrow %[[B]]
func.func @gelu_result(%h: tensor<8x16xbf16>, %w: tensor<16x4xbf16>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x16xf32>) {
  %a = cdp.gelu %h {round_result = "bf16"} : (tensor<8x16xbf16>) -> tensor<8x16xf32>
  %p = cdp.pack_narrow %a {format = "bf16"} : tensor<8x16xf32> -> tensor<8x16xbf16>
  %y = cdp.gemm %p, %w {narrow_operands = "bf16"} : (tensor<8x16xbf16>, tensor<16x4xbf16>) -> tensor<8x4xf32>
  %b = cdp.gelu %h {round_result = "bf16"} : (tensor<8x16xbf16>) -> tensor<8x16xf32>
  %q = cdp.pack_narrow %b {format = "bf16"} : tensor<8x16xf32> -> tensor<8x16xbf16>
  %z = cdp.gemm %q, %w {narrow_operands = "bf16"} : (tensor<8x16xbf16>, tensor<16x4xbf16>) -> tensor<8x4xf32>
  %r = cdp.relu %b : tensor<8x16xf32>
  return %y, %z, %r : tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x16xf32>
}

// -----

// A training function's outputs other than its loss are stored in 2 bytes
// like any value when every other reader takes them so: the LM head's
// logits. The result's type follows, marked cdp.widened (cdp-run writes
// the float32 values they stand for); one a float32 op also reads stays.
// CHECK-LABEL: func.func @returned_logits
// CHECK-SAME: -> (tensor<8x16xbf16> {cdp.name = "logits", cdp.widened}, tensor<f32>, tensor<8x16xf32>)
// CHECK: %[[L:.+]] = cdp.matmul %arg0, %arg1 {{.*}} -> tensor<8x16xbf16>
// CHECK: %[[K:.+]] = cdp.matmul %arg0, %arg1 {{.*}} -> tensor<8x16xf32>
// CHECK: return %[[L]], %{{.+}}, %[[K]] : tensor<8x16xbf16>, tensor<f32>, tensor<8x16xf32>
func.func @returned_logits(%x: tensor<8x4xbf16>, %w: tensor<4x16xbf16>, %labels: tensor<8xi64>) -> (tensor<8x16xf32> {cdp.name = "logits"}, tensor<f32>, tensor<8x16xf32>) attributes {cdp.loss_index = 1 : i64} {
  %logits = cdp.matmul %x, %w {narrow_operands = "bf16", round_result = "bf16"} : (tensor<8x4xbf16>, tensor<4x16xbf16>) -> tensor<8x16xf32>
  %loss = cdp.softmax_cross_entropy_loss %logits, %labels : (tensor<8x16xf32>, tensor<8xi64>) -> tensor<f32>
  %kept = cdp.matmul %x, %w {narrow_operands = "bf16", round_result = "bf16"} : (tensor<8x4xbf16>, tensor<4x16xbf16>) -> tensor<8x16xf32>
  %r = cdp.relu %kept : tensor<8x16xf32>
  return %logits, %loss, %kept : tensor<8x16xf32>, tensor<f32>, tensor<8x16xf32>
}

// -----

// A product's rounded result moved by reshapes, a split and transposes
// (GPT-2's q, k and v) is stored in bf16 when every reader at the end of the
// moves takes 2-byte values: the packs for attention and the mul scaling q,
// which reads it widened and, read only by its pack, stores its rounded
// result in bf16 too. The moves copy 2-byte values; the packs go.
// CHECK-LABEL: func.func @moved_values
// CHECK: %[[QKV:.+]] = cdp.gemm {{.*}} -> tensor<4x24xbf16>
// CHECK: cdp.reshape %[[QKV]] {{.*}} -> tensor<1x4x24xbf16>
// CHECK: cdp.split {{.*}} -> (tensor<1x4x8xbf16>, tensor<1x4x8xbf16>, tensor<1x4x8xbf16>)
// CHECK: %[[QT:.+]] = cdp.transpose {{.*}} -> tensor<1x2x4x4xbf16>
// CHECK: %[[KT:.+]] = cdp.transpose {{.*}} -> tensor<1x2x4x4xbf16>
// CHECK: %[[VT:.+]] = cdp.transpose {{.*}} -> tensor<1x2x4x4xbf16>
// CHECK: %[[QS:.+]] = cdp.mul %[[QT]], %arg2 {round_result = "bf16"} : (tensor<1x2x4x4xbf16>, tensor<f32>) -> tensor<1x2x4x4xbf16>
// CHECK-NOT: cdp.pack_narrow
// CHECK: return %[[QS]], %[[KT]], %[[VT]]
func.func @moved_values(%x: tensor<4x8xbf16>, %w: tensor<8x24xbf16>, %s: tensor<f32>) -> (tensor<1x2x4x4xbf16>, tensor<1x2x4x4xbf16>, tensor<1x2x4x4xbf16>) {
  %qkv = cdp.gemm %x, %w {narrow_operands = "bf16", round_result = "bf16"} : (tensor<4x8xbf16>, tensor<8x24xbf16>) -> tensor<4x24xf32>
  %r = cdp.reshape %qkv {shape = array<i64: 1, 4, 24>} : (tensor<4x24xf32>) -> tensor<1x4x24xf32>
  %q, %k, %v = cdp.split %r {axis = 2 : i64, split = array<i64: 8, 8, 8>} : (tensor<1x4x24xf32>) -> (tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>)
  %qh = cdp.reshape %q {shape = array<i64: 1, 4, 2, 4>} : (tensor<1x4x8xf32>) -> tensor<1x4x2x4xf32>
  %kh = cdp.reshape %k {shape = array<i64: 1, 4, 2, 4>} : (tensor<1x4x8xf32>) -> tensor<1x4x2x4xf32>
  %vh = cdp.reshape %v {shape = array<i64: 1, 4, 2, 4>} : (tensor<1x4x8xf32>) -> tensor<1x4x2x4xf32>
  %qt = cdp.transpose %qh {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
  %kt = cdp.transpose %kh {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
  %vt = cdp.transpose %vh {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
  %qs = cdp.mul %qt, %s {round_result = "bf16"} : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %qp = cdp.pack_narrow %qs {format = "bf16"} : tensor<1x2x4x4xf32> -> tensor<1x2x4x4xbf16>
  %kp = cdp.pack_narrow %kt {format = "bf16"} : tensor<1x2x4x4xf32> -> tensor<1x2x4x4xbf16>
  %vp = cdp.pack_narrow %vt {format = "bf16"} : tensor<1x2x4x4xf32> -> tensor<1x2x4x4xbf16>
  return %qp, %kp, %vp : tensor<1x2x4x4xbf16>, tensor<1x2x4x4xbf16>, tensor<1x2x4x4xbf16>
}

// -----

// One piece of the split read by a float32 op (relu) keeps the product, the
// split and every move in float32.
// CHECK-LABEL: func.func @moved_to_float32
// CHECK: cdp.gemm {{.*}} -> tensor<4x16xf32>
// CHECK: cdp.split {{.*}} -> (tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: cdp.pack_narrow
func.func @moved_to_float32(%x: tensor<4x8xbf16>, %w: tensor<8x16xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xf32>) {
  %y = cdp.gemm %x, %w {narrow_operands = "bf16", round_result = "bf16"} : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xf32>
  %a, %b = cdp.split %y {axis = 1 : i64, split = array<i64: 8, 8>} : (tensor<4x16xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  %p = cdp.pack_narrow %a {format = "bf16"} : tensor<4x8xf32> -> tensor<4x8xbf16>
  %r = cdp.relu %b : tensor<4x8xf32>
  return %p, %r : tensor<4x8xbf16>, tensor<4x8xf32>
}

// -----

// The backward's gradients: dropout's gradient, read by a linear layer's two
// backward products and its bias's reduce_to, is stored in bf16; the
// product's input gradient (rounded), read by the activation's gradient
// that rounds to bf16, too, and one read by a layer norm's gradient (which
// widens it); one read by a float32 op stays.
// CHECK-LABEL: func.func @backward_gradients
// CHECK: %[[DD:.+]] = cdp.dropout_grad {{.*}} -> tensor<8x16xbf16>
// CHECK: %[[DX:.+]] = cdp.gemm %[[DD]], %arg2 {{.*}} -> tensor<8x4xbf16>
// CHECK: cdp.gemm %arg3, %[[DD]] {{.*}} -> tensor<4x16xf32>
// CHECK: cdp.reduce_to %[[DD]] {{.*}}(tensor<8x16xbf16>) -> tensor<16xf32>
// CHECK: cdp.unary_grad %[[DX]], %arg4 {kind = "gelu_tanh", round_result = "bf16"} : (tensor<8x4xbf16>, tensor<8x4xbf16>) -> tensor<8x4xf32>
// CHECK: %[[LN:.+]] = cdp.gemm {{.*}} -> tensor<8x4xbf16>
// CHECK: cdp.layer_norm_grad %[[LN]], {{.*}} : (tensor<8x4xbf16>,
// CHECK: %[[KEPT:.+]] = cdp.gemm {{.*}} -> tensor<8x4xf32>
// CHECK: cdp.relu %[[KEPT]]
func.func @backward_gradients(%dy: tensor<8x16xf32>, %mask: tensor<8x16xi1>, %w: tensor<4x16xbf16>, %x: tensor<8x4xbf16>, %h: tensor<8x4xbf16>, %scale: tensor<4xf32>, %mean: tensor<8x1xf32>, %inv: tensor<8x1xf32>) -> (tensor<4x16xf32>, tensor<16xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>) {
  %dd = cdp.dropout_grad %dy, %mask {ratio = 0.1 : f32, round_result = "bf16"} : (tensor<8x16xf32>, tensor<8x16xi1>) -> tensor<8x16xf32>
  %dx = cdp.gemm %dd, %w {narrow_operands = "bf16", round_result = "bf16", trans_b = true} : (tensor<8x16xf32>, tensor<4x16xbf16>) -> tensor<8x4xf32>
  %dw = cdp.gemm %x, %dd {narrow_operands = "bf16", round_result = "bf16", trans_a = true} : (tensor<8x4xbf16>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %db = cdp.reduce_to %dd {shape = array<i64: 16>} : (tensor<8x16xf32>) -> tensor<16xf32>
  %da = cdp.unary_grad %dx, %h {kind = "gelu_tanh", round_result = "bf16"} : (tensor<8x4xf32>, tensor<8x4xbf16>) -> tensor<8x4xf32>
  %kept = cdp.gemm %dd, %w {narrow_operands = "bf16", round_result = "bf16", trans_b = true} : (tensor<8x16xf32>, tensor<4x16xbf16>) -> tensor<8x4xf32>
  %dn, %ds, %dbias = cdp.layer_norm_grad %kept, %da, %scale, %mean, %inv : (tensor<8x4xf32>, tensor<8x4xf32>, tensor<4xf32>, tensor<8x1xf32>, tensor<8x1xf32>) -> (tensor<8x4xf32>, tensor<4xf32>, tensor<4xf32>)
  %other = cdp.gemm %dd, %w {narrow_operands = "bf16", round_result = "bf16", trans_b = true} : (tensor<8x16xf32>, tensor<4x16xbf16>) -> tensor<8x4xf32>
  %r = cdp.relu %other : tensor<8x4xf32>
  return %dw, %db, %da, %dn, %r : tensor<4x16xf32>, tensor<16xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

// The residual branch: the projection's rounded product, read by dropout
// rounding to bf16, is stored in bf16; so is dropout's output, which the
// residual add reads widened into the float32 stream (as autocast adds).
// CHECK-LABEL: func.func @residual_branch
// CHECK: %[[P:.+]] = cdp.gemm {{.*}} -> tensor<8x4xbf16>
// CHECK: %[[D:.+]], %{{.+}} = cdp.dropout %[[P]] {{.*}} : (tensor<8x4xbf16>) -> (tensor<8x4xbf16>, tensor<8x4xi1>)
// CHECK: cdp.add %[[D]], %arg2 : (tensor<8x4xbf16>, tensor<8x4xf32>) -> tensor<8x4xf32>
func.func @residual_branch(%x: tensor<8x16xbf16>, %w: tensor<16x4xbf16>, %stream: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xi1>) {
  %p = cdp.gemm %x, %w {narrow_operands = "bf16", round_result = "bf16"} : (tensor<8x16xbf16>, tensor<16x4xbf16>) -> tensor<8x4xf32>
  %d, %mask = cdp.dropout %p {ratio = 0.1 : f32, round_result = "bf16", training_mode = true} : (tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xi1>)
  %sum = cdp.add %d, %stream : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %sum, %mask : tensor<8x4xf32>, tensor<8x4xi1>
}

// -----

// Attention's incoming gradient: the output projection's rounded input
// gradient, moved to heads by a reshape and a transpose, read by
// attention_grad under narrow_operands, is stored in bf16.
// CHECK-LABEL: func.func @attention_output_gradient
// CHECK: %[[DX:.+]] = cdp.gemm {{.*}} -> tensor<8x4xbf16>
// CHECK: %[[T:.+]] = cdp.transpose {{.*}} -> tensor<2x2x4x2xbf16>
// CHECK: cdp.attention_grad %[[T]], {{.*}} : (tensor<2x2x4x2xbf16>,
func.func @attention_output_gradient(%dy: tensor<8x8xbf16>, %w: tensor<4x8xbf16>, %q: tensor<2x2x4x3xbf16>, %k: tensor<2x2x3x4xbf16>, %v: tensor<2x2x4x2xbf16>, %stats: tensor<2x2x4x2xf32>) -> (tensor<2x2x4x3xf32>, tensor<2x2x3x4xf32>, tensor<2x2x4x2xf32>) {
  %dx = cdp.gemm %dy, %w {narrow_operands = "bf16", round_result = "bf16", trans_b = true} : (tensor<8x8xbf16>, tensor<4x8xbf16>) -> tensor<8x4xf32>
  %r = cdp.reshape %dx {shape = array<i64: 2, 4, 2, 2>} : (tensor<8x4xf32>) -> tensor<2x4x2x2xf32>
  %t = cdp.transpose %r {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x2xf32>) -> tensor<2x2x4x2xf32>
  %da, %db, %dv = cdp.attention_grad %t, %q, %k, %v, %stats {narrow_operands = "bf16"} : (tensor<2x2x4x2xf32>, tensor<2x2x4x3xbf16>, tensor<2x2x3x4xbf16>, tensor<2x2x4x2xbf16>, tensor<2x2x4x2xf32>) -> (tensor<2x2x4x3xf32>, tensor<2x2x3x4xf32>, tensor<2x2x4x2xf32>)
  return %da, %db, %dv : tensor<2x2x4x3xf32>, tensor<2x2x3x4xf32>, tensor<2x2x4x2xf32>
}

// -----

// The attention backward's gradients of q, k and v, scaled (q's and k's),
// moved back from heads and concatenated for the input projection's
// backward (its two products and its bias's reduce_to): attention_grad
// stores all three in bf16 (rounded under narrow_operands), the muls read
// and store bf16, and the transposes, reshapes and the concat move bf16.
// CHECK-LABEL: func.func @attention_gradients_joined
// CHECK: %[[DA:.+]], %[[DB:.+]], %{{.+}} = cdp.attention_grad {{.*}} -> (tensor<1x2x4x2xbf16>, tensor<1x2x2x4xbf16>, tensor<1x2x4x2xbf16>)
// CHECK: cdp.mul %[[DA]], %arg5 {round_result = "bf16"} : (tensor<1x2x4x2xbf16>, tensor<f32>) -> tensor<1x2x4x2xbf16>
// CHECK: cdp.mul %[[DB]], %arg5 {round_result = "bf16"} : (tensor<1x2x2x4xbf16>, tensor<f32>) -> tensor<1x2x2x4xbf16>
// CHECK: %[[J:.+]] = cdp.concat {{.*}} -> tensor<1x4x12xbf16>
// CHECK: %[[D:.+]] = cdp.reshape %[[J]] {{.*}} -> tensor<4x12xbf16>
// CHECK: cdp.gemm %[[D]], %arg6 {narrow_operands = "bf16", trans_b = true} : (tensor<4x12xbf16>, tensor<4x12xbf16>) -> tensor<4x4xf32>
// CHECK: cdp.reduce_to %[[D]] {shape = array<i64: 12>} : (tensor<4x12xbf16>) -> tensor<12xf32>
func.func @attention_gradients_joined(%dy: tensor<1x2x4x2xbf16>, %q: tensor<1x2x4x2xbf16>, %k: tensor<1x2x2x4xbf16>, %v: tensor<1x2x4x2xbf16>, %stats: tensor<1x2x4x2xf32>, %s: tensor<f32>, %w: tensor<4x12xbf16>, %x: tensor<4x4xbf16>) -> (tensor<4x4xf32>, tensor<4x12xf32>, tensor<12xf32>) {
  %da, %db, %dv = cdp.attention_grad %dy, %q, %k, %v, %stats {narrow_operands = "bf16"} : (tensor<1x2x4x2xbf16>, tensor<1x2x4x2xbf16>, tensor<1x2x2x4xbf16>, tensor<1x2x4x2xbf16>, tensor<1x2x4x2xf32>) -> (tensor<1x2x4x2xf32>, tensor<1x2x2x4xf32>, tensor<1x2x4x2xf32>)
  %dq = cdp.mul %da, %s {round_result = "bf16"} : (tensor<1x2x4x2xf32>, tensor<f32>) -> tensor<1x2x4x2xf32>
  %dk = cdp.mul %db, %s {round_result = "bf16"} : (tensor<1x2x2x4xf32>, tensor<f32>) -> tensor<1x2x2x4xf32>
  %qt = cdp.transpose %dq {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x4x2xf32>) -> tensor<1x4x2x2xf32>
  %kt = cdp.transpose %dk {perm = array<i64: 0, 3, 1, 2>} : (tensor<1x2x2x4xf32>) -> tensor<1x4x2x2xf32>
  %vt = cdp.transpose %dv {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x4x2xf32>) -> tensor<1x4x2x2xf32>
  %qr = cdp.reshape %qt {shape = array<i64: 1, 4, 4>} : (tensor<1x4x2x2xf32>) -> tensor<1x4x4xf32>
  %kr = cdp.reshape %kt {shape = array<i64: 1, 4, 4>} : (tensor<1x4x2x2xf32>) -> tensor<1x4x4xf32>
  %vr = cdp.reshape %vt {shape = array<i64: 1, 4, 4>} : (tensor<1x4x2x2xf32>) -> tensor<1x4x4xf32>
  %j = cdp.concat %qr, %kr, %vr {axis = 2 : i64} : (tensor<1x4x4xf32>, tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> tensor<1x4x12xf32>
  %d = cdp.reshape %j {shape = array<i64: 4, 12>} : (tensor<1x4x12xf32>) -> tensor<4x12xf32>
  %dx = cdp.gemm %d, %w {narrow_operands = "bf16", trans_b = true} : (tensor<4x12xf32>, tensor<4x12xbf16>) -> tensor<4x4xf32>
  %dw = cdp.gemm %x, %d {narrow_operands = "bf16", trans_a = true} : (tensor<4x4xbf16>, tensor<4x12xf32>) -> tensor<4x12xf32>
  %dbias = cdp.reduce_to %d {shape = array<i64: 12>} : (tensor<4x12xf32>) -> tensor<12xf32>
  return %dx, %dw, %dbias : tensor<4x4xf32>, tensor<4x12xf32>, tensor<12xf32>
}

// -----

// A concat one of whose inputs cannot be stored in bf16 (a function's
// float32 argument) keeps every value joined to it in float32: the muls'
// results and v's gradient; q's gradient, read by its mul only, is bf16.
// CHECK-LABEL: func.func @joined_with_float32
// CHECK: %[[DA:.+]], %{{.+}}, %{{.+}} = cdp.attention_grad {{.*}} -> (tensor<1x2x4x2xbf16>, tensor<1x2x2x4xf32>, tensor<1x2x4x2xf32>)
// CHECK: cdp.mul %[[DA]], %arg5 {round_result = "bf16"} : (tensor<1x2x4x2xbf16>, tensor<f32>) -> tensor<1x2x4x2xf32>
// CHECK: cdp.concat {{.*}} -> tensor<1x4x12xf32>
func.func @joined_with_float32(%dy: tensor<1x2x4x2xbf16>, %q: tensor<1x2x4x2xbf16>, %k: tensor<1x2x2x4xbf16>, %v: tensor<1x2x4x2xbf16>, %stats: tensor<1x2x4x2xf32>, %s: tensor<f32>, %w: tensor<4x12xbf16>, %other: tensor<1x4x4xf32>) -> (tensor<4x4xf32>, tensor<1x2x2x4xf32>) {
  %da, %db, %dv = cdp.attention_grad %dy, %q, %k, %v, %stats {narrow_operands = "bf16"} : (tensor<1x2x4x2xbf16>, tensor<1x2x4x2xbf16>, tensor<1x2x2x4xbf16>, tensor<1x2x4x2xbf16>, tensor<1x2x4x2xf32>) -> (tensor<1x2x4x2xf32>, tensor<1x2x2x4xf32>, tensor<1x2x4x2xf32>)
  %dq = cdp.mul %da, %s {round_result = "bf16"} : (tensor<1x2x4x2xf32>, tensor<f32>) -> tensor<1x2x4x2xf32>
  %qt = cdp.transpose %dq {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x4x2xf32>) -> tensor<1x4x2x2xf32>
  %vt = cdp.transpose %dv {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x4x2xf32>) -> tensor<1x4x2x2xf32>
  %qr = cdp.reshape %qt {shape = array<i64: 1, 4, 4>} : (tensor<1x4x2x2xf32>) -> tensor<1x4x4xf32>
  %vr = cdp.reshape %vt {shape = array<i64: 1, 4, 4>} : (tensor<1x4x2x2xf32>) -> tensor<1x4x4xf32>
  %j = cdp.concat %qr, %other, %vr {axis = 2 : i64} : (tensor<1x4x4xf32>, tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> tensor<1x4x12xf32>
  %d = cdp.reshape %j {shape = array<i64: 4, 12>} : (tensor<1x4x12xf32>) -> tensor<4x12xf32>
  %dx = cdp.gemm %d, %w {narrow_operands = "bf16", trans_b = true} : (tensor<4x12xf32>, tensor<4x12xbf16>) -> tensor<4x4xf32>
  return %dx, %db : tensor<4x4xf32>, tensor<1x2x2x4xf32>
}

// -----

// Attention's result, rounded and multiplied in bf16, moved back from heads
// to the output projection's product and the pack its backward keeps: the
// attention writes bf16 and the pack goes. One whose round_result differs
// from its narrow_operands stays float32 (its products would not write it).
// CHECK-LABEL: func.func @attention_result
// CHECK: %[[O:.+]], %{{.+}} = cdp.attention {{.*}} -> (tensor<1x2x4x2xbf16>, tensor<1x2x4x2xf32>)
// CHECK: %[[T:.+]] = cdp.transpose %[[O]] {{.*}} -> tensor<1x4x2x2xbf16>
// CHECK: %[[R:.+]] = cdp.reshape %[[T]] {{.*}} -> tensor<4x4xbf16>
// CHECK-NOT: cdp.pack_narrow
// CHECK: cdp.gemm %[[R]], %arg3 {narrow_operands = "bf16", round_result = "bf16"} : (tensor<4x4xbf16>, tensor<4x4xbf16>)
// CHECK: cdp.attention {{.*}} -> (tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>)
// CHECK: return %[[R]],
func.func @attention_result(%q: tensor<1x2x4x2xbf16>, %k: tensor<1x2x2x4xbf16>, %v: tensor<1x2x4x2xbf16>, %w: tensor<4x4xbf16>) -> (tensor<4x4xbf16>, tensor<4x4xf32>, tensor<1x2x4x2xf16>) {
  %o, %stats = cdp.attention %q, %k, %v {narrow_operands = "bf16", round_result = "bf16"} : (tensor<1x2x4x2xbf16>, tensor<1x2x2x4xbf16>, tensor<1x2x4x2xbf16>) -> (tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>)
  %t = cdp.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x4x2xf32>) -> tensor<1x4x2x2xf32>
  %r = cdp.reshape %t {shape = array<i64: 4, 4>} : (tensor<1x4x2x2xf32>) -> tensor<4x4xf32>
  %p = cdp.pack_narrow %r {format = "bf16"} : tensor<4x4xf32> -> tensor<4x4xbf16>
  %y = cdp.gemm %r, %w {narrow_operands = "bf16", round_result = "bf16"} : (tensor<4x4xf32>, tensor<4x4xbf16>) -> tensor<4x4xf32>
  %o2, %stats2 = cdp.attention %q, %k, %v {narrow_operands = "bf16", round_result = "f16"} : (tensor<1x2x4x2xbf16>, tensor<1x2x2x4xbf16>, tensor<1x2x4x2xbf16>) -> (tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>)
  %p2 = cdp.pack_narrow %o2 {format = "f16"} : tensor<1x2x4x2xf32> -> tensor<1x2x4x2xf16>
  return %p, %y, %p2 : tensor<4x4xbf16>, tensor<4x4xf32>, tensor<1x2x4x2xf16>
}

// -----

// A layer norm's output read only by the pack for the next product (through
// a reshape) is rounded by the layer norm and stored in bf16, the pack gone;
// one also read by a float32 add (a residual stream) stays float32 and
// unrounded, and so does one read by a float32 product.
// CHECK-LABEL: func.func @layer_norm_output
// CHECK: %[[Y:.+]], %{{.+}}, %{{.+}} = cdp.layer_norm %arg0, %arg1, %arg2 {round_result = "bf16"} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x4x8xbf16>, tensor<2x4x1xf32>, tensor<2x4x1xf32>)
// CHECK: %[[R:.+]] = cdp.reshape %[[Y]] {{.*}} -> tensor<8x8xbf16>
// CHECK-NOT: cdp.pack_narrow %[[R]]
// CHECK: cdp.gemm %[[R]], %arg3 {narrow_operands = "bf16"} : (tensor<8x8xbf16>, tensor<8x4xbf16>)
// CHECK: cdp.layer_norm %arg0, %arg1, %arg2 : {{.*}} -> (tensor<2x4x8xf32>,
// CHECK: cdp.pack_narrow
// CHECK: cdp.layer_norm %arg0, %arg1, %arg2 : {{.*}} -> (tensor<2x4x8xf32>,
func.func @layer_norm_output(%x: tensor<2x4x8xf32>, %scale: tensor<8xf32>, %bias: tensor<8xf32>, %w: tensor<8x4xbf16>, %wf: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x8xbf16>, tensor<2x4x8xf32>, tensor<8x4xf32>) {
  %y, %m, %i = cdp.layer_norm %x, %scale, %bias : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x1xf32>, tensor<2x4x1xf32>)
  %r = cdp.reshape %y {shape = array<i64: 8, 8>} : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
  %p = cdp.pack_narrow %r {format = "bf16"} : tensor<8x8xf32> -> tensor<8x8xbf16>
  %h = cdp.gemm %p, %w {narrow_operands = "bf16"} : (tensor<8x8xbf16>, tensor<8x4xbf16>) -> tensor<8x4xf32>
  %y2, %m2, %i2 = cdp.layer_norm %x, %scale, %bias : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x1xf32>, tensor<2x4x1xf32>)
  %r2 = cdp.reshape %y2 {shape = array<i64: 8, 8>} : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
  %p2 = cdp.pack_narrow %r2 {format = "bf16"} : tensor<8x8xf32> -> tensor<8x8xbf16>
  %s = cdp.add %y2, %x : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %y3, %m3, %i3 = cdp.layer_norm %x, %scale, %bias : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x1xf32>, tensor<2x4x1xf32>)
  %r3 = cdp.reshape %y3 {shape = array<i64: 8, 8>} : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
  %h3 = cdp.gemm %r3, %wf : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %h, %p2, %s, %h3 : tensor<8x4xf32>, tensor<8x8xbf16>, tensor<2x4x8xf32>, tensor<8x4xf32>
}

// -----

// A rounding of a float32 sum that the backward keeps (the residual
// stream's gradient reaching a bf16 branch), read by the branch's two
// backward products and its bias's reduce_to, becomes a pack: the same
// values stored in bf16. One read by a float32 op stays a round_to.
// CHECK-LABEL: func.func @rounded_gradient
// CHECK: %[[P:.+]] = cdp.pack_narrow %arg0 {cdp.phase = "backward", format = "bf16"} : tensor<8x16xf32> -> tensor<8x16xbf16>
// CHECK: cdp.gemm %[[P]], %arg1 {narrow_operands = "bf16", trans_b = true} : (tensor<8x16xbf16>, tensor<4x16xbf16>)
// CHECK: cdp.reduce_to %[[P]] {shape = array<i64: 16>} : (tensor<8x16xbf16>) -> tensor<16xf32>
// CHECK: %[[R:.+]] = cdp.round_to %arg0 {format = "bf16"} : tensor<8x16xf32>
// CHECK: cdp.relu %[[R]]
func.func @rounded_gradient(%g: tensor<8x16xf32>, %w: tensor<4x16xbf16>) -> (tensor<8x4xf32>, tensor<16xf32>, tensor<8x16xf32>) {
  %r = cdp.round_to %g {cdp.phase = "backward", format = "bf16"} : tensor<8x16xf32>
  %dx = cdp.gemm %r, %w {narrow_operands = "bf16", trans_b = true} : (tensor<8x16xf32>, tensor<4x16xbf16>) -> tensor<8x4xf32>
  %db = cdp.reduce_to %r {shape = array<i64: 16>} : (tensor<8x16xf32>) -> tensor<16xf32>
  %r2 = cdp.round_to %g {format = "bf16"} : tensor<8x16xf32>
  %a = cdp.relu %r2 : tensor<8x16xf32>
  return %dx, %db, %a : tensor<8x4xf32>, tensor<16xf32>, tensor<8x16xf32>
}
