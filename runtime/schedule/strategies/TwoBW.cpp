//===- TwoBW.cpp - 2bw: PipeDream-2BW -------------------------------------===//
//
// 1F1B without a flush on two weight versions: a step's forwards read the
// weights of two updates ago (docs/strategies/2bw.md).
//
//===----------------------------------------------------------------------===//

#include "Descriptors.h"

#include "cdp/Schedule/Pipeline.h"
#include "cdp/Schedule/ScheduleTable.h"

namespace cdp {

namespace pipeline {

ScheduleTable twoBwTable(int64_t S, int64_t M) {
  ScheduleTable table(S, S, M, WeightRule::OneStale);
  // Every stage's program repeats every 2M time steps; stage s's runs one
  // time step after stage s - 1's, so that each forward follows the
  // previous stage's and each backward the next stage's.
  table.period = 2 * M;
  for (int64_t s = 1; s <= S; ++s) {
    table.deviceOf[s - 1] = s - 1;
    for (const StepEntry &entry : twoBwStepProgram(s, S, M))
      table.add(entry.time + s - 1,
                {s, static_cast<ActionKind>(entry.kind),
                 entry.kind == 'U' ? 0 : entry.k + entry.stepRel * M});
  }
  return table;
}

} // namespace pipeline

namespace {

pipeline::ScheduleTable twoBwTableOf(int64_t S, int64_t M, int64_t) {
  return pipeline::twoBwTable(S, M);
}

/// A backward may run in the next step's program: the slot of micro-batch
/// k must be k mod slots in every step.
int64_t twoBwStash(int64_t s, int64_t S, int64_t M) {
  int64_t slots = std::min(S - s + 1, M);
  while (M % slots != 0)
    ++slots;
  return slots;
}

std::string twoBwShape(int64_t S, int64_t M, int64_t) {
  if (M >= S)
    return "";
  return "--strategy 2bw needs at least as many micro-batches as stages "
         "(m >= d): got --micro-batches " +
         std::to_string(M) + " for " + std::to_string(S) + " stages";
}

} // namespace

constexpr StrategyTraits kTwoBWStrategy = [] {
  StrategyTraits traits;
  traits.strategy = Strategy::TwoBW;
  traits.name = "2bw";
  traits.help = "PipeDream-2BW";
  traits.passPipeline = "cdp-2bw";
  traits.summary = "PipeDream-2BW: 1F1B without a flush on two weight versions";
  traits.pipelined = true;
  traits.weightVersions = 2;
  traits.replicable = true;
  traits.ordersStages = true;
  traits.autoPlans = true;
  traits.table = twoBwTableOf;
  traits.stash = twoBwStash;
  traits.checkShape = twoBwShape;
  return traits;
}();

} // namespace cdp
