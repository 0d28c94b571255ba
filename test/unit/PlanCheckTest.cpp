//===- PlanCheckTest.cpp - the send/recv simulation of plans --------------===//
//
// Hand-written two-device plans: a pipeline hand-off that completes, one
// where both devices first wait for the other, and a receive nobody sends;
// the timed simulation behind predicted step times.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/PlanCheck.h"

#include <gtest/gtest.h>

#include <limits>

using namespace cdp::plan;

namespace {

/// A message instruction appended to a device's or a template's program.
template <typename Program>
void add(Program &program, const std::string &op, int peer, int value,
         int microBatch) {
  Instruction *instruction = program.add_instructions();
  instruction->set_op(op);
  instruction->set_location(op + std::to_string(value));
  for (auto [name, v] : {std::pair<const char *, int>{"peer", peer},
                         {"value", value},
                         {"micro_batch", microBatch},
                         {"micro_batches", 2}}) {
    Attribute *a = instruction->add_attributes();
    a->set_name(name);
    a->set_i(v);
  }
}

void compute(Device &device) { device.add_instructions()->set_op("relu"); }

TEST(PlanCheck, ForwardAndBackwardHandOffCompletes) {
  Plan plan;
  Device &first = *plan.add_devices(), &second = *plan.add_devices();
  for (int k = 0; k < 2; ++k) {
    compute(first);
    add(first, "send", 1, 7, k);
  }
  for (int k = 0; k < 2; ++k) {
    add(second, "recv", 0, 7, k);
    compute(second);
    add(second, "send", 0, 9, k);
  }
  for (int k = 0; k < 2; ++k)
    add(first, "recv", 1, 9, k);
  EXPECT_EQ(findSendRecvDeadlock(plan), "");
}

TEST(PlanCheck, MutualWaitIsReported) {
  Plan plan;
  Device &first = *plan.add_devices(), &second = *plan.add_devices();
  compute(first);
  add(first, "recv", 1, 9, 0);
  add(first, "send", 1, 7, 0);
  compute(second);
  add(second, "recv", 0, 7, 0);
  add(second, "send", 0, 9, 0);
  std::string report = findSendRecvDeadlock(plan);
  EXPECT_NE(report.find("the plan would hang"), std::string::npos) << report;
  EXPECT_NE(report.find("device 0 at instruction 1: recv at 'recv9'"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("device 1 at instruction 1: recv at 'recv7'"),
            std::string::npos)
      << report;
}

// A damaged plan's message attributes would overflow the simulation's step
// arithmetic (the fuzzer's finding: step_offset 2^63 - 1): refused first,
// in one line naming the instruction, in a plain plan and in a template.
TEST(PlanCheck, MessageFieldsBeyondTheTagsAreRefused) {
  Plan plan;
  Device &first = *plan.add_devices(), &second = *plan.add_devices();
  add(first, "send", 1, 7, 0);
  add(second, "recv", 0, 7, 0);
  EXPECT_EQ(findSendRecvDeadlock(plan), "");
  Attribute *offset = first.mutable_instructions(0)->add_attributes();
  offset->set_name("step_offset");
  offset->set_i(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(findSendRecvDeadlock(plan),
            "send at 'send7' of device 0 has step_offset 9223372036854775807, "
            "outside -1048576 to 1048576 (a damaged plan?)");
  offset->set_i(kMostTagField);
  EXPECT_EQ(findSendRecvDeadlock(plan).rfind("the plan would hang", 0), 0u);
  offset->set_i(0);
  Template &t = *plan.add_templates();
  add(t, "recv", 0, 7, 0);
  t.mutable_instructions(0)->mutable_attributes(3)->set_i(0); // micro_batches
  EXPECT_EQ(findSendRecvDeadlock(plan),
            "recv at 'recv7' of template 0 has micro_batches 0, outside 1 to "
            "1048576 (a damaged plan?)");
}

TEST(PlanCheck, ReceiveOfAnotherMicroBatchDoesNotMatch) {
  Plan plan;
  Device &first = *plan.add_devices(), &second = *plan.add_devices();
  add(first, "send", 1, 7, 0);
  add(second, "recv", 0, 7, 1);
  std::string report = findSendRecvDeadlock(plan);
  EXPECT_NE(report.find("device 1 at instruction 0"), std::string::npos)
      << report;
  EXPECT_EQ(report.find("device 0 at"), std::string::npos) << report;
}

TEST(PlanCheck, TiedWeightFromThePreviousStep) {
  // Device 0 sends the updated weight at the end of each step; device 1
  // takes it at the start of the next (step_offset -1, from step 1 on).
  for (bool fromStepOne : {true, false}) {
    Plan plan;
    Device &owner = *plan.add_devices(), &replica = *plan.add_devices();
    add(replica, "recv", 0, 3, 0);
    Attribute *offset = replica.mutable_instructions(0)->add_attributes();
    offset->set_name("step_offset");
    offset->set_i(-1);
    if (fromStepOne)
      replica.mutable_instructions(0)->set_min_step(1);
    compute(replica);
    compute(owner);
    add(owner, "send", 1, 3, 0);
    std::string report = findSendRecvDeadlock(plan);
    if (fromStepOne)
      EXPECT_EQ(report, "");
    else
      EXPECT_NE(report.find("device 1 at instruction 0"), std::string::npos)
          << report;
  }
}

TEST(PlanCheck, TimedStreamsWaitForTheirSends) {
  // Device 0 computes (1) and sends; device 1 computes (3), then receives
  // and computes (1): its receive finds the message waiting, so one step
  // ends at 4. With device 1's first compute at 0.5 it waits for the send
  // (ends at 1) instead: 2. Sends and receives cost nothing here.
  for (double head : {3.0, 0.5}) {
    Plan plan;
    Device &first = *plan.add_devices(), &second = *plan.add_devices();
    compute(first);
    add(first, "send", 1, 7, 0);
    compute(second);
    second.mutable_instructions(0)->set_location("head");
    add(second, "recv", 0, 7, 0);
    compute(second);
    auto cost = [&](int, const Instruction &instruction) {
      if (instruction.op() != "relu")
        return 0.0;
      return instruction.location() == "head" ? head : 1.0;
    };
    EXPECT_DOUBLE_EQ(simulateTime(plan, 1, cost).end, head == 3.0 ? 4.0 : 2.0);
    // Step 1 on device 1 starts when its step 0 ends (4, or 2 where the
    // message of step 1 is ready at 2 and the head ends at 2.5).
    EXPECT_DOUBLE_EQ(simulateTime(plan, 2, cost).end, head == 3.0 ? 8.0 : 3.5);
  }
}

TEST(PlanCheck, TimedStreamsThatWouldHangOrLackACostSaySo) {
  using Status = SimulatedTime::Status;
  Plan plan;
  Device &first = *plan.add_devices(), &second = *plan.add_devices();
  add(first, "send", 1, 7, 0);
  add(second, "recv", 0, 7, 1); // another micro-batch: never arrives
  EXPECT_EQ(simulateTime(plan, 1, [](int, const Instruction &) { return 1.0; })
                .status,
            Status::WouldHang);
  Plan known;
  compute(*known.add_devices());
  EXPECT_EQ(
      simulateTime(known, 1, [](int, const Instruction &) { return -1.0; })
          .status,
      Status::UnknownCost);
  SimulatedTime time =
      simulateTime(known, 3, [](int, const Instruction &) { return 2.0; });
  EXPECT_EQ(time.status, Status::Ok);
  EXPECT_DOUBLE_EQ(time.end, 6.0);
}

TEST(PlanCheck, TimedStreamsWaitForASendOfTheNextStep) {
  // cdp-mp's tied weight: device 0 sends the value it updated in step t - 1
  // during step t (micro_batch -2 of 2 per step, from step 1 on, and in the
  // drain); device 1 takes it at the end of step t - 1. Without the drain
  // the last step's receive would never match; its wait counts, the
  // drain's own compute does not.
  Plan plan;
  Device &owner = *plan.add_devices(), &user = *plan.add_devices();
  compute(owner);
  add(owner, "send", 1, 3, -2);
  owner.mutable_instructions(1)->set_min_step(1);
  owner.mutable_instructions(1)->set_drain(true);
  compute(user);
  add(user, "recv", 0, 3, 0);
  SimulatedTime time =
      simulateTime(plan, 2, [](int, const Instruction &) { return 1.0; });
  ASSERT_EQ(time.status, SimulatedTime::Status::Ok);
  // Owner: compute [0,1], step 1's compute [1,2], send [2,3], drain send
  // [3,4]. User: compute [0,1], recv of step 0 waits for the send ending at
  // 3 ([3,4]), compute [4,5], recv [5,6] (drain's send ended at 4).
  EXPECT_DOUBLE_EQ(time.end, 6.0);
}

} // namespace

// Checkpoint cuts: a stream whose receives all wait on the same or earlier
// steps is cut between steps; a receive at the end of step t that waits
// for its peer's send of step t + 1 (a tied weight) stops its device before
// it, and every receive of what that device then has not sent moves back
// too.
TEST(PlanCheck, CheckpointCutBetweenStepsWithoutLookahead) {
  Plan plan;
  Device &first = *plan.add_devices(), &second = *plan.add_devices();
  compute(first);
  add(first, "send", 1, 7, 0);
  add(first, "recv", 1, 9, 0);
  add(second, "recv", 0, 7, 0);
  add(second, "send", 0, 9, 0);
  std::string error;
  EXPECT_EQ(checkpointCut(plan, 4, error), (std::vector<int>{3, 2})) << error;
}

TEST(PlanCheck, CheckpointCutStopsBeforeReceiveOfNextStep) {
  Plan plan;
  Device &first = *plan.add_devices(), &second = *plan.add_devices(),
         &third = *plan.add_devices();
  add(third, "send", 1, 5, 0); // the new value, at the start of a step
  third.mutable_instructions(0)->set_drain(true); // also after the last
  compute(third);
  add(second, "recv", 2, 5, 2); // micro-batch 2 of 2: the next step's
  add(second, "send", 0, 9, 0);
  compute(first);
  add(first, "recv", 1, 9, 0);
  std::string error;
  EXPECT_EQ(findSendRecvDeadlock(plan), "");
  // Device 1 stops before its receive (0); device 0 then before the
  // receive of what device 1 sends after it (1); device 2 runs its step.
  EXPECT_EQ(checkpointCut(plan, 5, error), (std::vector<int>{1, 0, 2}))
      << error;
}

TEST(PlanCheck, CheckpointCutRefusesToReachAnEarlierStep) {
  Plan plan;
  Device &first = *plan.add_devices(), &second = *plan.add_devices();
  add(first, "send", 1, 5, 0);
  add(second, "recv", 0, 5, 4); // two steps ahead
  std::string error;
  EXPECT_TRUE(checkpointCut(plan, 5, error).empty());
  EXPECT_NE(error.find("would need device 1 to stop in step 3"),
            std::string::npos)
      << error;
}

// Reductions: a reduce_wait of step t waits for every device's reduce_start
// of step t - 1 - delay; a device without its reduce_start hangs them all.
void reduction(Device &device, const std::string &op) {
  Instruction *instruction = device.add_instructions();
  instruction->set_op(op);
  instruction->set_location("stage 0");
  Attribute *stage = instruction->add_attributes();
  stage->set_name("stage");
  stage->set_i(0);
  if (op == "reduce_wait")
    instruction->set_min_step(1);
}

// ZeRO's shard_reduce and shard_update are blocking collectives: every
// device must reach the same one (step, stage) before any goes on.
TEST(PlanCheck, BlockingCollectivesNeedEveryDevice) {
  Plan plan;
  for (int d = 0; d < 2; ++d) {
    Device &device = *plan.add_devices();
    reduction(device, "shard_update");
    compute(device);
    reduction(device, "shard_reduce");
  }
  EXPECT_EQ(findSendRecvDeadlock(plan), "");
  plan.mutable_devices(1)->mutable_instructions()->RemoveLast();
  std::string report = findSendRecvDeadlock(plan);
  EXPECT_NE(report.find("device 0 at instruction 2: shard_reduce at "
                        "'stage 0' (stage 0"),
            std::string::npos)
      << report;
}

TEST(PlanCheck, ReductionsCompleteWhenEveryDeviceContributes) {
  Plan plan;
  for (int d = 0; d < 2; ++d) {
    Device &device = *plan.add_devices();
    reduction(device, "reduce_wait");
    compute(device);
    reduction(device, "reduce_start");
  }
  EXPECT_EQ(findSendRecvDeadlock(plan), "");
  plan.mutable_devices(1)->mutable_instructions()->RemoveLast();
  std::string report = findSendRecvDeadlock(plan);
  EXPECT_NE(report.find("device 0 at instruction 0 of step 1: reduce_wait at "
                        "'stage 0' (stage 0, the reduction of step 0"),
            std::string::npos)
      << report;
}
