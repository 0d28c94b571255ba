// RUN: cdp-opt %s -split-input-file -cdp-fold-attention-scale | FileCheck %s

// Tests that the exporters' scalar scalings of q and k become the
// attention's scale: in float32 any scalar (0.35 x 0.35, 0.125 less one float32 step); under
// narrow_operands only a power of two, through autocast's rounding after
// the product (then no bit changes), while 0.35 keeps its rounded product
// (autocast's reference rounds the scaled operand); and that scalings the
// attention cannot take stay: a product read elsewhere too, a factor that
// the scalar broadcasts (not of the product's shape), a factor not exact
// in the format.

// CHECK-LABEL: func.func @float32
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<2x8x4xf32>, %[[K:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[V:[a-z0-9]+]]: tensor<2x8x4xf32>)
// CHECK-NOT: cdp.mul
// CHECK: cdp.attention %[[Q]], %[[K]], %[[V]] {scale = 0.124999993 : f32}
func.func @float32(%q: tensor<2x8x4xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x8x4xf32>) -> tensor<2x8x4xf32> {
  %c = cdp.constant dense<0.353553385> : tensor<f32>
  %qs = cdp.mul %q, %c : (tensor<2x8x4xf32>, tensor<f32>) -> tensor<2x8x4xf32>
  %ks = cdp.mul %c, %k : (tensor<f32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %o, %stats = cdp.attention %qs, %ks, %v : (tensor<2x8x4xf32>, tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> (tensor<2x8x4xf32>, tensor<2x8x2xf32>)
  return %o : tensor<2x8x4xf32>
}

// -----

// CHECK-LABEL: func.func @narrow
// CHECK: %[[Q:.+]] = cdp.round_to %arg0
// CHECK-NEXT: %[[K:.+]] = cdp.round_to %arg1
// CHECK-NEXT: %[[V:.+]] = cdp.round_to %arg2
// CHECK: %[[KS:.+]] = cdp.mul %[[K]]
// CHECK-NEXT: %[[KR:.+]] = cdp.round_to %[[KS]]
// CHECK-NEXT: cdp.attention %[[Q]], %[[KR]], %[[V]] {narrow_operands = "bf16", scale = 2.500000e-01 : f32}
func.func @narrow(%q0: tensor<2x8x4xf32>, %k0: tensor<2x4x8xf32>, %v0: tensor<2x8x4xf32>) -> tensor<2x8x4xf32> {
  %q = cdp.round_to %q0 {format = "bf16"} : tensor<2x8x4xf32>
  %k = cdp.round_to %k0 {format = "bf16"} : tensor<2x4x8xf32>
  %v = cdp.round_to %v0 {format = "bf16"} : tensor<2x8x4xf32>
  %quarter = cdp.constant dense<0.25> : tensor<1xf32>
  %qs = cdp.mul %q, %quarter : (tensor<2x8x4xf32>, tensor<1xf32>) -> tensor<2x8x4xf32>
  %qr = cdp.round_to %qs {format = "bf16"} : tensor<2x8x4xf32>
  %c = cdp.constant dense<0.353553385> : tensor<f32>
  %ks = cdp.mul %k, %c : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %kr = cdp.round_to %ks {format = "bf16"} : tensor<2x4x8xf32>
  %o, %stats = cdp.attention %qr, %kr, %v {narrow_operands = "bf16"} : (tensor<2x8x4xf32>, tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> (tensor<2x8x4xf32>, tensor<2x8x2xf32>)
  return %o : tensor<2x8x4xf32>
}

// -----

// CHECK-LABEL: func.func @kept
// CHECK-COUNT-2: cdp.mul
// CHECK: cdp.attention
// CHECK-NOT: scale
// CHECK: cdp.mul
// CHECK: cdp.attention
// CHECK-NOT: scale
func.func @kept(%q: tensor<2x8x4xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x8x4xf32>, %row: tensor<8x4xf32>, %q0: tensor<2x8x4xf32>) -> (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) {
  %half = cdp.constant dense<0.5> : tensor<f32>
  // Read by the return too.
  %qs = cdp.mul %q, %half : (tensor<2x8x4xf32>, tensor<f32>) -> tensor<2x8x4xf32>
  // The scalar's factor broadcasts to the product's shape.
  %rs = cdp.mul %row, %half : (tensor<8x4xf32>, tensor<f32>) -> tensor<8x4xf32>
  %rb = cdp.expand %rs {shape = array<i64: 2, 8, 4>} : (tensor<8x4xf32>) -> tensor<2x8x4xf32>
  %o, %stats = cdp.attention %qs, %k, %rb : (tensor<2x8x4xf32>, tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> (tensor<2x8x4xf32>, tensor<2x8x2xf32>)
  // Under bf16 a factor not exact in it (no rounding before the product).
  %k16 = cdp.round_to %k {format = "bf16"} : tensor<2x4x8xf32>
  %v16 = cdp.round_to %v {format = "bf16"} : tensor<2x8x4xf32>
  %q0s = cdp.mul %q0, %half : (tensor<2x8x4xf32>, tensor<f32>) -> tensor<2x8x4xf32>
  %q0r = cdp.round_to %q0s {format = "bf16"} : tensor<2x8x4xf32>
  %o2, %stats2 = cdp.attention %q0r, %k16, %v16 {narrow_operands = "bf16"} : (tensor<2x8x4xf32>, tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> (tensor<2x8x4xf32>, tensor<2x8x2xf32>)
  return %o, %qs, %o2 : tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>
}
