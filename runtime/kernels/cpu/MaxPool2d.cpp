//===- MaxPool2d.cpp - direct 2-D max pooling -----------------------------===//

#include "MaxPool2d.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace cdp::runtime::cpu {

bool MaxPool2d::fits(const std::vector<int64_t> &x,
                     const std::vector<int64_t> &y,
                     const std::vector<int64_t> &kernel,
                     const std::vector<int64_t> &strides,
                     const std::vector<int64_t> &pads,
                     const std::vector<int64_t> &dilations) {
  if (x.size() != 4 || y.size() != 4 || kernel.size() != 2 ||
      strides.size() != 2 || pads.size() != 4)
    return false;
  if (!dilations.empty() &&
      (dilations.size() != 2 || dilations[0] != 1 || dilations[1] != 1))
    return false;
  for (int d = 0; d < 2; ++d) {
    int64_t begin = pads[d], end = pads[d + 2];
    // Padding smaller than the window, so every window holds an input
    // element; no window past the padded end (ceil mode).
    if (kernel[d] < 1 || strides[d] < 1 || y[2 + d] < 1 || begin < 0 ||
        end < 0 || begin >= kernel[d] || end >= kernel[d] ||
        (y[2 + d] - 1) * strides[d] + kernel[d] > x[2 + d] + begin + end)
      return false;
  }
  return x[0] == y[0] && x[1] == y[1];
}

MaxPool2d::MaxPool2d(const std::vector<int64_t> &x,
                     const std::vector<int64_t> &y,
                     const std::vector<int64_t> &kernel,
                     const std::vector<int64_t> &strides,
                     const std::vector<int64_t> &pads)
    : planes(x[0] * x[1]), inH(x[2]), inW(x[3]), outH(y[2]), outW(y[3]),
      kH(kernel[0]), kW(kernel[1]), sH(strides[0]), sW(strides[1]),
      padTop(pads[0]), padLeft(pads[1]),
      unpadded(std::all_of(pads.begin(), pads.end(),
                           [](int64_t p) { return p == 0; })) {}

int64_t MaxPool2d::argmax(const float *plane, int64_t oh, int64_t ow) const {
  Span rows = rowsOf(oh), columns = columnsOf(ow);
  int64_t where = rows.begin * inW + columns.begin;
  float best = plane[where];
  if (std::isnan(best))
    return where;
  for (int64_t row = rows.begin; row < rows.end; ++row)
    for (int64_t c = columns.begin; c < columns.end; ++c) {
      int64_t at = row * inW + c;
      float value = plane[at];
      if (value > best || std::isnan(value)) {
        best = value;
        where = at;
        if (std::isnan(value))
          return where;
      }
    }
  return where;
}

namespace {

/// Whether any element is a NaN (one vectorised pass): planes without one,
/// nearly all, take the fast backward below, which does not look for NaNs
/// (per-window NaN flags made it three times slower).
bool hasNaN(const float *x, int64_t n) {
  // On the bits: the largest magnitude is above infinity's only for a NaN
  // (an integer maximum vectorises; a float or bool reduction does not).
  uint32_t largest = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    largest = std::max(largest, bits & 0x7fffffffu);
  }
  return largest > 0x7f800000u;
}

/// One plane of 2 x 2, stride 2 pooling (no OpenMP in here, so that the
/// compiler sees the loops whole): plain maxima, and NaN where the window
/// has one, selected without branches (measured faster here than a NaN
/// pre-pass).
void forwardPlane2x2(const float *__restrict x, float *__restrict y,
                     int64_t outH, int64_t outW, int64_t inW) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t oh = 0; oh < outH; ++oh) {
    const float *r0 = x + 2 * oh * inW, *r1 = r0 + inW;
    float *out = y + oh * outW;
    for (int64_t ow = 0; ow < outW; ++ow) {
      float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow],
            d = r1[2 * ow + 1];
      bool anyNaN = (a != a) | (b != b) | (c != c) | (d != d);
      float m = std::max(std::max(a, b), std::max(c, d));
      out[ow] = anyNaN ? nan : m;
    }
  }
}

/// `value` where `keep`, else +0, by masking its bits (a conditional
/// expression compiled to branches, mispredicted on tied windows).
inline float keepIf(bool keep, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits &= 0u - static_cast<uint32_t>(keep);
  float kept;
  std::memcpy(&kept, &bits, sizeof kept);
  return kept;
}

