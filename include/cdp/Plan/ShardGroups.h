//===- ShardGroups.h - a ZeRO stage-3 plan's sharded parameters -*- C++ -*-===//
//
// A plan compiled with --zero 3 keeps each stage's parameters as one shard
// per device (a SHARD tensor) and gathers the stage into the arena only
// around the work that reads it (Schedule.shard_groups). The runtime, the
// validator and the report ask here which parameters those are and how a
// group is cut.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_SHARDGROUPS_H
#define CDP_PLAN_SHARDGROUPS_H

#include "cdp/Plan/ShardLayout.h"
#include "cdp/Plan/plan.pb.h"

#include <string>
#include <vector>

namespace cdp::plan {

/// Per plan tensor: 1 where it is a parameter of a shard group (it lives
/// in the arena and holds its stage only while gathered).
std::vector<char> gatheredParameters(const Plan &plan);

/// The group's parameters cut over the plan's devices.
ShardLayout layoutOf(const Plan &plan, const ShardGroup &group);

/// Empty when every shard group is well formed (ids, kinds, the shard's
/// size, the parameters one after another in the arena with the padding
/// behind them); otherwise one line naming the first fault.
std::string checkShardGroups(const Plan &plan);

} // namespace cdp::plan

#endif // CDP_PLAN_SHARDGROUPS_H
