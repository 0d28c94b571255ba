// RUN: cdp-opt %s -cdp-drop-exact-roundings | FileCheck %s

// A round_to of a value already exact in its format (a round_to's result,
// an unpacked value, or a reshape, transpose or concat of those alone)
// gives way to its input; one of a float32 value, of a value exact in the
// other format, or of a moved float32 value stays.
// CHECK-LABEL: func.func @main
// CHECK: %[[R:.+]] = cdp.round_to %arg0 {format = "bf16"}
// CHECK-NEXT: %[[T:.+]] = cdp.transpose %[[R]]
// CHECK-NEXT: %[[C:.+]] = cdp.concat %[[R]], %[[T]]
// CHECK-NEXT: %[[H:.+]] = cdp.round_to %[[R]] {format = "f16"}
// CHECK-NEXT: %[[L:.+]] = cdp.reshape %arg1
// CHECK-NEXT: %[[LR:.+]] = cdp.round_to %[[L]] {format = "bf16"}
// CHECK-NEXT: return %[[T]], %[[C]], %[[H]], %[[LR]]
// CHECK-NOT: round_to
func.func @main(%x: tensor<4x4xf32>, %y: tensor<16xf32>) -> (tensor<4x4xf32>, tensor<8x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
  %r = cdp.round_to %x {format = "bf16"} : tensor<4x4xf32>
  %t = cdp.transpose %r {cdp.phase = "backward", perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %tr = cdp.round_to %t {cdp.phase = "backward", format = "bf16"} : tensor<4x4xf32>
  %c = cdp.concat %r, %tr {axis = 0 : i64, cdp.phase = "backward"} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %cr = cdp.round_to %c {cdp.phase = "backward", format = "bf16"} : tensor<8x4xf32>
  %h = cdp.round_to %r {format = "f16"} : tensor<4x4xf32>
  %l = cdp.reshape %y {shape = array<i64: 4, 4>} : (tensor<16xf32>) -> tensor<4x4xf32>
  %lr = cdp.round_to %l {format = "bf16"} : tensor<4x4xf32>
  return %tr, %cr, %h, %lr : tensor<4x4xf32>, tensor<8x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}
