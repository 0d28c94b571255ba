//===- VectorMathTest.cpp - the vectorizable exp and its users ------------===//
//
// expInLoops against double-precision exp over the float range it serves
// (a sweep of bit patterns: within 2 ulp; 1 measured), its limits (0 below
// FLT_MIN's exponent, +inf above FLT_MAX's, NaN kept), and the CPU kernels
// that use it for GELU's tanh approximation on every bf16 value in
// [-12, 12] (the forward and the gradient, read from the 2-byte copies a
// bf16 plan keeps) against the formula in double.
//
//===----------------------------------------------------------------------===//

#include "../../runtime/kernels/cpu/VectorMath.h"
#include "../../runtime/kernels/NarrowFloat.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace {

using namespace cdp;
using namespace cdp::runtime;
using cpu::expInLoops;

int64_t bitsOf(float x) {
  int32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

/// How many floats apart `got` is from `want` rounded to float (both
/// positive).
int64_t ulpsApart(float got, double want) {
  return std::llabs(bitsOf(got) - bitsOf(static_cast<float>(want)));
}

TEST(VectorMath, ExpWithinTwoUlpWhereItIsNormal) {
  constexpr float kLow = -87.33f, kHigh = 88.72f;
  int64_t worst = 0, checked = 0;
  float worstAt = 0;
  // Every 101st bit pattern of the positive and the negative floats.
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t bits = 0; bits < 0x7f800000u; bits += 101) {
      uint32_t pattern = sign | bits;
      float x;
      std::memcpy(&x, &pattern, sizeof x);
      if (x < kLow || x > kHigh)
        continue;
      int64_t apart = ulpsApart(expInLoops(x), std::exp(double(x)));
      ++checked;
      if (apart > worst) {
        worst = apart;
        worstAt = x;
      }
    }
  EXPECT_GT(checked, 10000000);
  EXPECT_LE(worst, 2) << "at " << worstAt;
}

TEST(VectorMath, ExpLimits) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(expInLoops(0.0f), 1.0f);
  EXPECT_EQ(expInLoops(-0.0f), 1.0f);
  EXPECT_EQ(expInLoops(inf), inf);
  EXPECT_EQ(expInLoops(88.73f), inf);
  EXPECT_EQ(expInLoops(1e30f), inf);
  EXPECT_EQ(expInLoops(-inf), 0.0f);
  EXPECT_EQ(expInLoops(-87.35f), 0.0f); // exp is below FLT_MIN there
  EXPECT_EQ(expInLoops(-1e30f), 0.0f);
  EXPECT_GE(expInLoops(-87.33f), std::numeric_limits<float>::min());
  EXPECT_TRUE(std::isnan(expInLoops(std::nanf(""))));
  EXPECT_TRUE(std::isnan(expInLoops(-std::nanf(""))));
  // exp(1) and exp(-1) to the float nearest.
  EXPECT_LE(ulpsApart(expInLoops(1.0f), std::exp(1.0)), 1);
  EXPECT_LE(ulpsApart(expInLoops(-1.0f), std::exp(-1.0)), 1);
}

/// Every bf16 value in [-12, 12], as bits and as floats.
struct Bf16Range {
  std::vector<uint16_t> bits;
  std::vector<float> values;
  Bf16Range() {
    for (uint32_t pattern = 0; pattern < 0x10000u; ++pattern) {
      float x = floatOfBfloat16(static_cast<uint16_t>(pattern));
      if (std::fabs(x) <= 12.0f) {
        bits.push_back(static_cast<uint16_t>(pattern));
        values.push_back(x);
      }
    }
  }
};

TensorView viewOf(void *data, int64_t n, plan::DType type) {
  TensorView v;
  v.data = data;
  v.shape = {n};
  v.dtype = type;
  return v;
}

/// The registry's CPU kernel of `op` (its attribute `name` = `value`) on
/// `inputs`, into n float32 values.
std::vector<float> runKernel(const std::string &op, const char *name,
                             const char *value, std::vector<TensorView> inputs,
                             int64_t n) {
  plan::Instruction instruction;
  instruction.set_op(op);
  plan::Attribute *attribute = instruction.add_attributes();
  attribute->set_name(name);
  attribute->set_s(value);
  std::vector<float> out(n, std::nanf(""));
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = std::move(inputs);
  args.outputs = {viewOf(out.data(), n, plan::F32)};
  args.threads = 2;
  (*KernelRegistry::instance().lookup(op, Backend::CPU))(args)->run(
      StepContext());
  return out;
}

/// The tanh approximation's u and du/dx, in double.
double argument(double x) {
  return std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
}
double argumentSlope(double x) {
  return std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
}

/// Below this the kernels may give 0: exp(-2u) overflows where 2|u| >
/// 88.7 (x < -10), and float's 1 + tanh(u) is 0 already where |u| > 9.
constexpr double kFloor = 1e-30;

/// (1 + tanh(u)) / 2 in double without cancellation (1 + tanh(u) loses
/// all of double's digits where tanh(u) is near -1).
double gateOf(double x) { return 1.0 / (1.0 + std::exp(-2.0 * argument(x))); }

/// The relative error float arithmetic allows: u computed in float is
/// within about 4 ulp of u, which exp(-2u) turns into 8|u| ulp of the
/// gate where it is small (PyTorch's float 1 + tanh(u) alike), plus a few
/// roundings.
double tolerance(double x) {
  return (8.0 * std::fabs(argument(x)) + 8.0) * std::ldexp(1.0, -24);
}

TEST(VectorMath, GeluTanhOnEveryBf16Value) {
  Bf16Range range;
  int64_t n = static_cast<int64_t>(range.values.size());
  std::vector<float> y =
      runKernel("gelu", "approximate", "tanh",
                {viewOf(range.bits.data(), n, plan::BF16)}, n);
  for (int64_t i = 0; i < n; ++i) {
    double x = range.values[i];
    double want = x * gateOf(x);
    ASSERT_NEAR(y[i], want, tolerance(x) * std::fabs(want) + kFloor)
        << "x = " << x;
  }
}

TEST(VectorMath, GeluTanhGradientOnEveryBf16Value) {
  Bf16Range range;
  int64_t n = static_cast<int64_t>(range.values.size());
  std::vector<float> ones(n, 1.0f);
  std::vector<float> dx = runKernel("unary_grad", "kind", "gelu_tanh",
                                    {viewOf(ones.data(), n, plan::F32),
                                     viewOf(range.bits.data(), n, plan::BF16)},
                                    n);
  for (int64_t i = 0; i < n; ++i) {
    double x = range.values[i], gate = gateOf(x);
    // (1 - tanh(u)^2) / 2 = 2 s (1 - s), 1 - s = s exp(-2u).
    double slope =
        2.0 * x * gate * gate * std::exp(-2.0 * argument(x)) * argumentSlope(x);
    // Its two terms cancel near x = -0.75: the error scales with them.
    ASSERT_NEAR(dx[i], gate + slope,
                tolerance(x) * (std::fabs(gate) + std::fabs(slope)) + kFloor)
        << "x = " << x;
  }
}

} // namespace
