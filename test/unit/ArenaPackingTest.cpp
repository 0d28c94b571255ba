//===- ArenaPackingTest.cpp - the arena packers ---------------------------===//
//
// packFirstFit against the quadratic first fit it replaced, written out
// here as the reference: the same offsets and arena size on random live
// ranges of every shape (many short-lived values, long-lived stashes,
// fragmentation), and no two overlapping ranges sharing bytes. Greedy by
// size and by breadth on the same ranges: no two overlapping ranges share
// bytes, the arena is where the highest block ends, and packArena keeps the
// smallest.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/ArenaPacking.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

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

/// Random live ranges, one beginning at each position: many short-lived
/// values and, one in ten, a long-lived stash.
std::vector<LiveRange> randomRanges(std::mt19937_64 &random) {
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
  return ranges;
}

/// Empty when no two ranges live at one position share bytes and the arena
/// ends where the highest block does; else what is wrong.
std::string checkPacking(const std::vector<LiveRange> &ranges,
                         const std::vector<int64_t> &offsets,
                         int64_t arenaBytes) {
  auto size = [&](size_t i) {
    return alignToArena(std::max<int64_t>(ranges[i].bytes, 1));
  };
  int64_t top = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    top = std::max(top, offsets[i] + size(i));
    for (size_t j = i + 1; j < ranges.size(); ++j) {
      bool live =
          ranges[j].begin <= ranges[i].end && ranges[i].begin <= ranges[j].end;
      if (live && offsets[i] + size(i) > offsets[j] &&
          offsets[j] + size(j) > offsets[i])
        return "ranges " + std::to_string(i) + " and " + std::to_string(j) +
               " overlap";
    }
  }
  return top == arenaBytes ? "" : "the arena is not the highest block's end";
}

TEST(FirstFit, SameOffsetsAsTheQuadraticFirstFit) {
  std::mt19937_64 random(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<LiveRange> ranges = randomRanges(random);
    int64_t arena = 0, referenceArena = 0;
    std::vector<int64_t> got = packFirstFit(ranges, arena);
    std::vector<int64_t> want = referenceFirstFit(ranges, referenceArena);
    ASSERT_EQ(got, want) << "trial " << trial;
    ASSERT_EQ(arena, referenceArena) << "trial " << trial;
    ASSERT_EQ(checkPacking(ranges, got, arena), "") << "trial " << trial;
  }
}

TEST(GreedyBySize, NoLiveRangesShareBytesAndTheSmallerArenaIsKept) {
  std::mt19937_64 random(11);
  int greedyWins = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<LiveRange> ranges = randomRanges(random);
    int64_t greedyArena = 0, firstFitArena = 0, arena = 0;
    std::vector<int64_t> greedy = packGreedyBySize(ranges, greedyArena);
    ASSERT_EQ(checkPacking(ranges, greedy, greedyArena), "")
        << "trial " << trial;
    packFirstFit(ranges, firstFitArena);
    int64_t breadthArena = 0;
    std::vector<int64_t> breadth = packGreedyByBreadth(ranges, breadthArena);
    ASSERT_EQ(checkPacking(ranges, breadth, breadthArena), "")
        << "trial " << trial;
    std::vector<int64_t> kept = packArena(ranges, arena);
    ASSERT_EQ(arena, std::min({greedyArena, firstFitArena, breadthArena}))
        << "trial " << trial;
    int64_t overBudget = 0;
    ASSERT_EQ(packArena(ranges, overBudget, /*pairBudget=*/0),
              packFirstFit(ranges, firstFitArena));
    ASSERT_EQ(checkPacking(ranges, kept, arena), "") << "trial " << trial;
    greedyWins += greedyArena < firstFitArena;
  }
  EXPECT_GT(greedyWins, 0); // the random shapes include fragmentation
}

TEST(GreedyBySize, FillsTheHoleFirstFitLeaves) {
  // First fit in op order: a at 0, b at 64; c, born once a's 64-byte hole at
  // 0 is free but too small for it, goes above b (128..256). Greedy by size:
  // d at 0, c at 0 too (they are never live together), a at 0, b above c.
  std::vector<LiveRange> ranges = {{0, 1, 64},   // a
                                   {0, 3, 64},   // b
                                   {2, 3, 128},  // c
                                   {4, 5, 192}}; // d
  int64_t firstFitArena = 0, greedyArena = 0;
  packFirstFit(ranges, firstFitArena);
  std::vector<int64_t> greedy = packGreedyBySize(ranges, greedyArena);
  EXPECT_EQ(firstFitArena, 256);
  EXPECT_EQ(greedyArena, 192);
  EXPECT_EQ(greedy, (std::vector<int64_t>{0, 128, 0, 0}));
}

TEST(GreedyByBreadth, ReachesTheLivePeakWhereSizeAndFirstFitDoNot) {
  // Live bytes: 192 at 1, 384 at 2..3, 320 at 4..5, 448 at 6 (b, c, d). By
  // breadth: position 6's ranges first, largest first (b 0, c 192, d 320),
  // then a, live with b only, at 192: 448, the peak. By size (and first fit
  // in op order): a 0, b 192, c 0 (a is gone), then d, live with c at 0 and
  // b at 192, finds only 64 bytes between them and goes above: 512.
  std::vector<LiveRange> ranges = {{1, 3, 192},  // a
                                   {2, 6, 192},  // b
                                   {4, 6, 128},  // c
                                   {6, 6, 128}}; // d
  int64_t firstFitArena = 0, sizeArena = 0, breadthArena = 0, arena = 0;
  packFirstFit(ranges, firstFitArena);
  packGreedyBySize(ranges, sizeArena);
  std::vector<int64_t> breadth = packGreedyByBreadth(ranges, breadthArena);
  EXPECT_EQ(firstFitArena, 512);
  EXPECT_EQ(sizeArena, 512);
  EXPECT_EQ(breadthArena, 448);
  EXPECT_EQ(breadth, (std::vector<int64_t>{192, 0, 192, 320}));
  EXPECT_EQ(packArena(ranges, arena), breadth);
  EXPECT_EQ(arena, 448);
}

TEST(GreedyBySize, OverlappingPairsCountsEachPairFromBothEnds) {
  // a and b live together at 1 (inclusive ends), c with neither: each range
  // with itself, plus (a, b) and (b, a).
  std::vector<LiveRange> ranges = {{0, 1, 8}, {1, 2, 8}, {5, 6, 8}};
  EXPECT_EQ(overlappingPairs(ranges), 5);
}

} // namespace
