//===- IndexMap.h - element offsets of strided views, both backends -*- C++
//-*-===//
//
// The CUDA kernels compute a broadcast operand's, a transpose's or a
// slice's offset per element from sizes and strides passed by value. Done
// with 64-bit division, one quotient and remainder per dimension, that is
// some hundred integer instructions an element, and a 4-D transpose of
// GPT-2's heads is bound by them rather than by memory. So a map is built
// with its dimensions collapsed where memory allows (dimensions of size 1
// dropped, neighbours that walk memory as one merged) and each remaining
// size given a 32-bit divider by multiplication (Granlund and Montgomery's
// magic numbers, as PyTorch's IntDivider): an index below 2^31 costs a
// multiply-high, an add and a shift per dimension. Host code evaluates it
// with the same 32-bit arithmetic, so the CPU tests check what the GPU
// computes.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_INDEXMAP_H
#define CDP_RUNTIME_KERNELS_INDEXMAP_H

#include "HostDevice.h"

#include <cstdint>
#include <vector>

namespace cdp::runtime {

constexpr int kMaxRank = 8;

/// n / d for n < 2^31 and 1 <= d <= 2^31 - 1, without a division.
struct FastDivider {
  uint32_t magic = 1, shift = 0;

  FastDivider() = default;
  explicit FastDivider(uint32_t divisor) {
    while (shift < 32 && (uint64_t(1) << shift) < divisor)
      ++shift;
    magic = static_cast<uint32_t>(
        ((uint64_t(1) << 32) * ((uint64_t(1) << shift) - divisor)) / divisor +
        1);
  }
  CDP_HOST_DEVICE uint32_t quotient(uint32_t n) const {
#ifdef __CUDA_ARCH__
    uint32_t high = __umulhi(n, magic);
#else
    uint32_t high = static_cast<uint32_t>((uint64_t(n) * magic) >> 32);
#endif
    return (high + n) >> shift; // below 2^32: high <= n < 2^31
  }
};

/// Offset of element i of a row-major iteration space of `rank` dimensions
/// `size`, in memory whose dimensions have strides `stride` (0: broadcast),
/// starting at `base`.
struct IndexMap {
  int rank = 0;
  bool fast = true; ///< every size below 2^31: indices below it divide fast
  int64_t base = 0;
  int64_t size[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  FastDivider divider[kMaxRank];

  /// The map of iteration space `sizes` over `strides` from `base`, its
  /// dimensions collapsed; false (and no map) where more than kMaxRank
  /// remain.
  static bool build(const std::vector<int64_t> &sizes,
                    const std::vector<int64_t> &strides, int64_t base,
                    IndexMap &map) {
    std::vector<int64_t> keptSize, keptStride;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] <= 1) // contributes nothing: i % 1 == 0
        continue;
      bool merges =
          !keptSize.empty() && keptStride.back() == strides[d] * sizes[d];
      if (merges) { // the outer one steps over the inner one whole
        keptSize.back() *= sizes[d];
        keptStride.back() = strides[d];
      } else {
        keptSize.push_back(sizes[d]);
        keptStride.push_back(strides[d]);
      }
    }
    if (keptSize.size() > static_cast<size_t>(kMaxRank))
      return false;
    map = IndexMap();
    map.rank = static_cast<int>(keptSize.size());
    map.base = base;
    for (int d = 0; d < map.rank; ++d) {
      map.size[d] = keptSize[d];
      map.stride[d] = keptStride[d];
      map.fast = map.fast && keptSize[d] <= INT32_MAX;
      if (map.fast)
        map.divider[d] = FastDivider(static_cast<uint32_t>(keptSize[d]));
    }
    return true;
  }

  /// The map of value i of blocks of `size` values, block j of which lies
  /// at blocks(j) * size (a broadcast operand's matrices repeated); false
  /// where that takes more than kMaxRank dimensions.
  static bool ofBlocks(const IndexMap &blocks, int64_t size, IndexMap &map) {
    std::vector<int64_t> sizes(blocks.size, blocks.size + blocks.rank), strides;
    for (int d = 0; d < blocks.rank; ++d)
      strides.push_back(blocks.stride[d] * size);
    sizes.push_back(size);
    strides.push_back(1);
    return build(sizes, strides, blocks.base * size, map);
  }

  CDP_HOST_DEVICE int64_t operator()(int64_t i) const {
    int64_t offset = base;
    if (fast && i >= 0 && i <= INT32_MAX) {
      uint32_t n = static_cast<uint32_t>(i);
      for (int d = rank - 1; d >= 0; --d) {
        uint32_t q = divider[d].quotient(n);
        offset += int64_t(n - q * static_cast<uint32_t>(size[d])) * stride[d];
        n = q;
      }
      return offset;
    }
    for (int d = rank - 1; d >= 0; --d) {
      offset += (i % size[d]) * stride[d];
      i /= size[d];
    }
    return offset;
  }
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_INDEXMAP_H
