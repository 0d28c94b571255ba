//===- MaxPool2dTest.cpp - the direct 2-D max pooling against a reference -===//
//
// MaxPool2d (runtime/kernels/cpu) against a naive reference of PyTorch's
// rule: each window's first maximum in row-major order, a NaN wins (the
// first NaN), and the backward routes dy to that element (adding where
// windows overlap). Inputs after a ReLU (many tied zeros) and with NaNs, for
// the 2 x 2 / stride 2 loops and the general path (3 x 3 / stride 2,
// overlapping; 2 x 3 / strides 1, 3), in planes with and without NaNs.
// Results must be bit-identical.
//
//===----------------------------------------------------------------------===//

#include "kernels/cpu/MaxPool2d.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using cdp::runtime::cpu::MaxPool2d;

namespace {

struct Geometry {
  int64_t n, c, h, w, kH, kW, sH, sW, pH = 0, pW = 0; ///< padding both sides
  int64_t outH() const { return (h + 2 * pH - kH) / sH + 1; }
  int64_t outW() const { return (w + 2 * pW - kW) / sW + 1; }
};

/// The reference's window maximum position in its plane.
int64_t firstMax(const float *plane, const Geometry &g, int64_t oh,
                 int64_t ow) {
  int64_t where = -1;
  float best = 0;
  for (int64_t i = 0; i < g.kH; ++i)
    for (int64_t j = 0; j < g.kW; ++j) {
      int64_t row = oh * g.sH - g.pH + i, column = ow * g.sW - g.pW + j;
      if (row < 0 || row >= g.h || column < 0 || column >= g.w)
        continue; // padding
      int64_t at = row * g.w + column;
      float v = plane[at];
      if (where >= 0 && std::isnan(best))
        continue;
      if (where < 0 || v > best || std::isnan(v)) {
        best = v;
        where = at;
      }
    }
  return where;
}

/// Where NaNs lie in the input: none; every 97th element (in every plane
/// of the tests' sizes); or in the first plane only (the others take the
/// loops for planes without NaNs).
enum class NaNs { None, Spread, FirstPlane };

std::vector<float> input(const Geometry &g, NaNs nans, unsigned seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(g.n * g.c * g.h * g.w);
  for (float &v : x) {
    v = std::max(0.0f, normal(random)); // ReLU: ties of zeros
    if (v == 0.0f && random() % 2)
      v = -0.0f; // ties of +0 and -0: which one wins shows in the bits
  }
  size_t end = nans == NaNs::FirstPlane ? g.h * g.w : x.size();
  if (nans != NaNs::None)
    for (size_t i = 7; i < end; i += 97)
      x[i] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

bool sameBits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
}

void check(const Geometry &g, NaNs nans) {
  std::vector<int64_t> xs{g.n, g.c, g.h, g.w}, ys{g.n, g.c, g.outH(), g.outW()};
  std::vector<int64_t> pads{g.pH, g.pW, g.pH, g.pW};
  ASSERT_TRUE(MaxPool2d::fits(xs, ys, {g.kH, g.kW}, {g.sH, g.sW}, pads, {}));
  MaxPool2d pool(xs, ys, {g.kH, g.kW}, {g.sH, g.sW}, pads);
  std::vector<float> x = input(g, nans, 1), dy = input(g, NaNs::None, 2);
  int64_t planes = g.n * g.c, inPlane = g.h * g.w,
          outPlane = g.outH() * g.outW();
  dy.resize(planes * outPlane);
  std::vector<float> y(planes * outPlane), dx(x.size(), -1.0f);
  pool.forward(x.data(), y.data());
  pool.backward(x.data(), dy.data(), dx.data());
  std::vector<float> wantDx(x.size(), 0.0f);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < g.outH(); ++oh)
      for (int64_t ow = 0; ow < g.outW(); ++ow) {
        int64_t at = firstMax(x.data() + p * inPlane, g, oh, ow);
        int64_t o = p * outPlane + oh * g.outW() + ow;
        ASSERT_TRUE(sameBits(y[o], x[p * inPlane + at])) << "output " << o;
        wantDx[p * inPlane + at] += dy[o];
      }
  for (size_t i = 0; i < dx.size(); ++i)
    ASSERT_TRUE(sameBits(dx[i], wantDx[i])) << "dx " << i;
}

} // namespace

TEST(MaxPool2d, TwoByTwoStrideTwoWithTies) {
  check({8, 6, 24, 24, 2, 2, 2, 2}, NaNs::None);
}
TEST(MaxPool2d, TwoByTwoStrideTwoWithNaNs) {
  check({2, 3, 8, 10, 2, 2, 2, 2}, NaNs::Spread);
}
TEST(MaxPool2d, OddInputLeavesALastRowUncovered) {
  check({2, 2, 7, 9, 2, 2, 2, 2}, NaNs::None);
}
TEST(MaxPool2d, OverlappingWindows) {
  check({2, 4, 11, 11, 3, 3, 2, 2}, NaNs::Spread);
}
TEST(MaxPool2d, RectangularWindowAndStrides) {
  check({3, 2, 9, 12, 2, 3, 1, 3}, NaNs::None);
}

// ResNet's stem: 3 x 3, stride 2, padding 1 (padding never wins).
TEST(MaxPool2d, PaddedStem) {
  check({2, 4, 16, 16, 3, 3, 2, 2, 1, 1}, NaNs::Spread);
}
TEST(MaxPool2d, PaddedOddInput) {
  check({1, 3, 9, 7, 3, 3, 2, 2, 1, 1}, NaNs::None);
}
TEST(MaxPool2d, PaddedStemWithTies) {
  check({2, 4, 16, 16, 3, 3, 2, 2, 1, 1}, NaNs::None);
}
TEST(MaxPool2d, OverlappingWindowsSomePlanesWithNaNs) {
  check({2, 4, 11, 11, 3, 3, 2, 2}, NaNs::FirstPlane);
  check({2, 3, 15, 13, 3, 3, 2, 2, 1, 1}, NaNs::FirstPlane);
}
TEST(MaxPool2d, TwoByTwoPadded) {
  check({1, 2, 7, 7, 2, 2, 2, 2, 1, 1}, NaNs::None);
}

TEST(MaxPool2d, DeclinesWidePaddingDilationAndCeilMode) {
  std::vector<int64_t> x{1, 1, 8, 8}, y{1, 1, 4, 4};
  // Padding as wide as the window would make windows of padding only.
  EXPECT_FALSE(
      MaxPool2d::fits(x, {1, 1, 5, 5}, {2, 2}, {2, 2}, {2, 2, 2, 2}, {}));
  EXPECT_FALSE(MaxPool2d::fits(x, y, {2, 2}, {2, 2}, {0, 0, 0, 0}, {2, 2}));
  // ceil mode: 7 wide pooled into 4 puts the last window past the end.
  EXPECT_FALSE(
      MaxPool2d::fits({1, 1, 7, 7}, y, {2, 2}, {2, 2}, {0, 0, 0, 0}, {}));
  EXPECT_FALSE(MaxPool2d::fits({1, 1, 8, 8, 8}, {1, 1, 4, 4, 4}, {2, 2}, {2, 2},
                               {0, 0, 0, 0}, {}));
}
