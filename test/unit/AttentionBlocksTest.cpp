//===- AttentionBlocksTest.cpp - attention skipping the masked scores -----===//
//
// The CPU attention computes each block of a slice's rows only over the
// columns its rows leave unmasked (AttentionBlocks.h). Checked: which
// columns a bias row leaves live (masks of -inf and of the lowest float,
// causal, left padding, fully masked rows, biases of unknown scale), how
// rows and columns fall into blocks, and the kernels themselves: with a
// causal mask and left padding over 200 queries and keys (blocks of 64,
// a last one of 8; 256 on bf16 operands; grouped-query too), the result, the
// stats and every gradient (a trained bias's too) equal those of the same
// kernels computing every score, to the float32 sums' order (1e-5 of the
// largest value; under bf16, where a sum landing elsewhere may round the other
// way, one rounding of the value and 1e-3 of the largest), in float32 and on
// bf16 operands, under both layouts.
//
//===----------------------------------------------------------------------===//

#include "../../runtime/kernels/cpu/AttentionBlocks.h"
#include "../../runtime/kernels/NarrowFloat.h"
#include "../../runtime/kernels/cpu/CpuKernels.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace {

using namespace cdp;
using namespace cdp::runtime;
using cpu::LiveColumns;
using cpu::ScoreBlock;
using cpu::ScoreBlocks;

const float kInf = std::numeric_limits<float>::infinity();
const float kLowest = std::numeric_limits<float>::lowest();

std::pair<int64_t, int64_t> liveOf(std::vector<float> row) {
  LiveColumns live;
  live.scan(row.data(), 1, static_cast<int64_t>(row.size()));
  return {live.lo(0), live.hi(0)};
}

TEST(AttentionBlocks, LiveColumnsOfABiasRow) {
  using Range = std::pair<int64_t, int64_t>;
  // Causal: the first three columns live, -inf or the lowest float after.
  EXPECT_EQ(liveOf({0, 0, 0, -kInf, -kInf}), Range(0, 3));
  EXPECT_EQ(liveOf({0.5f, -2, 1, kLowest, kLowest}), Range(0, 3));
  // Left padding and causal: a hole inside stays live.
  EXPECT_EQ(liveOf({kLowest, 0, kLowest, 0, -kInf}), Range(1, 4));
  // No live value: the row is computed whole.
  EXPECT_EQ(liveOf({-kInf, kLowest, -kInf}), Range(0, 3));
  // A value of unknown scale (between -1e30 and -1e20): whole.
  EXPECT_EQ(liveOf({0, -1e25f, kLowest, kLowest}), Range(0, 4));
  // A NaN is live, as is -1e4 (BERT's old masks: not skipped).
  EXPECT_EQ(liveOf({kLowest, NAN, kLowest}), Range(1, 2));
  EXPECT_EQ(liveOf({0, -1e4f, kLowest}), Range(0, 2));
}

TEST(AttentionBlocks, RowsAndColumnsInBlocks) {
  auto causal = [](int64_t r) { return std::pair<int64_t, int64_t>(0, r + 1); };
  ScoreBlocks blocks(200, 200, true);
  ASSERT_TRUE(blocks.skips());
  ASSERT_EQ(blocks.count(), 4);
  EXPECT_EQ(blocks.rowCounts(), (std::set<int64_t>{64, 8}));
  EXPECT_EQ(blocks.widths(),
            (std::set<int64_t>{8, 64, 72, 128, 136, 192, 200}));
  const int64_t want[4][4] = {
      {0, 64, 0, 64}, {64, 64, 0, 128}, {128, 64, 0, 192}, {192, 8, 0, 200}};
  for (int64_t b = 0; b < 4; ++b) {
    ScoreBlock block = blocks.block(b, causal);
    EXPECT_EQ(block.row, want[b][0]);
    EXPECT_EQ(block.rows, want[b][1]);
    EXPECT_EQ(block.lo, want[b][2]);
    EXPECT_EQ(block.width, want[b][3]);
  }
  // Padding: columns [70, 200) live, widened out to [64, 200).
  ScoreBlock padded = blocks.block(
      1, [](int64_t) { return std::pair<int64_t, int64_t>(70, 200); });
  EXPECT_EQ(padded.lo, 64);
  EXPECT_EQ(padded.width, 136);
  // Nothing to skip: one block of everything.
  for (ScoreBlocks whole :
       {ScoreBlocks(200, 200, false), ScoreBlocks(50, 64, true)}) {
    EXPECT_FALSE(whole.skips());
    EXPECT_EQ(whole.count(), 1);
  }
  EXPECT_EQ(ScoreBlocks(50, 64, true).block(0, causal).width, 64);
  // Long sequences: blocks of 128 rows from 1025 on (16 blocks a side).
  EXPECT_EQ(ScoreBlocks(2048, 2048, true).count(), 16);
}

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

Tensor normal(std::vector<int64_t> shape, std::mt19937 &rng, bool bf16) {
  std::normal_distribution<float> draw;
  Tensor t{shape, std::vector<float>(cpu::product(shape))};
  for (float &v : t.values)
    v = bf16 ? roundToBfloat16(draw(rng)) : draw(rng);
  return t;
}

struct Options {
  int64_t sequence;
  bool bf16;
  std::string layout;
  float mask;          // -inf or the lowest float
  int64_t kvHeads = 2; // 1: grouped-query attention, two queries a key
};

