//===- Residency.cpp - what a device allocates at load --------------------===//

#include "cdp/Plan/Residency.h"

#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/ShardGroups.h"

#include <algorithm>

namespace cdp::plan {

namespace {

bool inArena(const Tensor &t) {
  return t.kind() == ACTIVATION || t.kind() == INPUT;
}

/// What gatherOnDeviceZero brings to device 0 after training.
bool gatheredLater(const Tensor &t) {
  return t.kind() == PARAM || t.kind() == BUFFER || t.kind() == REDUCED;
}

/// Calls `visit` with each tensor id `device`'s training instructions read
/// or write, spelled out or as runs of templates (each template once;
/// persistent tensors have no slot copies, so a template names them as its
/// runs do). Ids may repeat.
template <typename Visit>
void forEachNamedInTraining(const Plan &plan, int device, Visit visit) {
  auto visitAll = [&](const Instruction &instruction) {
    for (int id : instruction.inputs())
      if (id >= 0 && id < plan.tensors_size())
        visit(id);
    for (int id : instruction.outputs())
      if (id >= 0 && id < plan.tensors_size())
        visit(id);
  };
  const Device &stream = plan.devices(device);
  for (const Instruction &instruction : stream.instructions())
    visitAll(instruction);
  std::vector<int> templates;
  for (const Run &run : stream.runs())
    if (run.template_() >= 0 && run.template_() < plan.templates_size())
      templates.push_back(run.template_());
  std::sort(templates.begin(), templates.end());
  templates.erase(std::unique(templates.begin(), templates.end()),
                  templates.end());
  for (int t : templates)
    for (const Instruction &instruction : plan.templates(t).instructions())
      visitAll(instruction);
}

/// Who holds each persistent tensor, decided once per plan so that asking
/// for every device stays linear in the plan (the report asks for each of
/// 1,008 devices of a replicated pipeline).
enum class Holder : int8_t {
  kNone,  ///< arena tensors, ZeRO stage 3's gathered parameters
  kEvery, ///< every device
  kOwner, ///< CDP-ZeRO: the stage's owner alone (master copy, mean)
  kStage, ///< pipelines: its device, and any device naming it; device 0
          ///< after training (parameters, buffers, accumulators)
  kNamed  ///< pipelines: a replicated pipeline's exchange buffer, held
          ///< where it is named only
};

struct HolderTable {
  std::vector<Holder> holder;
  std::vector<int> device;      ///< kOwner: the owner; kStage: its device
  std::vector<int> conditional; ///< ids whose holding depends on the device
  /// Whether any depends on the device's instructions naming it (pipelines'
  /// tensors; not dp's, cdp's or CDP-ZeRO's owners').
  bool byName = false;
};

HolderTable holdersOf(const Plan &plan) {
  int tensors = plan.tensors_size();
  HolderTable table{std::vector<Holder>(tensors, Holder::kEvery),
                    std::vector<int>(tensors, -1),
                    {}};
  std::vector<char> gathered = gatheredParameters(plan);
  for (const ShardGroup &group : plan.schedule().shard_groups())
    if (group.has_owner())
      for (int id : {group.shard(), group.mean()})
        if (id >= 0 && id < tensors) {
          table.holder[id] = Holder::kOwner;
          table.device[id] = group.owner();
        }
  bool pipelined = isPipeline(plan);
  for (int id = 0; id < tensors; ++id) {
    const Tensor &t = plan.tensors(id);
    Holder &holder = table.holder[id];
    if (t.id() != id || inArena(t) || gathered[id])
      holder = Holder::kNone;
    else if (holder == Holder::kOwner)
      ;
    else if (pipelined && t.has_device())
      holder = Holder::kStage, table.device[id] = t.device();
    // A gradient buffer with no home device that none of a device's
    // instructions names (a replicated pipeline's exchange buffers): every
    // device held every stage's, R of each (a 1.3B Llama on 8 stages x 8
    // replicas: 47 GB on each device for 0.9 GB of stage).
    else if (pipelined && t.kind() == REDUCED)
      holder = Holder::kNamed;
    if (holder != Holder::kNone && holder != Holder::kEvery)
      table.conditional.push_back(id);
    table.byName |= holder == Holder::kStage || holder == Holder::kNamed;
  }
  return table;
}

/// Whether `device` holds conditional tensor `id` during training, and
/// whether device 0 takes it only after training (`gatheredLater`).
bool heldOn(const Plan &plan, const HolderTable &table, int id, int device,
            bool named, bool &takenAfterTraining) {
  takenAfterTraining = false;
  int home = table.device[id];
  switch (table.holder[id]) {
  case Holder::kOwner:
    return home == device;
  case Holder::kStage:
    if (home == device || named)
      return true;
    if (device != 0)
      return false;
    takenAfterTraining = gatheredLater(plan.tensors(id));
    return !takenAfterTraining;
  case Holder::kNamed:
    return named;
  default:
    return table.holder[id] == Holder::kEvery;
  }
}

int64_t blockPiece(const Tensor &t) {
  return (std::max<int64_t>(t.bytes(), 1) + 63) / 64 * 64;
}

} // namespace

std::vector<char> persistentOn(const Plan &plan, int device,
                               std::vector<char> *gatheredAfterTraining) {
  int tensors = plan.tensors_size();
  HolderTable table = holdersOf(plan);
  std::vector<char> held(tensors, 0), named(tensors, 0);
  if (gatheredAfterTraining)
    gatheredAfterTraining->assign(tensors, 0);
  if (table.byName)
    forEachNamedInTraining(plan, device, [&](int id) { named[id] = 1; });
  for (int id = 0; id < tensors; ++id) {
    bool later = false;
    held[id] = heldOn(plan, table, id, device, named[id], later);
    if (later && gatheredAfterTraining)
      (*gatheredAfterTraining)[id] = 1;
  }
  return held;
}

std::vector<int64_t> persistentOffsets(const Plan &plan,
                                       const std::vector<char> &held,
                                       int64_t &blockBytes) {
  std::vector<int64_t> offsets(plan.tensors_size(), -1);
  blockBytes = 0;
  for (int id = 0; id < plan.tensors_size(); ++id) {
    if (!held[id])
      continue;
    offsets[id] = blockBytes;
    blockBytes += blockPiece(plan.tensors(id));
  }
  return offsets;
}

int64_t allocatedBytes(const Plan &plan, int device) {
  int64_t block = 0;
  persistentOffsets(plan, persistentOn(plan, device), block);
  return plan.devices(device).arena_bytes() + block;
}

std::vector<int64_t> allocatedBytesPerDevice(const Plan &plan) {
  HolderTable table = holdersOf(plan);
  int64_t everywhere = 0;
  for (int id = 0; id < plan.tensors_size(); ++id)
    if (table.holder[id] == Holder::kEvery)
      everywhere += blockPiece(plan.tensors(id));
  // Which device last named a tensor: no clearing between devices.
  std::vector<int> namedBy(plan.tensors_size(), -1);
  std::vector<int64_t> bytes(plan.devices_size());
  for (int d = 0; d < plan.devices_size(); ++d) {
    if (table.byName)
      forEachNamedInTraining(plan, d, [&](int id) { namedBy[id] = d; });
    int64_t block = everywhere;
    for (int id : table.conditional) {
      bool later = false;
      if (heldOn(plan, table, id, d, namedBy[id] == d, later))
        block += blockPiece(plan.tensors(id));
    }
    bytes[d] = plan.devices(d).arena_bytes() + block;
  }
  return bytes;
}

} // namespace cdp::plan
