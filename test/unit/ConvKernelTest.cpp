//===- ConvKernelTest.cpp - the CPU convolutions, float32 and bf16 --------===//
//
// conv, conv_grad_input and conv_grad_weight through the CPU registry on
// operands exact in bf16, marked narrow_operands = bf16 or not, against a
// double-precision reference, to 1e-5 relative to the sum of |terms| (the
// products of two bf16 values are exact in float32, so float32 sums in any
// order land there). Where the processor has bf16 dot products the marked
// kernels must convolve in bf16; a marked operand holding a value bf16
// does not hold fails the run in one line.
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

struct ConvCase {
  std::vector<int64_t> x, w; ///< (N, C, H, W), (M, C / group, kH, kW)
  int64_t pad, stride, dilation, group;

  std::vector<int64_t> y() const {
    std::vector<int64_t> out = {x[0], w[0], 0, 0};
    for (int d = 0; d < 2; ++d)
      out[2 + d] =
          (x[2 + d] + 2 * pad - (w[2 + d] - 1) * dilation - 1) / stride + 1;
    return out;
  }
};

/// The three results of a convolution in double, and each one's sum of
/// |terms|: y = conv(x, w); dx and dw from dy.
struct Reference {
  std::vector<double> y, dx, dw, yScale, dxScale, dwScale;

  Reference(const ConvCase &c, const std::vector<float> &x,
            const std::vector<float> &w, const std::vector<float> &dy) {
    std::vector<int64_t> ys = c.y();
    y.assign(product(ys), 0);
    yScale = y;
    dx.assign(x.size(), 0);
    dxScale = dx;
    dw.assign(w.size(), 0);
    dwScale = dw;
    int64_t perGroupIn = c.w[1], perGroupOut = c.w[0] / c.group;
    for (int64_t n = 0; n < ys[0]; ++n)
      for (int64_t m = 0; m < ys[1]; ++m)
        for (int64_t oh = 0; oh < ys[2]; ++oh)
          for (int64_t ow = 0; ow < ys[3]; ++ow) {
            int64_t yi = ((n * ys[1] + m) * ys[2] + oh) * ys[3] + ow;
            int64_t g = m / perGroupOut;
            for (int64_t ci = 0; ci < perGroupIn; ++ci)
              for (int64_t kh = 0; kh < c.w[2]; ++kh)
                for (int64_t kw = 0; kw < c.w[3]; ++kw) {
                  int64_t ih = oh * c.stride - c.pad + kh * c.dilation,
                          iw = ow * c.stride - c.pad + kw * c.dilation;
                  if (ih < 0 || iw < 0 || ih >= c.x[2] || iw >= c.x[3])
                    continue;
                  int64_t xi =
                      ((n * c.x[1] + g * perGroupIn + ci) * c.x[2] + ih) *
                          c.x[3] +
                      iw;
                  int64_t wi =
                      ((m * perGroupIn + ci) * c.w[2] + kh) * c.w[3] + kw;
                  accumulate(y[yi], yScale[yi], double(x[xi]) * w[wi]);
                  accumulate(dx[xi], dxScale[xi], double(dy[yi]) * w[wi]);
                  accumulate(dw[wi], dwScale[wi], double(dy[yi]) * x[xi]);
                }
          }
  }

private:
  static void accumulate(double &sum, double &scale, double term) {
    sum += term;
    scale += std::fabs(term);
  }
};

/// Runs the registry's CPU kernel for `op` (a convolution of `c`'s window)
/// on `inputs` into a tensor of `outShape`, marked narrow_operands = bf16
/// where `marked`.
std::vector<float> runConv(const std::string &op, const ConvCase &c,
                           std::vector<TensorView> inputs,
                           const std::vector<int64_t> &outShape, bool marked) {
  plan::Instruction instruction;
  instruction.set_op(op);
  instruction.set_location("/layer/Conv");
  auto addInts = [&](const char *name, std::vector<int64_t> values) {
    plan::Attribute *attribute = instruction.add_attributes();
    attribute->set_name(name);
    for (int64_t v : values)
      attribute->mutable_ints()->add_values(v);
  };
  addInts("pads", {c.pad, c.pad, c.pad, c.pad});
  addInts("strides", {c.stride, c.stride});
  addInts("dilations", {c.dilation, c.dilation});
  plan::Attribute *group = instruction.add_attributes();
  group->set_name("group");
  group->set_i(c.group);
  if (marked)
    test::markNarrowOperands(instruction);
  std::vector<float> out(product(outShape), std::nanf(""));
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = std::move(inputs);
  args.outputs = {viewOf(out, outShape)};
  args.threads = 2;
  auto kernel = (*KernelRegistry::instance().lookup(op, Backend::CPU))(args);
  kernel->run(StepContext());
  return out;
}

