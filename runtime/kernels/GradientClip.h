//===- GradientClip.h - clip_grad_norm_'s coefficient ---------*- C++ -*-===//
//
// The factor PyTorch's torch.nn.utils.clip_grad_norm_ multiplies every
// gradient by, from the sum of their squares: max_norm / (norm + 1e-6),
// clamped to at most 1, in float as torch computes it from its fp32 norm.
// Shared by the CPU and CUDA kernels so both clip alike.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_GRADIENTCLIP_H
#define CDP_RUNTIME_KERNELS_GRADIENTCLIP_H

#include <cmath>

namespace cdp::runtime {

#if defined(__CUDACC__)
__host__ __device__
#endif
    inline float
    clipCoefficient(double squaredSum, float maxNorm) {
  float norm = static_cast<float>(std::sqrt(squaredSum));
  float coefficient = maxNorm / (norm + 1e-6f);
  return coefficient < 1.0f ? coefficient : 1.0f;
}

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_GRADIENTCLIP_H
