//===- StrategyTest.cpp - the strategy names and traits -------------------===//
//
// Every name parses to its strategy and back; unknown names do not; the
// registry holds each descriptor at its enumerator's index, each with the
// pieces its family needs; the stash rule the partitioner's estimate and
// the emitter share.
//
//===----------------------------------------------------------------------===//

#include "cdp/Schedule/Strategy.h"
#include "cdp/Schedule/Pipeline.h"

#include <gtest/gtest.h>

using namespace cdp;

namespace {

TEST(Strategy, NamesRoundTrip) {
  for (const char *name : {"single", "dp", "cdp", "gpipe", "1f1b", "2bw",
                           "cdp-mp", "laysa", "zb-v"}) {
    std::optional<Strategy> strategy = parseStrategy(name);
    ASSERT_TRUE(strategy) << name;
    EXPECT_STREQ(traitsOf(*strategy).name, name);
  }
  EXPECT_FALSE(parseStrategy("zero"));
  EXPECT_FALSE(parseStrategy("CDP"));
  EXPECT_FALSE(parseStrategy(""));
  EXPECT_EQ(strategyNames(),
            "single, dp, cdp, gpipe, 1f1b, 2bw, cdp-mp, interleaved-1f1b, "
            "zb-h1, laysa and zb-v");
}

TEST(Strategy, RegistryIsInEnumOrderAndComplete) {
  const std::vector<const StrategyTraits *> &all = allStrategies();
  for (size_t i = 0; i < all.size(); ++i) {
    const StrategyTraits &traits = *all[i];
    EXPECT_EQ(static_cast<size_t>(traits.strategy), i) << traits.name;
    EXPECT_EQ(&traitsOf(traits.strategy), &traits) << traits.name;
    EXPECT_EQ(parseStrategy(traits.name), traits.strategy);
    // A pipeline that is not cyclic follows a table; every strategy but
    // single has a cdp-opt pipeline.
    EXPECT_EQ(traits.table != nullptr, traits.pipelined && !traits.cyclic)
        << traits.name;
    EXPECT_EQ(traits.passPipeline != nullptr,
              traits.strategy != Strategy::Single)
        << traits.name;
    EXPECT_GE(traits.stagesPerDevice, 0) << traits.name;
  }
  EXPECT_EQ(strategyNames([](const StrategyTraits &t) { return t.replicable; }),
            "gpipe, 1f1b, 2bw, interleaved-1f1b, zb-h1 and zb-v");
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

// The sets the passes check their strategy against, and the names their
// messages list: what each pass takes follows from the descriptors.
TEST(Strategy, ScopesNameWhatEachPassTakes) {
  EXPECT_EQ(scopeNames(StrategyScope::Replicated, " and "),
            "dp, cdp and laysa");
  EXPECT_EQ(scopeNames(StrategyScope::OrderedPipeline), "gpipe, 1f1b or 2bw");
  EXPECT_EQ(scopeNames(StrategyScope::Pipeline, " and "),
            "gpipe, 1f1b, 2bw, cdp-mp, interleaved-1f1b, zb-h1 and zb-v");
  EXPECT_EQ(scopeNames(StrategyScope::OneStagePerDevice),
            "gpipe, 1f1b, 2bw, cdp-mp or zb-h1");
  EXPECT_TRUE(inScope(StrategyScope::Replicable, Strategy::ZBV));
  EXPECT_FALSE(inScope(StrategyScope::Replicable, Strategy::CDPMP));
  EXPECT_FALSE(inScope(StrategyScope::Pipeline, Strategy::LaySA));
  EXPECT_EQ(
      scopeNames(StrategyScope::LossScaled),
      "single, dp, cdp, gpipe, 1f1b, 2bw, interleaved-1f1b, zb-h1 or zb-v");
  EXPECT_EQ(weightVersions(Strategy::CDPMP), 2);
  EXPECT_TRUE(runsCyclicSlots(Strategy::CDPMP));
  EXPECT_FALSE(runsCyclicSlots(Strategy::TwoBW));
  // ZeRO over a pipeline's replicas: stage 1 only, and not for cdp-mp.
  EXPECT_TRUE(buildsReplicaZero(Strategy::OneFOneB, 1));
  EXPECT_FALSE(buildsReplicaZero(Strategy::OneFOneB, 2));
  EXPECT_FALSE(buildsReplicaZero(Strategy::CDPMP, 1));
  EXPECT_TRUE(buildsReplicaZero(Strategy::CDPMP, 0));
  EXPECT_TRUE(exchangesSparseGradients(Strategy::LaySA));
  EXPECT_FALSE(exchangesSparseGradients(Strategy::DP));
  EXPECT_EQ(stagesPerDevice(Strategy::Interleaved1F1B, 3), 3);
  EXPECT_EQ(stagesPerDevice(Strategy::OneFOneB, 3), 1);
  EXPECT_EQ(checkPipelineShape(Strategy::ZBV, 3, 8, 2),
            "--strategy zb-v places two stages on each device: --stages 3 is "
            "odd");
  EXPECT_EQ(checkPipelineShape(Strategy::TwoBW, 4, 4, 1), "");
  EXPECT_NE(checkPipelineShape(Strategy::TwoBW, 4, 3, 1), "");
  EXPECT_EQ(checkPipelineShape(Strategy::GPipe, 4, 1, 1), "");
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

namespace {

/// PipeDream-2BW's order for stage s of d, written as the paper states
/// it: d - s warm-up forwards, then a forward and a backward in turn, and
/// an update after every m-th backward.
std::vector<cdp::pipeline::StageOp> paperTwoBwOrder(int64_t s, int64_t d,
                                                    int64_t m, int64_t steps) {
  std::vector<cdp::pipeline::StageOp> order;
  int64_t total = m * steps, nextF = 1, nextB = 1;
  for (int64_t i = 0; i < std::min(d - s, total); ++i)
    order.push_back({'F', nextF++});
  while (nextB <= total) {
    if (nextF <= total)
      order.push_back({'F', nextF++});
    order.push_back({'B', nextB});
    if (nextB % m == 0)
      order.push_back({'U', nextB});
    ++nextB;
  }
  return order;
}

} // namespace

// The 2bw step program the plan repeats (with its previous-step work
// skipped in step 0 and drained after the last) runs exactly the paper's
// order, for every stage, depth, micro-batch count m >= d and run length.
TEST(Strategy, TwoBwStepProgramRunsThePapersOrder) {
  for (int64_t d = 1; d <= 5; ++d)
    for (int64_t m = d; m <= 8; ++m)
      for (int64_t steps = 1; steps <= 3; ++steps)
        for (int64_t s = 1; s <= d; ++s) {
          std::vector<cdp::pipeline::StageOp> got =
              cdp::pipeline::unrollStepProgram(
                  cdp::pipeline::twoBwStepProgram(s, d, m), m, steps);
          std::vector<cdp::pipeline::StageOp> want =
              paperTwoBwOrder(s, d, m, steps);
          ASSERT_EQ(got.size(), want.size())
              << "d = " << d << ", m = " << m << ", steps = " << steps
              << ", s = " << s;
          for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_EQ(got[i].kind, want[i].kind) << "op " << i;
            EXPECT_EQ(got[i].microBatch, want[i].microBatch) << "op " << i;
          }
        }
}