std::vector<Tensor> run(const std::string &op, const Options &o,
                        std::vector<Tensor> inputs,
                        std::vector<std::vector<int64_t>> shapes) {
  plan::Instruction instruction;
  instruction.set_op(op);
  instruction.set_location("/blocks/" + op);
  auto attribute = [&](const char *name) {
    plan::Attribute *a = instruction.add_attributes();
    a->set_name(name);
    return a;
  };
  attribute("scale")->set_f(0.17f);
  attribute("layout")->set_s(o.layout);
  attribute("zero_nan_rows")->set_i(1);
  if (o.bf16)
    attribute("narrow_operands")->set_s("bf16");
  std::vector<Tensor> outputs;
  for (auto &shape : shapes)
    outputs.push_back({shape, std::vector<float>(cpu::product(shape), NAN)});
  KernelArgs args;
  args.instruction = &instruction;
  auto view = [](Tensor &t) {
    return TensorView{t.values.data(), t.shape, plan::F32, MemorySpace::Host};
  };
  for (Tensor &t : inputs)
    args.inputs.push_back(view(t));
  for (Tensor &t : outputs)
    args.outputs.push_back(view(t));
  args.threads = 2;
  (*KernelRegistry::instance().lookup(op, Backend::CPU))(args)->run(
      StepContext());
  return outputs;
}

/// Within the float32 sums' order (1e-5 of the largest finite value); under
/// bf16 within one rounding of each value and 1e-3 of the largest (a sum
/// that lands elsewhere rounds dP or dS the other way, which the products
/// after carry); non-finite values (the stats of rows masked by -inf)
/// alike.
void expectClose(const Tensor &got, const Tensor &want, bool bf16,
                 const char *what) {
  float largest = 0;
  for (float v : want.values)
    if (std::isfinite(v))
      largest = std::max(largest, std::fabs(v));
  ASSERT_GT(largest, 0.0f) << what;
  for (size_t i = 0; i < want.values.size(); ++i) {
    float w = want.values[i], g = got.values[i];
    if (!std::isfinite(w)) {
      ASSERT_TRUE(w == g || (std::isnan(w) && std::isnan(g)))
          << what << ", element " << i << ": " << g << " for " << w;
      continue;
    }
    float tolerance =
        bf16 ? std::ldexp(std::fabs(w), -7) + 1e-3f * largest : 1e-5f * largest;
    ASSERT_NEAR(g, w, tolerance) << what << ", element " << i;
  }
}

/// B = 2, H = 2 (keys and v: o.kvHeads), `sequence` queries and keys, K =
/// D = 32; batch row 1 padded on the left by 70 tokens (its first 70 rows
/// fully masked). The gradients of the keys and v have H heads.
void checkSkipping(const Options &o) {
  const int64_t B = 2, H = 2, S = o.sequence, K = 32;
  std::mt19937 rng(11);
  bool heads = o.layout == "bshd";
  auto operandOf = [&](int64_t h) {
    return heads ? std::vector<int64_t>{B, S, h, K}
                 : std::vector<int64_t>{B, h, S, K};
  };
  auto keysOf = [&](int64_t h) {
    return heads ? operandOf(h) : std::vector<int64_t>{B, h, K, S};
  };
  std::vector<int64_t> operand = operandOf(H);
  Tensor q = normal(operand, rng, o.bf16),
         k = normal(keysOf(o.kvHeads), rng, o.bf16),
         v = normal(operandOf(o.kvHeads), rng, o.bf16),
         grad = normal(operand, rng, o.bf16);
  Tensor bias = normal({B, 1, S, S}, rng, false);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < S; ++r)
      for (int64_t c = 0; c < S; ++c)
        if (c > r || (b == 1 && c < 70))
          bias.values[(b * S + r) * S + c] = o.mask;
  std::vector<int64_t> stats{B, H, S, 2};
  auto both = [&](bool skip) {
    cpu::skipMaskedAttentionScores(skip);
    std::vector<Tensor> forward =
        run("attention", o, {q, k, v, bias}, {operand, stats});
    std::vector<Tensor> backward =
        run("attention_grad", o, {grad, q, k, v, forward[1], bias},
            {operand, keysOf(H), operand, bias.shape});
    cpu::skipMaskedAttentionScores(true);
    forward.insert(forward.end(), backward.begin(), backward.end());
    return forward;
  };
  std::vector<Tensor> whole = both(false), skipped = both(true);
  const char *names[] = {"result",     "stats",        "q's gradient",
                         "keys' grad", "v's gradient", "bias's gradient"};
  for (size_t i = 0; i < whole.size(); ++i)
    expectClose(skipped[i], whole[i], o.bf16, names[i]);
}

TEST(AttentionBlocks, SkippingEqualsEveryScoreFloat32) {
  checkSkipping({200, false, "bshd", -kInf});
  checkSkipping({200, false, "bhsd", kLowest});
  checkSkipping({200, false, "bshd", kLowest, 1});
}

// 256: every block's products large enough for the bf16 dot products (a
// block of 8 rows would send the kernel to its float32 products).
TEST(AttentionBlocks, SkippingEqualsEveryScoreBfloat16) {
  checkSkipping({256, true, "bshd", kLowest});
  checkSkipping({256, true, "bhsd", -kInf});
  checkSkipping({256, true, "bhsd", kLowest, 1});
}

} // namespace
