// Tests cdp-reuse-layer-memory on a one-layer model (single: no step
// program). The tanh overwrites the gemm result it uses last; the tanh
// gradient overwrites the activation y it reads last (Layrub's gradient
// over the activation it replaces); the gradient marker moves next to its
// producer and the update to just after the last reader of w (the input
// gradient), ahead of the relu, so that cdp-plan-memory lets the gradient
// die there and the relu's result takes its block: the arena shrinks from
// 704 to 640 bytes.
// RUN: cdp-opt %s -cdp-reuse-layer-memory | FileCheck %s
// RUN: cdp-opt %s -cdp-reuse-layer-memory -cdp-plan-memory | FileCheck %s --check-prefix=ARENA
// RUN: cdp-opt %s -cdp-plan-memory | FileCheck %s --check-prefix=PLAIN

// CHECK-LABEL: func.func @main
// CHECK-SAME: cdp.memory_reuse = "layer"
// CHECK: %[[H:.*]] = cdp.gemm
// CHECK: %[[Y:.*]] = cdp.tanh %[[H]] {cdp.in_place = 0 : i64}
// CHECK: cdp.mul %[[Y]], %[[Y]] :
// CHECK: %[[DY:.*]] = cdp.unary_grad %{{.*}}, %[[Y]] {cdp.in_place = 1 : i64
// CHECK: %[[GW:.*]] = cdp.gemm %arg0, %[[DY]]
// CHECK-NEXT: cdp.gradient "w" %[[GW]] {cdp.release_at_last_use}
// CHECK-NEXT: %[[GX:.*]] = cdp.gemm %[[DY]], %{{.*}} {trans_b = true}
// CHECK-NEXT: cdp.update "w"
// CHECK-NEXT: cdp.relu %[[GX]] {cdp.in_place = 0 : i64}
// ARENA: cdp.arena_bytes = 640
// PLAIN: cdp.arena_bytes = 704
module {
  func.func @main(%x: tensor<2x16xf32>) -> (tensor<f32>, tensor<2x16xf32>) {
    %w = cdp.param "w" : tensor<16x4xf32>
    %h = cdp.gemm %x, %w : (tensor<2x16xf32>, tensor<16x4xf32>) -> tensor<2x4xf32>
    %y = cdp.tanh %h : tensor<2x4xf32>
    %sq = cdp.mul %y, %y : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %loss = cdp.reduce_mean %sq {axes = array<i64>, keepdims = false} : (tensor<2x4xf32>) -> tensor<f32>
    %two = cdp.constant dense<0.25> : tensor<f32>
    %dsq = cdp.mul %y, %two : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
    %dy = cdp.unary_grad %dsq, %y {kind = "tanh"} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %gw = cdp.gemm %x, %dy {trans_a = true} : (tensor<2x16xf32>, tensor<2x4xf32>) -> tensor<16x4xf32>
    %gx = cdp.gemm %dy, %w {trans_b = true} : (tensor<2x4xf32>, tensor<16x4xf32>) -> tensor<2x16xf32>
    %r = cdp.relu %gx : tensor<2x16xf32>
    cdp.gradient "w" %gw : tensor<16x4xf32>
    cdp.update "w" %w, %gw {lr = 0.1 : f32, optimizer = "sgd"} : tensor<16x4xf32>
    return %loss, %r : tensor<f32>, tensor<2x16xf32>
  }
}
