//===- VectorMathTest.cpp - the vectorizable exp --------------------------===//
//
// expInLoops against double-precision exp over the float range it serves
// (a sweep of bit patterns: within 2 ulp; 1 measured), its limits (0
// below FLT_MIN's exponent, +inf above FLT_MAX's, NaN kept), and the
// kernels' arrays of it (expInPlace) and of GELU and its gradient (geluRow,
// geluGradRow) holding the scalar functions' bits on any processor
// (GeluKernelTest checks GELU's accuracy).
//
//===----------------------------------------------------------------------===//

#include "../../runtime/kernels/cpu/VectorMath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace {

using cdp::runtime::cpu::expInLoops;

int64_t bitsOf(float x) {
  int32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

/// How many floats apart `got` is from `want` rounded to float (both
/// positive).
int64_t ulpsApart(float got, double want) {
  return std::llabs(bitsOf(got) - bitsOf(static_cast<float>(want)));
}

TEST(VectorMath, ExpWithinTwoUlpWhereItIsNormal) {
  constexpr float kLow = -87.33f, kHigh = 88.72f;
  int64_t worst = 0, checked = 0;
  float worstAt = 0;
  // Every 101st bit pattern of the positive and the negative floats.
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t bits = 0; bits < 0x7f800000u; bits += 101) {
      uint32_t pattern = sign | bits;
      float x;
      std::memcpy(&x, &pattern, sizeof x);
      if (x < kLow || x > kHigh)
        continue;
      int64_t apart = ulpsApart(expInLoops(x), std::exp(double(x)));
      ++checked;
      if (apart > worst) {
        worst = apart;
        worstAt = x;
      }
    }
  EXPECT_GT(checked, 10000000);
  EXPECT_LE(worst, 2) << "at " << worstAt;
}

TEST(VectorMath, ExpLimits) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(expInLoops(0.0f), 1.0f);
  EXPECT_EQ(expInLoops(-0.0f), 1.0f);
  EXPECT_EQ(expInLoops(inf), inf);
  EXPECT_EQ(expInLoops(88.73f), inf);
  EXPECT_EQ(expInLoops(1e30f), inf);
  EXPECT_EQ(expInLoops(-inf), 0.0f);
  EXPECT_EQ(expInLoops(-87.35f), 0.0f); // exp is below FLT_MIN there
  EXPECT_EQ(expInLoops(-1e30f), 0.0f);
  EXPECT_GE(expInLoops(-87.33f), std::numeric_limits<float>::min());
  EXPECT_TRUE(std::isnan(expInLoops(std::nanf(""))));
  EXPECT_TRUE(std::isnan(expInLoops(-std::nanf(""))));
  // exp(1) and exp(-1) to the float nearest.
  EXPECT_LE(ulpsApart(expInLoops(1.0f), std::exp(1.0)), 1);
  EXPECT_LE(ulpsApart(expInLoops(-1.0f), std::exp(-1.0)), 1);
}

// The kernels' arrays of exponentials (AVX2 vectors where the processor
// has them, the baseline's otherwise, scalar tails) hold expInLoops' bits,
// for every length up to a few vectors and a vocabulary's.
TEST(VectorMath, ArraysHoldExpInLoopsBits) {
  std::vector<float> values(50257);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = std::sin(0.37f * i) * 30.0f - 10.0f;
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(3), int64_t(7), int64_t(8),
                    int64_t(9), int64_t(17), int64_t(33), int64_t(50257)}) {
    std::vector<float> got(values.begin(), values.begin() + n);
    cdp::runtime::cpu::expInPlace(got.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(bitsOf(got[i]), bitsOf(expInLoops(values[i])))
          << "length " << n << ", value " << i;
  }
}

// GELU's rows (AVX2 vectors where the processor has them) hold the scalar
// functions' bits, both forms, special values included, a row written over
// its input too.
TEST(VectorMath, GeluRowsHoldTheScalarBits) {
  using namespace cdp::runtime::cpu;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(4099), g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(0.37f * i) * 14.0f - 2.0f;
    g[i] = std::cos(0.11f * i);
  }
  x[5] = inf;
  x[6] = -inf;
  x[7] = std::nanf("");
  x[8] = 0.0f;
  x[9] = -0.0f;
  for (bool tanh : {true, false})
    for (int64_t n :
         {int64_t(0), int64_t(1), int64_t(9), int64_t(17), int64_t(4099)}) {
      std::vector<float> y(n), dx(n), inPlace(x.begin(), x.begin() + n);
      geluRow(x.data(), y.data(), n, tanh);
      geluGradRow(g.data(), x.data(), dx.data(), n, tanh);
      geluRow(inPlace.data(), inPlace.data(), n, tanh);
      for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(x[i])) { // NaN, whatever its sign and payload
          ASSERT_TRUE(std::isnan(y[i]) && std::isnan(dx[i]));
          continue;
        }
        float value = tanh ? geluTanhInLoops(x[i]) : geluErfInLoops(x[i]);
        float grad = tanh ? geluTanhGradInLoops(g[i], x[i])
                          : geluErfGradInLoops(g[i], x[i]);
        ASSERT_EQ(bitsOf(y[i]), bitsOf(value)) << "length " << n << " at " << i;
        ASSERT_EQ(bitsOf(inPlace[i]), bitsOf(value)) << "at " << i;
        ASSERT_EQ(bitsOf(dx[i]), bitsOf(grad)) << "length " << n << " at " << i;
      }
    }
  // GELU(+inf) = +inf; NaN stays NaN.
  EXPECT_EQ(geluTanhInLoops(inf), inf);
  EXPECT_EQ(geluErfInLoops(inf), inf);
  EXPECT_TRUE(std::isnan(geluTanhInLoops(std::nanf(""))));
  EXPECT_TRUE(std::isnan(geluErfGradInLoops(1.0f, std::nanf(""))));
}

} // namespace
