//===- FirstFit.h - packing live ranges into an arena -------------*- C++
//-*-===//
//
// cdp-plan-memory packs the one-micro-batch arena with it, and the pipeline
// emitter a stage's tensors that live within one forward or backward.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PASSES_FIRSTFIT_H
#define CDP_PASSES_FIRSTFIT_H

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <vector>

namespace cdp {

/// Offsets in an arena are multiples of this (cache lines, SIMD loads).
constexpr int64_t kArenaAlignment = 64;

inline int64_t alignToArena(int64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

/// A value's live range over op positions, both ends included.
struct LiveRange {
  int64_t begin, end, bytes;
};

/// First fit in the order given (by `begin`): a block is free for a range
/// beginning at i when its owner's range ended before i, so an op's results
/// never overlap its operands. Returns each range's offset; `arenaBytes`
/// gets the arena's size.
inline std::vector<int64_t> packFirstFit(const std::vector<LiveRange> &ranges,
                                         int64_t &arenaBytes) {
  std::vector<int64_t> offsets(ranges.size(), -1);
  auto size = [&](size_t i) {
    return alignToArena(std::max<int64_t>(ranges[i].bytes, 1));
  };
  std::map<int64_t, size_t> active; // offset -> range
  arenaBytes = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    for (auto it = active.begin(); it != active.end();)
      it = ranges[it->second].end < ranges[i].begin ? active.erase(it)
                                                    : std::next(it);
    int64_t candidate = 0;
    for (auto &[offset, j] : active) {
      if (offset - candidate >= size(i))
        break;
      candidate = std::max(candidate, offset + size(j));
    }
    offsets[i] = candidate;
    active[candidate] = i;
    arenaBytes = std::max(arenaBytes, candidate + size(i));
  }
  return offsets;
}

} // namespace cdp

#endif // CDP_PASSES_FIRSTFIT_H
