//===- ShardGroups.cpp - a ZeRO stage-3 plan's sharded parameters ---------===//

#include "cdp/Plan/ShardGroups.h"

namespace cdp::plan {

std::vector<char> gatheredParameters(const Plan &plan) {
  std::vector<char> gathered(plan.tensors_size(), 0);
  for (const ShardGroup &group : plan.schedule().shard_groups())
    for (int id : group.params())
      if (id >= 0 && id < plan.tensors_size())
        gathered[id] = 1;
  return gathered;
}

ShardLayout layoutOf(const Plan &plan, const ShardGroup &group) {
  std::vector<int64_t> sizes;
  for (int id : group.params())
    sizes.push_back(plan.tensors(id).bytes() / 4);
  return ShardLayout(sizes, group.has_owner() ? 1 : plan.devices_size());
}

std::vector<int> shardHolders(const Plan &plan, const ShardGroup &group) {
  if (group.has_owner())
    return {group.owner()};
  std::vector<int> holders(plan.devices_size());
  for (int d = 0; d < plan.devices_size(); ++d)
    holders[d] = d;
  return holders;
}

namespace {

/// CDP-ZeRO: the owner is a device of the plan and alone holds the master
/// copy and the mean gradients, whole; the region covers the parameters.
std::string checkOwned(const Plan &plan, const ShardGroup &group,
                       const std::string &name, const ShardLayout &layout,
                       int64_t end) {
  auto valid = [&](int64_t id) { return id >= 0 && id < plan.tensors_size(); };
  if (group.owner() < 0 || group.owner() >= plan.devices_size())
    return name + " is owned by device " + std::to_string(group.owner()) +
           ", which the plan lacks";
  if (group.padding() != -1)
    return name + " has padding, which an owned stage never has";
  for (int id : {group.shard(), group.mean()})
    if (!valid(id) || plan.tensors(id).device() != group.owner() ||
        plan.tensors(id).bytes() != 4 * layout.totalSize() ||
        plan.tensors(id).kind() != (id == group.shard() ? SHARD : REDUCED))
      return name + ": its master copy and mean gradients are not the " +
             "stage's " + std::to_string(layout.totalSize()) +
             " elements on its owner";
  const Tensor *region =
      valid(group.region()) ? &plan.tensors(group.region()) : nullptr;
  if (!region || region->kind() != ACTIVATION || region->has_device() ||
      region->offset() + region->bytes() != end ||
      region->bytes() != 4 * layout.totalSize())
    return name + ": its region does not cover its parameters";
  return "";
}

std::string checkGroup(const Plan &plan, const ShardGroup &group,
                       std::vector<char> &seen) {
  std::string name = "shard group of stage " + std::to_string(group.stage());
  auto valid = [&](int64_t id) { return id >= 0 && id < plan.tensors_size(); };
  if (group.params().empty())
    return name + " has no parameters";
  int64_t end = -1;
  for (int id : group.params()) {
    if (!valid(id) || seen[id])
      return name + " names tensor " + std::to_string(id) +
             ", which the plan lacks or another group holds";
    seen[id] = 1;
    const Tensor &t = plan.tensors(id);
    if (t.kind() != PARAM || t.dtype() != F32 || t.has_device())
      return name + " holds '" + t.name() +
             "', not a float32 parameter of every device";
    if (end >= 0 && t.offset() != end)
      return name + ": '" + t.name() +
             "' does not follow the previous parameter in the arena";
    end = t.offset() + t.bytes();
  }
  ShardLayout layout = layoutOf(plan, group);
  if (!valid(group.shard()) || plan.tensors(group.shard()).kind() != SHARD ||
      plan.tensors(group.shard()).bytes() != 4 * layout.shardSize())
    return name + ": its shard is not a SHARD tensor of " +
           std::to_string(layout.shardSize()) + " elements";
  if (group.has_owner())
    return checkOwned(plan, group, name, layout, end);
  if (layout.padding() == 0)
    return group.padding() == -1
               ? ""
               : name + " has padding where its shards are equal";
  if (!valid(group.padding()) ||
      plan.tensors(group.padding()).kind() != ACTIVATION ||
      plan.tensors(group.padding()).offset() != end ||
      plan.tensors(group.padding()).bytes() != 4 * layout.padding())
    return name + ": its padding of " + std::to_string(layout.padding()) +
           " elements does not follow its parameters in the arena";
  return "";
}

} // namespace

std::string checkShardGroups(const Plan &plan) {
  std::vector<char> seen(plan.tensors_size(), 0), shards(plan.tensors_size());
  for (const ShardGroup &group : plan.schedule().shard_groups()) {
    if (std::string problem = checkGroup(plan, group, seen); !problem.empty())
      return "the plan's " + problem;
    shards[group.shard()] = 1;
  }
  for (int id = 0; id < plan.tensors_size(); ++id)
    if (plan.tensors(id).kind() == SHARD && !shards[id])
      return "the plan's tensor " + std::to_string(id) +
             " is a shard no shard group names";
  return "";
}

} // namespace cdp::plan
