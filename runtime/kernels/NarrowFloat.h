//===- NarrowFloat.h - rounding float32 to bf16 and fp16 --------*- C++ -*-===//
//
// cdp.round_to's arithmetic, for both backends: the float32 value nearest
// to `x` that bf16 (8 significant bits) or fp16 (11, exponents down to
// 2^-24) can hold, ties to even, NaN kept, as PyTorch's .to(torch.bfloat16)
// and .to(torch.float16) round (fp16: magnitudes from 65520 on become
// infinities, which is what loss scaling watches for).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_NARROWFLOAT_H
#define CDP_RUNTIME_KERNELS_NARROWFLOAT_H

#include "HostDevice.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace cdp {

CDP_HOST_DEVICE inline uint32_t bitsOf(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

CDP_HOST_DEVICE inline float floatOf(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

/// Keeps the top 32 - `dropped` bits of `x`'s pattern, rounding the rest to
/// nearest, ties to even (a carry into the exponent is the right result,
/// up to infinity); a NaN is kept as it is. Branch-free, so that the
/// kernels' loops vectorize.
CDP_HOST_DEVICE inline float roundDroppingBits(float x, int dropped) {
  uint32_t bits = bitsOf(x);
  uint32_t half = (1u << (dropped - 1)) - 1;
  uint32_t rounded =
      (bits + half + ((bits >> dropped) & 1u)) & ~((1u << dropped) - 1u);
  bool isNaN = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return floatOf(isNaN ? bits : rounded);
}

CDP_HOST_DEVICE inline float roundToBfloat16(float x) {
  return roundDroppingBits(x, 16);
}

CDP_HOST_DEVICE inline float roundToFloat16(float x) {
  constexpr float kOverflow = 65520.0f; // halfway past 65504, ties up
  constexpr float kSmallestNormal = 6.103515625e-05f;       // 2^-14
  constexpr float kSubnormalStep = 5.9604644775390625e-08f; // 2^-24
  if (x != x)
    return x;
  if (fabsf(x) >= kOverflow)
    return x > 0 ? INFINITY : -INFINITY;
  if (fabsf(x) < kSmallestNormal) // fixed steps of 2^-24
    return rintf(x / kSubnormalStep) * kSubnormalStep;
  return roundDroppingBits(x, 13);
}

} // namespace cdp

#endif // CDP_RUNTIME_KERNELS_NARROWFLOAT_H
