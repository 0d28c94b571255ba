// RUN: cdp-opt %s -split-input-file -cdp-autodiff -cdp-recompute=mode=stage | FileCheck %s --check-prefix=STAGE
// RUN: cdp-opt %s -split-input-file -cdp-autodiff -cdp-recompute=mode=layer | FileCheck %s --check-prefix=LAYER
// RUN: cdp-opt %s -split-input-file -cdp-autodiff -cdp-recompute=mode=selective | FileCheck %s --check-prefix=SEL

// Tests the three modes on two layers (a product with a bias and GELU plus
// a residual, then a product and tanh): stage recomputes the whole forward
// from the input at the start of the backward; layer recomputes each layer
// from its input (%[[R]], the residual sum, is the second layer's), the
// second before the first; selective recomputes GELU and the residual sum
// from the bias sum the backward reads anyway (GELU's gradient), and keeps
// the bias sum itself (recomputing it would keep the product instead).
// Every backward reader reads the clone; the forward is unchanged.
// STAGE-LABEL: func.func @main
// STAGE-SAME: cdp.recompute = "stage"
// STAGE: %[[H:.+]] = cdp.matmul %arg0, %[[W1:.+]] {cdp.stage = 1 : i64}
// STAGE: %[[R:.+]] = cdp.add %{{.+}}, %arg0 {cdp.stage = 1 : i64}
// STAGE: %[[H2:.+]] = cdp.matmul %arg0, %[[W1]] {cdp.phase = "backward", cdp.stage = 1 : i64}
// STAGE-NEXT: %[[HB2:.+]] = cdp.add %[[H2]], %{{.+}} {cdp.phase = "backward"
// STAGE-NEXT: %[[A2:.+]] = cdp.gelu %[[HB2]] {cdp.phase = "backward"
// STAGE-NEXT: %[[R2:.+]] = cdp.add %[[A2]], %arg0 {cdp.phase = "backward"
// STAGE-NEXT: %[[Y2:.+]] = cdp.matmul %[[R2]], %{{.+}} {cdp.phase = "backward"
// STAGE-NEXT: %[[T2:.+]] = cdp.tanh %[[Y2]] {cdp.phase = "backward"
// STAGE-NEXT: cdp.unary_grad %{{.+}}, %[[T2]] {{.*}}kind = "tanh"
// STAGE: cdp.matmul %[[R2]], %{{.+}} {{.*}}trans_a = true
// STAGE: cdp.unary_grad %{{.+}}, %[[HB2]] {{.*}}kind = "gelu"

// LAYER-LABEL: func.func @main
// LAYER-SAME: cdp.recompute = "layer"
// LAYER: %[[R:.+]] = cdp.add %{{.+}}, %arg0 {cdp.stage = 1 : i64}
// LAYER: %[[Y2:.+]] = cdp.matmul %[[R]], %{{.+}} {cdp.phase = "backward"
// LAYER-NEXT: %[[T2:.+]] = cdp.tanh %[[Y2]] {cdp.phase = "backward"
// LAYER-NEXT: cdp.unary_grad %{{.+}}, %[[T2]] {{.*}}kind = "tanh"
// LAYER: cdp.matmul %[[R]], %{{.+}} {{.*}}trans_a = true
// LAYER-NEXT: %[[H2:.+]] = cdp.matmul %arg0, %{{.+}} {cdp.phase = "backward"
// LAYER-NEXT: %[[HB2:.+]] = cdp.add %[[H2]], %{{.+}} {cdp.phase = "backward"
// LAYER-NEXT: cdp.unary_grad %{{.+}}, %[[HB2]] {{.*}}kind = "gelu"
// LAYER-NOT: cdp.gelu {{.*}}backward

// SEL-LABEL: func.func @main
// SEL-SAME: cdp.recompute = "selective"
// SEL: %[[HB:.+]] = cdp.add %{{.+}}, %{{.+}} {cdp.stage = 1 : i64}
// SEL: %[[T:.+]] = cdp.tanh
// SEL: cdp.unary_grad %{{.+}}, %[[T]] {{.*}}kind = "tanh"
// SEL: %[[A2:.+]] = cdp.gelu %[[HB]] {cdp.phase = "backward"
// SEL-NEXT: %[[R2:.+]] = cdp.add %[[A2]], %arg0 {cdp.phase = "backward"
// SEL-NEXT: cdp.matmul %[[R2]], %{{.+}} {{.*}}trans_a = true
// SEL: cdp.unary_grad %{{.+}}, %[[HB]] {{.*}}kind = "gelu"
// SEL-NOT: cdp.matmul %arg0, %{{.+}} {cdp.phase = "backward", cdp.stage = 1 : i64} :
func.func @main(%x: tensor<2x3xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %w1 = cdp.param "w1" : tensor<3x3xf32>
  %w2 = cdp.param "w2" : tensor<3x3xf32>
  %b = cdp.param "b" : tensor<3xf32>
  %h = cdp.matmul %x, %w1 {cdp.stage = 1 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
  %hb = cdp.add %h, %b {cdp.stage = 1 : i64} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %a = cdp.gelu %hb {cdp.stage = 1 : i64} : tensor<2x3xf32>
  %r = cdp.add %a, %x {cdp.stage = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %y = cdp.matmul %r, %w2 {cdp.stage = 1 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
  %t = cdp.tanh %y {cdp.stage = 1 : i64} : tensor<2x3xf32>
  %l = cdp.reduce_sum %t {axes = array<i64>, keepdims = false, cdp.stage = 1 : i64} : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests what every mode keeps: the value another stage reads (tanh's, sent
// to stage 2), dropout's results (its mask is random) and the loss; the
// sigmoid after the dropout is recomputed from the dropout's output.
// STAGE-LABEL: func.func @main
// STAGE: %[[T:.+]] = cdp.tanh %{{.+}} {cdp.stage = 1 : i64}
// STAGE: %[[D:.+]], %[[MASK:.+]] = cdp.dropout %[[T]]
// STAGE: %[[S2:.+]] = cdp.sigmoid %[[D]] {cdp.phase = "backward", cdp.stage = 2 : i64}
// STAGE: cdp.unary_grad %{{.+}}, %[[S2]] {{.*}}kind = "sigmoid"
// STAGE-NEXT: cdp.dropout_grad %{{.+}}, %[[MASK]]
// STAGE-NEXT: cdp.unary_grad %{{.+}}, %[[T]] {{.*}}kind = "tanh"
// STAGE-NOT: cdp.dropout {{.*}}backward
// STAGE-NOT: cdp.tanh {{.*}}backward
// LAYER-LABEL: func.func @main
// SEL-LABEL: func.func @main
func.func @main(%x: tensor<2x3xf32>) -> (tensor<f32> {cdp.name = "loss"}) attributes {cdp.loss_index = 0 : i64} {
  %w1 = cdp.param "w1" : tensor<3x3xf32>
  %w2 = cdp.param "w2" : tensor<3x3xf32>
  %h = cdp.matmul %x, %w1 {cdp.stage = 1 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
  %t = cdp.tanh %h {cdp.stage = 1 : i64} : tensor<2x3xf32>
  %d, %mask = cdp.dropout %t {ratio = 0.5 : f32, training_mode = true, cdp.stage = 2 : i64} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
  %s = cdp.sigmoid %d {cdp.stage = 2 : i64} : tensor<2x3xf32>
  %y = cdp.matmul %s, %w2 {cdp.stage = 2 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
  %l = cdp.reduce_sum %y {axes = array<i64>, keepdims = false, cdp.stage = 2 : i64} : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
