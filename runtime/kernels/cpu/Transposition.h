//===- Transposition.h - a permutation of a tensor's dimensions -*- C++ -*-===//
//
// y = x with its dimensions permuted, row by row: each row of y (its last
// dimension) starts at an offset of x computed once at load and steps through
// x with one stride, or is one memcpy where that stride is 1. The index of
// every element (what the kernel loaded before) is no longer read.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_CPU_TRANSPOSITION_H
#define CDP_RUNTIME_KERNELS_CPU_TRANSPOSITION_H

#include <cstdint>
#include <vector>

namespace cdp::runtime::cpu {

class Transposition {
public:
  /// x of `inShape`, y[i...] = x at the position `perm` maps it to
  /// (ONNX Transpose: y's dimension d is x's dimension perm[d]);
  /// elements of `width` bytes.
  Transposition(const std::vector<int64_t> &inShape,
                const std::vector<int64_t> &perm, int64_t width);
  void run(const void *x, void *y) const;

private:
  int64_t width, rowLength = 1, rowStride = 1; ///< in elements
  std::vector<int64_t> rowStart;               ///< per row of y, in x
};

} // namespace cdp::runtime::cpu

#endif // CDP_RUNTIME_KERNELS_CPU_TRANSPOSITION_H
