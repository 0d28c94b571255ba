//===- MultiTensorUpdateTest.cpp - one launch for a stage's updates -------===//
//
// The executor offers each run of adjacent updates to its first kernel
// (Kernel::takeOver), which then updates every tensor of the run in one
// parallel loop (on a GPU, one launch). Checked here on the CPU kernels:
// what it takes over (rules equal but for weight decay, no loss scale),
// that the run equals one kernel per parameter bit for bit over steps of a
// warmed-up cosine schedule (momentum and AdamW, a tensor of several
// slices, tensors with and without weight decay), and that kernels whose
// counts differ (a checkpoint restores each kernel's) update one by one.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Executor.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

using namespace cdp;
using namespace cdp::runtime;

namespace {

plan::Attribute *attribute(plan::Instruction &instruction, const char *name) {
  plan::Attribute *a = instruction.add_attributes();
  a->set_name(name);
  return a;
}

/// An update instruction of `optimizer` over a warmed-up cosine schedule.
plan::Instruction updateOf(const std::string &optimizer, double weightDecay,
                           double lr = 0.1) {
  plan::Instruction instruction;
  instruction.set_op("update");
  attribute(instruction, "optimizer")->set_s(optimizer);
  attribute(instruction, "lr")->set_f(lr);
  attribute(instruction, "momentum")->set_f(0.9);
  attribute(instruction, "weight_decay")->set_f(weightDecay);
  attribute(instruction, "lr_schedule")->set_s("cosine");
  attribute(instruction, "lr_period")->set_i(5);
  attribute(instruction, "lr_warmup")->set_i(2);
  attribute(instruction, "lr_warmup_start")->set_f(0.25);
  return instruction;
}

TensorView viewOf(std::vector<float> &values) {
  TensorView view;
  view.data = values.data();
  view.shape = {static_cast<int64_t>(values.size())};
  return view;
}

std::vector<float> drawn(size_t n, unsigned seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n);
  for (float &v : values)
    v = normal(generator);
  return values;
}

/// Parameters and gradients of three tensors (the first of two slices of
/// 65536 elements and a piece), their update instructions and kernels.
struct Stage {
  Stage(const std::string &optimizer,
        std::vector<double> decays = {0.01, 0.0, 0.05}) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      params.push_back(drawn(sizes[k], 1 + k));
      grads.push_back(drawn(sizes[k], 11 + k));
      instructions.push_back(updateOf(optimizer, decays[k]));
    }
    for (size_t k = 0; k < sizes.size(); ++k) {
      KernelArgs args;
      args.instruction = &instructions[k];
      args.inputs = {viewOf(params[k]), viewOf(grads[k])};
      kernels.push_back(
          (*KernelRegistry::instance().lookup("update", Backend::CPU))(args));
    }
  }
  /// Offers the first kernel the other two; how many it took.
  size_t offer() {
    Kernel *following[] = {kernels[1].get(), kernels[2].get()};
    return kernels[0]->takeOver(following, 2);
  }
  void step(bool oneByOne = false) {
    StepContext context;
    context.oneByOne = oneByOne;
    for (auto &kernel : kernels)
      kernel->run(context);
  }

  std::vector<size_t> sizes = {65536 + 700, 5, 300};
  std::vector<std::vector<float>> params, grads;
  std::vector<plan::Instruction> instructions;
  std::vector<std::unique_ptr<Kernel>> kernels;
};

void expectSameBits(Stage &want, Stage &got, const std::string &what) {
  for (size_t k = 0; k < want.params.size(); ++k) {
    EXPECT_EQ(0, std::memcmp(want.params[k].data(), got.params[k].data(),
                             want.params[k].size() * 4))
        << what << ": parameter " << k;
    KernelState a = want.kernels[k]->state(), b = got.kernels[k]->state();
    EXPECT_EQ(*a.counter, *b.counter) << what << ": tensor " << k;
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (size_t m = 0; m < a.tensors.size(); ++m)
      EXPECT_EQ(0,
                std::memcmp(a.tensors[m].second.data, b.tensors[m].second.data,
                            want.params[k].size() * 4))
          << what << ": " << a.tensors[m].first << " of tensor " << k;
  }
}

