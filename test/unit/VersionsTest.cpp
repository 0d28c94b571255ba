//===- VersionsTest.cpp - dp's and CDP's versions, and the plan form ------===//
//
// The schedule library's answers the passes and the runtime take instead of
// reading a strategy's traits: slot offsets, the version table of each
// rule, CDP-ZeRO, the ZeRO stages built, and each strategy's plan form.
//
//===----------------------------------------------------------------------===//

#include "cdp/Schedule/Versions.h"

#include <gtest/gtest.h>

using namespace cdp;

namespace {

using Rows = std::vector<std::vector<int64_t>>;

TEST(VersionsTest, DataParallelReadsItsOwnStep) {
  std::vector<int64_t> offsets = slotOffsets(Strategy::DP, 2, 4);
  EXPECT_EQ(offsets, std::vector<int64_t>(4, 0));
  VersionTable dp = versionTable(Strategy::DP, "v2", "timing", offsets, 2,
                                 /*afterBackward=*/false);
  EXPECT_EQ(dp.delay, Rows(4, {0, 0}));
  EXPECT_EQ(dp.live, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(dp.idle, std::vector<int64_t>(4, 0));
  EXPECT_EQ(dp.rule, "dp");
}

TEST(VersionsTest, CyclicSlotsStartAUniformDelayApart) {
  // floor(2L·i / N): L = 2, N = 4.
  EXPECT_EQ(slotOffsets(Strategy::CDP, 2, 4),
            (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(slotOffsets(Strategy::CDP, 3, 4),
            (std::vector<int64_t>{0, 1, 3, 4}));
}

TEST(VersionsTest, V1ReadsThePreviousVersionEverywhere) {
  VersionTable v1 = versionTable(Strategy::CDP, "v1", "timing",
                                 slotOffsets(Strategy::CDP, 2, 2), 2, false);
  EXPECT_EQ(v1.delay, Rows(2, {1, 1}));
  EXPECT_EQ(v1.live, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(v1.rule, "v1");
}

TEST(VersionsTest, V2TimingReadsWhatTheLastSlotsReductionMade) {
  // N = L = 2, offsets 0 and 2: slot 0's F_1 (time 0) comes before stage
  // 1's update (the last slot's reduction starts at 2 + 3); its F_2 (time
  // 1) after stage 2's (2 + 2 - 4 = 0 of the previous cycle). Slot 1 reads
  // both fresh, so stage 2, fresh for every slot, keeps one version.
  VersionTable v2 = versionTable(Strategy::CDP, "v2", "timing",
                                 slotOffsets(Strategy::CDP, 2, 2), 2, false);
  EXPECT_EQ(v2.delay, (Rows{{1, 0}, {0, 0}}));
  EXPECT_EQ(v2.live, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(v2.idle, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(v2.rule, "v2-timing");
  // The code table (l >= L - i) reads the same here.
  EXPECT_EQ(versionTable(Strategy::CDP, "v2", "code", {0, 2}, 2, false).rule,
            "v2-code");
}

TEST(VersionsTest, OnlyCyclicClippingReducesAfterTheBackward) {
  EXPECT_TRUE(reducesAfterBackward(Strategy::CDP, /*clips=*/true));
  EXPECT_FALSE(reducesAfterBackward(Strategy::CDP, false));
  EXPECT_FALSE(reducesAfterBackward(Strategy::DP, true));
}

TEST(VersionsTest, ZeroStagesBuiltPerStrategy) {
  for (int64_t zero : {1, 2, 3})
    EXPECT_TRUE(buildsZero(Strategy::DP, zero)) << zero;
  EXPECT_FALSE(buildsZero(Strategy::CDP, 1));
  EXPECT_TRUE(buildsZero(Strategy::CDP, 3));
  EXPECT_FALSE(buildsZero(Strategy::OneFOneB, 3));
  EXPECT_FALSE(buildsZero(Strategy::DP, 4));
  EXPECT_TRUE(isCdpZero(Strategy::CDP, 3));
  EXPECT_FALSE(isCdpZero(Strategy::DP, 3));
  EXPECT_FALSE(isCdpZero(Strategy::CDP, 0));
}

TEST(VersionsTest, EveryStrategyHasOnePlanForm) {
  EXPECT_EQ(planForm(Strategy::Single), PlanForm::Single);
  for (Strategy replicated : {Strategy::DP, Strategy::CDP, Strategy::LaySA})
    EXPECT_EQ(planForm(replicated), PlanForm::Replicated)
        << strategyName(replicated);
  for (const StrategyTraits *traits : allStrategies())
    EXPECT_EQ(planForm(traits->strategy) == PlanForm::Pipeline,
              traits->pipelined)
        << traits->name;
}

} // namespace
