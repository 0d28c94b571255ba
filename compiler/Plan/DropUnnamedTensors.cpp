//===- DropUnnamedTensors.cpp - leave out tensors nothing names -----------===//

#include "cdp/Plan/DropUnnamedTensors.h"

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

} // namespace cdp
