//===- Activations.h - activations' values, on both backends ----*- C++ -*-===//
//
// What the element-wise activations and a product's `activation` compute,
// written once for the CPU's kernels and the GPU's (CDP_HOST_DEVICE). The
// formulas are PyTorch's: its kernels' order of operations, so that a value
// differs from torch's by the exp's last bit at most.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_ACTIVATIONS_H
#define CDP_RUNTIME_KERNELS_ACTIVATIONS_H

#include "HostDevice.h"

#include <cmath>

namespace cdp::runtime {

/// torch.relu: a NaN stays NaN (a diverged run stays visible), -0 becomes
/// +0.
CDP_HOST_DEVICE inline float reluOf(float x) {
  return x > 0.0f || x != x ? x : 0.0f;
}

CDP_HOST_DEVICE inline float sigmoidOf(float x) {
  return 1.0f / (1.0f + expf(-x));
}

/// torch.nn.functional.silu: x * sigmoid(x), the product cdp.mul of x and
/// cdp.sigmoid's value gives.
CDP_HOST_DEVICE inline float siluOf(float x) { return x * sigmoidOf(x); }

/// PyTorch's silu_backward: g * s * (1 + x * (1 - s)), s = sigmoid(x).
CDP_HOST_DEVICE inline float siluGradOf(float g, float x) {
  float s = sigmoidOf(x);
  return g * s * (1.0f + x * (1.0f - s));
}

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_ACTIVATIONS_H
