//===- ShardGroups.h - a ZeRO stage-3 plan's sharded parameters -*- C++ -*-===//
//
// A plan compiled with --zero 3 keeps each stage's parameters as one shard
// per device (a SHARD tensor) and gathers the stage into the arena only
// around the work that reads it (Schedule.shard_groups). Under CDP-ZeRO
// (cdp --zero 3) a group has an owner, which alone holds the whole stage
// as its shard, and the stage travels point to point in a region tensor. The
// runtime, the validator and the report ask here which parameters those are and
// how a group is cut.
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

/// The group's parameters cut over the plan's devices (CDP-ZeRO's owned
/// groups: one shard, the whole stage).
ShardLayout layoutOf(const Plan &plan, const ShardGroup &group);

/// The devices holding the group's shards, in shard order: its owner
/// alone (CDP-ZeRO), or every device of the plan.
std::vector<int> shardHolders(const Plan &plan, const ShardGroup &group);

/// Empty when every shard group is well formed (ids, kinds, the shard's
/// size, the parameters one after another in the arena with the padding
/// behind them); otherwise one line naming the first fault.
std::string checkShardGroups(const Plan &plan);

} // namespace cdp::plan

#endif // CDP_PLAN_SHARDGROUPS_H
