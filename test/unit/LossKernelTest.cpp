//===- LossKernelTest.cpp - the loss without its log-probabilities --------===//
//
// cdp-recompute-log-probabilities drops softmax_cross_entropy_loss's
// log-probabilities and has its gradient read the scores (from_scores).
// Both must give the bits of the kernels that store and read them: the pass
// changes memory, never a trained value.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Kernel.h"
#include "kernels/NarrowFloat.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace {

using namespace cdp::runtime;

TensorView view(void *data, std::vector<int64_t> shape, cdp::plan::DType type) {
  TensorView v;
  v.data = data;
  v.shape = std::move(shape);
  v.dtype = type;
  return v;
}

void runOnCpu(const cdp::plan::Instruction &instruction,
              std::vector<TensorView> inputs, std::vector<TensorView> outputs) {
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = std::move(inputs);
  args.outputs = std::move(outputs);
  (*KernelRegistry::instance().lookup(instruction.op(), Backend::CPU))(args)
      ->run(StepContext());
}

cdp::plan::Instruction lossInstruction(const std::string &op, bool fromScores) {
  cdp::plan::Instruction instruction;
  instruction.set_op(op);
  auto integer = [&](const char *name, int64_t value) {
    cdp::plan::Attribute *attribute = instruction.add_attributes();
    attribute->set_name(name);
    attribute->set_i(value);
  };
  integer("classes_last", 1);
  integer("ignore_index", 4);
  if (fromScores)
    integer("from_scores", 1);
  return instruction;
}

// A language model's shape, (batch, positions, classes), with wide scores
// (a row's max far from 0) and one ignored label: the lean loss and the
// gradient from the scores give the stored path's bits.
TEST(LossKernel, FromScoresGivesTheStoredLogProbabilitiesBits) {
  const int64_t batch = 2, positions = 3, classes = 37;
  std::mt19937 random(8);
  std::normal_distribution<float> normal(3.0f, 6.0f);
  std::vector<float> scores(batch * positions * classes);
  for (float &value : scores)
    value = normal(random);
  std::vector<int64_t> labels{0, 4, 36, 11, 5, 20};
  std::vector<int64_t> shape{batch, positions, classes};
  using cdp::plan::F32;
  using cdp::plan::I64;

  float storedLoss = 0, leanLoss = 0, dloss = 0.75f;
  std::vector<float> logp(scores.size());
  runOnCpu(lossInstruction("softmax_cross_entropy_loss", false),
           {view(scores.data(), shape, F32), view(labels.data(), {2, 3}, I64)},
           {view(&storedLoss, {}, F32), view(logp.data(), shape, F32)});
  runOnCpu(lossInstruction("softmax_cross_entropy_loss", false),
           {view(scores.data(), shape, F32), view(labels.data(), {2, 3}, I64)},
           {view(&leanLoss, {}, F32)});
  EXPECT_EQ(std::memcmp(&storedLoss, &leanLoss, sizeof(float)), 0)
      << storedLoss << " vs " << leanLoss;
  EXPECT_GT(storedLoss, 0.0f);

  std::vector<float> fromLogp(scores.size()), fromScores(scores.size());
  runOnCpu(lossInstruction("softmax_cross_entropy_loss_grad", false),
           {view(&dloss, {}, F32), view(logp.data(), shape, F32),
            view(labels.data(), {2, 3}, I64)},
           {view(fromLogp.data(), shape, F32)});
  runOnCpu(lossInstruction("softmax_cross_entropy_loss_grad", true),
           {view(&dloss, {}, F32), view(scores.data(), shape, F32),
            view(labels.data(), {2, 3}, I64)},
           {view(fromScores.data(), shape, F32)});
  EXPECT_EQ(std::memcmp(fromLogp.data(), fromScores.data(),
                        fromLogp.size() * sizeof(float)),
            0);
  // The ignored row (label 4) has no gradient; the others sum to 0.
  for (int64_t c = 0; c < classes; ++c)
    EXPECT_EQ(fromScores[1 * classes + c], 0.0f);
  double rowSum = 0;
  for (int64_t c = 0; c < classes; ++c)
    rowSum += fromScores[c];
  EXPECT_NEAR(rowSum, 0.0, 1e-6);
}

// The LM head's logits stored in 2 bytes (cdp-narrow-results): the loss
// and its gradient from the scores read the values the float32 copy holds.
TEST(LossKernel, TwoByteScoresReadAsTheirFloats) {
  const int64_t rows = 4, classes = 29;
  std::mt19937 random(10);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> wide(rows * classes);
  std::vector<uint16_t> narrow(wide.size());
  for (size_t k = 0; k < wide.size(); ++k) {
    wide[k] = cdp::roundToBfloat16(normal(random));
    narrow[k] = cdp::bfloat16BitsOf(wide[k]);
  }
  std::vector<int64_t> labels{3, 4, 28, 0};
  std::vector<int64_t> shape{rows, classes};
  using cdp::plan::BF16;
  using cdp::plan::F32;
  using cdp::plan::I64;
  float fromWide = 0, fromNarrow = 0, dloss = 1.0f;
  runOnCpu(lossInstruction("softmax_cross_entropy_loss", false),
           {view(wide.data(), shape, F32), view(labels.data(), {rows}, I64)},
           {view(&fromWide, {}, F32)});
  runOnCpu(lossInstruction("softmax_cross_entropy_loss", false),
           {view(narrow.data(), shape, BF16), view(labels.data(), {rows}, I64)},
           {view(&fromNarrow, {}, F32)});
  EXPECT_EQ(std::memcmp(&fromWide, &fromNarrow, sizeof(float)), 0);
  std::vector<float> gradWide(wide.size()), gradNarrow(wide.size());
  runOnCpu(lossInstruction("softmax_cross_entropy_loss_grad", true),
           {view(&dloss, {}, F32), view(wide.data(), shape, F32),
            view(labels.data(), {rows}, I64)},
           {view(gradWide.data(), shape, F32)});
  runOnCpu(lossInstruction("softmax_cross_entropy_loss_grad", true),
           {view(&dloss, {}, F32), view(narrow.data(), shape, BF16),
            view(labels.data(), {rows}, I64)},
           {view(gradNarrow.data(), shape, F32)});
  EXPECT_EQ(gradWide, gradNarrow);
}

} // namespace
