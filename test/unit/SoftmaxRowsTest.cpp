//===- SoftmaxRowsTest.cpp - the attention's vectorized softmax rows ------===//
//
// The CPU attention's row passes (SoftmaxRows.h) against plain loops of
// the same arithmetic: the rounded, biased scores and the exponentials bit
// for bit (expInLoops' bits), each reduction bit for bit against its
// definition (16 partial results, element c in lane c mod 16, combined in
// lane order) and within 1e-12 of the one-after-another sum, for lengths
// around the vectors' and the lanes' sizes. The backward recomputes the
// forward's probabilities from these functions, so their bits are what
// makes both agree.
//
//===----------------------------------------------------------------------===//

#include "../../runtime/kernels/cpu/SoftmaxRows.h"
#include "../../runtime/kernels/NarrowFloat.h"
#include "../../runtime/kernels/cpu/VectorMath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace {

using namespace cdp;
using namespace cdp::runtime;
using namespace cdp::runtime::cpu;

constexpr int kLanes = 16;
const int64_t kLengths[] = {1, 7, 15, 16, 17, 33, 512, 1000};

uint32_t bitsOf(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

std::vector<float> row(int64_t n, float spread) {
  std::vector<float> x(n);
  for (int64_t c = 0; c < n; ++c)
    x[c] = std::sin(0.91f * c + 0.3f) * spread;
  return x;
}

/// The documented order: lane c mod 16, lanes added in order.
double laneSum(const std::vector<double> &terms) {
  double lane[kLanes] = {};
  for (size_t c = 0; c < terms.size(); ++c)
    lane[c % kLanes] += terms[c];
  double sum = 0;
  for (double l : lane)
    sum += l;
  return sum;
}

TEST(SoftmaxRows, BiasedScoresAndTheirMaximum) {
  const NarrowFormat formats[] = {NarrowFormat::None, NarrowFormat::Bfloat16,
                                  NarrowFormat::Float16};
  // Step -1: no bias; 0: one value for the row; 1, 2: a row of them.
  for (int64_t n : kLengths)
    for (int64_t step : {-1, 0, 1, 2})
      for (NarrowFormat format : formats) {
        std::vector<float> x = row(n, 7.0f), bias = row(2 * n, 0.5f);
        const float *b = step < 0 ? nullptr : bias.data();
        std::vector<float> got = x;
        float top = biasedScoresMaximum(got.data(), b, step, n, format);
        float want = -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < n; ++c) {
          float expected = roundedTo(format, x[c]);
          if (b)
            expected += b[c * step];
          ASSERT_EQ(bitsOf(got[c]), bitsOf(expected))
              << "n " << n << " step " << step << " element " << c;
          want = std::max(want, expected);
        }
        EXPECT_EQ(top, want) << "n " << n << " step " << step;
      }
}

TEST(SoftmaxRows, ExponentialsAndTheirSum) {
  for (int64_t n : kLengths) {
    std::vector<float> x = row(n, 20.0f), got = x;
    double sum = exponentialsFrom(got.data(), 3.5f, n);
    std::vector<double> terms;
    double plain = 0;
    for (int64_t c = 0; c < n; ++c) {
      ASSERT_EQ(bitsOf(got[c]), bitsOf(expInLoops(x[c] - 3.5f)))
          << "n " << n << " element " << c;
      terms.push_back(got[c]);
      plain += got[c];
    }
    EXPECT_EQ(sum, laneSum(terms)) << "n " << n;
    EXPECT_NEAR(sum, plain, 1e-12 * plain) << "n " << n;
  }
}

TEST(SoftmaxRows, ProbabilitiesRoundedAndPacked) {
  for (int64_t n : kLengths) {
    std::vector<float> e = row(n, 1.0f), p(n), rounded(n);
    std::vector<uint16_t> bits(n);
    scaledRow(e.data(), 0.37, n, NarrowFormat::None, p.data());
    scaledRow(e.data(), 0.37, n, NarrowFormat::Bfloat16, rounded.data());
    scaledRowBits(e.data(), 0.37, n, bits.data());
    for (int64_t c = 0; c < n; ++c) {
      float want = static_cast<float>(e[c] * 0.37);
      ASSERT_EQ(bitsOf(p[c]), bitsOf(want)) << "element " << c;
      ASSERT_EQ(bitsOf(rounded[c]), bitsOf(roundToBfloat16(want)));
      ASSERT_EQ(floatOfBfloat16(bits[c]), rounded[c]);
    }
  }
}

TEST(SoftmaxRows, SoftmaxGradient) {
  for (int64_t n : kLengths)
    for (NarrowFormat format : {NarrowFormat::None, NarrowFormat::Bfloat16}) {
      std::vector<float> p = row(n, 0.5f), dp = row(n, 3.0f), got = dp;
      softmaxGradientRow(p.data(), got.data(), n, format);
      std::vector<double> terms;
      double plain = 0;
      for (int64_t c = 0; c < n; ++c) {
        terms.push_back(static_cast<double>(roundedTo(format, dp[c])) * p[c]);
        plain += terms.back();
      }
      double sum = laneSum(terms);
      EXPECT_NEAR(sum, plain, 1e-12 * n);
      for (int64_t c = 0; c < n; ++c)
        ASSERT_EQ(bitsOf(got[c]), bitsOf(static_cast<float>(
                                      p[c] * (roundedTo(format, dp[c]) - sum))))
            << "n " << n << " element " << c;
    }
}

} // namespace
