//===- AttentionProductsTest.cpp - the CPU attention's bf16 products ------===//
//
// Under narrow_operands = bf16, where the processor has bf16 dot products,
// the CPU attention and its gradient run their products on them (the
// operands packed into 2-byte buffers, float32 sums), as a GPU's tensor
// cores do. They compute what the float32 products of the same values
// compute but for the sums' order: the result and the three gradients
// against the same kernels with the bf16 products turned off, to 1e-5
// relative to the largest value. Under "bshd" with 2-byte operands and
// results (GPT-2's attention under --precision bf16: q, k and v read from
// the 2-byte copies, the heads interleaved) the same, but for the results'
// own rounding to bf16. Each kernel holds its threads' buffers (the
// workspace of a kernel made without a device).
//
//===----------------------------------------------------------------------===//

#include "../../runtime/kernels/NarrowFloat.h"
#include "../../runtime/kernels/cpu/CpuKernels.h"
#include "Bf16Values.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace {

using namespace cdp;
using namespace cdp::runtime;

using cpu::product; // the elements of a shape

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
  explicit Tensor(std::vector<int64_t> s)
      : shape(std::move(s)), values(product(shape), std::nanf("")) {}
  TensorView view() {
    TensorView v;
    v.data = values.data();
    v.shape = shape;
    return v;
  }
};

Tensor bf16Normal(std::vector<int64_t> shape, std::mt19937 &rng) {
  std::normal_distribution<float> normal;
  Tensor t(std::move(shape));
  for (float &v : t.values)
    v = roundToBfloat16(normal(rng));
  return t;
}

/// Runs `op` with narrow_operands = bf16 and scale 0.125 on `inputs`
/// into `outputs` (views: float32 or 2-byte); returns the kernel's
/// workspace bytes.
int64_t runOnViews(const std::string &op, std::vector<TensorView> inputs,
                   std::vector<TensorView> outputs,
                   const std::string &layout = "bhsd") {
  plan::Instruction instruction;
  instruction.set_op(op);
  instruction.set_location("/attn/" + op);
  test::markNarrowOperands(instruction);
  plan::Attribute *scale = instruction.add_attributes();
  scale->set_name("scale");
  scale->set_f(0.125f);
  plan::Attribute *heads = instruction.add_attributes();
  heads->set_name("layout");
  heads->set_s(layout);
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = std::move(inputs);
  args.outputs = std::move(outputs);
  args.threads = 2;
  auto kernel = (*KernelRegistry::instance().lookup(op, Backend::CPU))(args);
  kernel->run(StepContext());
  return kernel->workspaceBytes();
}

int64_t run(const std::string &op, std::vector<Tensor *> inputs,
            std::vector<Tensor *> outputs, const std::string &layout = "bhsd") {
  std::vector<TensorView> in, out;
  for (Tensor *t : inputs)
    in.push_back(t->view());
  for (Tensor *t : outputs)
    out.push_back(t->view());
  return runOnViews(op, in, out, layout);
}

/// A tensor stored as bf16 bits (the plan's 2-byte copies), its values
/// widened for comparison.
struct Bf16Tensor {
  std::vector<int64_t> shape;
  std::vector<uint16_t> bits;
  explicit Bf16Tensor(const Tensor &t) : shape(t.shape) {
    for (float v : t.values)
      bits.push_back(bfloat16BitsOf(v));
  }
  explicit Bf16Tensor(std::vector<int64_t> s)
      : shape(std::move(s)), bits(product(shape), 0x7FC0) {}
  TensorView view() {
    TensorView v;
    v.data = bits.data();
    v.shape = shape;
    v.dtype = plan::BF16;
    return v;
  }
  Tensor widened() const {
    Tensor t(shape);
    for (size_t i = 0; i < bits.size(); ++i)
      t.values[i] = floatOfBfloat16(bits[i]);
    return t;
  }
};

/// `got` (a result stored in bf16) within its own rounding of `want`, plus
/// the sums' order's 1e-5 of the largest value.
void expectRoundedClose(const Tensor &got, const Tensor &want,
                        const char *what) {
  float largest = 0;
  for (float v : want.values)
    largest = std::max(largest, std::fabs(v));
  for (size_t i = 0; i < want.values.size(); ++i)
    ASSERT_NEAR(got.values[i], want.values[i],
                std::ldexp(std::fabs(want.values[i]), -8) + 1e-5f * largest)
        << what << ", element " << i;
}

