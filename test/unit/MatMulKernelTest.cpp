//===- MatMulKernelTest.cpp - the CPU matmul kernel's paths ---------------===//
//
// The CPU matmul kernel picks one of four paths by shape: a single GEMM
// (one product, or a Linear's products stacked into rows), the small
// products' own loop (SmallMatMul.h, with B packed when transposed), or a
// GEMM per product. Each path, with every trans_a / trans_b combination,
// broadcast batch dimensions and 1-D operands, against a double-precision
// reference of numpy's matmul, to 1e-5 relative to the sum of |terms|.
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
using test::bf16Normal;
using test::viewOf;

/// Runs the registry's CPU matmul on (a, b) into a tensor of `yShape`.
std::vector<float>
runKernel(const std::vector<int64_t> &aShape, std::vector<float> &a,
          const std::vector<int64_t> &bShape, std::vector<float> &b,
          const std::vector<int64_t> &yShape, bool transA, bool transB,
          int threads, const std::string &narrow = "") {
  plan::Instruction instruction;
  instruction.set_op("matmul");
  instruction.set_location("/attn/MatMul");
  if (!narrow.empty())
    test::markNarrowOperands(instruction, narrow);
  for (auto [name, value] : {std::pair<const char *, bool>{"trans_a", transA},
                             {"trans_b", transB}}) {
    plan::Attribute *attribute = instruction.add_attributes();
    attribute->set_name(name);
    attribute->set_i(value);
  }
  std::vector<float> y(product(yShape), std::nanf(""));
  auto view = [](std::vector<float> &data, const std::vector<int64_t> &shape) {
    TensorView v;
    v.data = data.data();
    v.shape = shape;
    v.dtype = plan::F32;
    return v;
  };
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = {view(a, aShape), view(b, bShape)};
  args.outputs = {view(y, yShape)};
  args.threads = threads;
  auto kernel =
      (*KernelRegistry::instance().lookup("matmul", Backend::CPU))(args);
  kernel->run(StepContext());
  return y;
}

struct Case {
  std::vector<int64_t> a, b, y; ///< shapes as stored
  bool transA, transB;
};

/// numpy's matmul in double, with the stored operands read through the
/// trans flags; also the sum of |terms| per element, the error's scale.
void reference(const Case &c, const std::vector<float> &a,
               const std::vector<float> &b, std::vector<double> &y,
               std::vector<double> &scale) {
  std::vector<int64_t> as = c.a, bs = c.b;
  bool aVector = as.size() == 1, bVector = bs.size() == 1;
  if (aVector)
    as.insert(as.begin(), 1);
  if (bVector)
    bs.push_back(1);
  int64_t ar = as[as.size() - 2], ac = as.back(), br = bs[bs.size() - 2],
          bc = bs.back();
  int64_t m = c.transA ? ac : ar, k = c.transA ? ar : ac,
          n = c.transB ? br : bc;
  size_t rank = std::max(as.size(), bs.size()) - 2;
  auto batchOf = [&](const std::vector<int64_t> &s) {
    std::vector<int64_t> out(rank + 2 - s.size(), 1);
    out.insert(out.end(), s.begin(), s.end() - 2);
    return out;
  };
  std::vector<int64_t> ab = batchOf(as), bb = batchOf(bs), batch(rank);
  for (size_t d = 0; d < rank; ++d)
    batch[d] = std::max(ab[d], bb[d]);
  int64_t count = product(batch);
  y.assign(count * m * n, 0.0);
  scale.assign(count * m * n, 0.0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t ia = 0, ib = 0, rest = i;
    std::vector<int64_t> position(rank);
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
      position[d] = rest % batch[d];
      rest /= batch[d];
    }
    for (size_t d = 0; d < rank; ++d) {
      ia = ia * ab[d] + (ab[d] == 1 ? 0 : position[d]);
      ib = ib * bb[d] + (bb[d] == 1 ? 0 : position[d]);
    }
    const float *pa = a.data() + ia * ar * ac, *pb = b.data() + ib * br * bc;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t col = 0; col < n; ++col)
        for (int64_t p = 0; p < k; ++p) {
          double term = double(c.transA ? pa[p * ac + r] : pa[r * ac + p]) *
                        double(c.transB ? pb[col * bc + p] : pb[p * bc + col]);
          y[(i * m + r) * n + col] += term;
          scale[(i * m + r) * n + col] += std::fabs(term);
        }
  }
}

