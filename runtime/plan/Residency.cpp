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

/// Per tensor: 1 where `device`'s training instructions read or write it,
/// spelled out or as runs of templates.
std::vector<char> namedInTraining(const Plan &plan, int device) {
  std::vector<char> named(plan.tensors_size(), 0);
  auto mark = [&](int id) {
    if (id >= 0 && id < plan.tensors_size())
      named[id] = 1;
  };
  auto markAll = [&](const Instruction &instruction) {
    for (int id : instruction.inputs())
      mark(id);
    for (int id : instruction.outputs())
      mark(id);
  };
  const Device &stream = plan.devices(device);
  for (const Instruction &instruction : stream.instructions())
    markAll(instruction);
  // Format 4: the runs' templates (persistent tensors have no slot copies,
  // so a template names them as its runs do).
  for (const Run &run : stream.runs())
    if (run.template_() >= 0 && run.template_() < plan.templates_size())
      for (const Instruction &instruction :
           plan.templates(run.template_()).instructions())
        markAll(instruction);
  return named;
}

} // namespace

std::vector<char> persistentOn(const Plan &plan, int device,
                               std::vector<char> *gatheredAfterTraining) {
  std::vector<char> held(plan.tensors_size(), 0);
  if (gatheredAfterTraining)
    gatheredAfterTraining->assign(plan.tensors_size(), 0);
  std::vector<char> gathered = gatheredParameters(plan),
                    elsewhere = ownedElsewhere(plan, device), named;
  bool pipelined = traitsOf(plan).pipelined;
  if (pipelined)
    named = namedInTraining(plan, device);
  for (const Tensor &t : plan.tensors()) {
    int id = t.id();
    if (id < 0 || id >= plan.tensors_size() || inArena(t) || gathered[id] ||
        elsewhere[id])
      continue;
    bool otherStage = pipelined && t.has_device() && t.device() != device &&
                      !named[id] && (device != 0 || gatheredLater(t));
    // A gradient buffer with no home device that none of this device's
    // instructions names (a replicated pipeline's exchange buffers): every
    // device held every stage's, R of each (a 1.3B Llama on 8 stages x 8
    // replicas: 47 GB on each device for 0.9 GB of stage).
    bool unusedGradient =
        pipelined && t.kind() == REDUCED && !t.has_device() && !named[id];
    held[id] = !otherStage && !unusedGradient;
    if (otherStage && device == 0 && gatheredAfterTraining)
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
    blockBytes +=
        (std::max<int64_t>(plan.tensors(id).bytes(), 1) + 63) / 64 * 64;
  }
  return offsets;
}

int64_t allocatedBytes(const Plan &plan, int device) {
  int64_t block = 0;
  persistentOffsets(plan, persistentOn(plan, device), block);
  return plan.devices(device).arena_bytes() + block;
}

} // namespace cdp::plan