void expectClose(const Tensor &got, const Tensor &want, const char *what) {
  float largest = 0;
  for (float v : want.values)
    largest = std::max(largest, std::fabs(v));
  ASSERT_GT(largest, 0.0f) << what;
  for (size_t i = 0; i < want.values.size(); ++i)
    ASSERT_NEAR(got.values[i], want.values[i], 1e-5f * largest)
        << what << ", element " << i;
}

TEST(AttentionProducts, Bf16DotProductsComputeTheFloatProducts) {
  if (!cpu::processorHasBf16DotProducts())
    GTEST_SKIP() << "no bf16 dot products on this processor (oneDNN)";
  std::mt19937 rng(17);
  // Two heads of 64 queries and keys, 32 wide: products of 64 x 64 x 32.
  Tensor q = bf16Normal({1, 2, 64, 32}, rng),
         k = bf16Normal({1, 2, 32, 64}, rng),
         v = bf16Normal({1, 2, 64, 32}, rng),
         grad = bf16Normal({1, 2, 64, 32}, rng);
  struct Results {
    Tensor out{{1, 2, 64, 32}}, stats{{1, 2, 64, 2}}, dq{{1, 2, 64, 32}},
        dk{{1, 2, 32, 64}}, dv{{1, 2, 64, 32}};
    int64_t forwardBytes = 0, backwardBytes = 0;
  };
  auto compute = [&](bool dotProducts) {
    cpu::useBf16DotProducts(dotProducts);
    Results r;
    r.forwardBytes = run("attention", {&q, &k, &v}, {&r.out, &r.stats});
    r.backwardBytes = run("attention_grad", {&grad, &q, &k, &v, &r.stats},
                          {&r.dq, &r.dk, &r.dv});
    cpu::useBf16DotProducts(true);
    return r;
  };
  Results floats = compute(false), bf16 = compute(true);
  // Each of the two threads holds at least the scores and dP, 64 x 64.
  const int64_t buffers = 2 * 2 * 64 * 64 * sizeof(float);
  for (const Results *r : {&floats, &bf16}) {
    EXPECT_GE(r->forwardBytes, buffers);
    EXPECT_GE(r->backwardBytes, buffers);
  }
  expectClose(bf16.out, floats.out, "result");
  expectClose(bf16.dq, floats.dq, "q's gradient");
  expectClose(bf16.dk, floats.dk, "the keys' gradient");
  expectClose(bf16.dv, floats.dv, "v's gradient");
}

TEST(AttentionProducts, TwoByteOperandsWithHeadsInterleaved) {
  if (!cpu::processorHasBf16DotProducts())
    GTEST_SKIP() << "no bf16 dot products on this processor (oneDNN)";
  std::mt19937 rng(23);
  // (B, S, H, D) = (1, 64, 3, 32): three heads of products 64 x 64 x 32.
  const std::vector<int64_t> shape{1, 64, 3, 32}, stats{1, 3, 64, 2};
  Tensor q = bf16Normal(shape, rng), k = bf16Normal(shape, rng),
         v = bf16Normal(shape, rng), grad = bf16Normal(shape, rng);
  // Float32 operands on float32 products: the reference.
  cpu::useBf16DotProducts(false);
  Tensor out(shape), st(stats), dq(shape), dk(shape), dv(shape);
  run("attention", {&q, &k, &v}, {&out, &st}, "bshd");
  run("attention_grad", {&grad, &q, &k, &v, &st}, {&dq, &dk, &dv}, "bshd");
  cpu::useBf16DotProducts(true);
  Bf16Tensor q2(q), k2(k), v2(v), grad2(grad), out2(shape), dq2(shape),
      dk2(shape), dv2(shape);
  Tensor st2(stats);
  runOnViews("attention", {q2.view(), k2.view(), v2.view()},
             {out2.view(), st2.view()}, "bshd");
  runOnViews("attention_grad",
             {grad2.view(), q2.view(), k2.view(), v2.view(), st2.view()},
             {dq2.view(), dk2.view(), dv2.view()}, "bshd");
  expectRoundedClose(out2.widened(), out, "result");
  expectClose(st2, st, "stats");
  expectRoundedClose(dq2.widened(), dq, "q's gradient");
  expectRoundedClose(dk2.widened(), dk, "the keys' gradient");
  expectRoundedClose(dv2.widened(), dv, "v's gradient");
}

} // namespace
