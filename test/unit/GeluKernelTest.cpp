//===- GeluKernelTest.cpp - GELU and its gradient on bf16 inputs ----------===//
//
// The CPU kernels of `gelu` and of its gradient (`unary_grad`), both of
// GELU's forms (erf, and the tanh approximation), on every bf16 value in
// [-12, 12] read from the 2-byte copies a bf16 plan keeps, against the
// formulas in double, written without cancellation (1 + erf(z) and
// 1 + tanh(u) lose every digit where they are near 0). The kernels compute
// the gate as erfc(-z) / 2 (z < -1) and sigmoid(2u) from exp(-2|u|), so
// they keep their relative precision in the negative tail too (PyTorch's
// float formula and oneDNN's GELU, which served these until 2026-12-02,
// give 0 from about x = -6 on): 4 (4 + |a|) ulp of the value, a the
// exponential's argument (2|u|, x^2 / 2), whose own rounding costs |a| ulp
// of it (the rest: the polynomials, and 1 + erf(z) for z in [-1, -0.5]).
// Then the storage cases, each the float32 kernel's bits: a float32 input
// with a bf16 round_result, a result stored in bf16 or fp16, 2-byte incoming
// gradients and saved inputs, lengths across the kernels' chunks, a result
// written over its input.
//
//===----------------------------------------------------------------------===//

#include "../../runtime/kernels/NarrowFloat.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

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

/// The exponential's argument in the kernels' gate (its magnitude).
double exponentOf(const Form &form, double x) {
  return form.gate == tanhGate ? 2.0 * tanhArgument(x) : 0.5 * x * x;
}

/// 4 (4 + |a|) ulp of `scale`; and where the gate is below the normal
/// floats, whose exponentials the kernels flush to 0, that of the smallest
/// normal times what multiplies it in the value and the gradient (x, and
/// x u' < |x| (1 + 0.14 x^2)).
double bound(const Form &form, double x, double scale) {
  double flushed = std::numeric_limits<float>::min() * (1 + std::fabs(x)) *
                   (1 + 0.14 * x * x);
  return 4 * (4 + std::fabs(exponentOf(form, x))) * kUlp * scale + flushed;
}
double forwardBound(const Form &form, double x, double want) {
  return bound(form, x, std::fabs(want));
}
double gradientBound(const Form &form, double x, double gate, double slope) {
  return bound(form, x, std::fabs(gate) + std::fabs(slope));
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
      ASSERT_NEAR(y[i], want, forwardBound(form, x, want))
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
      ASSERT_NEAR(dx[i], gate + slope, gradientBound(form, x, gate, slope))
          << form.kind << " at x = " << x;
    }
  }
}

/// `op` with string attributes `attributes` on `inputs` into `output`.
void runInto(const std::string &op,
             std::vector<std::pair<const char *, const char *>> attributes,
             std::vector<TensorView> inputs, TensorView output) {
  plan::Instruction instruction;
  instruction.set_op(op);
  for (auto [name, value] : attributes) {
    plan::Attribute *attribute = instruction.add_attributes();
    attribute->set_name(name);
    attribute->set_s(value);
  }
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = std::move(inputs);
  args.outputs = {output};
  args.threads = 2;
  (*KernelRegistry::instance().lookup(op, Backend::CPU))(args)->run(
      StepContext());
}

uint32_t bitsOf(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

/// Values spread over GELU's interesting range, and n of them.
std::vector<float> inputsOf(int64_t n) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = 7.0f * std::sin(0.61f * static_cast<float>(i)) - 1.0f;
  return x;
}

/// The storage cases' results hold the float32 kernel's `want`: rounded
/// to bf16, stored as its bf16 and its fp16 bits, and written over the
/// input.
void expectTheFloat32Bits(const std::vector<float> &want,
                          const std::vector<float> &rounded,
                          const std::vector<uint16_t> &stored,
                          const std::vector<uint16_t> &storedF16,
                          const std::vector<float> &inPlace,
                          const char *label) {
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(bitsOf(rounded[i]), bitsOf(roundToBfloat16(want[i])))
        << label << ", length " << want.size() << ", element " << i;
    ASSERT_EQ(stored[i], narrowBitsOf(want[i], true))
        << label << ", length " << want.size() << ", element " << i;
    ASSERT_EQ(storedF16[i], narrowBitsOf(want[i], false))
        << label << ", length " << want.size() << ", element " << i;
    ASSERT_EQ(bitsOf(inPlace[i]), bitsOf(want[i]))
        << label << ", length " << want.size() << ", element " << i;
  }
}

