// RUN: cdp-opt %s -cdp-fuse-rotary -mlir-print-debuginfo -mlir-print-local-scope | FileCheck %s

// Tests that transformers' rotate-half rotary embedding, as both exporters
// write it (Slice, Slice, Neg imported as a product with -1, Concat, Mul,
// Mul, Add), becomes one cdp.rotary with the Add's location, whatever the
// products' and the sum's operand order; and that a chain whose rotated
// half is read elsewhere, whose halves come from another tensor than the
// product with cos, or whose table reads a trained parameter, stays.

// CHECK-LABEL: func.func @llama
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<2x4x8x8xf32>
// CHECK-DAG: %[[COS:.+]] = cdp.constant dense<5.000000e-01> : tensor<1x1x8x8xf32>
// CHECK-DAG: %[[SIN:.+]] = cdp.constant dense<2.500000e-01> : tensor<1x1x8x8xf32>
// CHECK: %[[Y:.+]] = cdp.rotary %[[Q]], %[[COS]], %[[SIN]] : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32> loc("/rotary/Add")
// CHECK-NEXT: return %[[Y]]
func.func @llama(%q: tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %cos = cdp.constant dense<0.5> : tensor<1x1x8x8xf32>
  %sin = cdp.constant dense<0.25> : tensor<1x1x8x8xf32>
  %a = cdp.mul %q, %cos : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %x1 = cdp.slice %q {axes = array<i64: 3>, ends = array<i64: 4>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x4xf32>
  %x2 = cdp.slice %q {axes = array<i64: 3>, ends = array<i64: 9223372036854775807>, starts = array<i64: 4>, steps = array<i64: 1>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x4xf32>
  %m1 = cdp.constant dense<-1.0> : tensor<f32>
  %n = cdp.mul %x2, %m1 : (tensor<2x4x8x4xf32>, tensor<f32>) -> tensor<2x4x8x4xf32>
  %r = cdp.concat %n, %x1 {axis = -1 : i64} : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>) -> tensor<2x4x8x8xf32>
  %b = cdp.mul %r, %sin : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %y = cdp.add %a, %b : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32> loc("/rotary/Add")
  return %y : tensor<2x4x8x8xf32>
}

// Under bf16 autocast: q is a rounded projection (exact in bf16) and
// autocast rounds its negated half, which changes nothing; the fused op
// records the format, so that its gradient rounds each product to it as
// the exported graph's gradients are rounded.
// CHECK-LABEL: func.func @bf16
// CHECK: %[[Q:.+]] = cdp.round_to %arg0 {format = "bf16"}
// CHECK: %[[Y:.+]] = cdp.rotary %[[Q]], %{{.+}}, %{{.+}} {narrow_operands = "bf16"}
// CHECK-NEXT: return %[[Y]]
func.func @bf16(%p: tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %q = cdp.round_to %p {format = "bf16"} : tensor<2x4x8x8xf32>
  %cos = cdp.constant dense<0.5> : tensor<1x1x8x8xf32>
  %sin = cdp.constant dense<0.25> : tensor<1x1x8x8xf32>
  %a = cdp.mul %q, %cos : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %x1 = cdp.slice %q {axes = array<i64: 3>, ends = array<i64: 4>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x4xf32>
  %x2 = cdp.slice %q {axes = array<i64: 3>, ends = array<i64: 9223372036854775807>, starts = array<i64: 4>, steps = array<i64: 1>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x4xf32>
  %m1 = cdp.constant dense<-1.0> : tensor<f32>
  %n = cdp.mul %x2, %m1 : (tensor<2x4x8x4xf32>, tensor<f32>) -> tensor<2x4x8x4xf32>
  %nr = cdp.round_to %n {format = "bf16"} : tensor<2x4x8x4xf32>
  %r = cdp.concat %nr, %x1 {axis = -1 : i64} : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>) -> tensor<2x4x8x8xf32>
  %b = cdp.mul %r, %sin : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %y = cdp.add %a, %b : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %y : tensor<2x4x8x8xf32>
}

// A rounding of the negation of a half that is not exact in the format
// rounds it: kept as exported.
// CHECK-LABEL: func.func @rounded_inexact
// CHECK-NOT: cdp.rotary
// CHECK: cdp.concat
func.func @rounded_inexact(%q: tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %cos = cdp.constant dense<0.5> : tensor<1x1x8x8xf32>
  %sin = cdp.constant dense<0.25> : tensor<1x1x8x8xf32>
  %a = cdp.mul %q, %cos : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %x1 = cdp.slice %q {axes = array<i64: 3>, ends = array<i64: 4>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x4xf32>
  %x2 = cdp.slice %q {axes = array<i64: 3>, ends = array<i64: 9223372036854775807>, starts = array<i64: 4>, steps = array<i64: 1>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x4xf32>
  %m1 = cdp.constant dense<-1.0> : tensor<f32>
  %n = cdp.mul %x2, %m1 : (tensor<2x4x8x4xf32>, tensor<f32>) -> tensor<2x4x8x4xf32>
  %nr = cdp.round_to %n {format = "bf16"} : tensor<2x4x8x4xf32>
  %r = cdp.concat %nr, %x1 {axis = -1 : i64} : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>) -> tensor<2x4x8x8xf32>
  %b = cdp.mul %r, %sin : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %y = cdp.add %a, %b : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %y : tensor<2x4x8x8xf32>
}

// Operands the other way round: cos * q, sin * rotated, -1 * x2, the sum
// of the rotated term first; a table of position ids' angles (no
// parameter) and a half-axis table shape that broadcasts.
// CHECK-LABEL: func.func @commuted
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[COS:[a-z0-9]+]]: tensor<8x8xf32> {{.*}}, %[[ANGLE:[a-z0-9]+]]: tensor<8x1xf32>
// CHECK: %[[SIN:.+]] = cdp.sin %[[ANGLE]]
// CHECK-NEXT: %[[Y:.+]] = cdp.rotary %[[Q]], %[[COS]], %[[SIN]]
// CHECK-NOT: cdp.concat
// CHECK-NOT: cdp.constant
// CHECK: return %[[Y]]
func.func @commuted(%q: tensor<2x8x8xf32>, %cos: tensor<8x8xf32>, %angle: tensor<8x1xf32>) -> tensor<2x8x8xf32> {
  %sin = cdp.sin %angle : tensor<8x1xf32>
  %a = cdp.mul %cos, %q : (tensor<8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %x1 = cdp.slice %q {axes = array<i64: -1>, ends = array<i64: 4>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x8x8xf32>) -> tensor<2x8x4xf32>
  %x2 = cdp.slice %q {axes = array<i64: -1>, ends = array<i64: 8>, starts = array<i64: 4>, steps = array<i64: 1>} : (tensor<2x8x8xf32>) -> tensor<2x8x4xf32>
  %m1 = cdp.constant dense<-1.0> : tensor<f32>
  %n = cdp.mul %m1, %x2 : (tensor<f32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  %r = cdp.concat %n, %x1 {axis = 2 : i64} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x8xf32>
  %b = cdp.mul %sin, %r : (tensor<8x1xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %y = cdp.add %b, %a : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  return %y : tensor<2x8x8xf32>
}

// The rotated half is returned too: the chain must stay.
// CHECK-LABEL: func.func @rotated_read_elsewhere
// CHECK-NOT: cdp.rotary
// CHECK: cdp.concat
func.func @rotated_read_elsewhere(%q: tensor<2x8x8xf32>, %cos: tensor<8x8xf32>, %sin: tensor<8x8xf32>) -> (tensor<2x8x8xf32>, tensor<2x8x8xf32>) {
  %a = cdp.mul %q, %cos : (tensor<2x8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x8xf32>
  %x1 = cdp.slice %q {axes = array<i64: 2>, ends = array<i64: 4>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x8x8xf32>) -> tensor<2x8x4xf32>
  %x2 = cdp.slice %q {axes = array<i64: 2>, ends = array<i64: 8>, starts = array<i64: 4>, steps = array<i64: 1>} : (tensor<2x8x8xf32>) -> tensor<2x8x4xf32>
  %m1 = cdp.constant dense<-1.0> : tensor<f32>
  %n = cdp.mul %x2, %m1 : (tensor<2x8x4xf32>, tensor<f32>) -> tensor<2x8x4xf32>
  %r = cdp.concat %n, %x1 {axis = 2 : i64} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x8xf32>
  %b = cdp.mul %r, %sin : (tensor<2x8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x8xf32>
  %y = cdp.add %a, %b : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  return %y, %r : tensor<2x8x8xf32>, tensor<2x8x8xf32>
}

// The halves are of %k, the product with cos of %q: no rotary of either.
// CHECK-LABEL: func.func @other_tensor
// CHECK-NOT: cdp.rotary
// CHECK: cdp.concat
func.func @other_tensor(%q: tensor<2x8x8xf32>, %k: tensor<2x8x8xf32>, %cos: tensor<8x8xf32>, %sin: tensor<8x8xf32>) -> tensor<2x8x8xf32> {
  %a = cdp.mul %q, %cos : (tensor<2x8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x8xf32>
  %x1 = cdp.slice %k {axes = array<i64: 2>, ends = array<i64: 4>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x8x8xf32>) -> tensor<2x8x4xf32>
  %x2 = cdp.slice %k {axes = array<i64: 2>, ends = array<i64: 8>, starts = array<i64: 4>, steps = array<i64: 1>} : (tensor<2x8x8xf32>) -> tensor<2x8x4xf32>
  %m1 = cdp.constant dense<-1.0> : tensor<f32>
  %n = cdp.mul %x2, %m1 : (tensor<2x8x4xf32>, tensor<f32>) -> tensor<2x8x4xf32>
  %r = cdp.concat %n, %x1 {axis = 2 : i64} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x8xf32>
  %b = cdp.mul %r, %sin : (tensor<2x8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x8xf32>
  %y = cdp.add %a, %b : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  return %y : tensor<2x8x8xf32>
}

// A trained table (its gradient is not cdp.rotary's to give): kept.
// CHECK-LABEL: func.func @trained_table
// CHECK-NOT: cdp.rotary
// CHECK: cdp.concat
func.func @trained_table(%q: tensor<2x8x8xf32>, %sin: tensor<8x8xf32>) -> tensor<2x8x8xf32> {
  %cos = cdp.param "rotary.cos" : tensor<8x8xf32>
  %a = cdp.mul %q, %cos : (tensor<2x8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x8xf32>
  %x1 = cdp.slice %q {axes = array<i64: 2>, ends = array<i64: 4>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x8x8xf32>) -> tensor<2x8x4xf32>
  %x2 = cdp.slice %q {axes = array<i64: 2>, ends = array<i64: 8>, starts = array<i64: 4>, steps = array<i64: 1>} : (tensor<2x8x8xf32>) -> tensor<2x8x4xf32>
  %m1 = cdp.constant dense<-1.0> : tensor<f32>
  %n = cdp.mul %x2, %m1 : (tensor<2x8x4xf32>, tensor<f32>) -> tensor<2x8x4xf32>
  %r = cdp.concat %n, %x1 {axis = 2 : i64} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x8xf32>
  %b = cdp.mul %r, %sin : (tensor<2x8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x8xf32>
  %y = cdp.add %a, %b : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  return %y : tensor<2x8x8xf32>
}