TEST(MatMulKernel, EveryPathMatchesNumpyInDouble) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<Case> cases = {
      // small products (attention over 6 tokens), each flag combination
      {{32, 6, 8}, {32, 8, 6}, {32, 6, 6}, false, false},
      {{32, 8, 6}, {32, 8, 6}, {32, 6, 6}, true, false},
      {{32, 6, 8}, {32, 6, 8}, {32, 6, 6}, false, true},
      {{32, 8, 6}, {32, 6, 8}, {32, 6, 6}, true, true},
      // edges of the 8-wide columns and 4-row tiles; broadcast batch
      {{3, 1, 7, 5}, {4, 5, 13}, {3, 4, 7, 13}, false, false},
      {{2, 5, 9}, {9, 3}, {2, 5, 3}, false, false},
      // a Linear over a sequence: rows stacked into one GEMM
      {{16, 8, 64}, {64, 48}, {16, 8, 48}, false, false},
      {{16, 8, 64}, {48, 64}, {16, 8, 48}, false, true},
      // one GEMM per product, transposed operands, broadcast A
      {{40, 24}, {3, 24, 40}, {3, 24, 24}, true, true},
      {{5, 20, 30}, {5, 20, 33}, {5, 30, 33}, true, false},
      // 1-D operands
      {{7}, {7, 3}, {3}, false, false},
      {{4, 7}, {7}, {4}, false, false},
      {{2, 7, 4}, {7}, {2, 4}, true, false},
  };
  for (const Case &c : cases)
    for (int threads : {1, 3}) {
      std::vector<float> a(product(c.a)), b(product(c.b));
      for (float &v : a)
        v = normal(rng);
      for (float &v : b)
        v = normal(rng);
      std::vector<float> y =
          runKernel(c.a, a, c.b, b, c.y, c.transA, c.transB, threads);
      std::vector<double> want, scale;
      reference(c, a, b, want, scale);
      ASSERT_EQ(y.size(), want.size());
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], want[i], 1e-5 * scale[i] + 1e-30)
            << "case a" << ::testing::PrintToString(c.a) << " b"
            << ::testing::PrintToString(c.b) << " trans " << c.transA
            << c.transB << ", " << threads << " threads, element " << i;
    }
}

/// The message a run of the kernel fails with, or "" when it runs.
std::string failureOf(const std::function<void()> &run) {
  try {
    run();
  } catch (const RuntimeError &e) {
    return e.what();
  }
  return "";
}

// A product marked narrow_operands (a GPU multiplies it in bf16 or fp16)
// computes as an unmarked one on the CPU, and fails the step, naming the
// instruction, the operand and the element, when an operand holds a value
// the format does not: the CPU backend checks each mark the compiler makes.
TEST(MatMulKernel, NarrowOperandsAreChecked) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> a(4 * 6 * 5), b(4 * 5 * 3);
  for (float &v : a)
    v = cdp::roundToBfloat16(normal(rng));
  for (float &v : b)
    v = cdp::roundToBfloat16(normal(rng));
  std::vector<int64_t> as{4, 6, 5}, bs{4, 5, 3}, ys{4, 6, 3};
  std::vector<float> plain = runKernel(as, a, bs, b, ys, false, false, 1);
  std::vector<float> marked =
      runKernel(as, a, bs, b, ys, false, false, 1, "bf16");
  EXPECT_EQ(plain, marked);

  std::vector<float> inexact = b;
  inexact[7] = std::nextafter(inexact[7], 10.0f);
  std::string message = failureOf(
      [&] { runKernel(as, a, bs, inexact, ys, false, false, 1, "bf16"); });
  EXPECT_NE(message.find("matmul at '/attn/MatMul': operand B holds"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("(element 7)"), std::string::npos) << message;
  EXPECT_NE(message.find("(bf16)"), std::string::npos) << message;

  // Every bf16 value of this range is also an fp16 one, but 2^-30 is
  // below fp16's smallest step.
  EXPECT_EQ(
      failureOf([&] { runKernel(as, a, bs, b, ys, false, false, 1, "f16"); }),
      "");
  std::vector<float> tiny = a;
  tiny[0] = std::ldexp(1.0f, -30);
  EXPECT_NE(failureOf([&] {
              runKernel(as, tiny, bs, b, ys, false, false, 1, "f16");
            }).find("operand A holds"),
            std::string::npos);

  EXPECT_NE(failureOf([&] {
              runKernel(as, a, bs, b, ys, false, false, 1, "fp8");
            }).find("narrow_operands must be bf16 or f16, got 'fp8'"),
            std::string::npos);
}

