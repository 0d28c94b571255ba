//===- PlanInstantiateTest.cpp - format 4's runs spelled out --------------===//

#include "cdp/Plan/PlanInstantiate.h"
#include "cdp/Plan/ReplicaSymmetry.h"

#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/SpelledPlan.h"
#include "cdp/Runtime/Report.h"

#include <gtest/gtest.h>

#include <functional>

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

/// The spelled-out view reads a run's instructions as instantiation
/// writes them: ids in the run's slot, time step, micro-batch, the
/// message's micro-batch.
TEST(SpelledPlan, ReadsRunsAsInstantiationWritesThem) {
  Plan plan = stagePlan();
  SpelledPlan spelled(plan);
  Plan instantiated = plan;
  instantiate(instantiated);
  ASSERT_EQ(spelled.tensors(), instantiated.tensors_size());
  for (int id = 0; id < spelled.tensors(); ++id)
    EXPECT_EQ(spelled.tensor(id).bytes(), instantiated.tensors(id).bytes());
  const Device &device = instantiated.devices(0);
  ASSERT_EQ(spelled.size(0), device.instructions_size());
  for (int i = 0; i < spelled.size(0); ++i) {
    const SpelledInstruction &view = spelled.at(0, i);
    const Instruction &written = device.instructions(i);
    EXPECT_EQ(view.timeStep, written.time_step());
    EXPECT_EQ(view.microBatch, written.micro_batch());
    IdRange inputs = spelled.inputs(0, view),
            outputs = spelled.outputs(0, view);
    EXPECT_EQ(
        std::vector<int>(inputs.begin(), inputs.end()),
        std::vector<int>(written.inputs().begin(), written.inputs().end()));
    EXPECT_EQ(
        std::vector<int>(outputs.begin(), outputs.end()),
        std::vector<int>(written.outputs().begin(), written.outputs().end()));
    if (written.op() == "recv")
      EXPECT_EQ(view->attributes(0).i() + view.messageBatch,
                written.attributes(0).i());
    else
      EXPECT_EQ(view.messageBatch, 0);
  }
}

Instruction *addOp(Template *t, const char *op, const char *phase, int stage,
                   std::vector<int> inputs, std::vector<int> outputs) {
  Instruction *instruction = t->add_instructions();
  instruction->set_op(op);
  instruction->set_phase(phase);
  instruction->set_stage(stage);
  for (int id : inputs)
    instruction->add_inputs(id);
  for (int id : outputs)
    instruction->add_outputs(id);
  return instruction;
}

void setMessage(Instruction *instruction, int peer, int value) {
  setInt(instruction, "peer", peer);
  setInt(instruction, "value", value);
  setInt(instruction, "micro_batch", 0);
  setInt(instruction, "micro_batches", 2);
}

/// Two stages of a pipeline, two micro-batches a step: each device's
/// forward and backward as templates over a stash tensor of 2 slots, run
/// once per micro-batch.
Plan twoStagePlan() {
  Plan plan;
  plan.set_strategy("gpipe");
  plan.set_micro_batches(2);
  plan.mutable_schedule()->set_cycle(6);
  addTensor(plan, PARAM, 0)->set_device(0);        // 0
  Tensor *stash0 = addTensor(plan, ACTIVATION, 0); // 1
  addTensor(plan, ACTIVATION, 32)->set_device(0);  // 2: dev 0's gradient
  Tensor *stash1 = addTensor(plan, ACTIVATION, 0); // 3
  addTensor(plan, ACTIVATION, 32)->set_device(1);  // 4
  for (Tensor *stash : {stash0, stash1}) {
    stash->set_slots(2);
    stash->set_slot_stride(16);
  }
  stash0->set_device(0);
  stash1->set_device(1);
  Template *forward0 = plan.add_templates();
  addOp(forward0, "relu", "forward", 1, {0}, {1});
  setMessage(addOp(forward0, "send", "forward", 1, {1}, {}), 1, 0);
  Template *forward1 = plan.add_templates();
  setMessage(addOp(forward1, "recv", "forward", 2, {}, {3}), 0, 0);
  addOp(forward1, "relu", "forward", 2, {3}, {4});
  Template *backward1 = plan.add_templates();
  addOp(backward1, "neg", "backward", 2, {3}, {4});
  setMessage(addOp(backward1, "send", "backward", 2, {4}, {}), 0, 1);
  Template *backward0 = plan.add_templates();
  setMessage(addOp(backward0, "recv", "backward", 1, {}, {2}), 1, 1);
  addOp(backward0, "mul", "backward", 1, {1, 2}, {2});
  // (device, template, time step) per micro-batch k: + k each.
  int runs[4][3] = {{0, 0, 0}, {0, 3, 4}, {1, 1, 1}, {1, 2, 3}};
  plan.add_devices();
  plan.add_devices();
  for (auto &[d, t, time] : runs)
    for (int k = 0; k < 2; ++k) {
      Run *run = plan.mutable_devices(d)->add_runs();
      run->set_template_(t);
      run->set_time_step(time + k);
      run->set_micro_batch(k);
      run->set_slot(k);
      run->set_message_batch(k);
    }
  return plan;
}

