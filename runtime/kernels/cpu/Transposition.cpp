//===- Transposition.cpp - a permutation of a tensor's dimensions ---------===//

#include "Transposition.h"

#include <cstring>

namespace cdp::runtime::cpu {

Transposition::Transposition(const std::vector<int64_t> &inShape,
                             const std::vector<int64_t> &perm, int64_t width)
    : width(width) {
  size_t rank = perm.size();
  std::vector<int64_t> inStride(rank, 1), outShape(rank), stride(rank);
  for (int64_t d = static_cast<int64_t>(rank) - 2; d >= 0; --d)
    inStride[d] = inStride[d + 1] * inShape[d + 1];
  for (size_t d = 0; d < rank; ++d) {
    outShape[d] = inShape[perm[d]];
    stride[d] = inStride[perm[d]];
  }
  if (rank > 0) {
    rowLength = outShape[rank - 1];
    rowStride = stride[rank - 1];
  }
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d)
    rows *= outShape[d];
  if (rowLength == 0)
    rows = 0;
  rowStart.resize(rows);
  std::vector<int64_t> position(rank, 0);
  int64_t offset = 0;
  for (int64_t row = 0; row < rows; ++row) {
    rowStart[row] = offset;
    for (int64_t d = static_cast<int64_t>(rank) - 2; d >= 0; --d) {
      offset += stride[d];
      if (++position[d] < outShape[d])
        break;
      offset -= stride[d] * position[d];
      position[d] = 0;
    }
  }
}

namespace {

template <typename T>
void copyRows(const T *x, T *y, const std::vector<int64_t> &rowStart,
              int64_t length, int64_t stride) {
  int64_t rows = static_cast<int64_t>(rowStart.size());
#pragma omp parallel for if (rows * length > 65536) schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const T *in = x + rowStart[row];
    T *out = y + row * length;
    if (stride == 1) {
      std::memcpy(out, in, length * sizeof(T));
      continue;
    }
    for (int64_t j = 0; j < length; ++j)
      out[j] = in[j * stride];
  }
}

} // namespace

void Transposition::run(const void *x, void *y) const {
  switch (width) {
  case 4:
    return copyRows(static_cast<const uint32_t *>(x),
                    static_cast<uint32_t *>(y), rowStart, rowLength, rowStride);
  case 8:
    return copyRows(static_cast<const uint64_t *>(x),
                    static_cast<uint64_t *>(y), rowStart, rowLength, rowStride);
  case 2:
    return copyRows(static_cast<const uint16_t *>(x),
                    static_cast<uint16_t *>(y), rowStart, rowLength, rowStride);
  case 1:
    return copyRows(static_cast<const uint8_t *>(x), static_cast<uint8_t *>(y),
                    rowStart, rowLength, rowStride);
  default: // any other element size, a byte copy per element
    for (size_t row = 0; row < rowStart.size(); ++row)
      for (int64_t j = 0; j < rowLength; ++j)
        std::memcpy(static_cast<char *>(y) + (row * rowLength + j) * width,
                    static_cast<const char *>(x) +
                        (rowStart[row] + j * rowStride) * width,
                    width);
  }
}

} // namespace cdp::runtime::cpu
