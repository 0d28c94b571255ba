//===- StrategyTest.cpp - the strategy names and traits -------------------===//
//
// Every name parses to its strategy and back; unknown names do not; the
// stash rule the partitioner's estimate and the emitter share.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/Strategy.h"

#include <gtest/gtest.h>

using namespace cdp;

namespace {

TEST(Strategy, NamesRoundTrip) {
  for (const char *name :
       {"single", "dp", "cdp", "gpipe", "1f1b", "2bw", "cdp-mp"}) {
    std::optional<Strategy> strategy = parseStrategy(name);
    ASSERT_TRUE(strategy) << name;
    EXPECT_STREQ(traitsOf(*strategy).name, name);
  }
  EXPECT_FALSE(parseStrategy("zero"));
  EXPECT_FALSE(parseStrategy("CDP"));
  EXPECT_FALSE(parseStrategy(""));
  EXPECT_EQ(strategyNames(), "single, dp, cdp, gpipe, 1f1b, 2bw and cdp-mp");
}

TEST(Strategy, TraitsSeparateTheFamilies) {
  EXPECT_TRUE(traitsOf(Strategy::DP).dataParallel);
  EXPECT_TRUE(traitsOf(Strategy::CDP).cyclic);
  EXPECT_FALSE(traitsOf(Strategy::CDP).pipelined);
  for (Strategy pipeline :
       {Strategy::GPipe, Strategy::OneFOneB, Strategy::TwoBW, Strategy::CDPMP})
    EXPECT_TRUE(traitsOf(pipeline).pipelined);
  EXPECT_EQ(traitsOf(Strategy::TwoBW).weightVersions, 2);
  EXPECT_EQ(traitsOf(Strategy::CDPMP).weightVersions, 2);
  EXPECT_EQ(traitsOf(Strategy::OneFOneB).weightVersions, 1);
  EXPECT_TRUE(traitsOf(Strategy::GPipe).flushes);
  EXPECT_FALSE(traitsOf(Strategy::TwoBW).flushes);
  EXPECT_FALSE(traitsOf(Strategy::CDPMP).replicable);
}

TEST(Strategy, StashSlots) {
  // gpipe keeps the step's m; 1f1b at most d - s + 1 in flight.
  EXPECT_EQ(stashSlots(Strategy::GPipe, 1, 4, 6), 6);
  EXPECT_EQ(stashSlots(Strategy::OneFOneB, 1, 4, 6), 4);
  EXPECT_EQ(stashSlots(Strategy::OneFOneB, 4, 4, 6), 1);
  EXPECT_EQ(stashSlots(Strategy::OneFOneB, 1, 4, 2), 2);
  // 2bw: the smallest divisor of m not below d - s + 1 (4 -> 6, 3 -> 3).
  EXPECT_EQ(stashSlots(Strategy::TwoBW, 1, 4, 6), 6);
  EXPECT_EQ(stashSlots(Strategy::TwoBW, 2, 4, 6), 3);
  EXPECT_EQ(stashSlots(Strategy::TwoBW, 1, 4, 8), 4);
}

} // namespace