/// The report and the step time read from the runs equal those of the
/// plan cdp-run spells out, byte for byte.
TEST(SpelledPlan, ReportAndStepTimeEqualTheInstantiatedPlans) {
  Plan plan = twoStagePlan();
  ASSERT_EQ(checkRuns(plan), "");
  ASSERT_EQ(findSendRecvDeadlock(plan), "");
  Plan instantiated = plan;
  instantiate(instantiated);
  std::string fromRuns = cdp::runtime::predictReport(plan, 3);
  EXPECT_EQ(fromRuns, cdp::runtime::predictReport(instantiated, 3));
  // The stash's two slots are both live at the forward's end.
  EXPECT_NE(fromRuns.find("\"activation_bytes\": 32"), std::string::npos);
  auto cost = [](int device, const Instruction &instruction) {
    return instruction.op() == "send" ? 0.5 : 1.0 + device;
  };
  SimulatedTime fromRunsTime = simulateTime(plan, 3, cost);
  SimulatedTime spelledTime = simulateTime(instantiated, 3, cost);
  EXPECT_EQ(fromRunsTime.status, SimulatedTime::Status::Ok);
  EXPECT_EQ(fromRunsTime.end, spelledTime.end);
  EXPECT_GT(fromRunsTime.end, 0);
}

/// twoStagePlan with a second replica on devices 2 and 3: each runs device
/// d - 2's runs, two micro-batches later, as `place` makes them run there.
Plan withSecondReplica(
    const std::function<void(Plan &, cdp::plan::Run &)> &place) {
  Plan plan = twoStagePlan();
  plan.set_replica_devices(2);
  for (int d = 0; d < 2; ++d) {
    Device *replica = plan.add_devices();
    *replica->mutable_runs() = plan.devices(d).runs();
    for (cdp::plan::Run &run : *replica->mutable_runs()) {
      place(plan, run);
      run.set_message_batch(run.message_batch() + 2);
    }
  }
  return plan;
}

