//===- LossScaleTest.cpp - dynamic loss scaling's kernels -----------------===//
//
// GradScaler's rules worked by hand: the scale halves on an overflow and
// the clean steps restart; after `growth_interval` clean steps it doubles;
// the gradients are multiplied by 1 / scale; an update that names the
// loss-scale buffer leaves its parameter, momentum and step count alone on
// an overflowed step.
//
//===----------------------------------------------------------------------===//

#include "kernels/LossScale.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace cdp;
using namespace cdp::runtime;

namespace {

TensorView viewOf(std::vector<float> &values) {
  TensorView view;
  view.data = values.data();
  view.shape = {static_cast<int64_t>(values.size())};
  view.dtype = plan::F32;
  return view;
}

std::unique_ptr<Kernel> kernelFor(plan::Instruction &instruction,
                                  std::vector<TensorView> inputs,
                                  std::vector<TensorView> outputs = {}) {
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = std::move(inputs);
  args.outputs = std::move(outputs);
  return (*KernelRegistry::instance().lookup(instruction.op(), Backend::CPU))(
      args);
}

void setInt(plan::Instruction &instruction, const char *name, int64_t value) {
  plan::Attribute *a = instruction.add_attributes();
  a->set_name(name);
  a->set_i(value);
}

TEST(LossScale, HalvesOnOverflowAndDoublesAfterTheInterval) {
  float state[3] = {65536.0f, 0.0f, 0.0f};
  adjustLossScale(state, /*overflow=*/true, 2.0f, 0.5f, 3);
  EXPECT_EQ(state[kScale], 32768.0f);
  EXPECT_EQ(state[kOverflow], 1.0f);
  for (int step = 1; step <= 2; ++step) {
    adjustLossScale(state, false, 2.0f, 0.5f, 3);
    EXPECT_EQ(state[kScale], 32768.0f) << "clean step " << step;
    EXPECT_EQ(state[kCleanSteps], static_cast<float>(step));
    EXPECT_EQ(state[kOverflow], 0.0f);
  }
  adjustLossScale(state, false, 2.0f, 0.5f, 3); // the third clean step
  EXPECT_EQ(state[kScale], 65536.0f);
  EXPECT_EQ(state[kCleanSteps], 0.0f);
  // An overflow resets the clean steps counted so far.
  adjustLossScale(state, false, 2.0f, 0.5f, 3);
  adjustLossScale(state, true, 2.0f, 0.5f, 3);
  EXPECT_EQ(state[kCleanSteps], 0.0f);
  EXPECT_EQ(state[kScale], 32768.0f);
  // Growth that would not be finite keeps the scale (as GradScaler does).
  float top[3] = {std::numeric_limits<float>::max(), 0.0f, 0.0f};
  adjustLossScale(top, false, 2.0f, 0.5f, 1);
  EXPECT_EQ(top[kScale], std::numeric_limits<float>::max());
}

TEST(LossScale, UnscalesTheGradientsAndNotesAnOverflow) {
  plan::Instruction instruction;
  instruction.set_op("unscale_grads");
  setInt(instruction, "growth_interval", 2000);
  std::vector<float> state = {4.0f, 5.0f, 0.0f}, g = {4.0f, -8.0f, 2.0f},
                     h = {1.0f};
  auto kernel = kernelFor(instruction, {viewOf(state), viewOf(g), viewOf(h)});
  kernel->run(StepContext());
  EXPECT_EQ(g, (std::vector<float>{1.0f, -2.0f, 0.5f}));
  EXPECT_EQ(h, (std::vector<float>{0.25f}));
  EXPECT_EQ(state, (std::vector<float>{4.0f, 6.0f, 0.0f}));
  // An infinity in any gradient (a NaN likewise) marks the step.
  g[1] = INFINITY;
  kernel->run(StepContext());
  EXPECT_EQ(state, (std::vector<float>{2.0f, 0.0f, 1.0f}));
  h[0] = NAN;
  g[1] = 1.0f;
  kernel->run(StepContext());
  EXPECT_EQ(state, (std::vector<float>{1.0f, 0.0f, 1.0f}));
}

// cdp's own gradients (`adjust` 0): unscaled before they are reduced, the
// buffer only read, even where a gradient overflowed (the flag that rides
// in the reductions says so; the scale is adjusted where the means arrive).
TEST(LossScale, UnscalesOwnGradientsWithoutAdjusting) {
  plan::Instruction instruction;
  instruction.set_op("unscale_grads");
  setInt(instruction, "adjust", 0);
  std::vector<float> state = {4.0f, 5.0f, 0.0f}, g = {4.0f, INFINITY};
  auto kernel = kernelFor(instruction, {viewOf(state), viewOf(g)});
  kernel->run(StepContext());
  EXPECT_EQ(g[0], 1.0f);
  EXPECT_EQ(state, (std::vector<float>{4.0f, 5.0f, 0.0f}));
}

// cdp v2's marks (`adjust` 2): the buffer's skip flag set from a stage's
// mean flag, the scale and its clean steps kept.
TEST(LossScale, MarksTheSkipFlagOnly) {
  plan::Instruction instruction;
  instruction.set_op("unscale_grads");
  setInt(instruction, "adjust", 2);
  setInt(instruction, "flags", 1);
  std::vector<float> state = {4.0f, 5.0f, 0.0f}, flag = {0.5f};
  auto kernel = kernelFor(instruction, {viewOf(state), viewOf(flag)});
  kernel->run(StepContext());
  EXPECT_EQ(state, (std::vector<float>{4.0f, 5.0f, 1.0f}));
  flag[0] = 0.0f;
  kernel->run(StepContext());
  EXPECT_EQ(state, (std::vector<float>{4.0f, 5.0f, 0.0f}));
}

// A pipeline stage's flag: 1 where any of its gradients is not finite.
TEST(LossScale, FindsAnInfinityOrNaNAmongTheGradients) {
  plan::Instruction instruction;
  instruction.set_op("found_inf");
  std::vector<float> g = {1e30f, -2.0f}, h = {0.0f}, flag = {7.0f};
  auto kernel = kernelFor(instruction, {viewOf(g), viewOf(h)}, {viewOf(flag)});
  kernel->run(StepContext());
  EXPECT_EQ(flag[0], 0.0f);
  h[0] = -INFINITY;
  kernel->run(StepContext());
  EXPECT_EQ(flag[0], 1.0f);
  h[0] = NAN;
  kernel->run(StepContext());
  EXPECT_EQ(flag[0], 1.0f);
  // A stage with no trained parameter (the loss's, frozen) has no overflow.
  kernelFor(instruction, {}, {viewOf(flag)})->run(StepContext());
  EXPECT_EQ(flag[0], 0.0f);
}

// With `flags`, every stage's flag after the buffer: any one set skips the
// step on this stage, whose own gradients are finite, and its scale halves
// as the other stages' do; the gradients are unscaled all the same.
TEST(LossScale, AnotherStagesFlagMarksTheStep) {
  plan::Instruction instruction;
  instruction.set_op("unscale_grads");
  setInt(instruction, "growth_interval", 2000);
  setInt(instruction, "flags", 2);
  std::vector<float> state = {4.0f, 5.0f, 0.0f}, mine = {0.0f}, theirs = {0.0f},
                     g = {4.0f, -8.0f};
  auto kernel = kernelFor(
      instruction, {viewOf(state), viewOf(mine), viewOf(theirs), viewOf(g)});
  kernel->run(StepContext());
  EXPECT_EQ(g, (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(state, (std::vector<float>{4.0f, 6.0f, 0.0f}));
  theirs[0] = 1.0f;
  kernel->run(StepContext());
  EXPECT_EQ(g, (std::vector<float>{0.25f, -0.5f}));
  EXPECT_EQ(state, (std::vector<float>{2.0f, 0.0f, 1.0f}));
  // No gradients of its own (the loss's stage, frozen): the flags alone.
  plan::Instruction bare = instruction;
  std::vector<float> seedState = {4.0f, 0.0f, 0.0f};
  kernelFor(bare, {viewOf(seedState), viewOf(mine), viewOf(theirs)})
      ->run(StepContext());
  EXPECT_EQ(seedState, (std::vector<float>{2.0f, 0.0f, 1.0f}));
}

TEST(LossScale, SeedsTheBackwardWithTheScale) {
  plan::Instruction instruction;
  instruction.set_op("loss_scale");
  std::vector<float> state = {1024.0f, 3.0f, 0.0f}, seed = {0.0f};
  kernelFor(instruction, {viewOf(state)}, {viewOf(seed)})->run(StepContext());
  EXPECT_EQ(seed[0], 1024.0f);
}

TEST(LossScale, AnUpdateSkipsAnOverflowedStep) {
  plan::Instruction instruction;
  instruction.set_op("update");
  plan::Attribute *a = instruction.add_attributes();
  a->set_name("optimizer");
  a->set_s("sgd");
  a = instruction.add_attributes();
  a->set_name("lr");
  a->set_f(0.5);
  a = instruction.add_attributes();
  a->set_name("momentum");
  a->set_f(0.9);
  std::vector<float> w = {1.0f, 2.0f}, g = {2.0f, 4.0f},
                     state = {8.0f, 0.0f, 1.0f};
  auto kernel = kernelFor(instruction, {viewOf(w), viewOf(g), viewOf(state)});
  kernel->run(StepContext());
  KernelState s = kernel->state();
  EXPECT_EQ(w, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(*s.counter, 0);
  EXPECT_EQ(s.tensors[0].second.f32()[0], 0.0f); // momentum untouched
  state[kOverflow] = 0.0f;
  kernel->run(StepContext());
  EXPECT_EQ(w, (std::vector<float>{0.0f, 0.0f})); // w - 0.5 g, buffer = g
  EXPECT_EQ(*s.counter, 1);
}

} // namespace
