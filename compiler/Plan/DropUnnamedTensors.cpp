//===- DropUnnamedTensors.cpp - leave out tensors nothing names -----------===//

#include "cdp/Plan/DropUnnamedTensors.h"

#include "cdp/Plan/ArenaPacking.h"

#include <algorithm>
#include <functional>
#include <vector>

namespace cdp {

namespace {

/// Calls `visit` on every tensor id field of `plan` (not the tensors' own
/// ids): what the renumbering rewrites and the marking reads.
void forEachTensorReference(plan::Plan &plan,
                            const std::function<void(int &)> &visit) {
  auto visitInstruction = [&](plan::Instruction &instruction) {
    for (int &id : *instruction.mutable_inputs())
      visit(id);
    for (int &id : *instruction.mutable_outputs())
      visit(id);
    // A load names the plan input it reads by id.
    if (instruction.op() == "load")
      for (plan::Attribute &a : *instruction.mutable_attributes())
        if (a.name() == "input" && a.value_case() == plan::Attribute::kI) {
          int id = static_cast<int>(a.i());
          visit(id);
          a.set_i(id);
        }
  };
  for (plan::Device &device : *plan.mutable_devices()) {
    for (plan::Instruction &instruction : *device.mutable_instructions())
      visitInstruction(instruction);
    for (plan::Instruction &instruction : *device.mutable_eval_instructions())
      visitInstruction(instruction);
  }
  for (plan::Template &t : *plan.mutable_templates())
    for (plan::Instruction &instruction : *t.mutable_instructions())
      visitInstruction(instruction);
  for (int &id : *plan.mutable_inputs())
    visit(id);
  for (plan::Output &output : *plan.mutable_outputs()) {
    int id = output.tensor();
    visit(id);
    output.set_tensor(id);
  }
  for (int &id : *plan.mutable_applied_gradients())
    visit(id);
  auto visitField = [&](int id, const std::function<void(int)> &set) {
    visit(id);
    set(id);
  };
  visitField(plan.loss(), [&](int id) { plan.set_loss(id); });
  visitField(plan.labels(), [&](int id) { plan.set_labels(id); });
  visitField(plan.scores(), [&](int id) { plan.set_scores(id); });
  if (plan.has_eval_loss())
    visitField(plan.eval_loss(), [&](int id) { plan.set_eval_loss(id); });
  for (plan::Tensor &t : *plan.mutable_tensors())
    if (t.has_previous_version_of())
      visitField(t.previous_version_of(),
                 [&](int id) { t.set_previous_version_of(id); });
}

} // namespace

int dropUnnamedActivations(plan::Plan &plan) {
  int count = plan.tensors_size();
  std::vector<char> named(count, 0);
  forEachTensorReference(plan, [&](int &id) {
    if (id >= 0 && id < count)
      named[id] = 1;
  });
  std::vector<int> newId(count, -1);
  int kept = 0;
  for (int id = 0; id < count; ++id)
    if (named[id] || plan.tensors(id).kind() != plan::ACTIVATION)
      newId[id] = kept++;
  if (kept == count)
    return 0;
  forEachTensorReference(plan, [&](int &id) {
    if (id >= 0 && id < count)
      id = newId[id];
  });
  auto &tensors = *plan.mutable_tensors();
  for (int id = 0; id < count; ++id) {
    if (newId[id] < 0)
      continue;
    tensors.SwapElements(newId[id], id); // newId[id] <= id: already placed
    tensors[newId[id]].set_id(newId[id]);
  }
  tensors.DeleteSubrange(kept, count - kept);
  return count - kept;
}

namespace {

/// The tensors an instruction reads or writes (a load's `input` names a
/// data source, not memory).
template <typename Visit>
void forEachOperand(const plan::Instruction &instruction, Visit visit) {
  for (int id : instruction.inputs())
    visit(id);
  for (int id : instruction.outputs())
    visit(id);
}

/// Whether the device programs or templates of `plan` read or write each
/// tensor while training.
std::vector<char> usedInTraining(const plan::Plan &plan) {
  std::vector<char> used(plan.tensors_size(), 0);
  auto mark = [&](int id) {
    if (id >= 0 && id < plan.tensors_size())
      used[id] = 1;
  };
  for (const plan::Device &device : plan.devices())
    for (const plan::Instruction &instruction : device.instructions())
      forEachOperand(instruction, mark);
  for (const plan::Template &t : plan.templates())
    for (const plan::Instruction &instruction : t.instructions())
      forEachOperand(instruction, mark);
  return used;
}

} // namespace

int64_t packEvaluationArena(plan::Plan &plan) {
  if (plan.devices_size() == 0)
    return 0;
  const auto &stream = plan.devices(0).eval_instructions();
  int64_t last = stream.size();
  std::vector<LiveRange> ranges(plan.tensors_size(), {last, -1, 0});
  for (int64_t position = 0; position < last; ++position)
    forEachOperand(stream[position], [&](int id) {
      if (id < 0 || id >= plan.tensors_size())
        return;
      ranges[id].begin = std::min(ranges[id].begin, position);
      ranges[id].end = std::max(ranges[id].end, position);
    });
  // Filled before the stream runs and read after it: the inputs and labels,
  // the scores and the evaluation loss.
  auto wholeStream = [&](int id) {
    if (id >= 0 && id < plan.tensors_size())
      ranges[id] = {0, last, 0};
  };
  for (int id : plan.inputs())
    wholeStream(id);
  wholeStream(plan.labels());
  wholeStream(plan.scores());
  if (plan.has_eval_loss())
    wholeStream(plan.eval_loss());
  std::vector<char> training = usedInTraining(plan);
  std::vector<int> packed;
  for (const plan::Tensor &t : plan.tensors()) {
    bool arena = t.kind() == plan::ACTIVATION || t.kind() == plan::INPUT;
    if (!arena || !t.has_device() || t.device() != 0 || training[t.id()])
      continue;
    LiveRange &range = ranges[t.id()];
    if (range.end < 0) // named by no instruction: kept in bounds all along
      range = {0, last, 0};
    range.bytes = t.bytes();
    packed.push_back(t.id());
  }
  std::stable_sort(packed.begin(), packed.end(), [&](int a, int b) {
    return ranges[a].begin < ranges[b].begin;
  });
  std::vector<LiveRange> ordered;
  for (int id : packed)
    ordered.push_back(ranges[id]);
  int64_t arenaBytes = 0;
  std::vector<int64_t> offsets = packArena(ordered, arenaBytes);
  for (size_t k = 0; k < packed.size(); ++k)
    plan.mutable_tensors(packed[k])->set_offset(offsets[k]);
  return arenaBytes;
}

} // namespace cdp
