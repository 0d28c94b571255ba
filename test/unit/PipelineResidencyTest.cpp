//===- PipelineResidencyTest.cpp - a stage's model states stay on it ------===//
//
// In a pipeline plan a parameter belongs to its stage's device: during
// training another device allocates it only where one of its instructions
// names it; device 0 takes every stage's after training (the gather) only
// for an evaluation stream (the outputs read each tensor where it lies).
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/Residency.h"
#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Executor.h"

#include <gtest/gtest.h>

#include <thread>

namespace cdp::runtime {
namespace {

plan::Tensor *addParam(plan::Plan &plan, const std::string &name, int device) {
  plan::Tensor *t = plan.add_tensors();
  t->set_id(plan.tensors_size() - 1);
  t->set_name(name);
  t->set_dtype(plan::F32);
  t->add_shape(4);
  t->set_bytes(16);
  t->set_kind(plan::PARAM);
  t->set_trainable(true);
  t->set_device(device);
  return t;
}

/// Two stages on two devices, then a weight of stage 1 that stage 2 names
/// too (tied).
plan::Plan twoStages() {
  plan::Plan plan;
  plan.set_strategy("1f1b");
  addParam(plan, "w1", 0);
  addParam(plan, "w2", 1);
  addParam(plan, "tied", 0);
  for (int d = 0; d < 2; ++d)
    plan.add_devices()->set_arena_bytes(0);
  plan::Instruction *scale = plan.mutable_devices(1)->add_instructions();
  scale->set_op("identity");
  scale->add_inputs(2);
  scale->add_outputs(1);
  return plan;
}

TEST(PipelineResidency, AStageDeviceHoldsItsOwnAndWhatItNames) {
  plan::Plan plan = twoStages();
  Executor second(plan, 1, 1);
  EXPECT_EQ(second.view(0).data, nullptr) << "stage 1's weight on device 1";
  EXPECT_NE(second.view(1).data, nullptr);
  EXPECT_NE(second.view(2).data, nullptr) << "named by device 1";
  // What the report says each device allocates: its arena (0 here) and a
  // 64-byte aligned piece for each 16-byte tensor it holds.
  EXPECT_EQ(plan::allocatedBytes(plan, 1), 128);
  EXPECT_EQ(plan::allocatedBytes(plan, 0), 128) << "w1 and tied, not w2";
}

TEST(PipelineResidency, DeviceZeroTakesTheOtherStagesAfterTraining) {
  plan::Plan plan = twoStages();
  for (int id : {0, 1, 2})
    plan.mutable_tensors(id)->set_data(std::string(16, char(id + 1)));
  LocalFabric fabric(2);
  Executor first(plan, 1, 0, &fabric.endpoint(0));
  Executor second(plan, 1, 1, &fabric.endpoint(1));
  EXPECT_NE(first.view(0).data, nullptr);
  EXPECT_EQ(first.view(1).data, nullptr) << "stage 2's weight during training";
  // What a device holds at load is one allocation, 64-byte aligned pieces
  // in plan order.
  EXPECT_EQ(static_cast<const char *>(first.view(2).data) -
                static_cast<const char *>(first.view(0).data),
            64);
  EXPECT_THROW(first.runEval(StepContext()), RuntimeError);
  std::thread sender([&] { second.gatherOnDeviceZero(/*wholeModel=*/true); });
  first.gatherOnDeviceZero(/*wholeModel=*/true);
  sender.join();
  ASSERT_NE(first.view(1).data, nullptr);
  EXPECT_EQ(std::string(static_cast<const char *>(first.view(1).data), 16),
            std::string(16, char(2)))
      << "stage 2's weight gathered from device 1";
  EXPECT_NO_THROW(first.runEval(StepContext()));
}

TEST(PipelineResidency, WithoutAnEvaluationNoStageIsGathered) {
  // The outputs read each trained tensor where it lies: device 0 taking
  // the others' was the model's size once more on it.
  plan::Plan plan = twoStages();
  LocalFabric fabric(2);
  Executor first(plan, 1, 0, &fabric.endpoint(0));
  Executor second(plan, 1, 1, &fabric.endpoint(1));
  std::thread sender([&] { second.gatherOnDeviceZero(/*wholeModel=*/false); });
  first.gatherOnDeviceZero(/*wholeModel=*/false);
  sender.join();
  EXPECT_EQ(first.view(1).data, nullptr)
      << "stage 2's weight stays on device 1";
}

TEST(PipelineResidency, DataParallelDevicesHoldEverything) {
  plan::Plan plan = twoStages();
  plan.set_strategy("dp");
  Executor second(plan, 1, 1);
  EXPECT_NE(second.view(0).data, nullptr);
}

/// allocatedBytesPerDevice counts, for all devices at once, what each
/// device's persistentOn holds one device at a time: names reached through
/// a template run, an exchange buffer named by one device only, a tied
/// weight, and device 0's arena.
TEST(PipelineResidency, EveryDeviceAtOnceEqualsOneAtATime) {
  plan::Plan plan = twoStages();
  plan.add_devices()->set_arena_bytes(0);
  plan.mutable_devices(0)->set_arena_bytes(4096);
  addParam(plan, "w3", 2);
  plan::Tensor *exchange = addParam(plan, "exchange", 0);
  exchange->clear_device();
  exchange->set_kind(plan::REDUCED);
  exchange->set_bytes(100);
  exchange->clear_shape();
  exchange->add_shape(25);
  plan::Instruction *read = plan.add_templates()->add_instructions();
  read->set_op("identity");
  read->add_inputs(4);
  read->add_outputs(0);
  plan.mutable_devices(2)->add_runs()->set_template_(0);
  std::vector<int64_t> all = plan::allocatedBytesPerDevice(plan);
  ASSERT_EQ(all.size(), 3u);
  for (int d = 0; d < 3; ++d) {
    int64_t block = 0;
    plan::persistentOffsets(plan, plan::persistentOn(plan, d), block);
    EXPECT_EQ(all[d], plan.devices(d).arena_bytes() + block) << "device " << d;
  }
  EXPECT_EQ(all[2], 64 + 128 + 64) << "w3, the exchange buffer and w1";
}

} // namespace
} // namespace cdp::runtime