// A product reading 2-byte operands (cdp-read-narrow-operands) widens them
// into buffers of its own, its workspace, and computes exactly what the
// float32 product of the same values does: matmul with a bf16 A, with an
// fp16 B, with both, and a gemm with a bf16 B and a bias.
TEST(MatMulKernel, ReadsTwoByteOperands) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<int64_t> as{4, 6, 5}, bs{4, 5, 3}, ys{4, 6, 3};
  std::vector<float> a(product(as)), b(product(bs));
  for (float &v : a)
    v = cdp::roundToBfloat16(normal(rng));
  for (float &v : b)
    v = cdp::roundToFloat16(cdp::roundToBfloat16(normal(rng)));
  std::vector<uint16_t> aBits(a.size()), bBf16(b.size()), bF16(b.size());
  for (size_t i = 0; i < a.size(); ++i)
    aBits[i] = cdp::bfloat16BitsOf(a[i]);
  for (size_t i = 0; i < b.size(); ++i) {
    bBf16[i] = cdp::bfloat16BitsOf(b[i]);
    bF16[i] = cdp::float16BitsOf(b[i]);
  }
  auto run = [&](const std::string &op, const std::string &format, TensorView x,
                 TensorView w, std::vector<TensorView> extra,
                 std::vector<int64_t> outShape, int64_t *workspace) {
    plan::Instruction instruction;
    instruction.set_op(op);
    instruction.set_location("/mlp/" + op);
    plan::Attribute *mark = instruction.add_attributes();
    mark->set_name("narrow_operands");
    mark->set_s(format);
    std::vector<float> y(product(outShape), std::nanf(""));
    KernelArgs args;
    args.instruction = &instruction;
    args.inputs = {x, w};
    for (const TensorView &v : extra)
      args.inputs.push_back(v);
    TensorView out;
    out.data = y.data();
    out.shape = outShape;
    args.outputs = {out};
    auto kernel = (*KernelRegistry::instance().lookup(op, Backend::CPU))(args);
    kernel->run(StepContext());
    *workspace = kernel->workspaceBytes();
    return y;
  };
  auto f32 = [](std::vector<float> &data, std::vector<int64_t> shape) {
    TensorView v;
    v.data = data.data();
    v.shape = std::move(shape);
    return v;
  };
  auto narrow = [](std::vector<uint16_t> &bits, std::vector<int64_t> shape,
                   plan::DType dtype) {
    TensorView v;
    v.data = bits.data();
    v.shape = std::move(shape);
    v.dtype = dtype;
    return v;
  };
  int64_t workspace = 0;
  std::vector<float> expected =
      run("matmul", "f16", f32(a, as), f32(b, bs), {}, ys, &workspace);
  EXPECT_EQ(workspace, 0);
  EXPECT_EQ(run("matmul", "bf16", narrow(aBits, as, plan::BF16), f32(b, bs), {},
                ys, &workspace),
            expected);
  EXPECT_EQ(workspace, product(as) * 4);
  EXPECT_EQ(run("matmul", "f16", f32(a, as), narrow(bF16, bs, plan::F16), {},
                ys, &workspace),
            expected);
  EXPECT_EQ(workspace, product(bs) * 4);
  std::vector<uint16_t> aOnly(aBits.begin(), aBits.begin() + 30);
  std::vector<float> a2(a.begin(), a.begin() + 30),
      b2(b.begin(), b.begin() + 15), bias{0.5f, -1.0f, 2.0f};
  std::vector<uint16_t> b2Bits(bBf16.begin(), bBf16.begin() + 15);
  std::vector<float> gemmPlain =
      run("gemm", "bf16", f32(a2, {6, 5}), f32(b2, {5, 3}), {f32(bias, {3})},
          {6, 3}, &workspace);
  EXPECT_EQ(run("gemm", "bf16", narrow(aOnly, {6, 5}, plan::BF16),
                narrow(b2Bits, {5, 3}, plan::BF16), {f32(bias, {3})}, {6, 3},
                &workspace),
            gemmPlain);
  EXPECT_EQ(workspace, (30 + 15) * 4);
}

/// A product run through the registry: its result as float32 (2-byte
/// results widened), and whether it is a bf16 product on the dot
/// products (nativeBf16Product takes it).
struct ProductRun {
  std::vector<float> values;
  bool native = false;
};

