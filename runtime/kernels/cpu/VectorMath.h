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

/// A row function compiled three times, for AVX-512 (16 floats a vector),
/// AVX2 (8) and the build's baseline (SSE2, 4), the processor's best picked
/// when the program loads (GCC's and clang's target_clones). The runtime is
/// built with -ffp-contract=off, so that no clone fuses a multiply and an
/// add (AVX-512's FMA): each computes every value with the same IEEE
/// operations, the same bits on any processor (VectorMathTest,
/// SoftmaxRowsTest).
#define CDP_VECTOR_CLONES                                                      \
  __attribute__((target_clones("avx512f", "avx2", "default")))

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

/// values[i] = expInLoops(values[i]) for i < n, in AVX-512 or AVX2 vectors
/// where the processor has them (CDP_VECTOR_CLONES), the same bits.
void expInPlace(float *values, int64_t n);

/// sigmoid(t) and 1 - sigmoid(t), each without cancellation, from
/// exp(-|t|) <= 1, which never overflows (a NaN stays NaN).
struct SigmoidPair {
  float value, complement;
};
inline SigmoidPair sigmoidPairInLoops(float t) {
  float e = expInLoops(t < 0.0f ? t : -t);
  float large = 1.0f / (1.0f + e), small = e * large;
  return t >= 0.0f ? SigmoidPair{large, small} : SigmoidPair{small, large};
}

/// GELU's tanh form, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715
/// x^3), as x sigmoid(2u): no tanh call, and no 1 + tanh(u) that cancels in
/// the negative tail.
inline float geluTanhInLoops(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286536f;
  float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  return x * sigmoidPairInLoops(2.0f * u).value;
}

/// g times the derivative of geluTanhInLoops: with s = sigmoid(2u),
/// s + 2 x s (1 - s) du/dx.
inline float geluTanhGradInLoops(float g, float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286536f;
  float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
  SigmoidPair s = sigmoidPairInLoops(2.0f * u);
  return g * (s.value + 2.0f * x * s.value * s.complement * du);
}

/// The standard normal distribution function Phi(x) = (1 + erf(x / sqrt 2))
/// / 2 and exp(-x^2 / 2) (the density without its constant), vectorizable.
/// With z = x / sqrt 2: for |z| <= 1, erf(z) = z P(z^2) (degree 6); beyond,
/// erfc(|z|) = exp(-z^2) Q(1 / |z| - 0.55) / |z| (degree 10 on |z| in
/// [1, 10]; erfc is below the floats past 9.4). Both fitted to the double
/// erf by least squares on Chebyshev nodes (relative error 2e-7 and 1e-7
/// evaluated in float). Phi's left tail is erfc / 2 itself, not 1 + erf,
/// which cancels: relative accuracy down to Phi's smallest normal values.
struct NormalCdf {
  float cdf, density;
};
inline NormalCdf normalCdfInLoops(float x) {
  constexpr float kSqrt1_2 = 0.70710678118654752f;
  float z = x * kSqrt1_2, squared = z * z;
  float magnitude = z < 0.0f ? -z : z;
  float p = 7.847262168070301e-05f;
  p = p * squared - 8.008193108253181e-04f;
  p = p * squared + 5.1880995742976665e-03f;
  p = p * squared - 2.6853691786527634e-02f;
  p = p * squared + 1.128358244895935e-01f;
  p = p * squared - 3.761262595653534e-01f;
  p = p * squared + 1.1283791065216064f;
  float inverse = 1.0f / (magnitude > 1.0f ? magnitude : 1.0f);
  float w = inverse - 0.55f;
  float q = -4.4806309044361115e-02f;
  q = q * w - 2.961183711886406e-02f;
  q = q * w + 1.0400046408176422e-01f;
  q = q * w - 7.384458929300308e-02f;
  q = q * w + 9.951697662472725e-03f;
  q = q * w + 5.103760585188866e-02f;
  q = q * w - 9.693647176027298e-02f;
  q = q * w + 9.831516444683075e-02f;
  q = q * w - 2.0365053787827492e-02f;
  q = q * w - 1.7003469169139862e-01f;
  q = q * w + 5.023534297943115e-01f;
  float density = expInLoops(-squared);
  float halfErfc = 0.5f * density * q * inverse;
  // A NaN fails every comparison: the left tail's formula, NaN.
  float cdf = magnitude <= 1.0f ? 0.5f + 0.5f * (z * p)
              : z > 0.0f        ? 1.0f - halfErfc
                                : halfErfc;
  return {cdf, density};
}

/// GELU, x Phi(x) (PyTorch's approximate="none").
inline float geluErfInLoops(float x) { return x * normalCdfInLoops(x).cdf; }

/// g (Phi(x) + x phi(x)), phi the normal density.
inline float geluErfGradInLoops(float g, float x) {
  constexpr float kInverseSqrt2Pi = 0.3989422804014327f;
  NormalCdf at = normalCdfInLoops(x);
  return g * (at.cdf + x * (kInverseSqrt2Pi * at.density));
}

/// y[i] = GELU(x[i]) for i < n (the tanh form where `tanh`), in vectors
/// where the processor has them (CDP_VECTOR_CLONES), the same bits.
void geluRow(const float *x, float *y, int64_t n, bool tanh);

/// dx[i] = g[i] GELU'(x[i]) for i < n, likewise.
void geluGradRow(const float *g, const float *x, float *dx, int64_t n,
                 bool tanh);

} // namespace cdp::runtime::cpu

#endif // CDP_RUNTIME_KERNELS_CPU_VECTORMATH_H
