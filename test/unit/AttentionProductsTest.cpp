//===- AttentionProductsTest.cpp - the CPU attention's bf16 products ------===//
//
// Under narrow_operands = bf16, where the processor has bf16 dot products,
// the CPU attention and its gradient run their products on them (the
// operands packed into 2-byte buffers, float32 sums), as a GPU's tensor
// cores do. They compute what the float32 products of the same values
// compute but for the sums' order: the result and the three gradients
// against the same kernels with the bf16 products turned off, to 1e-5
// relative to the largest value. The bf16 kernels hold their operand
// buffers (the workspace of a kernel made without a device: larger).
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
/// into `outputs`; returns the kernel's workspace bytes.
int64_t run(const std::string &op, std::vector<Tensor *> inputs,
            std::vector<Tensor *> outputs) {
  plan::Instruction instruction;
  instruction.set_op(op);
  instruction.set_location("/attn/" + op);
  test::markNarrowOperands(instruction);
  plan::Attribute *scale = instruction.add_attributes();
  scale->set_name("scale");
  scale->set_f(0.125f);
  KernelArgs args;
  args.instruction = &instruction;
  for (Tensor *t : inputs)
    args.inputs.push_back(t->view());
  for (Tensor *t : outputs)
    args.outputs.push_back(t->view());
  args.threads = 2;
  auto kernel = (*KernelRegistry::instance().lookup(op, Backend::CPU))(args);
  kernel->run(StepContext());
  return kernel->workspaceBytes();
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
  EXPECT_GT(bf16.forwardBytes, floats.forwardBytes);
  EXPECT_GT(bf16.backwardBytes, floats.backwardBytes);
  expectClose(bf16.out, floats.out, "result");
  expectClose(bf16.dq, floats.dq, "q's gradient");
  expectClose(bf16.dk, floats.dk, "the keys' gradient");
  expectClose(bf16.dv, floats.dv, "v's gradient");
}

} // namespace
