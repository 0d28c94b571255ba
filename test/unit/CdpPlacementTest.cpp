//===- CdpPlacementTest.cpp - cdp-mp's devices per stage ------------------===//
//
// The per-stage device counts of algorithms.md 2.5's table (column "GPUs/
// stage CDP+MP"), that no device of a stage runs two ops at one time step
// of CDP's cycle, and that a stage has no more devices than its most ops
// at one time step.
//
//===----------------------------------------------------------------------===//

#include "cdp/Schedule/Pipeline.h"

#include <gtest/gtest.h>

#include <set>

using cdp::pipeline::cdpCodeTableTooEarly;
using cdp::pipeline::cdpStageDevices;

namespace {

std::vector<int64_t> counts(int64_t L, int64_t N) {
  std::vector<int64_t> result;
  for (int64_t s = 1; s <= L; ++s) {
    std::vector<int64_t> device = cdpStageDevices(s, L, N);
    result.push_back(*std::max_element(device.begin(), device.end()) + 1);
  }
  return result;
}

TEST(CdpPlacement, MatchesTheSpecTable) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(counts(4, 1), (V{1, 1, 1, 1}));
  EXPECT_EQ(counts(4, 2), (V{1, 1, 1, 1}));
  EXPECT_EQ(counts(4, 3), (V{1, 2, 2, 1}));
  EXPECT_EQ(counts(4, 4), (V{1, 1, 1, 1}));
  EXPECT_EQ(counts(4, 5), (V{2, 2, 2, 2}));
  EXPECT_EQ(counts(4, 6), (V{2, 2, 2, 2}));
  EXPECT_EQ(counts(4, 8), (V{2, 2, 2, 2}));
  EXPECT_EQ(counts(4, 16), (V{4, 4, 4, 4}));
  EXPECT_EQ(counts(3, 3), (V{1, 1, 1}));
  EXPECT_EQ(counts(8, 4), (V{1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(counts(8, 8), (V{1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(counts(8, 16), (V{2, 2, 2, 2, 2, 2, 2, 2}));
  EXPECT_EQ(counts(6, 4), (V{1, 2, 1, 1, 2, 1}));
  // L | N: N devices (algorithms.md 2.6, "checked up to N = 4L"), here 16L.
  EXPECT_EQ(counts(4, 64), (V{16, 16, 16, 16}));
}

TEST(CdpPlacement, NoDeviceRunsTwoOpsAtOnceAndNoneIsSpare) {
  for (int64_t L : {2, 3, 4, 5, 6, 8, 16})
    for (int64_t N = 1; N <= 8 * L; ++N)
      for (int64_t s = 1; s <= L; ++s) {
        std::vector<int64_t> device = cdpStageDevices(s, L, N);
        // As many devices as the most ops at one time step (c_l).
        std::vector<int64_t> load(2 * L, 0);
        for (int64_t j = 0; j < N; ++j) {
          int64_t start = 2 * L * j / N;
          ++load[(start + s - 1) % (2 * L)];
          ++load[(start + 2 * L - s) % (2 * L)];
        }
        EXPECT_EQ(*std::max_element(device.begin(), device.end()) + 1,
                  *std::max_element(load.begin(), load.end()))
            << "L=" << L << " N=" << N << " s=" << s;
        std::set<std::pair<int64_t, int64_t>> busy; // (device, time step)
        for (int64_t j = 0; j < N; ++j) {
          int64_t start = 2 * L * j / N;
          EXPECT_TRUE(
              busy.insert({device[j], (start + s - 1) % (2 * L)}).second)
              << "L=" << L << " N=" << N << " s=" << s << " slot " << j;
          EXPECT_TRUE(
              busy.insert({device[j], (start + 2 * L - s) % (2 * L)}).second)
              << "L=" << L << " N=" << N << " s=" << s << " slot " << j;
        }
      }
}

} // namespace

TEST(CdpPlacement, CodeTableAgreesWithTheTimingTableOnlyWhereItMay) {
  // N = L: the tables agree.
  for (int64_t L = 1; L <= 6; ++L)
    EXPECT_EQ(cdpCodeTableTooEarly(L, L),
              std::make_pair(int64_t{-1}, int64_t{-1}))
        << "L = " << L;
  // N = 8 on L = 4: slot 0's F_4 (time 3) precedes stage 4's update (after
  // the last slot's B_4 at s_7 + 4 = 11), yet the code table says fresh.
  EXPECT_EQ(cdpCodeTableTooEarly(4, 8), std::make_pair(int64_t{0}, int64_t{4}));
}

TEST(CdpPlacement, StashSlotsAreTheMostMicroBatchesOneDeviceRuns) {
  for (int64_t L = 1; L <= 5; ++L)
    for (int64_t N = 1; N <= 10; ++N)
      for (int64_t s = 1; s <= L; ++s) {
        std::vector<int64_t> device = cdpStageDevices(s, L, N);
        std::vector<int64_t> runs(N, 0);
        for (int64_t c : device)
          ++runs[c];
        EXPECT_EQ(cdp::stashSlots(cdp::Strategy::CDPMP, s, L, N),
                  *std::max_element(runs.begin(), runs.end()))
            << "L = " << L << ", N = " << N << ", s = " << s;
      }
  // S = N = 4: one device per stage runs all four slots.
  EXPECT_EQ(cdp::stashSlots(cdp::Strategy::CDPMP, 4, 4, 4), 4);
}
