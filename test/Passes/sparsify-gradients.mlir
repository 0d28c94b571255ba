// Tests cdp-sparsify-gradients: every cdp.update gets the entries its top-k
// exchange sends, k = max(1, ceil(density * n)), and n (sent whole) below
// dense-below; @main records the choice and the form. A 1000-element
// weight at density 0.01 sends 10, at 0.0001 still 1; the 10-element bias
// is below 16 and goes whole, at dense-below 0 it sends 1 (ceil 0.1).
// Adam and clipping are refused: error feedback accumulates SGD steps.
// RUN: cdp-opt %s -split-input-file -verify-diagnostics -cdp-sparsify-gradients="density=0.01 dense-below=16" | FileCheck %s
// RUN: cdp-opt %s -split-input-file -verify-diagnostics -cdp-sparsify-gradients="density=0.0001 dense-below=0 residual=true" | FileCheck %s --check-prefix=TINY
// RUN: not cdp-opt %s -split-input-file -cdp-sparsify-gradients="density=1.5" 2>&1 | FileCheck %s --check-prefix=RANGE

// CHECK: func.func @main{{.*}}cdp.sparse = {dense_below = 16 : i64, density = 1.000000e-02 : f64, form = "mirror"}
// CHECK: cdp.update "w" {{.*}}{cdp.sparse_count = 10 : i64
// CHECK: cdp.update "b" {{.*}}{cdp.sparse_count = 10 : i64
// TINY: form = "residual"
// TINY: cdp.update "w" {{.*}}{cdp.sparse_count = 1 : i64
// TINY: cdp.update "b" {{.*}}{cdp.sparse_count = 1 : i64
// RANGE: error: --density must lie in (0, 1]
func.func @main(%gw: tensor<1000xf32>, %gb: tensor<10xf32>) {
  %w = cdp.param "w" : tensor<1000xf32>
  %b = cdp.param "b" : tensor<10xf32>
  cdp.update "w" %w, %gw {lr = 0.1 : f32, optimizer = "sgd"} : tensor<1000xf32>
  cdp.update "b" %b, %gb {lr = 0.1 : f32, optimizer = "sgd"} : tensor<10xf32>
  return
}

// -----

func.func @main(%g: tensor<4xf32>) {
  %w = cdp.param "w" : tensor<4xf32>
  // expected-error @below {{laysa's error feedback accumulates SGD steps; use --optimizer sgd or momentum, not adam}}
  cdp.update "w" %w, %g {lr = 0.1 : f32, optimizer = "adam"} : tensor<4xf32>
  return
}

// -----

func.func @main(%g: tensor<4xf32>) {
  %w = cdp.param "w" : tensor<4xf32>
  // expected-error @below {{laysa does not clip yet}}
  cdp.clip_grad_norm %g {max_norm = 1.0 : f32} : tensor<4xf32>
  cdp.update "w" %w, %g {lr = 0.1 : f32, optimizer = "sgd"} : tensor<4xf32>
  return
}
