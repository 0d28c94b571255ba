//===- SmallMatMul.h - many tiny matrix products ----------------*- C++ -*-===//
//
// Attention over a short sequence multiplies many matrices of a few rows
// (the e2e transformer block: 32 products of 6 x 8 by 8 x 6). oneDNN's sgemm
// costs about half a microsecond per call whatever the size, ten times the
// arithmetic here; one matmul primitive over the batch costs as much. These
// products go through a register-tiled loop instead: four rows of C at a
// time, eight columns per AVX2 vector (masked at the edge), accumulated over
// k in registers and stored once. Without AVX2 and FMA a plain loop runs.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_CPU_SMALLMATMUL_H
#define CDP_RUNTIME_KERNELS_CPU_SMALLMATMUL_H

#include <cstdint>

namespace cdp::runtime::cpu {

/// Products up to this many multiply-adds (m * n * k) are small.
constexpr int64_t kSmallMatMulVolume = 16 * 16 * 16;

/// C (m x n, row-major) = A B, where A's element (i, p) is
/// a[i * aRow + p * aCol] and B is k x n, row-major.
void smallMatMul(int64_t m, int64_t n, int64_t k, const float *a, int64_t aRow,
                 int64_t aCol, const float *b, float *c);

} // namespace cdp::runtime::cpu

#endif // CDP_RUNTIME_KERNELS_CPU_SMALLMATMUL_H
