//===- VectorMath.cpp - exponentials of arrays, AVX2 where there is -------===//
//
// The kernels' loops of exponentials (the loss's over a vocabulary, the
// attention softmax's over a row of scores) in one function compiled twice:
// for AVX2 (8 floats a vector) and for the build's baseline (SSE2, 4), the
// processor's picked when the program loads (GCC's target_clones). AVX2
// without FMA computes each value with the same IEEE operations as the
// baseline and as expInLoops itself, so the bits do not depend on the
// processor (VectorMathTest).
//
//===----------------------------------------------------------------------===//

#include "VectorMath.h"

namespace cdp::runtime::cpu {

__attribute__((target_clones("avx2", "default"))) void expInPlace(float *values,
                                                                  int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    values[i] = expInLoops(values[i]);
}

} // namespace cdp::runtime::cpu
