// RUN: cdp-opt %s -split-input-file -cdp-pack-narrow-stash | FileCheck %s

// A forward round_to the backward reads is packed after it (a bf16
// tensor of its shape, 2 bytes a value) and unpacked before its first
// backward reader, which reads the copy; its forward reader keeps the
// float32 value. Without a pipeline (no strategy here: dp, cdp and the
// single device run every stage on one device) a result another stage reads
// stays as it is, and so does a backward round_to.
// CHECK-LABEL: func.func @main
// CHECK: %[[R:.+]] = cdp.round_to %arg0 {cdp.stage = 1 : i64, format = "bf16"} : tensor<2x3xf32>
// CHECK-NEXT: %[[P:.+]] = cdp.pack_narrow %[[R]] {cdp.stage = 1 : i64, format = "bf16"} : tensor<2x3xf32> -> tensor<2x3xbf16>
// CHECK-NEXT: %[[F:.+]] = cdp.relu %[[R]] {cdp.stage = 1 : i64}
// CHECK: %[[U:.+]] = cdp.unpack_narrow %[[P]] {cdp.phase = "backward", cdp.stage = 1 : i64, format = "bf16"} : tensor<2x3xbf16> -> tensor<2x3xf32>
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

// -----

// Where stages run on devices of their own (a pipeline), what another
// stage reads is a message: a rounded value another stage reads is packed
// too, and each stage and phase reading it unpacks its own copy before its
// first reader there (stage 2's forward and backward read the one message),
// as does a rounded gradient sent back; the producer's own phase reads the
// float32 value (and stage 1's backward its own unpacked copy, as before).
// CHECK-LABEL: module attributes {sched.strategy = #sched.strategy<"1f1b">}
// CHECK: %[[R:.+]] = cdp.round_to %arg0 {cdp.stage = 1 : i64, format = "bf16"}
// CHECK-NEXT: %[[P:.+]] = cdp.pack_narrow %[[R]] {cdp.stage = 1 : i64, format = "bf16"}
// CHECK-NEXT: cdp.relu %[[R]] {cdp.stage = 1 : i64}
// CHECK-NEXT: %[[F:.+]] = cdp.unpack_narrow %[[P]] {cdp.stage = 2 : i64, format = "bf16"}
// CHECK-NEXT: cdp.relu %[[F]] {cdp.stage = 2 : i64}
// CHECK-NEXT: %[[B:.+]] = cdp.unpack_narrow %[[P]] {cdp.phase = "backward", cdp.stage = 2 : i64, format = "bf16"}
// CHECK-NEXT: %[[G:.+]] = cdp.mul %[[B]], %arg1 {cdp.phase = "backward", cdp.stage = 2 : i64}
// CHECK-NEXT: %[[GR:.+]] = cdp.round_to %[[G]] {cdp.phase = "backward", cdp.stage = 2 : i64, format = "bf16"}
// CHECK-NEXT: %[[GP:.+]] = cdp.pack_narrow %[[GR]] {cdp.phase = "backward", cdp.stage = 2 : i64, format = "bf16"}
// CHECK-NEXT: cdp.add %[[GR]], %[[GR]] {cdp.phase = "backward", cdp.stage = 2 : i64}
// CHECK-NEXT: %[[RU:.+]] = cdp.unpack_narrow %[[P]] {cdp.phase = "backward", cdp.stage = 1 : i64, format = "bf16"}
// CHECK-NEXT: %[[GU:.+]] = cdp.unpack_narrow %[[GP]] {cdp.phase = "backward", cdp.stage = 1 : i64, format = "bf16"}
// CHECK-NEXT: cdp.mul %[[GU]], %[[RU]] {cdp.phase = "backward", cdp.stage = 1 : i64}
module attributes {sched.strategy = #sched.strategy<"1f1b">} {
func.func @main(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %r = cdp.round_to %x {cdp.stage = 1 : i64, format = "bf16"} : tensor<2x3xf32>
  %a = cdp.relu %r {cdp.stage = 1 : i64} : tensor<2x3xf32>
  %b = cdp.relu %r {cdp.stage = 2 : i64} : tensor<2x3xf32>
  %g = cdp.mul %r, %y {cdp.phase = "backward", cdp.stage = 2 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %gr = cdp.round_to %g {cdp.phase = "backward", cdp.stage = 2 : i64, format = "bf16"} : tensor<2x3xf32>
  %h = cdp.add %gr, %gr {cdp.phase = "backward", cdp.stage = 2 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %k = cdp.mul %gr, %r {cdp.phase = "backward", cdp.stage = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return %a, %b, %h, %k : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}
}
