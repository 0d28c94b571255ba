//===- ReluGradientTest.cpp - ReLU's gradient over every storage ----------===//
//
// The CPU kernel of `unary_grad` of kind relu, dx = dy where the saved ReLU
// output y > 0, else 0 (PyTorch's threshold_backward), with y and dy read
// as float32 or as the 2-byte copies a --precision plan keeps, and dx
// written as float32, rounded (round_result) or in 2 bytes: bit for bit
// the formula, rounded after, on +0, -0, NaN, infinities, negative and
// positive saved values and incoming gradients that no 2-byte format holds.
//
//===----------------------------------------------------------------------===//

#include "../../runtime/kernels/NarrowFloat.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace {

using namespace cdp;
using namespace cdp::runtime;

/// A tensor of n values stored as `type`: float32, or the 2-byte patterns
/// of values exact in it.
struct Stored {
  plan::DType type;
  std::vector<float> values; ///< what the kernel reads
  std::vector<uint8_t> bytes;

  Stored(plan::DType type, std::vector<float> exact) : type(type) {
    values = std::move(exact);
    size_t width = type == plan::F32 ? 4 : 2;
    bytes.resize(values.size() * width);
    for (size_t i = 0; i < values.size(); ++i) {
      if (type == plan::F32) {
        std::memcpy(bytes.data() + 4 * i, &values[i], 4);
        continue;
      }
      uint16_t bits = narrowBitsOf(values[i], type == plan::BF16);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }

  TensorView view() {
    TensorView v;
    v.data = bytes.data();
    v.shape = {static_cast<int64_t>(values.size())};
    v.dtype = type;
    return v;
  }
};

float roundedTo(plan::DType type, float x) {
  return type == plan::BF16  ? roundToBfloat16(x)
         : type == plan::F16 ? roundToFloat16(x)
                             : x;
}

/// n values exact in `type`: the special ones first, then normal values.
std::vector<float> valuesIn(plan::DType type, int64_t n, std::mt19937 &rng) {
  std::vector<float> values = {0.0f,      -0.0f, std::nanf(""), INFINITY,
                               -INFINITY, 1e-3f, -1e-3f,        3.0f,
                               -3.0f,     0.0f,  -0.0f,         std::nanf("")};
  std::normal_distribution<float> normal;
  while (static_cast<int64_t>(values.size()) < n)
    values.push_back(normal(rng));
  for (float &v : values)
    v = roundedTo(type, v);
  std::shuffle(values.begin() + 2, values.end(), rng);
  return values;
}

/// Runs the registry's unary_grad (kind relu, `rounding` as round_result
/// where not empty) on dy and y, into `dx`.
void runReluGradient(Stored &dy, Stored &y, Stored &dx,
                     const std::string &rounding) {
  plan::Instruction instruction;
  instruction.set_op("unary_grad");
  plan::Attribute *kind = instruction.add_attributes();
  kind->set_name("kind");
  kind->set_s("relu");
  if (!rounding.empty()) {
    plan::Attribute *round = instruction.add_attributes();
    round->set_name("round_result");
    round->set_s(rounding);
  }
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = {dy.view(), y.view()};
  args.outputs = {dx.view()};
  args.threads = 2;
  (*KernelRegistry::instance().lookup("unary_grad", Backend::CPU))(args)->run(
      StepContext());
}

/// The bits of value i of `out`, widened to float32.
uint32_t bitsAt(const Stored &out, size_t i) {
  if (out.type == plan::F32) {
    uint32_t bits;
    std::memcpy(&bits, out.bytes.data() + 4 * i, 4);
    return bits;
  }
  uint16_t pattern;
  std::memcpy(&pattern, out.bytes.data() + 2 * i, 2);
  return bitsOf(out.type == plan::BF16 ? floatOfBfloat16(pattern)
                                       : floatOfFloat16(pattern));
}

struct Layout {
  plan::DType grad, saved, result;
  const char *rounding; ///< round_result, "" for none
};

TEST(ReluGradient, EqualsTheMaskedGradientRoundedAfter) {
  // 3 x 67,000 values: above the threshold that splits the loop over threads.
  const int64_t n = 201000;
  const Layout layouts[] = {
      {plan::F32, plan::F32, plan::F32, ""},
      {plan::F32, plan::BF16, plan::F32, "bf16"},
      {plan::BF16, plan::BF16, plan::F32, "bf16"},
      {plan::F32, plan::BF16, plan::BF16, "bf16"},
      {plan::BF16, plan::BF16, plan::BF16, "bf16"},
      {plan::F32, plan::F16, plan::F32, "f16"},
      {plan::F16, plan::F16, plan::F16, "f16"},
      {plan::F32, plan::F16, plan::F16, "f16"},
      {plan::F32, plan::BF16, plan::F32, ""},
  };
  for (const Layout &layout : layouts) {
    SCOPED_TRACE(std::to_string(layout.grad) + " " +
                 std::to_string(layout.saved) + " " +
                 std::to_string(layout.result) + " " + layout.rounding);
    std::mt19937 rng(7);
    Stored dy(layout.grad, valuesIn(layout.grad, n, rng));
    Stored y(layout.saved, valuesIn(layout.saved, n, rng));
    Stored dx(layout.result, std::vector<float>(n, std::nanf("")));
    runReluGradient(dy, y, dx, layout.rounding);
    plan::DType rounding = std::string(layout.rounding) == "bf16"  ? plan::BF16
                           : std::string(layout.rounding) == "f16" ? plan::F16
                                                                   : plan::F32;
    int64_t wrong = 0, passed = 0;
    for (int64_t i = 0; i < n; ++i) {
      float expected = y.values[i] > 0.0f ? dy.values[i] : 0.0f;
      expected = roundedTo(
          layout.result == plan::F32 ? rounding : layout.result, expected);
      passed += y.values[i] > 0.0f;
      float got = floatOf(bitsAt(dx, i));
      if (std::isnan(expected) ? !std::isnan(got)
                               : bitsOf(got) != bitsOf(expected))
        ++wrong;
    }
    EXPECT_EQ(wrong, 0);
    EXPECT_GT(passed, n / 3); // the mask is not all 0
  }
}

} // namespace
