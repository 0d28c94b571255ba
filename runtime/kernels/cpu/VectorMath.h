//===- VectorMath.h - exp the compiler vectorizes ----------------*- C++
//-*-===//
//
// A transformer's CPU step spends seconds in exponentials: the loss's over
// every logit (batch x sequence x vocabulary), the attention softmax's over
// every score, GELU's. std::exp is a call the compiler cannot vectorize
// (glibc's vector variants need -ffast-math), so the kernels' loops ran one
// value at a time, in double. expInLoops is exp as plain float arithmetic
// without calls or branches, which loops over arrays vectorize: the
// reduction x = k ln 2 + r (|r| <= ln 2 / 2, ln 2 in two parts so that
// k ln 2 is exact), Cephes' degree-6 polynomial for exp(r), and 2^k made
// from its bits in two halves (so that no half overflows the exponent).
// Within 2 ulp of exp wherever exp is a normal float (VectorMathTest
// sweeps every range); 0 below that (x < -87.34, where exp(x) < 1.2e-38),
// +inf above 88.72, NaN for NaN. PyTorch's CPU kernels use vectorized
// exponentials of the same accuracy (Sleef's, 1 ulp).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_CPU_VECTORMATH_H
#define CDP_RUNTIME_KERNELS_CPU_VECTORMATH_H

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

namespace cdp::runtime::cpu {

/// The float whose bits are `bits`.
inline float floatWithBits(int32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

/// exp(x) in float, vectorizable; see the file comment for its accuracy.
inline float expInLoops(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f; // 9 bits: k * kLn2High is exact
  constexpr float kLn2Low = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f; // 1.5 * 2^23: rounds to integers
  constexpr float kLargest = 88.72283935546875f; // exp(x) <= FLT_MAX
  constexpr float kSmallest = -87.33654475f;     // exp(x) >= FLT_MIN
  // A NaN passes the clamps (each comparison false) and stays NaN below.
  float clamped = x < kSmallest ? kSmallest : x;
  clamped = clamped > kLargest ? kLargest : clamped;
  float k = (clamped * kLog2e + kRound) - kRound;
  float r = (clamped - k * kLn2High) - k * kLn2Low;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float expR = p * r * r + r + 1.0f;
  // k is within [-126, 128] (0 for a NaN, whose conversion to an integer
  // is undefined): 2^k as 2^half 2^(k - half), each a normal float.
  int32_t whole = static_cast<int32_t>(k == k ? k : 0.0f), half = whole >> 1;
  float y = expR * floatWithBits((half + 127) << 23) *
            floatWithBits((whole - half + 127) << 23);
  y = x > kLargest ? std::numeric_limits<float>::infinity() : y;
  return x < kSmallest ? 0.0f : y;
}

/// values[i] = expInLoops(values[i]) for i < n, in AVX2 vectors where the
/// processor has them (VectorMath.cpp), the same bits.
void expInPlace(float *values, int64_t n);

} // namespace cdp::runtime::cpu

#endif // CDP_RUNTIME_KERNELS_CPU_VECTORMATH_H
