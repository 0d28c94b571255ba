//===- VectorMath.cpp - exp and GELU over arrays, in vectors -------------===//
//
// The kernels' loops of exponentials (the loss's over a vocabulary, the
// attention softmax's over a row of scores) and of GELU and its gradient,
// each compiled for AVX-512, AVX2 and the build's baseline
// (CDP_VECTOR_CLONES): without FMA each clone computes every value with the
// same IEEE operations as the scalar functions, so the bits do not depend on
// the processor (VectorMathTest).
//
//===----------------------------------------------------------------------===//

#include "VectorMath.h"

namespace cdp::runtime::cpu {

CDP_VECTOR_CLONES void expInPlace(float *values, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    values[i] = expInLoops(values[i]);
}

CDP_VECTOR_CLONES void geluRow(const float *x, float *y, int64_t n, bool tanh) {
  // simd: y may be x (an element's result replaces it), which the
  // compiler's overlap check would send to the scalar loop.
  if (tanh) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      y[i] = geluTanhInLoops(x[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      y[i] = geluErfInLoops(x[i]);
  }
}

CDP_VECTOR_CLONES void geluGradRow(const float *g, const float *x, float *dx,
                                   int64_t n, bool tanh) {
  if (tanh) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      dx[i] = geluTanhGradInLoops(g[i], x[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      dx[i] = geluErfGradInLoops(g[i], x[i]);
  }
}

} // namespace cdp::runtime::cpu
