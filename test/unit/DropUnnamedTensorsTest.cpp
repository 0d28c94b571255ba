//===- DropUnnamedTensorsTest.cpp - tensors nothing names, left out -------===//

#include "cdp/Plan/DropUnnamedTensors.h"

#include <gtest/gtest.h>

namespace {

using namespace cdp::plan;

void addTensor(Plan &plan, TensorKind kind, const char *name) {
  Tensor *t = plan.add_tensors();
  t->set_id(plan.tensors_size() - 1);
  t->set_kind(kind);
  t->set_name(name);
}

/// Every kind of reference, each to a tensor after an unnamed one, so that
/// each must be renumbered.
Plan planWithGaps() {
  Plan plan;
  addTensor(plan, PARAM, "w");            // 0
  addTensor(plan, ACTIVATION, "gap1");    // 1: unnamed
  addTensor(plan, INPUT, "x");            // 2: a plan input, a load's
  addTensor(plan, ACTIVATION, "copy");    // 3: a template's
  addTensor(plan, ACTIVATION, "gap4");    // 4: unnamed
  addTensor(plan, ACTIVATION, "eval");    // 5: the evaluation stream's
  addTensor(plan, PARAM, "w@previous");   // 6
  addTensor(plan, ACTIVATION, "gap7");    // 7: unnamed
  addTensor(plan, ACTIVATION, "loss");    // 8
  addTensor(plan, ACTIVATION, "scores");  // 9
  addTensor(plan, ACTIVATION, "applied"); // 10
  plan.mutable_tensors(6)->set_previous_version_of(0);
  plan.add_inputs(2);
  plan.set_loss(8);
  plan.set_eval_loss(8);
  plan.set_labels(-1);
  plan.set_scores(9);
  plan.add_applied_gradients(10);
  Output *output = plan.add_outputs();
  output->set_tensor(9);
  Device *device = plan.add_devices();
  Instruction *load = device->add_instructions();
  load->set_op("load");
  load->add_outputs(3);
  Attribute *input = load->add_attributes();
  input->set_name("input");
  input->set_i(2);
  Instruction *eval = device->add_eval_instructions();
  eval->set_op("relu");
  eval->add_inputs(2);
  eval->add_outputs(5);
  Instruction *step = plan.add_templates()->add_instructions();
  step->set_op("update");
  step->add_inputs(0);
  step->add_inputs(10);
  step->add_outputs(6);
  return plan;
}

TEST(DropUnnamedTensors, LeavesOutUnnamedActivationsAndRenumbers) {
  Plan plan = planWithGaps();
  EXPECT_EQ(cdp::dropUnnamedActivations(plan), 3);
  ASSERT_EQ(plan.tensors_size(), 8);
  std::vector<std::string> names;
  for (int id = 0; id < plan.tensors_size(); ++id) {
    EXPECT_EQ(plan.tensors(id).id(), id);
    names.push_back(plan.tensors(id).name());
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"w", "x", "copy", "eval", "w@previous",
                                      "loss", "scores", "applied"}));
  EXPECT_EQ(plan.tensors(4).previous_version_of(), 0);
  EXPECT_EQ(plan.inputs(0), 1);
  EXPECT_EQ(plan.loss(), 5);
  EXPECT_EQ(plan.eval_loss(), 5);
  EXPECT_EQ(plan.labels(), -1);
  EXPECT_EQ(plan.scores(), 6);
  EXPECT_EQ(plan.outputs(0).tensor(), 6);
  EXPECT_EQ(plan.applied_gradients(0), 7);
  const Instruction &load = plan.devices(0).instructions(0);
  EXPECT_EQ(load.outputs(0), 2);
  EXPECT_EQ(load.attributes(0).i(), 1);
  const Instruction &eval = plan.devices(0).eval_instructions(0);
  EXPECT_EQ(eval.inputs(0), 1);
  EXPECT_EQ(eval.outputs(0), 3);
  const Instruction &update = plan.templates(0).instructions(0);
  EXPECT_EQ(update.inputs(1), 7);
  EXPECT_EQ(update.outputs(0), 4);
}

TEST(DropUnnamedTensors, KeepsPlansWhereEveryTensorIsNamed) {
  Plan plan = planWithGaps();
  cdp::dropUnnamedActivations(plan);
  Plan before = plan;
  EXPECT_EQ(cdp::dropUnnamedActivations(plan), 0);
  EXPECT_EQ(plan.SerializeAsString(), before.SerializeAsString());
}

} // namespace
