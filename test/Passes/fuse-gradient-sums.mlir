// RUN: cdp-opt %s -cdp-fuse-gradient-sums | FileCheck %s

// Tests that an add of a layer norm gradient's dx (its only reader) and
// another gradient becomes the layer norm gradient's addend, in either
// operand order; and that a dx read elsewhere too, an add that rounds, an
// addend of another stage or one defined after the layer norm gradient
// keep their adds.

// CHECK-LABEL: func.func @residual
// CHECK: %[[DX:.+]], %{{.+}}, %{{.+}} = cdp.layer_norm_grad %arg0, %arg1, %arg2, %arg3, %arg4, %arg5 :
// CHECK-NOT: cdp.add
// CHECK: %[[DX2:.+]], %{{.+}}, %{{.+}} = cdp.layer_norm_grad %arg0, %arg1, %arg2, %arg3, %arg4, %[[DX]] :
// CHECK: return %[[DX2]]
func.func @residual(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %scale: tensor<8xf32>, %mean: tensor<4x1xf32>, %inv: tensor<4x1xf32>, %past: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %dx, %ds, %db = cdp.layer_norm_grad %dy, %x, %scale, %mean, %inv : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %s = cdp.add %past, %dx : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %dx2, %ds2, %db2 = cdp.layer_norm_grad %dy, %x, %scale, %mean, %inv : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %s2 = cdp.add %dx2, %s : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %s2 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @kept
// CHECK-COUNT-4: cdp.add
func.func @kept(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %scale: tensor<8xf32>, %mean: tensor<4x1xf32>, %inv: tensor<4x1xf32>, %past: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %dx, %ds, %db = cdp.layer_norm_grad %dy, %x, %scale, %mean, %inv : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %s = cdp.add %past, %dx : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %dx2, %ds2, %db2 = cdp.layer_norm_grad %dy, %x, %scale, %mean, %inv : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %s2 = cdp.add %past, %dx2 {round_result = "bf16"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %dx3, %ds3, %db3 = cdp.layer_norm_grad %dy, %x, %scale, %mean, %inv {cdp.stage = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %s3 = cdp.add %past, %dx3 {cdp.stage = 2 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %dx4, %ds4, %db4 = cdp.layer_norm_grad %dy, %x, %scale, %mean, %inv : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %late = cdp.relu %past : tensor<4x8xf32>
  %s4 = cdp.add %late, %dx4 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %s, %dx, %s2, %s3, %s4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
