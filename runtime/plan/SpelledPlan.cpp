//===- SpelledPlan.cpp - device programs as the analyses read them -------===//
//===//

#include "cdp/Plan/SpelledPlan.h"

#include "cdp/Plan/PlanInstantiate.h"

#include <string_view>

namespace cdp::plan {

bool carriesMessageBatch(const Instruction &instruction) {
  std::string_view op = instruction.op();
  return op == "load" || op == "send" || op == "recv";
}

bool carriesPeer(const Instruction &instruction) {
  std::string_view op = instruction.op();
  return op == "send" || op == "recv";
}

SpelledPlan::SpelledPlan(const Plan &plan, const std::function<bool(int)> &keep,
                         const std::function<bool(const Instruction &)> &only)
    : source(&plan), programs(plan.devices_size()), ids(plan.devices_size()) {
  // Per template, its instructions `only` accepts (all without it).
  std::vector<std::vector<const Instruction *>> kept(plan.templates_size());
  for (int t = 0; t < plan.templates_size(); ++t)
    for (const Instruction &instruction : plan.templates(t).instructions())
      if (!only || only(instruction))
        kept[t].push_back(&instruction);
  std::vector<std::vector<int>> slotIds = slotCopyIds(plan);
  originalOf.resize(plan.tensors_size());
  for (int id = 0; id < plan.tensors_size(); ++id)
    originalOf[id] = id;
  for (int id = 0; id < plan.tensors_size(); ++id)
    for (size_t k = 1; k < slotIds[id].size(); ++k)
      originalOf.push_back(id); // copies are numbered in this order
  for (int d = 0; d < plan.devices_size(); ++d) {
    if (keep && !keep(d))
      continue;
    const Device &device = plan.devices(d);
    std::vector<SpelledInstruction> &program = programs[d];
    std::vector<int> &deviceIds = ids[d];
    size_t length = device.instructions_size();
    for (const Run &run : device.runs())
      length += kept[run.template_()].size();
    program.reserve(length);
    auto add = [&](const Instruction &instruction, const Run *run) {
      SpelledInstruction spelled;
      spelled.source = &instruction;
      spelled.timeStep = instruction.time_step();
      spelled.microBatch = instruction.micro_batch();
      spelled.firstId = deviceIds.size();
      spelled.inputs = instruction.inputs_size();
      spelled.outputs = instruction.outputs_size();
      auto name = [&](int id) {
        deviceIds.push_back(run ? idInSlot(slotIds, id, run->slot()) : id);
      };
      for (int id : instruction.inputs())
        name(id);
      for (int id : instruction.outputs())
        name(id);
      if (run) {
        spelled.timeStep += run->time_step();
        spelled.microBatch += run->micro_batch();
        if (carriesMessageBatch(instruction))
          spelled.messageBatch = run->message_batch();
        if (carriesPeer(instruction))
          spelled.peerOffset = run->peer_offset();
      }
      program.push_back(spelled);
    };
    for (const Instruction &instruction : device.instructions())
      if (!only || only(instruction))
        add(instruction, nullptr);
    for (const Run &run : device.runs())
      for (const Instruction *instruction : kept[run.template_()])
        add(*instruction, &run);
  }
}

IdRange SpelledPlan::inputs(int device,
                            const SpelledInstruction &instruction) const {
  const int *first = ids[device].data() + instruction.firstId;
  return {first, first + instruction.inputs};
}

IdRange SpelledPlan::outputs(int device,
                             const SpelledInstruction &instruction) const {
  const int *first =
      ids[device].data() + instruction.firstId + instruction.inputs;
  return {first, first + instruction.outputs};
}

} // namespace cdp::plan