TEST(MultiTensorUpdate, TakesOverUpdatesOfTheSameRule) {
  Stage stage("adamw");
  EXPECT_EQ(stage.offer(), 2u);

  // Another learning rate, or a loss scale, is another launch.
  Stage other("sgd");
  plan::Instruction faster = updateOf("sgd", 0.0, 0.5);
  std::vector<float> p(4), g(4), scale = {1.0f, 0.0f, 0.0f};
  KernelArgs args;
  args.instruction = &faster;
  args.inputs = {viewOf(p), viewOf(g)};
  auto lookup = *KernelRegistry::instance().lookup("update", Backend::CPU);
  auto differs = lookup(args);
  args.inputs.push_back(viewOf(scale));
  auto scaled = lookup(args);
  Kernel *mixed[] = {other.kernels[1].get(), differs.get(),
                     other.kernels[2].get()};
  EXPECT_EQ(other.kernels[0]->takeOver(mixed, 3), 1u);
  Kernel *scaledOnly[] = {scaled.get()}, *plain[] = {other.kernels[2].get()};
  EXPECT_EQ(other.kernels[2]->takeOver(scaledOnly, 1), 0u);
  EXPECT_EQ(scaled->takeOver(plain, 1), 0u);
}

TEST(MultiTensorUpdate, EqualsOneKernelPerParameter) {
  for (const char *optimizer : {"sgd", "adamw", "adam"}) {
    Stage apart(optimizer), together(optimizer);
    ASSERT_EQ(together.offer(), 2u);
    for (int step = 1; step <= 4; ++step) {
      apart.step();
      together.step();
      ASSERT_NO_FATAL_FAILURE(expectSameBits(
          apart, together,
          std::string(optimizer) + " after step " + std::to_string(step)));
    }
    // Watched one by one (--profile), each updates itself, the same.
    apart.step();
    together.step(/*oneByOne=*/true);
    expectSameBits(apart, together, std::string(optimizer) + " one by one");
  }
}

TEST(MultiTensorUpdate, KernelsOfOtherCountsUpdateOneByOne) {
  Stage apart("adamw"), together("adamw");
  ASSERT_EQ(together.offer(), 2u);
  // A restored checkpoint whose second tensor has counted 3 updates.
  for (Stage *stage : {&apart, &together})
    *stage->kernels[1]->state().counter = 3;
  for (int step = 1; step <= 2; ++step) {
    apart.step();
    together.step();
  }
  expectSameBits(apart, together, "counts apart");
}

/// A plan of one device whose instructions are `updates` of tensors of 4
/// elements (a parameter and its gradient each), with `min_step` as given,
/// and an `add` between them where the list says -1.
plan::Plan updatesPlan(const std::vector<int> &minSteps) {
  plan::Plan plan;
  plan.set_strategy("single");
  plan::Device *device = plan.add_devices();
  device->set_arena_bytes(0);
  auto tensor = [&](const std::string &name, plan::TensorKind kind) {
    plan::Tensor *t = plan.add_tensors();
    t->set_id(plan.tensors_size() - 1);
    t->set_name(name);
    t->set_dtype(plan::F32);
    t->add_shape(4);
    t->set_bytes(16);
    t->set_kind(kind);
    t->set_trainable(kind == plan::PARAM);
    return t->id();
  };
  for (size_t k = 0; k < minSteps.size(); ++k) {
    std::string name = "w" + std::to_string(k);
    int p = tensor(name, plan::PARAM), g = tensor(name + ".grad", plan::BUFFER);
    plan::Instruction *instruction = device->add_instructions();
    if (minSteps[k] < 0) {
      instruction->set_op("add");
      instruction->add_inputs(g);
      instruction->add_inputs(g);
      instruction->add_outputs(g);
      continue;
    }
    *instruction = updateOf("sgd", 0.0);
    attribute(*instruction, "name")->set_s(name);
    instruction->set_phase("update");
    instruction->set_min_step(minSteps[k]);
    instruction->add_inputs(p);
    instruction->add_inputs(g);
  }
  return plan;
}

// The executor offers runs of adjacent updates that run at the same points
// of a step: an update after another op, or one that starts a step later
// (cdp's delayed stages), begins a run of its own.
TEST(MultiTensorUpdate, TheExecutorOffersAdjacentUpdatesOfOneStepOnly) {
  EXPECT_EQ(Executor(updatesPlan({0, 0, 0, 0}), 1, 0).launchesTakenOver(), 3);
  EXPECT_EQ(Executor(updatesPlan({0, 0, -1, 0, 0}), 1, 0).launchesTakenOver(),
            2);
  EXPECT_EQ(Executor(updatesPlan({0, 0, 1, 1, 1}), 1, 0).launchesTakenOver(),
            3);
}

} // namespace