ProductRun runProduct(const std::string &op,
                      const std::vector<std::pair<std::string, double>> &attrs,
                      std::vector<TensorView> inputs,
                      const std::vector<int64_t> &outShape,
                      plan::DType outType = plan::F32) {
  plan::Instruction instruction;
  instruction.set_op(op);
  instruction.set_location("/h/" + op);
  test::markNarrowOperands(instruction);
  for (const auto &[name, value] : attrs) {
    plan::Attribute *attribute = instruction.add_attributes();
    attribute->set_name(name);
    if (name == "activation") // the only one Gemm takes
      attribute->set_s("relu");
    else if (name == "alpha" || name == "beta")
      attribute->set_f(static_cast<float>(value));
    else
      attribute->set_i(static_cast<int64_t>(value));
  }
  std::vector<float> y(product(outShape), std::nanf(""));
  std::vector<uint16_t> narrowY(product(outShape), 0xffff);
  TensorView out;
  out.data = outType == plan::F32 ? static_cast<void *>(y.data())
                                  : static_cast<void *>(narrowY.data());
  out.shape = outShape;
  out.dtype = outType;
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = std::move(inputs);
  args.outputs = {out};
  args.threads = 2;
  auto kernel = (*KernelRegistry::instance().lookup(op, Backend::CPU))(args);
  kernel->run(StepContext());
  if (outType != plan::F32)
    for (size_t i = 0; i < y.size(); ++i)
      y[i] = cdp::floatOfBfloat16(narrowY[i]);
  cdp::runtime::cpu::KernelScratch scratch(args);
  bool native =
      static_cast<bool>(cdp::runtime::cpu::nativeBf16Product(args, scratch));
  return {y, native};
}

/// The sum of term(p) for p < k in double, and the sum of their magnitudes.
template <typename Term>
std::pair<double, double> dotInDouble(int64_t k, const Term &term) {
  double sum = 0, size = 0;
  for (int64_t p = 0; p < k; ++p) {
    sum += term(p);
    size += std::fabs(term(p));
  }
  return {sum, size};
}

