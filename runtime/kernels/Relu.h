//===- Relu.h - cdp.relu's value, on both backends --------------*- C++ -*-===//
//
// torch.relu's: a NaN stays NaN (a diverged run stays visible), -0 becomes
// +0. The element-wise ReLU and a product's `activation = "relu"` take it
// from here, on the CPU and on the GPU.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_RELU_H
#define CDP_RUNTIME_KERNELS_RELU_H

#include "HostDevice.h"

namespace cdp::runtime {

CDP_HOST_DEVICE inline float reluOf(float x) {
  return x > 0.0f || x != x ? x : 0.0f;
}

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_RELU_H
