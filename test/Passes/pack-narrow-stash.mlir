// RUN: cdp-opt %s -cdp-pack-narrow-stash | FileCheck %s

// A forward round_to the backward reads is packed after it (two bf16
// values to a float32 element, 6 values -> 3) and unpacked before its first
// backward reader, which reads the copy; its forward reader keeps the
// float32 value. A result another stage reads stays as it is, and so does a
// backward round_to.
// CHECK-LABEL: func.func @main
// CHECK: %[[R:.+]] = cdp.round_to %arg0 {cdp.stage = 1 : i64, format = "bf16"} : tensor<2x3xf32>
// CHECK-NEXT: %[[P:.+]] = cdp.pack_narrow %[[R]] {cdp.stage = 1 : i64, format = "bf16"} : tensor<2x3xf32> -> tensor<3xf32>
// CHECK-NEXT: %[[F:.+]] = cdp.relu %[[R]] {cdp.stage = 1 : i64}
// CHECK: %[[U:.+]] = cdp.unpack_narrow %[[P]] {cdp.phase = "backward", cdp.stage = 1 : i64, format = "bf16"} : tensor<3xf32> -> tensor<2x3xf32>
// CHECK-NEXT: cdp.mul %[[U]], %{{.+}} {cdp.phase = "backward", cdp.stage = 1 : i64}
// CHECK-NEXT: cdp.add %[[U]], %{{.+}} {cdp.phase = "backward", cdp.stage = 1 : i64}
// CHECK-NOT: pack_narrow
// CHECK: return
func.func @main(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %r = cdp.round_to %x {cdp.stage = 1 : i64, format = "bf16"} : tensor<2x3xf32>
  %f = cdp.relu %r {cdp.stage = 1 : i64} : tensor<2x3xf32>
  %s = cdp.round_to %y {cdp.stage = 1 : i64, format = "bf16"} : tensor<2x3xf32>
  %o = cdp.relu %s {cdp.stage = 2 : i64} : tensor<2x3xf32>
  %g = cdp.mul %r, %f {cdp.phase = "backward", cdp.stage = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %h = cdp.add %r, %g {cdp.phase = "backward", cdp.stage = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %k = cdp.mul %s, %h {cdp.phase = "backward", cdp.stage = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %b = cdp.round_to %k {cdp.phase = "backward", cdp.stage = 1 : i64, format = "bf16"} : tensor<2x3xf32>
  %z = cdp.mul %b, %b {cdp.phase = "backward", cdp.stage = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return %o, %h, %z : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}
