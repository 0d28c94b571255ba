//===- OneFOneB.cpp - 1f1b: PipeDream-Flush -------------------------------===//

#include "Descriptors.h"

#include "cdp/Schedule/ScheduleTable.h"

#include <algorithm>

namespace cdp {

namespace {

pipeline::ScheduleTable oneFOneBTable(int64_t S, int64_t M, int64_t) {
  return pipeline::flushedTable(Strategy::OneFOneB, S, M);
}

/// At most S - s + 1 micro-batches in flight on stage s.
int64_t oneFOneBStash(int64_t s, int64_t S, int64_t M) {
  return std::min(S - s + 1, M);
}

} // namespace

constexpr StrategyTraits kOneFOneBStrategy = [] {
  StrategyTraits traits;
  traits.strategy = Strategy::OneFOneB;
  traits.name = "1f1b";
  traits.help = "PipeDream-Flush";
  traits.passPipeline = "cdp-1f1b";
  traits.summary =
      "PipeDream-Flush: one forward, one backward, flushed every step";
  traits.pipelined = true;
  traits.flushes = true;
  traits.replicable = true;
  traits.ordersStages = true;
  traits.table = oneFOneBTable;
  traits.stash = oneFOneBStash;
  return traits;
}();

} // namespace cdp
