// RUN: cdp-opt %s -split-input-file -cdp-read-narrow-operands | FileCheck %s

// Tests that a marked product reads the 2-byte copies of its operands: the
// forward matmul reads the pack of %r made before it (same stage, same
// phase) instead of %r, and %w itself (its pack is the backward's); the
// backward gemm reads the packed values its unpacks widened, and the
// unpack nothing else reads is erased; the one the relu also reads stays.
// An unmarked product is left alone.
// CHECK-LABEL: func.func @main
// CHECK: %[[R:.+]] = cdp.round_to %arg0
// CHECK-NEXT: %[[P:.+]] = cdp.pack_narrow %[[R]]
// CHECK-NEXT: %[[Q:.+]] = cdp.pack_narrow %arg1 {cdp.phase = "backward", format = "bf16"}
// CHECK-NEXT: cdp.matmul %[[P]], %arg1 {narrow_operands = "bf16"} : (tensor<4x8xbf16>, tensor<8x2xf32>) -> tensor<4x2xf32>
// CHECK-NEXT: cdp.matmul %[[R]], %{{.+}} : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
// CHECK-NEXT: %[[U:.+]] = cdp.unpack_narrow %[[Q]]
// CHECK-NOT: cdp.unpack_narrow %[[P]]
// CHECK-NEXT: cdp.gemm %[[P]], %[[Q]] {cdp.phase = "backward", narrow_operands = "bf16"} : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xf32>
// CHECK-NEXT: cdp.relu %[[U]]
func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<8x2xf32>) {
  %r = cdp.round_to %x {format = "bf16"} : tensor<4x8xf32>
  %p = cdp.pack_narrow %r {format = "bf16"} : tensor<4x8xf32> -> tensor<4x8xbf16>
  %q = cdp.pack_narrow %w {cdp.phase = "backward", format = "bf16"} : tensor<8x2xf32> -> tensor<8x2xbf16>
  %y = cdp.matmul %r, %w {narrow_operands = "bf16"} : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %z = cdp.matmul %r, %w : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %ur = cdp.unpack_narrow %p {cdp.phase = "backward", format = "bf16"} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %uw = cdp.unpack_narrow %q {cdp.phase = "backward", format = "bf16"} : tensor<8x2xbf16> -> tensor<8x2xf32>
  %g = cdp.gemm %ur, %uw {cdp.phase = "backward", narrow_operands = "bf16"} : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %a = cdp.relu %uw {cdp.phase = "backward"} : tensor<8x2xf32>
  return %y, %z, %g, %a : tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<8x2xf32>
}

// -----

// Tests that a round_to only the pack reads, once the product reads the
// pack, is folded into it (the pack rounds as it stores); one another op
// still reads stays.
// CHECK-LABEL: func.func @main
// CHECK-NEXT: %[[P:.+]] = cdp.pack_narrow %arg0 {format = "bf16"} : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK-NEXT: %[[R:.+]] = cdp.round_to %arg1
// CHECK-NEXT: %[[Q:.+]] = cdp.pack_narrow %[[R]]
// CHECK-NEXT: cdp.matmul %[[P]], %[[Q]] {narrow_operands = "bf16"}
// CHECK-NEXT: cdp.relu %[[R]]
func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> (tensor<4x2xf32>, tensor<8x2xf32>) {
  %r = cdp.round_to %x {format = "bf16"} : tensor<4x8xf32>
  %p = cdp.pack_narrow %r {format = "bf16"} : tensor<4x8xf32> -> tensor<4x8xbf16>
  %rw = cdp.round_to %w {format = "bf16"} : tensor<8x2xf32>
  %q = cdp.pack_narrow %rw {format = "bf16"} : tensor<8x2xf32> -> tensor<8x2xbf16>
  %y = cdp.matmul %r, %rw {narrow_operands = "bf16"} : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %a = cdp.relu %rw : tensor<8x2xf32>
  return %y, %a : tensor<4x2xf32>, tensor<8x2xf32>
}

// -----

