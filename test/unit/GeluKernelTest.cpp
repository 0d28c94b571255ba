//===- GeluKernelTest.cpp - GELU and its gradient on bf16 inputs ----------===//
//
// The CPU kernels of `gelu` and of its gradient (`unary_grad`), both of
// GELU's forms (erf, and the tanh approximation), on every bf16 value in
// [-12, 12] read from the 2-byte copies a bf16 plan keeps, against the
// formulas in double, written without cancellation (1 + erf(z) and
// 1 + tanh(u) lose every digit where they are near 0): 32 ulp of the
// value, and in the negative tail an ulp of 1 in the gate, as PyTorch's
// float formula has (oneDNN's GELU, which serves these, loses its relative
// precision there as that formula does: 0 from about x = -6 on).
//
//===----------------------------------------------------------------------===//

#include "../../runtime/kernels/NarrowFloat.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>

namespace {

using namespace cdp;
using namespace cdp::runtime;

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

/// A GELU form in double: the gate g(x) with GELU(x) = x g(x), and
/// GELU'(x) as its two terms, g(x) and x g'(x).
struct Form {
  const char *name; ///< gelu's `approximate`
  const char *kind; ///< unary_grad's
  double (*gate)(double);
  double (*slope)(double); ///< x g'(x)
};

double tanhArgument(double x) {
  return std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
}
/// (1 + tanh(u)) / 2 = 1 / (1 + exp(-2u)).
double tanhGate(double x) {
  return 1.0 / (1.0 + std::exp(-2.0 * tanhArgument(x)));
}
/// x (1 - tanh(u)^2) u' / 2 = 2 x s (1 - s) u', 1 - s = s exp(-2u).
double tanhSlope(double x) {
  double s = tanhGate(x);
  return 2.0 * x * s * s * std::exp(-2.0 * tanhArgument(x)) *
         std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
}
/// (1 + erf(x / sqrt 2)) / 2 = erfc(-x / sqrt 2) / 2.
double erfGate(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double erfSlope(double x) {
  return x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

const Form kForms[] = {
    {"tanh", "gelu_tanh", tanhGate, tanhSlope},
    {"none", "gelu", erfGate, erfSlope},
};

/// One float ulp of 1.
const double kUlp = std::ldexp(1.0, -24);

/// What float arithmetic allows: 32 ulp of the value, and in the negative
/// tail, where the gate is 1 + erf(z) or 1 + tanh(u) of values near -1, an
/// absolute error of an ulp of 1 in the gate (2 ulp of x in the value),
/// which PyTorch's float formula has too; in the gradient also in 1 -
/// tanh(u)^2, which x u' / 2 multiplies (u' < 1 + 0.14 x^2).
double forwardBound(double x, double want) {
  return 32 * kUlp * std::fabs(want) + 2 * kUlp * std::fabs(x);
}
double gradientBound(double x, double gate, double slope) {
  return 32 * kUlp * (std::fabs(gate) + std::fabs(slope)) +
         2 * kUlp * (1 + std::fabs(x) * (1 + 0.14 * x * x));
}

TEST(GeluKernel, ForwardOnEveryBf16Value) {
  Bf16Range range;
  int64_t n = static_cast<int64_t>(range.values.size());
  for (const Form &form : kForms) {
    std::vector<float> y =
        runKernel("gelu", "approximate", form.name,
                  {viewOf(range.bits.data(), n, plan::BF16)}, n);
    for (int64_t i = 0; i < n; ++i) {
      double x = range.values[i], want = x * form.gate(x);
      ASSERT_NEAR(y[i], want, forwardBound(x, want))
          << form.name << " at x = " << x;
    }
  }
}

TEST(GeluKernel, GradientOnEveryBf16Value) {
  Bf16Range range;
  int64_t n = static_cast<int64_t>(range.values.size());
  std::vector<float> ones(n, 1.0f);
  for (const Form &form : kForms) {
    std::vector<float> dx =
        runKernel("unary_grad", "kind", form.kind,
                  {viewOf(ones.data(), n, plan::F32),
                   viewOf(range.bits.data(), n, plan::BF16)},
                  n);
    for (int64_t i = 0; i < n; ++i) {
      double x = range.values[i], gate = form.gate(x), slope = form.slope(x);
      // The two terms cancel near x = -0.75: the error scales with them.
      ASSERT_NEAR(dx[i], gate + slope, gradientBound(x, gate, slope))
          << form.kind << " at x = " << x;
    }
  }
}

} // namespace
