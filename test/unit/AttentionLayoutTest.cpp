//===- AttentionLayoutTest.cpp - attention reading the heads in place -----===//
//
// cdp.attention's layout "bshd" (cdp-fold-attention-transposes) reads q,
// the keys and v as the projections write them, (B, S, H, D), and writes
// its result and the gradients so. Checked on the CPU kernels: the same
// bits as the default layout run on the explicitly transposed operands,
// for the result, the stats and every gradient (a trained bias's too), in
// float32 with a scale and under narrow_operands (bf16), on one thread and
// on several (each with its own gathered matrices).
//
//===----------------------------------------------------------------------===//

#include "../../runtime/kernels/NarrowFloat.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace {

using namespace cdp;
using namespace cdp::runtime;

using Shape = std::vector<int64_t>;

struct Tensor {
  Shape shape;
  std::vector<float> values;
};

int64_t count(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// `t` (4-D) permuted: result dimension i is t's dimension perm[i].
Tensor permuted(const Tensor &t, const std::vector<int> &perm) {
  Tensor out;
  for (int p : perm)
    out.shape.push_back(t.shape[p]);
  out.values.resize(t.values.size());
  std::vector<int64_t> strides(4, 1);
  for (int d = 2; d >= 0; --d)
    strides[d] = strides[d + 1] * t.shape[d + 1];
  int64_t i = 0;
  for (int64_t a = 0; a < out.shape[0]; ++a)
    for (int64_t b = 0; b < out.shape[1]; ++b)
      for (int64_t c = 0; c < out.shape[2]; ++c)
        for (int64_t d = 0; d < out.shape[3]; ++d) {
          int64_t index[4] = {a, b, c, d}, from = 0;
          for (int k = 0; k < 4; ++k)
            from += index[k] * strides[perm[k]];
          out.values[i++] = t.values[from];
        }
  return out;
}

Tensor drawn(const Shape &shape, std::mt19937 &random, bool bf16) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor t{shape, std::vector<float>(count(shape))};
  for (float &x : t.values) {
    x = normal(random);
    if (bf16)
      x = roundToBfloat16(x);
  }
  return t;
}

struct Options {
  std::string layout;
  bool bf16 = false;
  double scale = 1.0;
  int threads = 1;
};

/// Runs the CPU kernel of `op` on `inputs`, into outputs of `shapes`.
std::vector<Tensor> run(const std::string &op, const Options &o,
                        std::vector<Tensor> inputs,
                        const std::vector<Shape> &shapes, bool biasGrad) {
  plan::Instruction instruction;
  instruction.set_op(op);
  auto attribute = [&](const char *name) {
    plan::Attribute *a = instruction.add_attributes();
    a->set_name(name);
    return a;
  };
  if (!o.layout.empty())
    attribute("layout")->set_s(o.layout);
  if (o.bf16)
    attribute("narrow_operands")->set_s("bf16");
  attribute("scale")->set_f(o.scale);
  if (biasGrad)
    attribute("with_bias_grad")->set_i(1);
  std::vector<Tensor> outputs;
  for (const Shape &shape : shapes)
    outputs.push_back({shape, std::vector<float>(count(shape), NAN)});
  auto view = [](Tensor &t) {
    return TensorView{t.values.data(), t.shape, plan::F32, MemorySpace::Host};
  };
  KernelArgs args;
  args.instruction = &instruction;
  for (Tensor &t : inputs)
    args.inputs.push_back(view(t));
  for (Tensor &t : outputs)
    args.outputs.push_back(view(t));
  args.threads = o.threads;
  (*KernelRegistry::instance().lookup(op, Backend::CPU))(args)->run(
      StepContext());
  return outputs;
}

const std::vector<int> kHeadsFirst = {0, 2, 1, 3}, kKeys = {0, 2, 3, 1},
                       kKeysBack = {0, 3, 1, 2};

void expectSameBits(const Tensor &want, const Tensor &got, const char *what) {
  ASSERT_EQ(want.shape, got.shape) << what;
  for (size_t i = 0; i < want.values.size(); ++i)
    ASSERT_EQ(want.values[i], got.values[i]) << what << " element " << i;
}

/// B = 2, M = 5 queries, N = 7 keys, H = 3 heads, K = 4, D = 6.
void checkLayouts(const Options &o) {
  std::mt19937 random(7);
  const int64_t B = 2, M = 5, N = 7, H = 3, K = 4, D = 6;
  Tensor q = drawn({B, M, H, K}, random, o.bf16),
         keys = drawn({B, N, H, K}, random, o.bf16),
         v = drawn({B, N, H, D}, random, o.bf16),
         bias = drawn({1, H, M, N}, random, false),
         grad = drawn({B, M, H, D}, random, o.bf16);
  Shape stats{B, H, M, 2};
  Options heads = o;
  heads.layout = "bshd";
  Tensor ql = permuted(q, kHeadsFirst), kl = permuted(keys, kKeys),
         vl = permuted(v, kHeadsFirst), gl = permuted(grad, kHeadsFirst);
  std::vector<Tensor> want =
      run("attention", o, {ql, kl, vl, bias}, {{B, H, M, D}, stats}, false);
  std::vector<Tensor> got =
      run("attention", heads, {q, keys, v, bias}, {{B, M, H, D}, stats}, false);
  expectSameBits(permuted(want[0], kHeadsFirst), got[0], "result");
  expectSameBits(want[1], got[1], "stats");
  std::vector<Tensor> wantGrads =
      run("attention_grad", o, {gl, ql, kl, vl, want[1], bias},
          {ql.shape, kl.shape, vl.shape, bias.shape}, true);
  std::vector<Tensor> gotGrads =
      run("attention_grad", heads, {grad, q, keys, v, got[1], bias},
          {q.shape, keys.shape, v.shape, bias.shape}, true);
  expectSameBits(permuted(wantGrads[0], kHeadsFirst), gotGrads[0], "q grad");
  expectSameBits(permuted(wantGrads[1], kKeysBack), gotGrads[1], "keys grad");
  expectSameBits(permuted(wantGrads[2], kHeadsFirst), gotGrads[2], "v grad");
  expectSameBits(wantGrads[3], gotGrads[3], "bias grad");
}

TEST(AttentionLayout, HeadsInPlaceEqualTransposedFloat32) {
  checkLayouts({"", false, 0.35, 1});
}

TEST(AttentionLayout, HeadsInPlaceEqualTransposedOnSeveralThreads) {
  checkLayouts({"", false, 0.35, 3});
}

TEST(AttentionLayout, HeadsInPlaceEqualTransposedBfloat16) {
  checkLayouts({"", true, 0.125, 2});
}

} // namespace
