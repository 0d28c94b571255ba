//===- PlanInstantiate.cpp - format 4's templates and runs, spelled out ---===//

#include "cdp/Plan/PlanInstantiate.h"

#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/SpelledPlan.h"

#include <string_view>

namespace cdp::plan {

namespace {

/// The most stash slots a tensor may have: a step's micro-batches, which
/// plans keep below 2^20.
constexpr int kMostSlots = 1 << 20;

std::string runName(int device, int index) {
  return "device " + std::to_string(device) + " run " + std::to_string(index);
}

/// The slots every slot tensor a template names has (the fewest; any
/// number where it names none: its runs' slots change nothing).
int slotsNamed(const Plan &plan, const Template &t) {
  int fewest = kMostSlots;
  auto visit = [&](int id) {
    if (id >= 0 && id < plan.tensors_size() && plan.tensors(id).slots() > 1)
      fewest = std::min(fewest, plan.tensors(id).slots());
  };
  for (const Instruction &instruction : t.instructions()) {
    for (int id : instruction.inputs())
      visit(id);
    for (int id : instruction.outputs())
      visit(id);
  }
  return fewest;
}

} // namespace

std::string checkRuns(const Plan &plan, int64_t most) {
  int64_t copies = 0;
  for (int id = 0; id < plan.tensors_size(); ++id) {
    const Tensor &t = plan.tensors(id);
    if (t.id() != id)
      return "plan tensor " + std::to_string(id) + " has id " +
             std::to_string(t.id());
    if (t.slots() < 0 || t.slots() > kMostSlots || t.slot_stride() < 0)
      return "tensor " + std::to_string(t.id()) + " has " +
             std::to_string(t.slots()) + " stash slots " + "of stride " +
             std::to_string(t.slot_stride());
    if (t.slots() > 1 && t.kind() != ACTIVATION)
      return "tensor " + std::to_string(t.id()) +
             " has stash slots but is no activation";
    copies += std::max(t.slots() - 1, 0);
  }
  if (copies > most)
    return "the plan's stash slots make " + std::to_string(copies) +
           " tensors, more than cdp-run instantiates";
  std::vector<int> templateSlots;
  for (const Template &t : plan.templates())
    templateSlots.push_back(slotsNamed(plan, t));
  int64_t instructions = 0;
  for (int d = 0; d < plan.devices_size(); ++d) {
    const Device &device = plan.devices(d);
    if (device.runs_size() && device.instructions_size())
      return "device " + std::to_string(d) + " has both runs and instructions";
    for (int r = 0; r < device.runs_size(); ++r) {
      const Run &run = device.runs(r);
      if (run.template_() < 0 || run.template_() >= plan.templates_size())
        return runName(d, r) + " names template " +
               std::to_string(run.template_()) + ", and the plan has " +
               std::to_string(plan.templates_size());
      // What instantiation adds to a message's micro-batch and peer: within
      // the tags' bounds, so that no sum overflows.
      auto beyond = [](int64_t shift) {
        return shift < -kMostTagField || shift > kMostTagField;
      };
      if (beyond(run.message_batch()) || beyond(run.peer_offset()))
        return runName(d, r) + " shifts messages by micro-batch " +
               std::to_string(run.message_batch()) + " and peer " +
               std::to_string(run.peer_offset()) + ", beyond " +
               std::to_string(kMostTagField);
      if (run.slot() < 0 || run.slot() >= templateSlots[run.template_()])
        return runName(d, r) + " names stash slot " +
               std::to_string(run.slot()) + ", and its tensors have " +
               std::to_string(templateSlots[run.template_()]);
      instructions += plan.templates(run.template_()).instructions_size();
      if (instructions > most)
        return "the plan's runs make more than " + std::to_string(most) +
               " instructions, more than cdp-run instantiates";
    }
  }
  return "";
}

std::vector<std::vector<int>> slotCopyIds(const Plan &plan) {
  std::vector<std::vector<int>> slotIds(plan.tensors_size());
  int next = plan.tensors_size();
  for (const Tensor &t : plan.tensors()) {
    if (t.slots() <= 1)
      continue;
    std::vector<int> &ids = slotIds[t.id()];
    ids.push_back(t.id());
    for (int k = 1; k < t.slots(); ++k)
      ids.push_back(next++);
  }
  return slotIds;
}

void shiftByRun(Instruction &instruction, const Run &run, int sign) {
  instruction.set_time_step(instruction.time_step() + sign * run.time_step());
  instruction.set_micro_batch(instruction.micro_batch() +
                              sign * run.micro_batch());
  bool message = carriesMessageBatch(instruction);
  bool peered = carriesPeer(instruction);
  for (Attribute &a : *instruction.mutable_attributes()) {
    if (message && a.name() == "micro_batch")
      a.set_i(a.i() + sign * run.message_batch());
    else if (peered && a.name() == "peer")
      a.set_i(a.i() + sign * run.peer_offset());
    else if (a.name() == "step_micro_batch")
      a.set_i(a.i() + sign * run.step_micro_batch());
  }
}

void instantiateInstruction(const Instruction &instruction, const Run &run,
                            const std::vector<std::vector<int>> &slotIds,
                            Instruction &out) {
  out = instruction;
  shiftByRun(out, run, +1);
  for (int &id : *out.mutable_inputs())
    id = idInSlot(slotIds, id, run.slot());
  for (int &id : *out.mutable_outputs())
    id = idInSlot(slotIds, id, run.slot());
}

void instantiate(Plan &plan) {
  std::vector<std::vector<int>> slotIds = slotCopyIds(plan);
  int original = plan.tensors_size();
  for (int id = 0; id < original; ++id) {
    if (slotIds[id].empty())
      continue;
    Tensor *base = plan.mutable_tensors(id);
    int slots = base->slots();
    int64_t stride = base->slot_stride();
    base->clear_slots();
    base->clear_slot_stride();
    for (int k = 1; k < slots; ++k) {
      Tensor *copy = plan.add_tensors();
      *copy = plan.tensors(id); // add_tensors may move nothing: elements stay
      copy->set_id(slotIds[id][k]);
      copy->set_offset(copy->offset() + k * stride);
    }
  }
  for (Device &device : *plan.mutable_devices()) {
    if (device.runs().empty())
      continue;
    auto &stream = *device.mutable_instructions();
    for (const Run &run : device.runs())
      for (const Instruction &instruction :
           plan.templates(run.template_()).instructions())
        instantiateInstruction(instruction, run, slotIds, *stream.Add());
    device.clear_runs();
  }
  plan.clear_templates();
}

bool hasRuns(const Plan &plan) {
  for (const Device &device : plan.devices())
    if (!device.runs().empty())
      return true;
  return false;
}

} // namespace cdp::plan
