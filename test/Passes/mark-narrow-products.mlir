// RUN: cdp-opt %s -cdp-mark-narrow-products | FileCheck %s

// A product is marked when both its operands are exact in one format: a
// round_to or unpack_narrow of it, an op cdp-autocast marked cdp.narrow, or
// an op that only moves values (here a backward reshape and a relu) of
// exact values alone. A float32 operand, a mix of formats, or a moved
// float32 value leaves it unmarked; the gemm's C does not count.
// CHECK-LABEL: func.func @main
// CHECK: cdp.matmul %[[R:.+]], %[[S:.+]] {narrow_operands = "bf16"}
// CHECK: cdp.gemm %{{.+}}, %{{.+}}, %arg1 {narrow_operands = "bf16"}
// CHECK: cdp.matmul %{{.+}}, %{{.+}} {cdp.phase = "backward", narrow_operands = "bf16"}
// CHECK: cdp.matmul %{{.+}}, %arg1 :
// CHECK: cdp.matmul %{{.+}}, %{{.+}} :
// CHECK: cdp.matmul %{{.+}}, %{{.+}} {cdp.phase = "backward"} :
// CHECK: cdp.matmul %{{.+}}, %{{.+}} {narrow_operands = "f16"}
func.func @main(%x: tensor<4x4xf32>, %y: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
  %r = cdp.round_to %x {format = "bf16"} : tensor<4x4xf32>
  %s = cdp.round_to %y {format = "bf16"} : tensor<4x4xf32>
  %p0 = cdp.matmul %r, %s : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %t = cdp.transpose %r {cdp.narrow = "bf16", perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %packed = cdp.pack_narrow %s {format = "bf16"} : tensor<4x4xf32> -> tensor<4x4xbf16>
  %u = cdp.unpack_narrow %packed {format = "bf16"} : tensor<4x4xbf16> -> tensor<4x4xf32>
  %p1 = cdp.gemm %t, %u, %y : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %flat = cdp.reshape %r {cdp.phase = "backward", shape = array<i64: 16>} : (tensor<4x4xf32>) -> tensor<16xf32>
  %back = cdp.reshape %flat {cdp.phase = "backward", shape = array<i64: 4, 4>} : (tensor<16xf32>) -> tensor<4x4xf32>
  %relu = cdp.relu %u {cdp.phase = "backward"} : tensor<4x4xf32>
  %p2 = cdp.matmul %back, %relu {cdp.phase = "backward"} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %p3 = cdp.matmul %r, %y : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %h = cdp.round_to %y {format = "f16"} : tensor<4x4xf32>
  %p4 = cdp.matmul %r, %h : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %loose = cdp.relu %x {cdp.phase = "backward"} : tensor<4x4xf32>
  %p5 = cdp.matmul %r, %loose {cdp.phase = "backward"} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %g = cdp.round_to %x {format = "f16"} : tensor<4x4xf32>
  %p6 = cdp.matmul %g, %h : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %p0, %p1, %p2, %p3, %p4, %p5, %p6 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}

// A convolution and its two gradients are marked as the products are, on
// their two operands (input and weight; gradient and weight; gradient and
// input); the forward's float32 bias does not count. A float32 gradient
// leaves the weight gradient unmarked.
// CHECK-LABEL: func.func @convolutions
// CHECK: cdp.conv %{{.+}}, %{{.+}}, %arg2 {{{.*}}narrow_operands = "bf16"{{.*}}}
// CHECK: cdp.conv_grad_input %{{.+}}, %{{.+}} {{{.*}}narrow_operands = "bf16"{{.*}}}
// CHECK: cdp.conv_grad_weight %{{.+}}, %{{.+}} {{{.*}}narrow_operands = "bf16"{{.*}}}
// CHECK: cdp.conv_grad_weight %arg3, %{{.+}} {cdp.phase = "backward", dilations = array<i64: 1, 1>, pads
func.func @convolutions(%x: tensor<2x1x6x6xf32>, %w: tensor<4x1x3x3xf32>, %b: tensor<4xf32>, %dy: tensor<2x4x6x6xf32>) -> (tensor<2x4x6x6xf32>, tensor<2x1x6x6xf32>, tensor<4x1x3x3xf32>, tensor<4x1x3x3xf32>) {
  %rx = cdp.round_to %x {format = "bf16"} : tensor<2x1x6x6xf32>
  %rw = cdp.round_to %w {format = "bf16"} : tensor<4x1x3x3xf32>
  %y = cdp.conv %rx, %rw, %b {pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>} : (tensor<2x1x6x6xf32>, tensor<4x1x3x3xf32>, tensor<4xf32>) -> tensor<2x4x6x6xf32>
  %g = cdp.round_to %dy {format = "bf16", cdp.phase = "backward"} : tensor<2x4x6x6xf32>
  %dx = cdp.conv_grad_input %g, %rw {cdp.phase = "backward", input_shape = array<i64: 2, 1, 6, 6>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>} : (tensor<2x4x6x6xf32>, tensor<4x1x3x3xf32>) -> tensor<2x1x6x6xf32>
  %dw = cdp.conv_grad_weight %g, %rx {cdp.phase = "backward", weight_shape = array<i64: 4, 1, 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>} : (tensor<2x4x6x6xf32>, tensor<2x1x6x6xf32>) -> tensor<4x1x3x3xf32>
  %dw32 = cdp.conv_grad_weight %dy, %rx {cdp.phase = "backward", weight_shape = array<i64: 4, 1, 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>} : (tensor<2x4x6x6xf32>, tensor<2x1x6x6xf32>) -> tensor<4x1x3x3xf32>
  return %y, %dx, %dw, %dw32 : tensor<2x4x6x6xf32>, tensor<2x1x6x6xf32>, tensor<4x1x3x3xf32>, tensor<4x1x3x3xf32>
}
