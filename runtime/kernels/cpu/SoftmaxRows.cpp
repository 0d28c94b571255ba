//===- SoftmaxRows.cpp - the attention's softmax rows, vectorized ---------===//
//
// Each reduction keeps kLanes partial results, element c in lane c mod
// kLanes, and combines them in lane order after the row (SoftmaxRows.h).
//
//===----------------------------------------------------------------------===//

#include "SoftmaxRows.h"
#include "../NarrowFloat.h"
#include "CpuKernels.h"
#include "VectorMath.h"

#include <limits>

namespace cdp::runtime::cpu {

namespace {

constexpr int kLanes = 16;

/// The largest of the lanes' maxima.
inline float maximumOfLanes(const float *lane) {
  float top = lane[0];
  for (int l = 1; l < kLanes; ++l)
    top = lane[l] > top ? lane[l] : top;
  return top;
}

/// The largest of x[0..n), kLanes at a time.
inline float maximumOf(const float *x, int64_t n) {
  float lane[kLanes];
  for (float &l : lane)
    l = -std::numeric_limits<float>::infinity();
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int l = 0; l < kLanes; ++l)
      lane[l] = x[c + l] > lane[l] ? x[c + l] : lane[l];
  for (; c < n; ++c)
    lane[c % kLanes] = x[c] > lane[c % kLanes] ? x[c] : lane[c % kLanes];
  return maximumOfLanes(lane);
}

/// The lanes' partial sums, added in lane order.
inline double total(const double *lane) {
  double sum = 0;
  for (int l = 0; l < kLanes; ++l)
    sum += lane[l];
  return sum;
}

} // namespace

CDP_VECTOR_CLONES float biasedScoresMaximum(float *x, const float *bias,
                                            int64_t step, int64_t n,
                                            NarrowFormat format) {
  // One pass where the row is rounded to bf16 (or not at all) and its bias
  // lies in a row: the common cases.
  if (format != NarrowFormat::Float16 && (!bias || step == 1)) {
    bool bf16 = format == NarrowFormat::Bfloat16;
    auto biased = [&](int64_t c) {
      float rounded = bf16 ? roundToBfloat16(x[c]) : x[c];
      return bias ? rounded + bias[c] : rounded;
    };
    float lane[kLanes];
    for (float &l : lane)
      l = -std::numeric_limits<float>::infinity();
    int64_t c = 0;
    for (; c + kLanes <= n; c += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        x[c + l] = biased(c + l);
        lane[l] = x[c + l] > lane[l] ? x[c + l] : lane[l];
      }
    for (; c < n; ++c) {
      x[c] = biased(c);
      lane[0] = x[c] > lane[0] ? x[c] : lane[0];
    }
    return maximumOfLanes(lane);
  }
  roundedRow(x, n, format, x);
  if (bias)
    for (int64_t c = 0; c < n; ++c)
      x[c] += bias[c * step];
  return maximumOf(x, n);
}

CDP_VECTOR_CLONES float maximumOfRow(const float *x, int64_t n) {
  return maximumOf(x, n);
}

CDP_VECTOR_CLONES double exponentialsFrom(float *x, float top, int64_t n) {
  double lane[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      x[c + l] = expInLoops(x[c + l] - top);
      lane[l] += x[c + l];
    }
  for (; c < n; ++c) {
    x[c] = expInLoops(x[c] - top);
    lane[c % kLanes] += x[c];
  }
  return total(lane);
}

CDP_VECTOR_CLONES void scaledRow(const float *e, double scale, int64_t n,
                                 NarrowFormat format, float *p) {
  for (int64_t c = 0; c < n; ++c)
    p[c] = static_cast<float>(e[c] * scale);
  roundedRow(p, n, format, p);
}

CDP_VECTOR_CLONES void scaledRowBits(const float *e, double scale, int64_t n,
                                     uint16_t *bits) {
  for (int64_t c = 0; c < n; ++c)
    bits[c] = roundedBfloat16BitsOf(static_cast<float>(e[c] * scale));
}

CDP_VECTOR_CLONES void softmaxGradientRow(const float *p, float *dp, int64_t n,
                                          NarrowFormat format) {
  roundedRow(dp, n, format, dp);
  double lane[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int l = 0; l < kLanes; ++l)
      lane[l] += static_cast<double>(dp[c + l]) * p[c + l];
  for (; c < n; ++c)
    lane[c % kLanes] += static_cast<double>(dp[c]) * p[c];
  double sum = total(lane);
  for (c = 0; c < n; ++c)
    dp[c] = static_cast<float>(p[c] * (dp[c] - sum));
}

} // namespace cdp::runtime::cpu