void expectNear(const std::vector<float> &got, const std::vector<double> &want,
                const std::vector<double> &scale, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * scale[i] + 1e-30)
        << what << " element " << i;
}

const std::vector<ConvCase> kCases = {
    {{2, 16, 10, 10}, {32, 16, 3, 3}, 1, 1, 1, 1}, // a ResNet block's
    {{2, 16, 10, 10}, {32, 16, 3, 3}, 1, 2, 1, 1}, // strided
    {{2, 16, 9, 9}, {32, 16, 1, 1}, 0, 2, 1, 1},   // 1x1 downsample
    {{2, 3, 21, 21}, {16, 3, 7, 7}, 3, 2, 1, 1},   // a stem on 3 channels
    {{2, 16, 8, 8}, {32, 8, 3, 3}, 1, 1, 1, 2},    // grouped
    {{2, 16, 11, 11}, {16, 16, 3, 3}, 2, 1, 2, 1}, // dilated
};

/// Each case's three kernels, marked or not, against the reference; returns
/// how many of them were made on bf16 operands.
int64_t checkCases(bool marked) {
  std::mt19937 rng(29);
  int64_t before = cpu::bf16ConvolutionsMade();
  for (const ConvCase &c : kCases) {
    std::string name = "case x" + ::testing::PrintToString(c.x) + " w" +
                       ::testing::PrintToString(c.w) + " stride " +
                       std::to_string(c.stride);
    std::vector<int64_t> ys = c.y();
    std::vector<float> x = bf16Normal(rng, product(c.x)),
                       w = bf16Normal(rng, product(c.w)),
                       dy = bf16Normal(rng, product(ys));
    Reference want(c, x, w, dy);
    expectNear(runConv("conv", c, {viewOf(x, c.x), viewOf(w, c.w)}, ys, marked),
               want.y, want.yScale, "conv " + name);
    expectNear(runConv("conv_grad_input", c, {viewOf(dy, ys), viewOf(w, c.w)},
                       c.x, marked),
               want.dx, want.dxScale, "conv_grad_input " + name);
    expectNear(runConv("conv_grad_weight", c, {viewOf(dy, ys), viewOf(x, c.x)},
                       c.w, marked),
               want.dw, want.dwScale, "conv_grad_weight " + name);
  }
  return cpu::bf16ConvolutionsMade() - before;
}

TEST(ConvKernel, Float32MatchesTheReference) {
  EXPECT_EQ(checkCases(/*marked=*/false), 0);
}

TEST(ConvKernel, MarkedConvolutionsRunInBf16) {
  int64_t made = checkCases(/*marked=*/true);
  if (!cpu::processorHasBf16DotProducts())
    GTEST_SKIP() << "no bf16 dot products on this processor (oneDNN): the "
                    "marked kernels ran in float32 and matched";
  EXPECT_EQ(made, static_cast<int64_t>(3 * kCases.size()))
      << "not every marked convolution ran on bf16 operands";
}

TEST(ConvKernel, MarkedWithoutBf16DotProductsRunsInFloat32) {
  cpu::useBf16DotProducts(false);
  int64_t made = checkCases(/*marked=*/true);
  cpu::useBf16DotProducts(true);
  EXPECT_EQ(made, 0);
}

TEST(ConvKernel, WrongMarkFailsInOneLine) {
  const ConvCase &c = kCases[0];
  std::mt19937 rng(31);
  std::vector<float> x = bf16Normal(rng, product(c.x)),
                     w = bf16Normal(rng, product(c.w));
  w[5] = 1.0f + 1.0f / 1024; // not a bf16 value
  try {
    runConv("conv", c, {viewOf(x, c.x), viewOf(w, c.w)}, c.y(), true);
    FAIL() << "a marked convolution ran on a value bf16 does not hold";
  } catch (const RuntimeError &error) {
    std::string text = error.what();
    EXPECT_NE(text.find("conv at '/layer/Conv': operand weight holds"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("(element 5)"), std::string::npos) << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  }
}

} // namespace
