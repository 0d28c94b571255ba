//===- PlannerTest.cpp - the cost model and the --plan auto search --------===//
//
// The hardware model's costs worked out by hand, its JSON reader's
// refusals, the predicted step time of a hand-written stream, and the 2bw
// planner's candidates and choice.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/Planner.h"
#include "cdp/Plan/CostModel.h"

#include <gtest/gtest.h>

using namespace cdp;

namespace {

int addTensor(plan::Plan &plan, std::vector<int64_t> shape) {
  plan::Tensor *tensor = plan.add_tensors();
  tensor->set_id(plan.tensors_size() - 1);
  int64_t elements = 1;
  for (int64_t d : shape) {
    tensor->add_shape(d);
    elements *= d;
  }
  tensor->set_bytes(4 * elements);
  return tensor->id();
}

TEST(CostModel, GemmTakesTwiceItsMultiplyAddsAtTheDevicesFlops) {
  plan::Plan plan;
  int a = addTensor(plan, {2, 4}), b = addTensor(plan, {4, 3}),
      y = addTensor(plan, {2, 3});
  plan::Instruction gemm;
  gemm.set_op("gemm");
  gemm.add_inputs(a);
  gemm.add_inputs(b);
  gemm.add_outputs(y);
  Hardware hw;
  hw.flopsPerSecond = 1e3;
  hw.memoryBandwidth = 1e12;
  // 2 x 6 outputs x a reduced dimension of 4 = 48 FLOP at 1000 FLOP/s.
  EXPECT_DOUBLE_EQ(hardwareCost(hw)(plan, gemm), 48.0);
  // Bound by memory instead: (32 + 48 + 24) bytes at 1040 bytes/s.
  hw.flopsPerSecond = 1e12;
  hw.memoryBandwidth = 1040;
  EXPECT_DOUBLE_EQ(hardwareCost(hw)(plan, gemm), 100.0);
}

TEST(CostModel, SendTakesTheLatencyPlusItsBytesOverTheLink) {
  plan::Plan plan;
  int x = addTensor(plan, {4});
  plan::Instruction send;
  send.set_op("send");
  send.add_inputs(x);
  Hardware hw;
  hw.linkLatency = 1e-3;
  hw.linkBandwidth = 16;
  EXPECT_DOUBLE_EQ(hardwareCost(hw)(plan, send), 1001.0);
}

TEST(CostModel, HardwareJsonKeepsDefaultsAndRefusesNonsense) {
  Hardware hw;
  std::string error;
  ASSERT_TRUE(parseHardware(R"({"flops_per_s": 2e9})", hw, error)) << error;
  EXPECT_DOUBLE_EQ(hw.flopsPerSecond, 2e9);
  EXPECT_DOUBLE_EQ(hw.linkLatency, Hardware().linkLatency);
  EXPECT_FALSE(parseHardware(R"({"flops": 1})", hw, error));
  EXPECT_NE(error.find("unknown key 'flops'"), std::string::npos) << error;
  EXPECT_FALSE(parseHardware(R"({"link_latency_s": -1})", hw, error));
  EXPECT_EQ(error, "'link_latency_s' must be a positive number");
  EXPECT_FALSE(parseHardware("[1]", hw, error));
  EXPECT_EQ(error, "expected a JSON object");
  EXPECT_FALSE(parseHardware("{", hw, error));
  EXPECT_EQ(error.rfind("not JSON", 0), 0u) << error;
}

TEST(CostModel, StepTimeOfOneStreamIsTheSumOfItsInstructions) {
  plan::Plan plan;
  plan::Device &device = *plan.add_devices();
  for (const char *op : {"relu", "tanh", "relu"})
    device.add_instructions()->set_op(op);
  InstructionCost cost = [](const plan::Plan &,
                            const plan::Instruction &instruction) {
    return instruction.op() == "relu" ? 1.0 : 2.5;
  };
  plan::SimulatedTime time = predictStepMs(plan, cost, 3);
  ASSERT_EQ(time.status, plan::SimulatedTime::Status::Ok);
  EXPECT_DOUBLE_EQ(time.end, 4.5);
  // An unknown compute cost makes the step unpredictable; an unknown
  // message cost (a one-device profile has none) is free.
  plan.mutable_devices(0)->mutable_instructions(1)->set_op("load");
  InstructionCost unknown = [](const plan::Plan &,
                               const plan::Instruction &instruction) {
    return instruction.op() == "relu" ? 1.0 : -1.0;
  };
  EXPECT_DOUBLE_EQ(predictStepMs(plan, unknown, 3).end, 2.0);
  plan.mutable_devices(0)->mutable_instructions(1)->set_op("tanh");
  EXPECT_EQ(predictStepMs(plan, unknown, 3).status,
            plan::SimulatedTime::Status::UnknownCost);
}

TEST(Planner, CandidatesSplitTheDevicesAndTheGlobalBatch) {
  // 4 devices, 24 samples a step, micro-batch 2.
  std::vector<PlanCandidate> candidates = planCandidates(4, 24, 2);
  ASSERT_EQ(candidates.size(), 3u);
  EXPECT_EQ(candidates[0].stages, 1);
  EXPECT_EQ(candidates[0].replicas, 4);
  EXPECT_EQ(candidates[0].microBatches, 3);
  EXPECT_EQ(candidates[0].why, "");
  EXPECT_EQ(candidates[1].stages, 2);
  EXPECT_EQ(candidates[1].microBatches, 6);
  EXPECT_EQ(candidates[2].stages, 4);
  EXPECT_EQ(candidates[2].microBatches, 12);
  // 6 samples: 4 replicas x 2 do not divide them; 2 stages x 2 replicas
  // leave 1 micro-batch, fewer than the stages.
  candidates = planCandidates(4, 6, 2);
  EXPECT_EQ(candidates[0].why,
            "global batch is not a multiple of replicas x micro-batch");
  EXPECT_EQ(candidates[1].why, "global batch is not a multiple of replicas x "
                               "micro-batch");
  EXPECT_EQ(candidates[2].why, "fewer micro-batches than stages");
}

TEST(Planner, BestIsTheFastestThatFits) {
  std::vector<PlanCandidate> candidates(3);
  candidates[0].ms = 5;
  candidates[1].ms = 2;
  candidates[1].why = "above --device-memory";
  candidates[2].ms = 3;
  EXPECT_EQ(bestCandidate(candidates), 2);
  candidates[0].why = candidates[2].why = "above --device-memory";
  EXPECT_EQ(bestCandidate(candidates), -1);
}

} // namespace