// Tests that an attention and its gradient read the 2-byte copies of q, k
// and v likewise (the forward the packs made before it, the backward the
// packed values its unpacks widened, which are erased); the gradient's
// float32 grad operand stays.
// CHECK-LABEL: func.func @attention
// CHECK: %[[PQ:.+]] = cdp.pack_narrow %arg0
// CHECK-NEXT: %[[PK:.+]] = cdp.pack_narrow %arg1
// CHECK-NEXT: %[[PV:.+]] = cdp.pack_narrow %arg2
// CHECK-NEXT: %{{.+}}, %[[S:.+]] = cdp.attention %[[PQ]], %[[PK]], %[[PV]] {narrow_operands = "bf16"} : (tensor<2x4x8xbf16>, tensor<2x8x4xbf16>, tensor<2x4x8xbf16>)
// CHECK-NOT: cdp.unpack_narrow
// CHECK-NEXT: cdp.attention_grad %arg3, %[[PQ]], %[[PK]], %[[PV]], %[[S]] {cdp.phase = "backward", narrow_operands = "bf16"} : (tensor<2x4x8xf32>, tensor<2x4x8xbf16>, tensor<2x8x4xbf16>, tensor<2x4x8xbf16>, tensor<2x4x2xf32>)
func.func @attention(%q: tensor<2x4x8xf32>, %k: tensor<2x8x4xf32>, %v: tensor<2x4x8xf32>, %dy: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<2x4x8xf32>) {
  %pq = cdp.pack_narrow %q {format = "bf16"} : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
  %pk = cdp.pack_narrow %k {format = "bf16"} : tensor<2x8x4xf32> -> tensor<2x8x4xbf16>
  %pv = cdp.pack_narrow %v {format = "bf16"} : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
  %o, %s = cdp.attention %q, %k, %v {narrow_operands = "bf16"} : (tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x2xf32>)
  %uq = cdp.unpack_narrow %pq {cdp.phase = "backward", format = "bf16"} : tensor<2x4x8xbf16> -> tensor<2x4x8xf32>
  %uk = cdp.unpack_narrow %pk {cdp.phase = "backward", format = "bf16"} : tensor<2x8x4xbf16> -> tensor<2x8x4xf32>
  %uv = cdp.unpack_narrow %pv {cdp.phase = "backward", format = "bf16"} : tensor<2x4x8xbf16> -> tensor<2x4x8xf32>
  %dq, %dk, %dv = cdp.attention_grad %dy, %uq, %uk, %uv, %s {cdp.phase = "backward", narrow_operands = "bf16"} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<2x4x8xf32>, tensor<2x4x2xf32>) -> (tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<2x4x8xf32>)
  return %o, %dq, %dk, %dv : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<2x4x8xf32>
}

// -----

// Tests that an activation's gradient reads its saved value from the
// backward's 2-byte copy (GELU's: the c_fc product's result), the unpack
// erased; a saved value computed otherwise stays.
// CHECK-LABEL: func.func @activation_gradient
// CHECK-NOT: cdp.unpack_narrow
// CHECK: cdp.unary_grad %arg1, %arg0 {cdp.phase = "backward", kind = "gelu_tanh", round_result = "bf16"} : (tensor<4x8xf32>, tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK: cdp.unary_grad %arg1, %arg2 {kind = "relu"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
func.func @activation_gradient(%packed: tensor<4x8xbf16>, %dy: tensor<4x8xf32>, %x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %saved = cdp.unpack_narrow %packed {cdp.phase = "backward", format = "bf16"} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %d = cdp.unary_grad %dy, %saved {cdp.phase = "backward", kind = "gelu_tanh", round_result = "bf16"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %e = cdp.unary_grad %dy, %x {kind = "relu"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %d, %e : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Tests that GELU under round_result reads its input from the 2-byte copy
// the backward keeps (the pack made before it); GELU without the rounding
// keeps its float32 input.
// CHECK-LABEL: func.func @gelu_input
// CHECK: %[[P:.+]] = cdp.pack_narrow %arg0
// CHECK-NEXT: cdp.gelu %[[P]] {approximate = "tanh", round_result = "bf16"} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK-NEXT: cdp.gelu %arg0 : tensor<4x8xf32>
func.func @gelu_input(%h: tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %p = cdp.pack_narrow %h {format = "bf16"} : tensor<4x8xf32> -> tensor<4x8xbf16>
  %a = cdp.gelu %h {approximate = "tanh", round_result = "bf16"} : tensor<4x8xf32>
  %b = cdp.gelu %h : tensor<4x8xf32>
  return %p, %a, %b : tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>
}
