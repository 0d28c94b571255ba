//===- SoftmaxRows.h - the attention's softmax rows, vectorized -*- C++ -*-===//
//
// The CPU attention spent most of its time outside its products: over every
// scores element (batch x heads x queries x keys) it rounds, adds the bias,
// takes each row's maximum, exponentiates, sums and scales, and its
// backward multiplies dP by P twice more. Plain loops of these vectorize
// but for their reductions: GCC keeps a maximum or a sum in one register,
// one element after another, since summing in another order changes the
// bits. These functions reduce in a fixed number of interleaved partial
// results combined in a fixed order at the end, so they run in vectors and
// give the same bits on every processor and any number of threads. Each is
// compiled for AVX-512, AVX2 and the build's baseline (CDP_VECTOR_CLONES),
// the same IEEE operations in each (no FMA).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_CPU_SOFTMAXROWS_H
#define CDP_RUNTIME_KERNELS_CPU_SOFTMAXROWS_H

#include "../NarrowOperands.h"

#include <cstdint>

namespace cdp::runtime::cpu {

/// x[c] = roundedTo(format, x[c]) + bias[c * step] for c < n (x[c] rounded
/// only where `bias` is null); returns the largest, -inf where n is 0. A
/// NaN in the row leaves the maximum unspecified: the row's sum of
/// exponentials is NaN whatever it is.
float biasedScoresMaximum(float *x, const float *bias, int64_t step, int64_t n,
                          NarrowFormat format);

/// The largest of x[0..n), -inf where n is 0 (unspecified where x holds a
/// NaN: a softmax's sum is NaN then whatever it is).
float maximumOfRow(const float *x, int64_t n);

/// x[c] = expInLoops(x[c] - top) for c < n; returns their sum in double.
double exponentialsFrom(float *x, float top, int64_t n);

/// p[c] = float(e[c] * scale), rounded to `format` (p may be e).
void scaledRow(const float *e, double scale, int64_t n, NarrowFormat format,
               float *p);

/// bits[c] = the bf16 bits of float(e[c] * scale), rounded to nearest even.
void scaledRowBits(const float *e, double scale, int64_t n, uint16_t *bits);

/// The softmax's gradient of one row, in place of dp: with d[c] =
/// roundedTo(format, dp[c]), dp[c] = float(p[c] * (d[c] - sum_c d[c] p[c])),
/// the sum and the products in double.
void softmaxGradientRow(const float *p, float *dp, int64_t n,
                        NarrowFormat format);

} // namespace cdp::runtime::cpu

#endif // CDP_RUNTIME_KERNELS_CPU_SOFTMAXROWS_H
