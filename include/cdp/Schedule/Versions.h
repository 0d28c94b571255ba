//===- Versions.h - the weight versions CDP's slots read --------*- C++ -*-===//
//
// The data-parallel strategies' schedule, MLIR-free: where each device's
// slot starts in the cycle of 2L time steps and which version of each
// stage's weights it reads (dp: the step's own; CDP-v1: the previous one;
// CDP-v2: the newest its start allows, by the timing or the code table,
// docs/strategies/cdp.md). cdp-build-schedule and cdp-delay-updates write
// what these return into the IR.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_SCHEDULE_VERSIONS_H
#define CDP_SCHEDULE_VERSIONS_H

#include "cdp/Schedule/Strategy.h"

#include <cstdint>
#include <string>
#include <vector>

namespace cdp {

/// Each of N devices' start time step with L stages: 0 for all under dp,
/// CDP's uniform delay floor(2L·i / N) under a cyclic strategy.
std::vector<int64_t> slotOffsets(Strategy strategy, int64_t L, int64_t N);

/// Whether the slots hand their gradients to the reductions after the whole
/// backward instead of after each B_l: under a cyclic strategy a model that
/// `clips` clips each device's own gradient by its global norm, which needs
/// every stage's gradient (dp clips the means and reduces as usual).
bool reducesAfterBackward(Strategy strategy, bool clips);

/// CDP-ZeRO: a cyclic strategy under ZeRO stage 3, whose model states move
/// point to point along the slots' chain (its own program).
bool isCdpZero(Strategy strategy, int64_t zero);

/// What the strategy's slots read, and what that costs.
struct VersionTable {
  /// delay[i][l - 1]: slot i reads stage l's weights of step t - delay.
  std::vector<std::vector<int64_t>> delay;
  /// Time steps each slot waits for a version not made yet (added to its
  /// offset; the code table with N != L can ask for one).
  std::vector<int64_t> idle;
  /// Versions of each stage alive at once (2 where a slot reads the
  /// previous one; 1 where v2 reads every slot fresh, updated in place).
  std::vector<int64_t> live;
  /// The rule's name in the plan: dp, v1, v2-timing or v2-code.
  std::string rule;
};

/// The version table of `strategy`'s slots starting at `offsets`, under
/// CDP's `rule` (v1 or v2) and v2's `table` (timing or code); reductions
/// after each B_l or, with `afterBackward`, after the whole backward.
VersionTable versionTable(Strategy strategy, const std::string &rule,
                          const std::string &table,
                          const std::vector<int64_t> &offsets, int64_t L,
                          bool afterBackward);

} // namespace cdp

#endif // CDP_SCHEDULE_VERSIONS_H
