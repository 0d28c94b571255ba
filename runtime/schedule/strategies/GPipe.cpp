//===- GPipe.cpp - gpipe: all forwards, then all backwards ----------------===//

#include "Descriptors.h"

#include "cdp/Schedule/ScheduleTable.h"

namespace cdp {

namespace {

pipeline::ScheduleTable gpipeTable(int64_t S, int64_t M, int64_t) {
  return pipeline::flushedTable(Strategy::GPipe, S, M);
}

/// Every micro-batch's activations wait for the backwards.
int64_t gpipeStash(int64_t, int64_t, int64_t M) { return M; }

} // namespace

constexpr StrategyTraits kGPipeStrategy = [] {
  StrategyTraits traits;
  traits.strategy = Strategy::GPipe;
  traits.name = "gpipe";
  traits.passPipeline = "cdp-gpipe";
  traits.summary = "GPipe: all forwards, then all backwards, then the update";
  traits.pipelined = true;
  traits.flushes = true;
  traits.replicable = true;
  traits.ordersStages = true;
  traits.table = gpipeTable;
  traits.stash = gpipeStash;
  return traits;
}();

} // namespace cdp
