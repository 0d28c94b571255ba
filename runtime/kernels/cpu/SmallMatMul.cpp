//===- SmallMatMul.cpp - many tiny matrix products ------------------------===//

#include "SmallMatMul.h"

#include <immintrin.h>

namespace cdp::runtime::cpu {

namespace {

/// Rows [i, i + Rows) of C, columns [j, j + 8) under `mask`.
template <int Rows>
__attribute__((target("avx2,fma"))) void
tile(int64_t n, int64_t k, const float *a, int64_t aRow, int64_t aCol,
     const float *b, float *c, __m256i mask) {
  __m256 acc[Rows];
  for (int r = 0; r < Rows; ++r)
    acc[r] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    __m256 row = _mm256_maskload_ps(b + p * n, mask);
    for (int r = 0; r < Rows; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + r * aRow + p * aCol),
                               row, acc[r]);
  }
  for (int r = 0; r < Rows; ++r)
    _mm256_maskstore_ps(c + r * n, mask, acc[r]);
}

__attribute__((target("avx2,fma"))) void productAvx2(int64_t m, int64_t n,
                                                     int64_t k, const float *a,
                                                     int64_t aRow, int64_t aCol,
                                                     const float *b, float *c) {
  static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                   0,  0,  0,  0,  0,  0,  0,  0};
  for (int64_t j = 0; j < n; j += 8) {
    int64_t width = n - j < 8 ? n - j : 8;
    __m256i mask =
        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ones + 8 - width));
    int64_t i = 0;
    for (; i + 4 <= m; i += 4)
      tile<4>(n, k, a + i * aRow, aRow, aCol, b + j, c + i * n + j, mask);
    for (; i < m; ++i)
      tile<1>(n, k, a + i * aRow, aRow, aCol, b + j, c + i * n + j, mask);
  }
}

void productPlain(int64_t m, int64_t n, int64_t k, const float *a, int64_t aRow,
                  int64_t aCol, const float *b, float *c) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int64_t p = 0; p < k; ++p)
        sum += a[i * aRow + p * aCol] * b[p * n + j];
      c[i * n + j] = sum;
    }
}

bool hasAvx2() {
  static const bool yes =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

} // namespace

void smallMatMul(int64_t m, int64_t n, int64_t k, const float *a, int64_t aRow,
                 int64_t aCol, const float *b, float *c) {
  if (hasAvx2())
    productAvx2(m, n, k, a, aRow, aCol, b, c);
  else
    productPlain(m, n, k, a, aRow, aCol, b, c);
}

} // namespace cdp::runtime::cpu
