//===- ScheduleTableTest.cpp - pipeline schedules as tables ---------------===//
//
// The strategies' tables against the papers' step lengths (interleaved
// 1F1B: 2VM + 2(D - 1) chunk time steps; ZB-H1: 3M + S - 1 with F, I and W
// one time step each), their checks, stash slots against stashSlots, and
// the CSV form read back into the same table. ZB-V against the order of
// PyTorch's ScheduleZBVZeroBubble, worked by hand from its code.
//
//===----------------------------------------------------------------------===//

#include "cdp/Schedule/ScheduleTable.h"

#include <gtest/gtest.h>

using namespace cdp;
using namespace cdp::pipeline;

namespace {

bool sameActions(const ScheduleTable &a, const ScheduleTable &b) {
  if (a.rows.size() != b.rows.size() || a.deviceOf != b.deviceOf ||
      a.period != b.period || a.rule != b.rule)
    return false;
  for (size_t t = 0; t < a.rows.size(); ++t)
    for (size_t d = 0; d < a.rows[t].size(); ++d)
      if (!(a.rows[t][d] == b.rows[t][d]))
        return false;
  return true;
}

TEST(ScheduleTable, InterleavedStepLength) {
  for (int64_t D : {2, 3, 4})
    for (int64_t V : {1, 2, 3})
      for (int64_t M : {D, 2 * D, 3 * D}) {
        ScheduleTable table = interleavedTable(D, V, M);
        EXPECT_EQ(table.cycle(), 2 * V * M + 2 * (D - 1))
            << "D=" << D << " V=" << V << " M=" << M;
        EXPECT_FALSE(checkTable(table).has_value());
      }
}

TEST(ScheduleTable, ZeroBubbleStepLengthAndStash) {
  for (int64_t S : {2, 3, 4, 6})
    for (int64_t M : {S, S + 1, 2 * S}) {
      ScheduleTable table = zbH1Table(S, M);
      EXPECT_EQ(table.cycle(), 3 * M + S - 1) << "S=" << S << " M=" << M;
      EXPECT_FALSE(checkTable(table).has_value());
      // 1F1B's peak: the first stage's S micro-batches, on every stage.
      for (int64_t s = 1; s <= S; ++s)
        EXPECT_EQ(tableStashSlots(table, s), S);
    }
}

/// Device d's actions in table order, as "1F0 4I0 ...".
std::string deviceOrder(const ScheduleTable &table, int64_t d) {
  std::string text;
  for (const auto &row : table.rows)
    for (const Action &action : row[d])
      text += (text.empty() ? "" : " ") + std::to_string(action.stage) +
              static_cast<char>(action.kind) +
              (action.computes() ? std::to_string(action.microBatch) : "");
  return text;
}

TEST(ScheduleTable, ZeroBubbleVFollowsPyTorchsOrder) {
  // PyTorch's _calculate_single_rank_operations for 2 ranks and 3
  // micro-batches, by hand; stages 1-based (rank 0 holds 1 and 4).
  ScheduleTable table = strategyTable(Strategy::ZBV, 4, 3, 2);
  EXPECT_EQ(table.deviceOf, (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(deviceOrder(table, 0),
            "1F0 1F1 1F2 4F0 4I0 4W0 4F1 4I1 4W1 1I0 1W0 4F2 4I2 4W2 1I1 "
            "1W1 1I2 1W2 1U 4U");
  EXPECT_EQ(deviceOrder(table, 1),
            "2F0 3F0 2F1 3F1 3I0 3W0 2F2 2I0 2W0 3F2 3I1 3W1 2I1 3I2 2I2 "
            "2W1 3W2 2W2 2U 3U");
}

TEST(ScheduleTable, ZeroBubbleVIsCompleteAndKeepsOneFOneBsMemory) {
  for (int64_t D : {1, 2, 3, 4})
    for (int64_t M : {int64_t(1), int64_t(2), D, 2 * D - 1, 2 * D, 3 * D + 1}) {
      ScheduleTable table = strategyTable(Strategy::ZBV, 2 * D, M, 2);
      std::optional<TableFault> fault = checkTable(table);
      EXPECT_FALSE(fault.has_value())
          << "D=" << D << " M=" << M << ": " << fault->message;
      for (int64_t d = 0; d < D; ++d) {
        EXPECT_EQ(table.deviceOf[d], d);
        EXPECT_EQ(table.deviceOf[2 * D - 1 - d], d);
      }
      // Activation memory: device 0, the fullest, stashes 2D + 1
      // micro-batches of its two half-size stages together (1F1B's first
      // device D of whole stages, 2D halves).
      for (int64_t d = 0; d < D; ++d)
        EXPECT_LE(tableStashSlots(table, d + 1) +
                      tableStashSlots(table, 2 * D - d),
                  2 * D + 1)
            << "D=" << D << " M=" << M << " d=" << d;
    }
}

TEST(ScheduleTable, ZeroBubbleVStepLength) {
  // F, I and W of a half-size stage one time step each: with M >= 2D - 1
  // the step lasts 6M + D - 1, half of zb-h1's 2(D - 1) idle time steps on
  // the same model and devices (its stages are twice as long).
  for (int64_t D : {1, 2, 3, 4})
    for (int64_t M : {2 * D - 1, 2 * D, 4 * D + 1}) {
      ScheduleTable table = strategyTable(Strategy::ZBV, 2 * D, M, 2);
      EXPECT_EQ(table.cycle(), 6 * M + D - 1) << "D=" << D << " M=" << M;
    }
}

TEST(ScheduleTable, SlotsMatchTheStrategies) {
  for (Strategy strategy : {Strategy::GPipe, Strategy::OneFOneB})
    for (int64_t S : {1, 2, 4})
      for (int64_t M : {1, 2, 4, 6}) {
        ScheduleTable table = flushedTable(strategy, S, M);
        EXPECT_FALSE(checkTable(table).has_value());
        for (int64_t s = 1; s <= S; ++s)
          EXPECT_EQ(tableStashSlots(table, s), stashSlots(strategy, s, S, M));
      }
  for (int64_t S : {1, 2, 4})
    for (int64_t M : {S, S + 2, 2 * S}) {
      ScheduleTable table = twoBwTable(S, M);
      EXPECT_FALSE(checkTable(table).has_value()) << "S=" << S << " M=" << M;
      for (int64_t s = 1; s <= S; ++s)
        EXPECT_EQ(tableStashSlots(table, s),
                  stashSlots(Strategy::TwoBW, s, S, M));
    }
}

TEST(ScheduleTable, SlotsPerStageAsTheStepProgramSizesThem) {
  for (int64_t S : {1, 3, 8})
    for (int64_t M : {S, 2 * S + 1}) {
      for (Strategy strategy :
           {Strategy::OneFOneB, Strategy::TwoBW, Strategy::ZBH1}) {
        std::vector<int64_t> slots = stashSlotsPerStage(strategy, S, M);
        ScheduleTable table = strategyTable(strategy, S, M, 1);
        ASSERT_EQ(slots.size(), static_cast<size_t>(S + 1));
        for (int64_t s = 1; s <= S; ++s)
          EXPECT_EQ(slots[s], tableStashSlots(table, s))
              << traitsOf(strategy).name << " S=" << S << " M=" << M;
      }
      std::vector<int64_t> cyclic = stashSlotsPerStage(Strategy::CDPMP, S, M);
      for (int64_t s = 1; s <= S; ++s)
        EXPECT_EQ(cyclic[s], stashSlots(Strategy::CDPMP, s, S, M));
    }
}

TEST(ScheduleTable, CsvRoundTrip) {
  std::vector<ScheduleTable> tables = {flushedTable(Strategy::GPipe, 3, 4),
                                       flushedTable(Strategy::OneFOneB, 4, 6),
                                       twoBwTable(4, 4),
                                       interleavedTable(2, 2, 4),
                                       zbH1Table(4, 5),
                                       strategyTable(Strategy::ZBV, 6, 5, 2)};
  for (const ScheduleTable &table : tables) {
    CsvResult read = readScheduleCsv(writeScheduleCsv(table), table.stages,
                                     table.microBatches);
    ASSERT_TRUE(read.table.has_value()) << read.error;
    EXPECT_TRUE(sameActions(table, *read.table));
    EXPECT_EQ(writeScheduleCsv(*read.table), writeScheduleCsv(table));
  }
}

TEST(ScheduleTable, CheckFindsBackwardBeforeForward) {
  ScheduleTable table = flushedTable(Strategy::GPipe, 2, 2);
  // Swap stage 2's F of micro-batch 0 with its B of micro-batch 0.
  for (auto &row : table.rows)
    for (Action &action : row[1])
      if (action.microBatch == 0 && action.computes())
        action.kind = action.kind == ActionKind::Forward ? ActionKind::Backward
                                                         : ActionKind::Forward;
  std::optional<TableFault> fault = checkTable(table);
  ASSERT_TRUE(fault.has_value());
  EXPECT_EQ(fault->device, 1);
  EXPECT_NE(fault->message.find("1B0 needs 1F0"), std::string::npos)
      << fault->message;
}

} // namespace
