// RUN: cdp-opt %s -split-input-file -cdp-autocast | FileCheck %s
// RUN: cdp-opt %s -split-input-file -cdp-autocast -cdp-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: cdp-opt %s -split-input-file -cdp-autocast -cdp-autodiff -cdp-fold-transpose | FileCheck %s --check-prefix=FOLD
// RUN: not cdp-opt %s -split-input-file -cdp-autocast=precision=fp8 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: error: precision must be bf16 or f16, got 'fp8'
// The gradients' roundings come from the forward's: after autodiff, refused.
// RUN: not cdp-opt %s -split-input-file -cdp-autodiff -cdp-autocast 2>&1 | FileCheck %s --check-prefix=AFTER
// AFTER: error: @main is differentiated already; run cdp-autocast before cdp-autodiff

// Tests a linear layer (MatMul + Add of its bias), ReLU, a product and a
// softmax under bf16: the products read rounded operands (the input, the
// weights, the bias), the linear is rounded once, after its bias, the
// ReLU only moves narrow values (marked, not rounded), the second product
// is rounded, and softmax stays float32 (its result is not rounded).
// CHECK-LABEL: func.func @main
// CHECK: %[[X:.+]] = cdp.round_to %arg0 {format = "bf16"}
// CHECK: %[[W1:.+]] = cdp.round_to %{{.+}} {format = "bf16"} : tensor<3x4xf32>
// CHECK: %[[M:.+]] = cdp.matmul %[[X]], %[[W1]]
// CHECK-NOT: cdp.round_to %[[M]]
// CHECK: %[[B:.+]] = cdp.round_to %{{.+}} {format = "bf16"} : tensor<4xf32>
// CHECK: %[[H:.+]] = cdp.add %[[M]], %[[B]]
// CHECK: %[[HR:.+]] = cdp.round_to %[[H]] {format = "bf16"}
// CHECK: %[[R:.+]] = cdp.relu %[[HR]] {cdp.narrow = "bf16"}
// CHECK: %[[W2:.+]] = cdp.round_to %{{.+}} {format = "bf16"} : tensor<4x4xf32>
// CHECK: %[[Y:.+]] = cdp.matmul %[[R]], %[[W2]]
// CHECK: %[[YR:.+]] = cdp.round_to %[[Y]]
// CHECK: %[[S:.+]] = cdp.softmax %[[YR]]
// CHECK-NOT: cdp.round_to
// CHECK: return
//
// Autodiff then keeps every gradient that reaches a narrow value narrow:
// softmax's float32 gradient is rounded where it reaches the product's
// rounded result, and so on down; the weights' gradients are their narrow
// copies' (rounded), passed to the float32 parameters unchanged.
// GRAD-LABEL: func.func @main
// GRAD: %[[DS:.+]] = cdp.softmax_grad
// GRAD: %[[DY:.+]] = cdp.round_to %[[DS]] {format = "bf16"}
// GRAD: %[[DW2:.+]] = cdp.matmul %{{.+}}, %[[DY]] {trans_a = true}
// GRAD: %[[DW2R:.+]] = cdp.round_to %[[DW2]] {format = "bf16"}
// GRAD: %[[DB:.+]] = cdp.reduce_to
// GRAD: %[[DBR:.+]] = cdp.round_to %[[DB]] {format = "bf16"}
// GRAD: %[[DW1:.+]] = cdp.matmul %{{.+}} {trans_a = true}
// GRAD: %[[DW1R:.+]] = cdp.round_to %[[DW1]] {format = "bf16"}
// GRAD: cdp.gradient "w1" %[[DW1R]]
// GRAD: cdp.gradient "b1" %[[DBR]]
// GRAD: cdp.gradient "w2" %[[DW2R]]
func.func @main(%x: tensor<2x3xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %w1 = cdp.param "w1" : tensor<3x4xf32>
  %b1 = cdp.param "b1" : tensor<4xf32>
  %w2 = cdp.param "w2" : tensor<4x4xf32>
  %m = cdp.matmul %x, %w1 : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %h = cdp.add %m, %b1 : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %r = cdp.relu %h : tensor<2x4xf32>
  %y = cdp.matmul %r, %w2 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %s = cdp.softmax %y {axis = 1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %l = cdp.reduce_sum %s {axes = array<i64>, keepdims = false} : (tensor<2x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests type promotion: a narrow product times a scalar constant stays
// narrow (rounded), as a tensor times a Python scalar does; plus a float32
// tensor (a parameter of the same shape) it becomes float32 (not rounded);
// a product of a buffer and positions made from integers (a rotary table)
// is computed from neither the inputs nor the weights and stays float32.
// A value read by two products is rounded once.
// CHECK-LABEL: func.func @main
// CHECK: %[[XR:.+]] = cdp.round_to %arg0
// CHECK: %[[P:.+]] = cdp.matmul %[[XR]], %[[XR]]
// CHECK: %[[PR:.+]] = cdp.round_to %[[P]]
// CHECK: %[[SC:.+]] = cdp.mul %[[PR]], %{{.+}} : (tensor<2x2xf32>, tensor<f32>)
// CHECK: cdp.round_to %[[SC]]
// CHECK: %[[SUM:.+]] = cdp.add %{{.+}}, %{{.+}} : (tensor<2x2xf32>, tensor<2x2xf32>)
// CHECK-NOT: cdp.round_to %[[SUM]]
// CHECK: %[[POS:.+]] = cdp.cast %arg1
// CHECK: %[[T:.+]] = cdp.matmul %[[POS]], %{{.+}} : (tensor<2x1xf32>, tensor<1x2xf32>)
// CHECK-NOT: cdp.round_to %[[T]]
// CHECK: return
func.func @main(%x: tensor<2x2xf32>, %positions: tensor<2x1xi64>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %half = cdp.constant dense<5.000000e-01> : tensor<f32>
  %shift = cdp.param "shift" : tensor<2x2xf32>
  %freq = cdp.param "freq" {buffer} : tensor<1x2xf32>
  %p = cdp.matmul %x, %x : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %scaled = cdp.mul %p, %half : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  %sum = cdp.add %scaled, %shift : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %pos = cdp.cast %positions {to = f32} : (tensor<2x1xi64>) -> tensor<2x1xf32>
  %table = cdp.matmul %pos, %freq : (tensor<2x1xf32>, tensor<1x2xf32>) -> tensor<2x2xf32>
  %all = cdp.add %sum, %table : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %l = cdp.reduce_sum %all {axes = array<i64>, keepdims = false} : (tensor<2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests a weight transposed for its product only (x @ W^T, as torch
// exports a Linear over a sequence): the weight is rounded and the
// transpose moves narrow values, so that cdp-fold-transpose still folds it
// into the product.
// CHECK-LABEL: func.func @main
// CHECK: %[[W:.+]] = cdp.param "w"
// CHECK: %[[WR:.+]] = cdp.round_to %[[W]] {format = "bf16"}
// CHECK: %[[WT:.+]] = cdp.transpose %[[WR]] {cdp.narrow = "bf16"
// CHECK: cdp.matmul %{{.+}}, %[[WT]]
// FOLD-LABEL: func.func @main
// FOLD-NOT: cdp.transpose
// FOLD: cdp.matmul %{{.+}}, %{{.+}} {trans_b = true} : (tensor<2x3xf32>, tensor<4x3xf32>)
func.func @main(%x: tensor<2x3xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %w = cdp.param "w" : tensor<4x3xf32>
  %wt = cdp.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %y = cdp.matmul %x, %wt : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %l = cdp.reduce_sum %y {axes = array<i64>, keepdims = false} : (tensor<2x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