/// Replicas running the first replica's templates (format 7): a second
/// replica's devices 2 and 3 run devices 0 and 1's templates, their
/// messages' peers offset by 2. Instantiation, the deadlock check, the
/// report and the step time all read the offset (without it, device 2
/// would send to device 1 and device 3 wait forever).
TEST(SpelledPlan, ReplicasRunTheFirstReplicasTemplatesWithTheirPeers) {
  Plan plan = withSecondReplica(
      [](Plan &, cdp::plan::Run &run) { run.set_peer_offset(2); });
  ASSERT_EQ(checkRuns(plan), "");
  EXPECT_EQ(arenaHome(plan, 3), 1);
  EXPECT_EQ(findSendRecvDeadlock(plan), "");
  Plan instantiated = plan;
  instantiate(instantiated);
  std::vector<int64_t> peers;
  for (const Instruction &instruction : instantiated.devices(2).instructions())
    if (instruction.op() == "send" || instruction.op() == "recv")
      peers.push_back(intAttribute(instruction, "peer"));
  EXPECT_EQ(peers, std::vector<int64_t>({3, 3, 3, 3}));
  EXPECT_EQ(cdp::runtime::predictReport(plan, 3),
            cdp::runtime::predictReport(instantiated, 3));
  auto cost = [](int, const Instruction &) { return 1.0; };
  SimulatedTime fromRuns = simulateTime(plan, 3, cost);
  EXPECT_EQ(fromRuns.status, SimulatedTime::Status::Ok);
  EXPECT_EQ(fromRuns.end, simulateTime(instantiated, 3, cost).end);
  // The runs' plan is predicted from its first replica (alike up to the
  // replica), the instantiated one device by device: the same figures.
  EXPECT_EQ(alikeReplicaDevices(plan), 2);
  EXPECT_EQ(alikeReplicaDevices(instantiated), 0);
  Plan shifted = plan; // a replica whose run starts later is not alike
  shifted.mutable_devices(3)->mutable_runs(0)->set_time_step(
      plan.devices(1).runs(0).time_step() + 7);
  EXPECT_EQ(alikeReplicaDevices(shifted), 0);
  Plan crossing = plan; // nor one whose first replica sends to another
  crossing.mutable_devices(2)->mutable_runs(0)->set_peer_offset(0);
  EXPECT_EQ(alikeReplicaDevices(crossing), 0);
  // The deadlock check reads the first replica alone when the replicas are
  // alike: a receive no send matches, in a template every replica runs,
  // still hangs the plan.
  Plan hung = plan;
  bool changed = false;
  for (cdp::plan::Template &t : *hung.mutable_templates())
    for (Instruction &instruction : *t.mutable_instructions())
      if (instruction.op() == "recv" && !changed) {
        for (cdp::plan::Attribute &attribute :
             *instruction.mutable_attributes())
          if (attribute.name() == "value")
            attribute.set_i(attribute.i() + 1000);
        changed = true;
      }
  ASSERT_TRUE(changed);
  EXPECT_EQ(alikeReplicaDevices(hung), 2);
  std::string hang = findSendRecvDeadlock(hung);
  EXPECT_NE(hang.find("the plan would hang"), std::string::npos);
  // As cdp-run and cdp-compile print it: one line, naming the stuck
  // devices.
  std::string line = deadlockLine(hang);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_EQ(
      line.rfind("the plan would hang: no device can move after round ", 0), 0u)
      << line;
  EXPECT_NE(line.find("; device 0 at instruction "), std::string::npos) << line;
}

/// A replica's own copy of a template (update-time work: a tied weight's
/// messages name their peers as they are) is alike when its peers are a
/// replica further and the rest is equal, its `replica` aside.
TEST(SpelledPlan, ReplicasOwnTemplatesAreAlikeUpToTheirPeers) {
  Plan plan = withSecondReplica([](Plan &plan, cdp::plan::Run &run) {
    cdp::plan::Template own = plan.templates(run.template_());
    for (Instruction &instruction : *own.mutable_instructions()) {
      setIntAttribute(&instruction, "replica", 1);
      for (cdp::plan::Attribute &attribute : *instruction.mutable_attributes())
        if (attribute.name() == "peer")
          attribute.set_i(attribute.i() + 2);
    }
    *plan.add_templates() = own;
    run.set_template_(plan.templates_size() - 1);
  });
  for (int d = 0; d < 2; ++d)
    for (cdp::plan::Run &run : *plan.mutable_devices(d)->mutable_runs()) {
      cdp::plan::Template &first = *plan.mutable_templates(run.template_());
      for (Instruction &instruction : *first.mutable_instructions())
        if (intAttribute(instruction, "replica", -1) < 0)
          setIntAttribute(&instruction, "replica", 0);
    }
  ASSERT_EQ(checkRuns(plan), "");
  EXPECT_EQ(alikeReplicaDevices(plan), 2);
  Plan unshifted = plan; // a copied message still naming the first replica
  for (Instruction &instruction :
       *unshifted.mutable_templates(plan.devices(2).runs(0).template_())
            ->mutable_instructions())
    for (cdp::plan::Attribute &attribute : *instruction.mutable_attributes())
      if (attribute.name() == "peer")
        attribute.set_i(attribute.i() - 2);
  EXPECT_EQ(alikeReplicaDevices(unshifted), 0);
  Plan otherOp = plan; // or doing other work
  otherOp.mutable_templates(plan.devices(3).runs(0).template_())
      ->mutable_instructions(0)
      ->set_min_step(5);
  EXPECT_EQ(alikeReplicaDevices(otherOp), 0);
  // sameUpToReplica compares Instruction field by field: a new field must
  // be compared there too.
  EXPECT_EQ(Instruction::descriptor()->field_count(), 14);
}

} // namespace
