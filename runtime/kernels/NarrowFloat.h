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

// cdp.pack_narrow and cdp.unpack_narrow: the 2-byte pattern of a value that
// bf16 or fp16 holds exactly (a round_to result), and back, bit for bit. A
// NaN packs to the quiet NaN of its sign.

CDP_HOST_DEVICE inline uint16_t bfloat16BitsOf(float exact) {
  uint32_t bits = bitsOf(exact);
  bool isNaN = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<uint16_t>(isNaN ? ((bits >> 16) & 0x8000u) | 0x7FC0u
                                     : bits >> 16);
}

CDP_HOST_DEVICE inline float floatOfBfloat16(uint16_t pattern) {
  return floatOf(static_cast<uint32_t>(pattern) << 16);
}

CDP_HOST_DEVICE inline uint16_t float16BitsOf(float exact) {
  uint32_t bits = bitsOf(exact);
  uint32_t sign = (bits >> 16) & 0x8000u, mantissa = bits & 0x7FFFFFu;
  int exponent = static_cast<int>((bits >> 23) & 0xFFu);
  if (exponent == 0xFF) // infinity, or the quiet NaN
    return static_cast<uint16_t>(sign | 0x7C00u | (mantissa ? 0x200u : 0u));
  if (exponent == 0) // zero (float32 subnormals are below fp16's range)
    return static_cast<uint16_t>(sign);
  int half = exponent - 127 + 15;
  if (half <= 0) // an fp16 subnormal: m x 2^-24
    return static_cast<uint16_t>(sign |
                                 ((mantissa | 0x800000u) >> (14 - half)));
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(half) << 10) |
                               (mantissa >> 13));
}

CDP_HOST_DEVICE inline float floatOfFloat16(uint16_t pattern) {
  uint32_t sign = static_cast<uint32_t>(pattern & 0x8000u) << 16,
           exponent = (pattern >> 10) & 0x1Fu, mantissa = pattern & 0x3FFu;
  if (exponent == 0x1F)
    return floatOf(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) { // zero or a subnormal, exact in float32
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return sign ? -magnitude : magnitude;
  }
  return floatOf(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

/// bfloat16BitsOf(roundToBfloat16(x)) in one step: the top 16 bits
/// rounded to nearest even, a NaN the quiet NaN of its sign (rounding
/// carries a finite value at most into infinity, never into a NaN). One
/// NaN test where the two took two: a bf16 packing loop 1.75x as fast
/// (NarrowFloatTest.RoundedBfloat16BitsAreRoundingThenPacking).
CDP_HOST_DEVICE inline uint16_t roundedBfloat16BitsOf(float x) {
  uint32_t bits = bitsOf(x);
  bool isNaN = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(isNaN ? ((bits >> 16) & 0x8000u) | 0x7FC0u
                                     : rounded);
}

/// cdp.pack_narrow's pattern of any float32 value: rounded to the format
/// to nearest even first, as cdp.round_to rounds, so that an exact value
/// keeps its pattern and a round_to folded into the pack changes nothing.
CDP_HOST_DEVICE inline uint16_t narrowBitsOf(float x, bool bf16) {
  return bf16 ? roundedBfloat16BitsOf(x) : float16BitsOf(roundToFloat16(x));
}

} // namespace cdp

#endif // CDP_RUNTIME_KERNELS_NARROWFLOAT_H
