//===- PlanInstantiateTest.cpp - format 4's runs spelled out --------------===//

#include "cdp/Plan/PlanInstantiate.h"

#include <gtest/gtest.h>

namespace {

using namespace cdp::plan;

Tensor *addTensor(Plan &plan, TensorKind kind, int64_t offset) {
  Tensor *t = plan.add_tensors();
  t->set_id(plan.tensors_size() - 1);
  t->set_kind(kind);
  t->set_dtype(F32);
  t->add_shape(4);
  t->set_bytes(16);
  t->set_offset(offset);
  return t;
}

void setInt(Instruction *instruction, const char *name, int64_t value) {
  Attribute *a = instruction->add_attributes();
  a->set_name(name);
  a->set_i(value);
}

/// A stage's forward for one micro-batch, as a template over a stash
/// tensor with 3 slots (id 0) and a transient one (id 1), run twice.
Plan stagePlan() {
  Plan plan;
  plan.set_strategy("gpipe");
  Tensor *stash = addTensor(plan, ACTIVATION, 64);
  stash->set_slots(3);
  stash->set_slot_stride(16);
  addTensor(plan, ACTIVATION, 0);
  Template *forward = plan.add_templates();
  Instruction *recv = forward->add_instructions();
  recv->set_op("recv");
  recv->add_outputs(0);
  setInt(recv, "micro_batch", 0);
  Instruction *relu = forward->add_instructions();
  relu->set_op("relu");
  relu->add_inputs(0);
  relu->add_outputs(1);
  setInt(relu, "step_micro_batch", 0);
  setInt(relu, "micro_batch", 5); // not a message: left alone
  Device *device = plan.add_devices();
  for (int k = 0; k < 2; ++k) {
    Run *run = device->add_runs();
    run->set_template_(0);
    run->set_time_step(10 + k);
    run->set_micro_batch(k);
    run->set_slot(2 - k);
    run->set_message_batch(64 + k);
    run->set_step_micro_batch(7 + k);
  }
  return plan;
}

TEST(PlanInstantiate, RunsBecomeInstructionsInTheirSlots) {
  Plan plan = stagePlan();
  ASSERT_EQ(checkRuns(plan), "");
  instantiate(plan);
  EXPECT_EQ(plan.templates_size(), 0);
  // Slot copies 1 and 2 of tensor 0 follow the plan's tensors.
  ASSERT_EQ(plan.tensors_size(), 4);
  EXPECT_EQ(plan.tensors(2).offset(), 64 + 16);
  EXPECT_EQ(plan.tensors(3).offset(), 64 + 32);
  EXPECT_EQ(plan.tensors(3).id(), 3);
  EXPECT_EQ(plan.tensors(0).slots(), 0);
  const Device &device = plan.devices(0);
  ASSERT_EQ(device.runs_size(), 0);
  ASSERT_EQ(device.instructions_size(), 4);
  const Instruction &recv = device.instructions(0);
  EXPECT_EQ(recv.time_step(), 10);
  EXPECT_EQ(recv.outputs(0), 3); // slot 2
  EXPECT_EQ(recv.attributes(0).i(), 64);
  const Instruction &relu = device.instructions(3);
  EXPECT_EQ(relu.time_step(), 11);
  EXPECT_EQ(relu.micro_batch(), 1);
  EXPECT_EQ(relu.inputs(0), 2);  // slot 1
  EXPECT_EQ(relu.outputs(0), 1); // the transient tensor is shared
  EXPECT_EQ(relu.attributes(0).i(), 8);
  EXPECT_EQ(relu.attributes(1).i(), 5);
}

TEST(PlanInstantiate, RefusesRunsOutOfRange) {
  Plan plan = stagePlan();
  plan.mutable_devices(0)->mutable_runs(1)->set_template_(1);
  EXPECT_EQ(checkRuns(plan),
            "device 0 run 1 names template 1, and the plan has 1");
  plan = stagePlan();
  plan.mutable_devices(0)->mutable_runs(0)->set_slot(3);
  EXPECT_EQ(checkRuns(plan),
            "device 0 run 0 names stash slot 3, and its tensors have 3");
  plan = stagePlan();
  plan.mutable_tensors(1)->set_slots(2);
  plan.mutable_tensors(1)->set_kind(PARAM);
  EXPECT_EQ(checkRuns(plan), "tensor 1 has stash slots but is no activation");
  plan = stagePlan();
  plan.mutable_devices(0)->add_instructions()->set_op("relu");
  EXPECT_EQ(checkRuns(plan), "device 0 has both runs and instructions");
  plan = stagePlan();
  plan.mutable_tensors(0)->set_slots(-1);
  EXPECT_NE(checkRuns(plan), "");
}

TEST(PlanInstantiate, LeavesPlainPlansAlone) {
  Plan plan;
  addTensor(plan, ACTIVATION, 0);
  Instruction *relu = plan.add_devices()->add_instructions();
  relu->set_op("relu");
  relu->add_inputs(0);
  relu->add_outputs(0);
  EXPECT_FALSE(hasRuns(plan));
  Plan before = plan;
  instantiate(plan);
  EXPECT_EQ(plan.SerializeAsString(), before.SerializeAsString());
}

} // namespace
