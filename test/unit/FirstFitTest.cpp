//===- FirstFitTest.cpp - the arena packer --------------------------------===//
//
// packFirstFit against the quadratic first fit it replaced, written out
// here as the reference: the same offsets and arena size on random live
// ranges of every shape (many short-lived values, long-lived stashes,
// fragmentation), and no two overlapping ranges sharing bytes.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/FirstFit.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

using namespace cdp;

namespace {

std::vector<int64_t> referenceFirstFit(const std::vector<LiveRange> &ranges,
                                       int64_t &arenaBytes) {
  std::vector<int64_t> offsets(ranges.size(), -1);
  auto size = [&](size_t i) {
    return alignToArena(std::max<int64_t>(ranges[i].bytes, 1));
  };
  std::map<int64_t, size_t> active;
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

TEST(FirstFit, SameOffsetsAsTheQuadraticFirstFit) {
  std::mt19937_64 random(7);
  for (int trial = 0; trial < 300; ++trial) {
    int n = 1 + static_cast<int>(random() % 400);
    int64_t longest = 1 + static_cast<int64_t>(random() % 50);
    std::vector<LiveRange> ranges;
    for (int i = 0; i < n; ++i) {
      int64_t life = static_cast<int64_t>(random() % longest);
      if (random() % 10 == 0)
        life += static_cast<int64_t>(random() % (4 * n)); // a stash
      int64_t bytes = static_cast<int64_t>(random() % 5000);
      ranges.push_back({i, i + life, bytes});
    }
    int64_t arena = 0, referenceArena = 0;
    std::vector<int64_t> got = packFirstFit(ranges, arena);
    std::vector<int64_t> want = referenceFirstFit(ranges, referenceArena);
    ASSERT_EQ(got, want) << "trial " << trial;
    ASSERT_EQ(arena, referenceArena) << "trial " << trial;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n && ranges[j].begin <= ranges[i].end; ++j) {
        int64_t si = alignToArena(std::max<int64_t>(ranges[i].bytes, 1)),
                sj = alignToArena(std::max<int64_t>(ranges[j].bytes, 1));
        ASSERT_TRUE(got[i] + si <= got[j] || got[j] + sj <= got[i])
            << "ranges " << i << " and " << j << " overlap";
      }
  }
}

} // namespace