// Where the processor has bf16 dot products, a product marked bf16 runs as
// oneDNN's matmul on 2-byte operands (float32 operands packed into 2
// bytes, an operand stored so read as it lies), with float32 sums:
// each path's shapes (rows stacked, batched with broadcast and transposes),
// a weight gradient's A^T B (inner product), a gemm's alpha, beta, bias and
// ReLU, and a result stored in bf16, against
// numpy's matmul in double, to 1e-5 relative to the sum of |terms|.
TEST(MatMulKernel, Bf16ProductsOnDotProducts) {
  if (!cdp::runtime::cpu::processorHasBf16DotProducts())
    GTEST_SKIP() << "no bf16 dot products on this processor (oneDNN)";
  std::mt19937 rng(13);
  std::vector<Case> cases = {
      {{16, 8, 64}, {64, 48}, {16, 8, 48}, false, false},
      {{16, 8, 64}, {48, 64}, {16, 8, 48}, false, true},
      {{3, 1, 17, 40}, {4, 40, 13}, {3, 4, 17, 13}, false, false},
      {{40, 24}, {3, 24, 40}, {3, 24, 24}, true, true},
      {{5, 20, 30}, {5, 20, 33}, {5, 30, 33}, true, false},
  };
  for (const Case &c : cases) {
    std::vector<float> a = bf16Normal(rng, product(c.a)),
                       b = bf16Normal(rng, product(c.b));
    ProductRun run =
        runProduct("matmul", {{"trans_a", c.transA}, {"trans_b", c.transB}},
                   {viewOf(a, c.a), viewOf(b, c.b)}, c.y);
    EXPECT_TRUE(run.native)
        << "not the bf16 product: case a" << ::testing::PrintToString(c.a);
    std::vector<double> want, scale;
    reference(c, a, b, want, scale);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(run.values[i], want[i], 1e-5 * scale[i] + 1e-30)
          << "case a" << ::testing::PrintToString(c.a) << " element " << i;
  }

  // A stored in bf16 is read as it lies.
  Case stacked = cases[0];
  std::vector<float> a = bf16Normal(rng, product(stacked.a)),
                     b = bf16Normal(rng, product(stacked.b));
  std::vector<uint16_t> aBits(a.size());
  for (size_t i = 0; i < a.size(); ++i)
    aBits[i] = cdp::bfloat16BitsOf(a[i]);
  TensorView narrowA;
  narrowA.data = aBits.data();
  narrowA.shape = stacked.a;
  narrowA.dtype = plan::BF16;
  ProductRun fromBits =
      runProduct("matmul", {}, {narrowA, viewOf(b, stacked.b)}, stacked.y);
  EXPECT_TRUE(fromBits.native);
  EXPECT_EQ(fromBits.values,
            runProduct("matmul", {},
                       {viewOf(a, stacked.a), viewOf(b, stacked.b)}, stacked.y)
                .values);

  // Y = A^T B, 2-D with nothing added (a weight's gradient X^T dY): as
  // oneDNN's inner-product weight gradient, float32 and stored in bf16;
  // with alpha 0.5 through the matmul primitive.
  {
    int64_t k = 96, m = 40, n = 56;
    std::vector<float> x = bf16Normal(rng, k * m), dy = bf16Normal(rng, k * n);
    for (double alpha : {1.0, 0.5})
      for (plan::DType outType : {plan::F32, plan::BF16}) {
        int64_t before = cdp::runtime::cpu::bf16WeightGradientsMade();
        ProductRun run = runProduct("gemm", {{"trans_a", 1}, {"alpha", alpha}},
                                    {viewOf(x, {k, m}), viewOf(dy, {k, n})},
                                    {m, n}, outType);
        EXPECT_TRUE(run.native);
        // runProduct makes the kernel twice (the run, then the check).
        EXPECT_EQ(cdp::runtime::cpu::bf16WeightGradientsMade() - before,
                  alpha == 1.0 ? 2 : 0)
            << "alpha " << alpha;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            auto [sum, size] = dotInDouble(k, [&](int64_t p) {
              return double(x[p * m + i]) * dy[p * n + j];
            });
            double want = alpha * sum, tolerance = 1e-5 * alpha * size + 1e-30;
            if (outType == plan::BF16)
              tolerance += std::fabs(want) * std::ldexp(1.0, -8);
            ASSERT_NEAR(run.values[i * n + j], want, tolerance)
                << "alpha " << alpha << ", element " << i << "," << j;
          }
      }
  }

  // gemm: relu(alpha A B^T + beta C), C a bias row (oneDNN's bias where
  // alpha and beta are 1) or a whole matrix (written into Y, summed by
  // oneDNN); the result stored in bf16 is written by oneDNN, rounded to
  // nearest even from the float32 sums, but where C is summed into Y
  // (a 2-byte Y cannot hold C exactly): that gemm runs in float32.
  int64_t m = 24, n = 20, k = 36;
  std::vector<float> ga = bf16Normal(rng, m * k), gb = bf16Normal(rng, n * k),
                     row = bf16Normal(rng, n), full = bf16Normal(rng, m * n);
  for (bool wholeC : {false, true})
    for (double alpha : {0.5, 1.0})
      for (plan::DType outType : {plan::F32, plan::BF16}) {
        double beta = alpha == 1.0 ? 1.0 : 2.0;
        std::vector<int64_t> cShape =
            wholeC ? std::vector<int64_t>{m, n} : std::vector<int64_t>{n};
        std::vector<float> &cValues = wholeC ? full : row;
        ProductRun run = runProduct(
            "gemm",
            {{"trans_b", 1},
             {"alpha", alpha},
             {"beta", beta},
             {"activation", 0}},
            {viewOf(ga, {m, k}), viewOf(gb, {n, k}), viewOf(cValues, cShape)},
            {m, n}, outType);
        bool summed = wholeC || alpha != 1.0;
        EXPECT_EQ(run.native, !(summed && outType == plan::BF16))
            << "C " << (wholeC ? "whole" : "row") << ", alpha " << alpha;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            auto [sum, size] = dotInDouble(k, [&](int64_t p) {
              return double(ga[i * k + p]) * gb[j * k + p];
            });
            double c = cValues[wholeC ? i * n + j : j];
            double want = std::max(alpha * sum + beta * c, 0.0);
            double got = run.values[i * n + j];
            double tolerance =
                1e-5 * (alpha * size + beta * std::fabs(c)) + 1e-30;
            if (outType == plan::BF16)
              tolerance += std::fabs(want) * std::ldexp(1.0, -8);
            ASSERT_NEAR(got, want, tolerance)
                << "C " << (wholeC ? "whole" : "row") << ", alpha " << alpha
                << ", element " << i << "," << j;
          }
      }
}
} // namespace