/// Its gradient: each window's first element equal to its maximum (the
/// first maximum in row-major order) takes the window's dy, found and
/// written without branches (after ReLU, ties of zeros are common and
/// unpredictable).
void backwardPlane2x2(const float *__restrict x, const float *__restrict dy,
                      float *__restrict dx, int64_t outH, int64_t outW,
                      int64_t inW) {
  for (int64_t oh = 0; oh < outH; ++oh) {
    const float *r0 = x + 2 * oh * inW, *r1 = r0 + inW;
    float *d0 = dx + 2 * oh * inW, *d1 = d0 + inW;
    const float *grad = dy + oh * outW;
    for (int64_t ow = 0; ow < outW; ++ow) {
      float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow],
            d = r1[2 * ow + 1];
      float m = std::max(std::max(a, b), std::max(c, d));
      bool isA = a == m, isB = !isA & (b == m), isC = !isA & !isB & (c == m);
      bool isD = !isA & !isB & !isC;
      // Added to zero as PyTorch's scatter into a zeroed gradient does: a
      // -0 dy lands as +0.
      float g = grad[ow] + 0.0f;
      d0[2 * ow] = keepIf(isA, g);
      d0[2 * ow + 1] = keepIf(isB, g);
      d1[2 * ow] = keepIf(isC, g);
      d1[2 * ow + 1] = keepIf(isD, g);
    }
  }
}

/// Large enough for threads to pay off.
bool worthThreads(int64_t elements) { return elements >= (int64_t(1) << 16); }

} // namespace

void MaxPool2d::forwardWithoutNaN(const float *plane, float *out) const {
  // std::max(a, b) keeps a unless a < b: the earlier value on a tie (+0 and
  // -0), as argmax's first maximum; rows combine in order likewise.
  for (int64_t oh = 0; oh < outH; ++oh) {
    Span rows = rowsOf(oh);
    float *y = out + oh * outW;
    for (int64_t row = rows.begin; row < rows.end; ++row) {
      const float *r = plane + row * inW;
      bool first = row == rows.begin;
      for (int64_t ow = 0; ow < outW; ++ow) {
        Span columns = columnsOf(ow);
        float m = r[columns.begin];
        for (int64_t c = columns.begin + 1; c < columns.end; ++c)
          m = std::max(m, r[c]);
        y[ow] = first ? m : std::max(y[ow], m);
      }
    }
  }
}

void MaxPool2d::backwardWithoutNaN(const float *plane, const float *dy,
                                   float *dx) const {
  for (int64_t oh = 0; oh < outH; ++oh) {
    Span rows = rowsOf(oh);
    for (int64_t ow = 0; ow < outW; ++ow) {
      Span columns = columnsOf(ow);
      // The first maximum in row-major order, as argmax without NaNs.
      int64_t where = rows.begin * inW + columns.begin;
      float best = plane[where];
      for (int64_t row = rows.begin; row < rows.end; ++row)
        for (int64_t c = columns.begin; c < columns.end; ++c) {
          int64_t at = row * inW + c;
          float v = plane[at];
          bool better = v > best;
          best = better ? v : best;
          where = better ? at : where;
        }
      dx[where] += dy[oh * outW + ow];
    }
  }
}

void MaxPool2d::forward(const float *x, float *y) const {
  int64_t inPlane = inH * inW, outPlane = outH * outW;
  bool twoByTwo = unpadded && kH == 2 && kW == 2 && sH == 2 && sW == 2;
#pragma omp parallel for schedule(static) if (worthThreads(planes * inPlane))
  for (int64_t p = 0; p < planes; ++p) {
    if (twoByTwo) {
      forwardPlane2x2(x + p * inPlane, y + p * outPlane, outH, outW, inW);
      continue;
    }
    const float *plane = x + p * inPlane;
    if (!hasNaN(plane, inPlane)) {
      forwardWithoutNaN(plane, y + p * outPlane);
      continue;
    }
    for (int64_t o = 0; o < outPlane; ++o)
      y[p * outPlane + o] = plane[argmax(plane, o / outW, o % outW)];
  }
}

void MaxPool2d::backward(const float *x, const float *dy, float *dx) const {
  int64_t inPlane = inH * inW, outPlane = outH * outW;
  bool twoByTwo = unpadded && kH == 2 && kW == 2 && sH == 2 && sW == 2;
#pragma omp parallel for schedule(static) if (worthThreads(planes * inPlane))
  for (int64_t p = 0; p < planes; ++p) {
    float *out = dx + p * inPlane;
    // Rows and columns no window covers keep a zero gradient.
    std::memset(out, 0, sizeof(float) * inPlane);
    if (twoByTwo && !hasNaN(x + p * inPlane, inPlane)) {
      backwardPlane2x2(x + p * inPlane, dy + p * outPlane, out, outH, outW,
                       inW);
      continue;
    }
    // Overlapping windows may pick one element twice: add, in window order.
    const float *plane = x + p * inPlane;
    if (!hasNaN(plane, inPlane)) {
      backwardWithoutNaN(plane, dy + p * outPlane, out);
      continue;
    }
    for (int64_t o = 0; o < outPlane; ++o)
      out[argmax(plane, o / outW, o % outW)] += dy[p * outPlane + o];
  }
}

} // namespace cdp::runtime::cpu