// Lengths below, at and across a chunk (4096) and one the threads share.
const int64_t kLengths[] = {1, 17, 4096, 4097, 70001};

TEST(GeluKernel, StorageCasesHoldTheFloat32KernelsBits) {
  for (const Form &form : kForms)
    for (int64_t n : kLengths) {
      std::vector<float> x = inputsOf(n), want(n);
      runInto("gelu", {{"approximate", form.name}},
              {viewOf(x.data(), n, plan::F32)},
              viewOf(want.data(), n, plan::F32));
      std::vector<float> rounded(n);
      runInto("gelu", {{"approximate", form.name}, {"round_result", "bf16"}},
              {viewOf(x.data(), n, plan::F32)},
              viewOf(rounded.data(), n, plan::F32));
      std::vector<uint16_t> stored(n), storedF16(n);
      runInto("gelu", {{"approximate", form.name}},
              {viewOf(x.data(), n, plan::F32)},
              viewOf(stored.data(), n, plan::BF16));
      runInto("gelu", {{"approximate", form.name}},
              {viewOf(x.data(), n, plan::F32)},
              viewOf(storedF16.data(), n, plan::F16));
      std::vector<float> inPlace = x;
      runInto("gelu", {{"approximate", form.name}},
              {viewOf(inPlace.data(), n, plan::F32)},
              viewOf(inPlace.data(), n, plan::F32));
      expectTheFloat32Bits(want, rounded, stored, storedF16, inPlace,
                           form.name);
    }
}

TEST(GeluKernel, GradientStorageCasesHoldTheFloat32KernelsBits) {
  for (const Form &form : kForms)
    for (int64_t n : kLengths) {
      std::vector<float> x = inputsOf(n), dy(n), want(n);
      std::vector<uint16_t> dyBits(n);
      for (int64_t i = 0; i < n; ++i) {
        dyBits[i] = narrowBitsOf(std::cos(0.3f * static_cast<float>(i)), true);
        dy[i] = floatOfBfloat16(dyBits[i]);
      }
      runInto("unary_grad", {{"kind", form.kind}},
              {viewOf(dy.data(), n, plan::F32), viewOf(x.data(), n, plan::F32)},
              viewOf(want.data(), n, plan::F32));
      std::vector<float> rounded(n);
      runInto("unary_grad", {{"kind", form.kind}, {"round_result", "bf16"}},
              {viewOf(dyBits.data(), n, plan::BF16),
               viewOf(x.data(), n, plan::F32)},
              viewOf(rounded.data(), n, plan::F32));
      std::vector<uint16_t> stored(n), storedF16(n);
      runInto("unary_grad", {{"kind", form.kind}},
              {viewOf(dyBits.data(), n, plan::BF16),
               viewOf(x.data(), n, plan::F32)},
              viewOf(stored.data(), n, plan::BF16));
      runInto("unary_grad", {{"kind", form.kind}},
              {viewOf(dy.data(), n, plan::F32), viewOf(x.data(), n, plan::F32)},
              viewOf(storedF16.data(), n, plan::F16));
      // A saved input stored in fp16: the kernel's bits on its values.
      std::vector<uint16_t> x16(n);
      std::vector<float> x16Values(n), fromValues(n), fromF16(n);
      for (int64_t i = 0; i < n; ++i) {
        x16[i] = narrowBitsOf(x[i], false);
        x16Values[i] = floatOfFloat16(x16[i]);
      }
      runInto("unary_grad", {{"kind", form.kind}},
              {viewOf(dy.data(), n, plan::F32),
               viewOf(x16Values.data(), n, plan::F32)},
              viewOf(fromValues.data(), n, plan::F32));
      runInto(
          "unary_grad", {{"kind", form.kind}},
          {viewOf(dy.data(), n, plan::F32), viewOf(x16.data(), n, plan::F16)},
          viewOf(fromF16.data(), n, plan::F32));
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(bitsOf(fromF16[i]), bitsOf(fromValues[i]))
            << form.kind << ", fp16 saved input, element " << i;
      std::vector<float> inPlace = dy;
      runInto("unary_grad", {{"kind", form.kind}},
              {viewOf(inPlace.data(), n, plan::F32),
               viewOf(x.data(), n, plan::F32)},
              viewOf(inPlace.data(), n, plan::F32));
      expectTheFloat32Bits(want, rounded, stored, storedF16, inPlace,
                           form.kind);
    }
}

} // namespace
