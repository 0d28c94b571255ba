//===- SparseExchange.cpp - laysa's tensors and instructions --------------===//

#include "SparseExchange.h"

#include "cdp/Plan/PlanIO.h"

#include <algorithm>
#include <string>

namespace cdp::sparse {

namespace {

void setText(plan::Instruction *instruction, const char *name,
             const std::string &value) {
  plan::Attribute *a = instruction->add_attributes();
  a->set_name(name);
  a->set_s(value);
}

int addTensor(plan::Plan &plan, const std::string &name, plan::DType dtype,
              plan::TensorKind kind, int64_t elements) {
  plan::Tensor *t = plan.add_tensors();
  t->set_id(plan.tensors_size() - 1);
  t->set_name(name);
  t->set_dtype(dtype);
  t->set_kind(kind);
  t->add_shape(elements);
  t->set_bytes(elements * 4); // float32 and int32
  return t->id();
}

/// The stage's selection sizes: values (every parameter's count) and
/// indices (the sparse parameters' only).
std::pair<int64_t, int64_t> selectionSizes(const Stage &stage,
                                           const plan::Plan &plan) {
  int64_t values = 0, indices = 0;
  for (const Param &p : stage.params) {
    values += p.count;
    if (p.count * 4 < plan.tensors(p.param).bytes())
      indices += p.count;
  }
  return {values, indices};
}

/// The stage's buffers, one after another from `base` (64-byte aligned):
/// this device's values and indices, then every device's.
int64_t addBuffers(plan::Plan &plan, Stage &stage, int64_t l, int64_t devices,
                   int64_t base) {
  auto [values, indices] = selectionSizes(stage, plan);
  std::string name = "stage" + std::to_string(l);
  int64_t at = base;
  auto place = [&](const std::string &suffix, plan::DType dtype,
                   int64_t elements) {
    int id = addTensor(plan, name + suffix, dtype, plan::ACTIVATION, elements);
    plan.mutable_tensors(id)->set_offset(at);
    at += (elements * 4 + 63) / 64 * 64;
    return id;
  };
  stage.values = place("@values", plan::F32, values);
  if (indices > 0)
    stage.indices = place("@indices", plan::I32, indices);
  stage.allValues = place("@values.all", plan::F32, devices * values);
  if (indices > 0)
    stage.allIndices = place("@indices.all", plan::I32, devices * indices);
  return at;
}

/// The stage's parameters, then their error feedback.
void addStageInputs(plan::Instruction *instruction, const Stage &stage) {
  for (const Param &p : stage.params)
    instruction->add_inputs(p.param);
  for (const Param &p : stage.params)
    instruction->add_inputs(p.state);
  plan::Attribute *counts = instruction->add_attributes();
  counts->set_name("counts");
  for (const Param &p : stage.params)
    counts->mutable_ints()->add_values(p.count);
}

} // namespace

int64_t addTensors(plan::Plan &plan, Exchange &exchange, int64_t arenaBytes) {
  int64_t base = (arenaBytes + 63) / 64 * 64, end = arenaBytes;
  for (size_t l = 1; l < exchange.stages.size(); ++l) {
    Stage &stage = exchange.stages[l];
    if (stage.params.empty())
      continue;
    for (Param &p : stage.params) {
      const plan::Tensor &param = plan.tensors(p.param);
      std::string name =
          param.name() + (exchange.residual ? "@residual" : "@mirror");
      int64_t elements = param.bytes() / 4;
      p.state = addTensor(plan, name, plan::F32, plan::SPARSE_STATE, elements);
      plan::Tensor *state = plan.mutable_tensors(p.state);
      state->mutable_shape()->CopyFrom(plan.tensors(p.param).shape());
      if (!exchange.residual)
        state->set_mirror_of(p.param);
    }
    end = std::max(end, addBuffers(plan, stage, static_cast<int64_t>(l),
                                   exchange.devices, base));
  }
  return end;
}

void lowerAbsorb(const Exchange &exchange, int64_t l,
                 const MakeInstruction &make) {
  for (const Param &p : exchange.stages[l].params) {
    plan::Instruction *absorb = make("sparse_absorb", "update");
    for (const plan::Attribute &a : p.update.attributes())
      *absorb->add_attributes() = a;
    absorb->set_location(p.update.location());
    absorb->add_inputs(p.param);
    absorb->add_inputs(p.grad);
    absorb->add_inputs(p.state);
    setText(absorb, "form", exchange.residual ? "residual" : "mirror");
  }
}

void lowerSend(const Exchange &exchange, int64_t l,
               const MakeInstruction &make) {
  const Stage &stage = exchange.stages[l];
  if (exchange.residual) // the gradient waited for the selection
    lowerAbsorb(exchange, l, make);
  plan::Instruction *select = make("sparse_select", "comm");
  addStageInputs(select, stage);
  select->add_outputs(stage.values);
  if (stage.indices >= 0)
    select->add_outputs(stage.indices);
  setText(select, "form", exchange.residual ? "residual" : "mirror");
}

void lowerApply(const Exchange &exchange, int64_t l,
                const MakeInstruction &make) {
  const Stage &stage = exchange.stages[l];
  int64_t N = exchange.devices;
  plan::Instruction *gather = make("sparse_gather", "comm");
  gather->add_inputs(stage.values);
  gather->add_outputs(stage.allValues);
  if (stage.indices >= 0) {
    gather->add_inputs(stage.indices);
    gather->add_outputs(stage.allIndices);
  }
  plan::setIntAttribute(gather, "cycle", exchange.cycle);
  plan::Instruction *apply = make("sparse_apply", "update");
  addStageInputs(apply, stage);
  apply->add_inputs(stage.allValues);
  apply->add_inputs(stage.allIndices);
  setText(apply, "form", exchange.residual ? "residual" : "mirror");
  plan::setIntAttribute(apply, "devices", N);
}

} // namespace cdp::sparse
