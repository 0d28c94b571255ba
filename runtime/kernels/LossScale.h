//===- LossScale.h - dynamic loss scaling (GradScaler's) -------*- C++ -*-===//
//
// The loss-scale buffer is three floats: the scale S the backward started
// from, the clean steps since it last changed, and whether this step's
// gradients overflowed (the updates then skip the step). Shared by the CPU
// and CUDA kernels so both adjust the scale alike.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_LOSSSCALE_H
#define CDP_RUNTIME_KERNELS_LOSSSCALE_H

#include <cmath>
#include <cstdint>

namespace cdp::runtime {

enum LossScaleField { kScale = 0, kCleanSteps = 1, kOverflow = 2 };

#if defined(__CUDACC__)
#define CDP_LOSS_SCALE_FN __host__ __device__ inline
#else
#define CDP_LOSS_SCALE_FN inline
#endif

/// GradScaler's unscale factor: the reciprocal taken in double, then
/// rounded to float (torch: scale.double().reciprocal().float()).
CDP_LOSS_SCALE_FN float inverseLossScale(const float *state) {
  return static_cast<float>(1.0 / static_cast<double>(state[kScale]));
}

/// GradScaler.update after a step that did (overflow) or did not overflow:
/// the scale times `backoff` and the clean steps reset on an overflow;
/// otherwise one more clean step, and after `interval` of them the scale
/// times `growth` (kept where that would not be finite).
CDP_LOSS_SCALE_FN void adjustLossScale(float *state, bool overflow,
                                       float growth, float backoff,
                                       int64_t interval) {
  state[kOverflow] = overflow ? 1.0f : 0.0f;
  if (overflow) {
    state[kScale] *= backoff;
    state[kCleanSteps] = 0.0f;
    return;
  }
  float clean = state[kCleanSteps] + 1.0f;
  if (clean < static_cast<float>(interval)) {
    state[kCleanSteps] = clean;
    return;
  }
  float grown = state[kScale] * growth;
  if (std::isfinite(grown))
    state[kScale] = grown;
  state[kCleanSteps] = 0.0f;
}

} // namespace cdp::runtime

#undef CDP_LOSS_SCALE_FN

#endif // CDP_RUNTIME_KERNELS_LOSSSCALE_H
