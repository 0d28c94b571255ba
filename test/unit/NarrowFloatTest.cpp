//===- NarrowFloatTest.cpp - cdp.round_to's arithmetic --------------------===//
//
// Values worked by hand from the formats: bf16 keeps 8 significant bits
// (1 + 7 stored), fp16 11 (1 + 10) down to 2^-14 and steps of 2^-24 below,
// its largest finite value 65504; both round to nearest, ties to even.
//
//===----------------------------------------------------------------------===//

#include "kernels/NarrowFloat.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Kernel.h"
#include "cdp/Runtime/OpTable.h"
#include "cdp/Runtime/Signatures.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace {

using cdp::bfloat16BitsOf;
using cdp::bitsOf;
using cdp::float16BitsOf;
using cdp::floatOfBfloat16;
using cdp::floatOfFloat16;
using cdp::roundedBfloat16BitsOf;
using cdp::roundToBfloat16;
using cdp::roundToFloat16;

/// A kernel's view of `data`: `shape` values of `dtype`.
cdp::runtime::TensorView viewOf(void *data, std::vector<int64_t> shape,
                                cdp::plan::DType dtype) {
  cdp::runtime::TensorView v;
  v.data = data;
  v.shape = std::move(shape);
  v.dtype = dtype;
  return v;
}

/// Runs `instruction`'s CPU kernel on the views, its signature checked first
/// as the executor checks it.
void runCpuKernel(const cdp::plan::Instruction &instruction,
                  std::vector<cdp::runtime::TensorView> inputs,
                  std::vector<cdp::runtime::TensorView> outputs) {
  using namespace cdp::runtime;
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = std::move(inputs);
  args.outputs = std::move(outputs);
  checkSignature(args);
  (*KernelRegistry::instance().lookup(instruction.op(), Backend::CPU))(args)
      ->run(StepContext());
}

/// `n` draws of `normal`, each rounded to bf16 (values exact in 2 bytes).
std::vector<float> bfloat16Values(std::mt19937 &random,
                                  std::normal_distribution<float> &normal,
                                  size_t n) {
  std::vector<float> values(n);
  for (float &value : values)
    value = roundToBfloat16(normal(random));
  return values;
}

TEST(NarrowFloat, Bfloat16KeepsEightBitsTiesToEven) {
  EXPECT_EQ(roundToBfloat16(1.0f), 1.0f);
  // Steps of 2^-7 above 1: 1 + 2^-8 is a tie, to the even 1; 1 + 3 * 2^-8
  // ties to the even 1 + 2^-6 (1 + 2^-7 is odd).
  EXPECT_EQ(roundToBfloat16(1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(roundToBfloat16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(roundToBfloat16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(roundToBfloat16(-3.14159265f), -3.140625f);
  EXPECT_EQ(roundToBfloat16(1e-40f), 1e-40f - std::fmod(1e-40f, 0x1p-133f));
  // Past the largest bf16 (about 3.39e38) float32's largest rounds up to
  // infinity; NaN stays NaN.
  EXPECT_EQ(roundToBfloat16(std::numeric_limits<float>::max()), INFINITY);
  EXPECT_TRUE(std::isnan(roundToBfloat16(NAN)));
  EXPECT_EQ(roundToBfloat16(-INFINITY), -INFINITY);
}

TEST(NarrowFloat, Float16OverflowsAndStepsBelowItsNormals) {
  EXPECT_EQ(roundToFloat16(1.0f + 0x1p-11f), 1.0f); // tie, to even
  EXPECT_EQ(roundToFloat16(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);
  EXPECT_EQ(roundToFloat16(0.1f), 0.0999755859375f);
  EXPECT_EQ(roundToFloat16(65504.0f), 65504.0f);
  EXPECT_EQ(roundToFloat16(65519.0f), 65504.0f);
  EXPECT_EQ(roundToFloat16(65520.0f), INFINITY); // tie, to the even 2^16
  EXPECT_EQ(roundToFloat16(-1e6f), -INFINITY);
  // Subnormals: multiples of 2^-24; 1.5 steps ties to the even 2 steps,
  // half a step to the even 0.
  EXPECT_EQ(roundToFloat16(1.5f * 0x1p-24f), 2 * 0x1p-24f);
  EXPECT_EQ(roundToFloat16(0.5f * 0x1p-24f), 0.0f);
  EXPECT_EQ(roundToFloat16(0x1p-14f - 0x1p-26f), 0x1p-14f);
  EXPECT_TRUE(std::isnan(roundToFloat16(NAN)));
}

// cdp.pack_narrow's patterns, every one of the 65536 of each format: the
// float32 value a pattern stands for is exact in its format (round_to keeps
// it), and packs back to the same pattern; a NaN packs to its sign's quiet
// NaN. So packing what round_to made and unpacking it is bit-identical.
TEST(NarrowFloat, EveryPatternPacksBackToItself) {
  for (uint32_t p = 0; p <= 0xFFFFu; ++p) {
    auto pattern = static_cast<uint16_t>(p);
    float b = floatOfBfloat16(pattern), h = floatOfFloat16(pattern);
    if (std::isnan(b)) {
      EXPECT_EQ(bfloat16BitsOf(b), (pattern & 0x8000u) | 0x7FC0u) << p;
    } else {
      EXPECT_EQ(bitsOf(roundToBfloat16(b)), bitsOf(b)) << p;
      EXPECT_EQ(bfloat16BitsOf(b), pattern) << p;
    }
    if (std::isnan(h)) {
      EXPECT_EQ(float16BitsOf(h) & 0xFE00u, (pattern & 0x8000u) | 0x7E00u) << p;
      continue;
    }
    EXPECT_EQ(bitsOf(roundToFloat16(h)), bitsOf(h)) << p;
    EXPECT_EQ(float16BitsOf(h), pattern) << p;
  }
  // fp16's extremes by value: the smallest subnormal, the largest finite.
  EXPECT_EQ(floatOfFloat16(0x0001), 0x1p-24f);
  EXPECT_EQ(floatOfFloat16(0x7BFF), 65504.0f);
  EXPECT_EQ(floatOfFloat16(0x8000), -0.0f);
  EXPECT_TRUE(std::signbit(floatOfFloat16(0x8000)));
}

// narrowBitsOf's bf16 pattern in one step is the rounding then the
// packing it replaced, on every 61st float bit pattern (both signs, NaNs,
// infinities, subnormals, the largest finite values that round to
// infinity) and the patterns around each rounding boundary.
TEST(NarrowFloat, RoundedBfloat16BitsAreRoundingThenPacking) {
  auto check = [](uint32_t pattern) {
    float x;
    std::memcpy(&x, &pattern, sizeof x);
    ASSERT_EQ(roundedBfloat16BitsOf(x), bfloat16BitsOf(roundToBfloat16(x)))
        << "pattern 0x" << std::hex << pattern;
  };
  for (uint64_t pattern = 0; pattern <= 0xFFFFFFFFull; pattern += 61)
    check(static_cast<uint32_t>(pattern));
  for (uint32_t high = 0; high < 0x10000u; high += 7)
    for (uint32_t low : {0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu, 0x0u})
      check(high << 16 | low);
  for (uint32_t pattern : {0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u, 0x7F800001u,
                           0xFFC00000u, 0x7FFFFFFFu, 0x00000001u})
    check(pattern);
}

// cdp.pack_narrow rounds what is not exact yet, as round_to does (to
// nearest, ties to even; NaN stays NaN), so cdp-read-narrow-operands may
// fold a round_to into the pack that alone reads it: the CPU kernel's
// patterns of values between, exactly halfway between and on each format's
// values are those of the rounded values.
TEST(NarrowFloat, PackRoundsAsRoundToDoes) {
  using namespace cdp::runtime;
  std::vector<float> x = {1.0f + 0x1p-8f,   1.0f + 0x1p-9f, 1.0f + 3 * 0x1p-9f,
                          -2.5f + 0x1p-20f, 65519.0f,       1e-9f,
                          0x1p-24f,         3.0f,           NAN};
  std::mt19937 random(5);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  for (int i = 0; i < 1000; ++i)
    x.push_back(normal(random));
  for (bool bf16 : {true, false}) {
    cdp::plan::Instruction instruction;
    instruction.set_op("pack_narrow");
    cdp::plan::Attribute *format = instruction.add_attributes();
    format->set_name("format");
    format->set_s(bf16 ? "bf16" : "f16");
    std::vector<uint16_t> packed(x.size());
    TensorView in, out;
    in.data = x.data();
    in.shape = {static_cast<int64_t>(x.size())};
    out.data = packed.data();
    out.shape = in.shape;
    out.dtype = bf16 ? cdp::plan::BF16 : cdp::plan::F16;
    KernelArgs args;
    args.instruction = &instruction;
    args.inputs = {in};
    args.outputs = {out};
    (*KernelRegistry::instance().lookup("pack_narrow", Backend::CPU))(args)
        ->run(StepContext());
    for (size_t i = 0; i < x.size(); ++i) {
      float rounded = bf16 ? roundToBfloat16(x[i]) : roundToFloat16(x[i]);
      float unpacked =
          bf16 ? floatOfBfloat16(packed[i]) : floatOfFloat16(packed[i]);
      if (std::isnan(rounded))
        EXPECT_TRUE(std::isnan(unpacked)) << i;
      else
        EXPECT_EQ(bitsOf(unpacked), bitsOf(rounded)) << bf16 << " " << i;
    }
  }
}

/// The CPU kernel of `op` on (a, b) with `round_result` when `rounding` is
/// set: a binary op on both, dropout (training, 30 %) on `a`, its gradient
/// on `a` with every other element kept, a product of both as 8 x 8
/// matrices, GELU of `a`, GELU's gradient (`a` at `b`), softmax's gradient
/// (`a` at the output `b`, rows of 8), the loss's gradient at log-probabilities
/// `-a` (8 rows of 8 classes, label i on row i), a training batch norm of
/// `a` as 2 x 4 x 8 (scale, bias and running statistics from `b`) and its
/// gradient (dy = `a` at x = `b`).
std::vector<float> runRounding(const std::string &op, std::vector<float> a,
                               std::vector<float> b,
                               const std::string &rounding) {
  using namespace cdp::runtime;
  cdp::plan::Instruction instruction;
  instruction.set_op(op);
  auto attribute = [&](const char *name) {
    cdp::plan::Attribute *added = instruction.add_attributes();
    added->set_name(name);
    return added;
  };
  if (!rounding.empty())
    attribute("round_result")->set_s(rounding);
  std::vector<float> y(a.size());
  std::vector<uint8_t> mask(a.size());
  std::vector<int64_t> labels(8);
  std::vector<float> stats(16);
  float one = 1.0f;
  for (size_t i = 0; i < mask.size(); ++i)
    mask[i] = i % 2;
  auto view = [](void *data, size_t n, cdp::plan::DType dtype) {
    TensorView v;
    v.data = data;
    v.shape = {static_cast<int64_t>(n)};
    v.dtype = dtype;
    return v;
  };
  TensorView va = view(a.data(), a.size(), cdp::plan::F32),
             vy = view(y.data(), y.size(), cdp::plan::F32),
             vm = view(mask.data(), mask.size(), cdp::plan::BOOL);
  KernelArgs args;
  args.instruction = &instruction;
  if (op == "dropout") {
    attribute("training_mode")->set_i(1);
    attribute("ratio")->set_f(0.3);
    attribute("seed")->set_i(5);
    args.inputs = {va};
    args.outputs = {vy, vm};
  } else if (op == "dropout_grad") {
    attribute("ratio")->set_f(0.3);
    args.inputs = {va, vm};
    args.outputs = {vy};
  } else if (op == "matmul" || op == "gemm" ||
             op == "softmax_grad") { // 8 x 8 by 8 x 8
    TensorView vb = view(b.data(), b.size(), cdp::plan::F32);
    for (TensorView *v : {&va, &vb, &vy})
      v->shape = {8, 8};
    args.inputs = {va, vb};
    args.outputs = {vy};
  } else if (op == "gelu") {
    args.inputs = {va};
    args.outputs = {vy};
  } else if (op == "unary_grad") {
    attribute("kind")->set_s("gelu");
    args.inputs = {va, view(b.data(), b.size(), cdp::plan::F32)};
    args.outputs = {vy};
  } else if (op == "attention") { // softmax(a b) b, 8 x 8 each
    TensorView vb = view(b.data(), b.size(), cdp::plan::F32),
               vs = view(stats.data(), stats.size(), cdp::plan::F32);
    for (TensorView *v : {&va, &vb, &vy})
      v->shape = {8, 8};
    vs.shape = {8, 2};
    args.inputs = {va, vb, vb};
    args.outputs = {vy, vs};
  } else if (op == "layer_norm") { // rows of 8, scale b[0, 8)
    TensorView vb = view(b.data(), 8, cdp::plan::F32),
               vm = view(stats.data(), 8, cdp::plan::F32),
               vi = view(stats.data() + 8, 8, cdp::plan::F32);
    va.shape = vy.shape = {8, 8};
    vm.shape = vi.shape = {8, 1};
    args.inputs = {va, vb};
    args.outputs = {vy, vm, vi};
  } else if (op == "reduce_to") { // a bias's gradient: 8 x 8 to 8 sums
    cdp::plan::Attribute *shape = attribute("shape");
    shape->mutable_ints()->add_values(8);
    va.shape = {8, 8};
    vy.shape = {8};
    args.inputs = {va};
    args.outputs = {vy};
  } else if (op == "batch_norm" || op == "batch_norm_grad") {
    bool forward = op == "batch_norm";
    attribute("training_mode")->set_i(1);
    TensorView x = forward ? va : view(b.data(), b.size(), cdp::plan::F32);
    x.shape = va.shape = vy.shape = {2, 4, 8};
    auto channels = [&](size_t k) {
      return view(b.data() + 4 * k, 4, cdp::plan::F32);
    };
    std::vector<TensorView> statistics = {
        view(stats.data(), 4, cdp::plan::F32),
        view(stats.data() + 4, 4, cdp::plan::F32)};
    if (forward) {
      args.inputs = {x, channels(0), channels(1), channels(2), channels(3)};
      args.outputs = {vy, statistics[0], statistics[1]};
    } else {
      args.inputs = {va, x, channels(0), channels(1), channels(2)};
      args.outputs = {vy, statistics[0], statistics[1]};
    }
  } else if (op == "softmax_cross_entropy_loss_grad") {
    for (float &value : a)
      value = -value; // log-probabilities
    for (int64_t row = 0; row < 8; ++row)
      labels[row] = row;
    TensorView dloss = view(&one, 1, cdp::plan::F32),
               vl = view(labels.data(), labels.size(), cdp::plan::I64);
    dloss.shape = {};
    va.shape = vy.shape = {8, 8};
    args.inputs = {dloss, va, vl};
    args.outputs = {vy};
  } else {
    args.inputs = {va, view(b.data(), b.size(), cdp::plan::F32)};
    args.outputs = {vy};
  }
  (*KernelRegistry::instance().lookup(op, Backend::CPU))(args)->run(
      StepContext());
  return y;
}

// Every op whose ODS takes `round_result` (cdp-fuse-roundings moves a
// cdp.round_to into it) rounds its results on the CPU exactly as the
// round_to would: an op whose kernel ignored the attribute would train
// with float32 values where the plan rounds (its results here are not
// exact in either format without it).
TEST(NarrowFloat, EveryOpWithRoundResultRoundsAsRoundTo) {
  std::mt19937 random(4);
  std::uniform_real_distribution<float> positive(0.5f, 3.0f);
  std::vector<float> a(64), b(64);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = positive(random);
    b[i] = positive(random);
  }
  int ops = 0;
  for (const cdp::ops::OpInfo &info : cdp::ops::allOps()) {
    bool takesIt = false;
    for (const cdp::ops::AttributeInfo &attribute : info.attributes)
      takesIt |= std::string(attribute.name) == "round_result";
    if (!takesIt)
      continue;
    ++ops;
    std::vector<float> plain = runRounding(info.name, a, b, "");
    for (const char *format : {"bf16", "f16"}) {
      std::vector<float> rounded = runRounding(info.name, a, b, format);
      int inexact = 0;
      for (size_t i = 0; i < plain.size(); ++i) {
        float want = std::string(format) == "bf16" ? roundToBfloat16(plain[i])
                                                   : roundToFloat16(plain[i]);
        EXPECT_EQ(bitsOf(rounded[i]), bitsOf(want))
            << info.name << " " << format << " element " << i;
        inexact += want != plain[i];
      }
      EXPECT_GT(inexact, 0) << info.name << " " << format;
    }
  }
  // add, sub, mul, div, pow, min, max, dropout(_grad), gemm, matmul, gelu,
  // unary_grad, softmax_grad, softmax_cross_entropy_loss_grad, attention,
  // layer_norm, batch_norm(_grad), reduce_to
  EXPECT_EQ(ops, 20);
}

/// softmax_grad (rows of 8) or unary_grad (relu) on (dy, saved) with
/// round_result `format`, its result stored as `dtype`.
std::vector<char> runNarrowResult(const std::string &op, std::vector<float> dy,
                                  std::vector<float> saved,
                                  const std::string &format,
                                  cdp::plan::DType dtype) {
  using namespace cdp::runtime;
  cdp::plan::Instruction instruction;
  instruction.set_op(op);
  auto attribute = [&](const char *name, const std::string &value) {
    cdp::plan::Attribute *added = instruction.add_attributes();
    added->set_name(name);
    added->set_s(value);
  };
  attribute("round_result", format);
  if (op == "unary_grad")
    attribute("kind", "relu");
  std::vector<char> out(dy.size() * cdp::plan::dtypeSize(dtype));
  auto view = [](void *data, cdp::plan::DType type) {
    return viewOf(data, {8, 8}, type);
  };
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = {view(dy.data(), cdp::plan::F32),
                 view(saved.data(), cdp::plan::F32)};
  args.outputs = {view(out.data(), dtype)};
  (*KernelRegistry::instance().lookup(op, Backend::CPU))(args)->run(
      StepContext());
  return out;
}

// cdp-narrow-results stores the rounded results of softmax_grad and
// unary_grad in 2 bytes: the CPU kernels must write there the bits of the
// values they write in float32 (a kernel writing float32 into the 2-byte
// tensor would overrun it and give other values).
TEST(NarrowFloat, TwoByteResultsHoldTheRoundedValues) {
  std::mt19937 random(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.05f, 0.95f);
  std::vector<float> dy(64), saved(64);
  for (size_t i = 0; i < dy.size(); ++i) {
    dy[i] = normal(random);
    saved[i] = unit(random);
  }
  for (const char *op : {"softmax_grad", "unary_grad"})
    for (bool bf16 : {true, false}) {
      std::string format = bf16 ? "bf16" : "f16";
      std::vector<char> wide =
          runNarrowResult(op, dy, saved, format, cdp::plan::F32);
      std::vector<char> narrow = runNarrowResult(
          op, dy, saved, format, bf16 ? cdp::plan::BF16 : cdp::plan::F16);
      for (size_t i = 0; i < dy.size(); ++i) {
        float value;
        uint16_t bits;
        std::memcpy(&value, wide.data() + 4 * i, 4);
        std::memcpy(&bits, narrow.data() + 2 * i, 2);
        EXPECT_EQ(bits, bf16 ? bfloat16BitsOf(value) : float16BitsOf(value))
            << op << " " << format << " element " << i;
      }
    }
}

// The loss's gradient (the logits') stored in 2 bytes holds the bits of
// the rounded values the float32 kernel writes.
TEST(NarrowFloat, LossGradientStoredInTwoBytes) {
  using namespace cdp::runtime;
  cdp::plan::Instruction instruction;
  instruction.set_op("softmax_cross_entropy_loss_grad");
  cdp::plan::Attribute *rounding = instruction.add_attributes();
  rounding->set_name("round_result");
  rounding->set_s("bf16");
  std::mt19937 random(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> logp(6 * 10);
  for (float &value : logp)
    value = -std::abs(normal(random)) - 1.0f;
  std::vector<int64_t> labels{0, 3, 9, 2, 2, 7};
  float dloss = 1.0f;
  auto run = [&](void *out, cdp::plan::DType dtype) {
    KernelArgs args;
    args.instruction = &instruction;
    args.inputs = {viewOf(&dloss, {}, cdp::plan::F32),
                   viewOf(logp.data(), {6, 10}, cdp::plan::F32),
                   viewOf(labels.data(), {6}, cdp::plan::I64)};
    args.outputs = {viewOf(out, {6, 10}, dtype)};
    (*KernelRegistry::instance().lookup("softmax_cross_entropy_loss_grad",
                                        Backend::CPU))(args)
        ->run(StepContext());
  };
  std::vector<float> wide(60);
  std::vector<uint16_t> narrow(60);
  run(wide.data(), cdp::plan::F32);
  run(narrow.data(), cdp::plan::BF16);
  for (size_t i = 0; i < wide.size(); ++i)
    EXPECT_EQ(narrow[i], bfloat16BitsOf(wide[i])) << "element " << i;
}

// unary_grad may read its saved value from the backward's 2-byte copy
// (cdp-read-narrow-operands): the values it widens give the bits of the
// float32 copy an unpack made (a kernel reading the patterns as float32
// would compute from other values, over half the bytes). With round_result,
// as the plans that keep the copy have it (both read by the own kernel; a
// float32 saved value without it goes to oneDNN's, other arithmetic).
TEST(NarrowFloat, UnaryGradReadsTwoByteSavedValuesAsTheirFloats) {
  using namespace cdp::runtime;
  std::mt19937 random(6);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> dy(64), wide(64);
  std::vector<uint16_t> bf16(64), f16(64);
  for (size_t i = 0; i < dy.size(); ++i) {
    dy[i] = normal(random);
    wide[i] = roundToFloat16(roundToBfloat16(normal(random)));
    bf16[i] = bfloat16BitsOf(wide[i]);
    f16[i] = float16BitsOf(wide[i]);
  }
  for (const char *kind : {"gelu_tanh", "gelu", "relu", "tanh"}) {
    cdp::plan::Instruction instruction;
    instruction.set_op("unary_grad");
    for (auto [name, value] :
         {std::pair<const char *, const char *>("kind", kind),
          {"round_result", "bf16"}}) {
      cdp::plan::Attribute *attribute = instruction.add_attributes();
      attribute->set_name(name);
      attribute->set_s(value);
    }
    auto run = [&](void *saved, cdp::plan::DType dtype) {
      auto view = [](void *data, cdp::plan::DType type) {
        return viewOf(data, {8, 8}, type);
      };
      std::vector<float> dx(64);
      KernelArgs args;
      args.instruction = &instruction;
      args.inputs = {view(dy.data(), cdp::plan::F32), view(saved, dtype)};
      args.outputs = {view(dx.data(), cdp::plan::F32)};
      (*KernelRegistry::instance().lookup("unary_grad", Backend::CPU))(args)
          ->run(StepContext());
      return dx;
    };
    std::vector<float> fromWide = run(wide.data(), cdp::plan::F32);
    EXPECT_EQ(run(bf16.data(), cdp::plan::BF16), fromWide) << kind;
    EXPECT_EQ(run(f16.data(), cdp::plan::F16), fromWide) << kind;
  }
}

// A product whose rounded result cdp-narrow-results stores in 2 bytes (an
// MLP's first product, the logits) holds the bits of the rounded float32
// result, bias and transposed operand included; GELU reading such values
// (the 2-byte copy of its input) gives the float32 input's result, and
// stored in 2 bytes (its result narrowed too) that result's bits.
TEST(NarrowFloat, ProductResultAndGeluInputInTwoBytes) {
  using namespace cdp::runtime;
  std::mt19937 random(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto exact = [&](size_t n) { return bfloat16Values(random, normal, n); };
  std::vector<float> a = exact(6 * 5), b = exact(7 * 5), bias = exact(7);
  cdp::plan::Instruction gemm;
  gemm.set_op("gemm");
  for (auto [name, value] :
       {std::pair<const char *, const char *>("narrow_operands", "bf16"),
        {"round_result", "bf16"}}) {
    cdp::plan::Attribute *attribute = gemm.add_attributes();
    attribute->set_name(name);
    attribute->set_s(value);
  }
  cdp::plan::Attribute *trans = gemm.add_attributes();
  trans->set_name("trans_b");
  trans->set_i(1);
  auto product = [&](void *out, cdp::plan::DType dtype) {
    KernelArgs args;
    args.instruction = &gemm;
    args.inputs = {viewOf(a.data(), {6, 5}, cdp::plan::F32),
                   viewOf(b.data(), {7, 5}, cdp::plan::F32),
                   viewOf(bias.data(), {7}, cdp::plan::F32)};
    args.outputs = {viewOf(out, {6, 7}, dtype)};
    (*KernelRegistry::instance().lookup("gemm", Backend::CPU))(args)->run(
        StepContext());
  };
  std::vector<float> wide(42);
  std::vector<uint16_t> narrow(42);
  product(wide.data(), cdp::plan::F32);
  product(narrow.data(), cdp::plan::BF16);
  int inexact = 0;
  for (size_t i = 0; i < wide.size(); ++i) {
    EXPECT_EQ(narrow[i], bfloat16BitsOf(wide[i])) << "element " << i;
    inexact += wide[i] != roundToBfloat16(wide[i]);
  }
  EXPECT_EQ(inexact, 0) << "the float32 result is rounded too";

  cdp::plan::Instruction gelu;
  gelu.set_op("gelu");
  cdp::plan::Attribute *rounding = gelu.add_attributes();
  rounding->set_name("round_result");
  rounding->set_s("bf16");
  auto activation = [&](void *in, cdp::plan::DType dtype, void *out,
                        cdp::plan::DType outType) {
    KernelArgs args;
    args.instruction = &gelu;
    args.inputs = {viewOf(in, {6, 7}, dtype)};
    args.outputs = {viewOf(out, {6, 7}, outType)};
    (*KernelRegistry::instance().lookup("gelu", Backend::CPU))(args)->run(
        StepContext());
  };
  std::vector<float> fromWide(42), fromNarrow(42);
  std::vector<uint16_t> narrowOut(42);
  activation(wide.data(), cdp::plan::F32, fromWide.data(), cdp::plan::F32);
  activation(narrow.data(), cdp::plan::BF16, fromNarrow.data(), cdp::plan::F32);
  activation(narrow.data(), cdp::plan::BF16, narrowOut.data(), cdp::plan::BF16);
  EXPECT_EQ(fromNarrow, fromWide);
  for (size_t i = 0; i < fromWide.size(); ++i)
    EXPECT_EQ(narrowOut[i], bfloat16BitsOf(fromWide[i])) << "element " << i;
}

// reduce_to may read a gradient cdp-narrow-results stores in 2 bytes (a
// GELU gradient, also read by the bias's gradient): it sums the values the
// patterns hold, as it sums their float32 copies (a kernel reading the
// patterns as float32 would sum other values, over half the bytes).
TEST(NarrowFloat, ReduceToSumsTwoByteValuesAsTheirFloats) {
  using namespace cdp::runtime;
  cdp::plan::Instruction instruction;
  instruction.set_op("reduce_to");
  std::mt19937 random(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (bool bf16 : {true, false}) {
    std::vector<float> wide(6 * 8);
    std::vector<uint16_t> narrow(wide.size());
    for (size_t i = 0; i < wide.size(); ++i) {
      float value = bf16 ? roundToBfloat16(normal(random))
                         : roundToFloat16(normal(random));
      wide[i] = value;
      narrow[i] = bf16 ? bfloat16BitsOf(value) : float16BitsOf(value);
    }
    // Columns (a bias's gradient: the rows summed into each output) and
    // rows (each row's values summed into one output).
    for (std::vector<int64_t> outShape :
         {std::vector<int64_t>{8}, std::vector<int64_t>{6, 1}}) {
      auto sum = [&](void *data, cdp::plan::DType dtype) {
        std::vector<float> out(outShape[0]);
        TensorView x, y;
        x.data = data;
        x.shape = {6, 8};
        x.dtype = dtype;
        y.data = out.data();
        y.shape = outShape;
        KernelArgs args;
        args.instruction = &instruction;
        args.inputs = {x};
        args.outputs = {y};
        (*KernelRegistry::instance().lookup("reduce_to", Backend::CPU))(args)
            ->run(StepContext());
        return out;
      };
      std::vector<float> want = sum(wide.data(), cdp::plan::F32);
      std::vector<float> got =
          sum(narrow.data(), bf16 ? cdp::plan::BF16 : cdp::plan::F16);
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_EQ(bitsOf(got[i]), bitsOf(want[i]))
            << outShape.size() << "-d output, element " << i;
    }
  }
}

// A reshape may view a 2-byte tensor (a result cdp-narrow-results stores
// so); where the plan gives it a block of its own it copies the tensor, all
// 2 bytes of each value (the CPU's byte count once took 1 for them).
TEST(NarrowFloat, ReshapeCopiesTwoByteValuesWhole) {
  using namespace cdp::runtime;
  cdp::plan::Instruction instruction;
  instruction.set_op("reshape");
  std::vector<uint16_t> in(24), out(24, 0);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = static_cast<uint16_t>(0x3f80 + i);
  TensorView x, y;
  x.data = in.data();
  x.shape = {4, 6};
  y.data = out.data();
  y.shape = {24};
  x.dtype = y.dtype = cdp::plan::BF16;
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = {x};
  args.outputs = {y};
  (*KernelRegistry::instance().lookup("reshape", Backend::CPU))(args)->run(
      StepContext());
  EXPECT_EQ(out, in);
}

TEST(NarrowFloat, MulReadsAndStoresTwoByteValues) {
  // GPT-2's scaling of q: a 2-byte operand (a product's rounded result moved
  // by split and transpose) times a float32 scalar under round_result, the
  // result stored in 2 bytes; the same bits as the float32 kernel's rounded
  // values on the widened operand. 24 values, and 70,001 (chunks of 4096 on
  // the threads, the last short).
  using namespace cdp::runtime;
  for (int64_t count : {int64_t(24), int64_t(70001)}) {
    std::mt19937 random(13);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> q(count);
    std::vector<uint16_t> q16(q.size());
    for (size_t i = 0; i < q.size(); ++i) {
      q[i] = roundToBfloat16(normal(random));
      q16[i] = bfloat16BitsOf(q[i]);
    }
    float scale = 0.594603539f;
    cdp::plan::Instruction mul;
    mul.set_op("mul");
    cdp::plan::Attribute *rounding = mul.add_attributes();
    rounding->set_name("round_result");
    rounding->set_s("bf16");
    auto multiply = [&](void *in, cdp::plan::DType inType, void *out,
                        cdp::plan::DType outType) {
      runCpuKernel(
          mul,
          {viewOf(in, {count}, inType), viewOf(&scale, {}, cdp::plan::F32)},
          {viewOf(out, {count}, outType)});
    };
    std::vector<float> wide(q.size());
    std::vector<uint16_t> narrow(q.size());
    multiply(q.data(), cdp::plan::F32, wide.data(), cdp::plan::F32);
    multiply(q16.data(), cdp::plan::BF16, narrow.data(), cdp::plan::BF16);
    for (size_t i = 0; i < q.size(); ++i) {
      ASSERT_EQ(wide[i], roundToBfloat16(q[i] * scale)) << "element " << i;
      ASSERT_EQ(narrow[i], bfloat16BitsOf(wide[i])) << "element " << i;
    }
  }
  // A 2-byte operand without round_result of its format is refused.
  float in16[1] = {0.0f}, out1[1], scale = 0.5f;
  cdp::plan::Instruction bare;
  bare.set_op("mul");
  EXPECT_THROW(runCpuKernel(bare,
                            {viewOf(in16, {1}, cdp::plan::BF16),
                             viewOf(&scale, {}, cdp::plan::F32)},
                            {viewOf(out1, {1}, cdp::plan::F32)}),
               RuntimeError);
}

TEST(NarrowFloat, BackwardGradientsInTwoBytes) {
  // Dropout's gradient stored in 2 bytes holds the float32 kernel's rounded
  // values; an activation's gradient reading its incoming gradient in 2
  // bytes computes what it computes from the widened values.
  using namespace cdp::runtime;
  std::mt19937 random(17);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int64_t n = 40;
  std::vector<float> dy(n), x(n);
  std::vector<uint16_t> dy16(n);
  std::vector<uint8_t> mask(n);
  for (int64_t i = 0; i < n; ++i) {
    dy[i] = roundToBfloat16(normal(random));
    dy16[i] = bfloat16BitsOf(dy[i]);
    x[i] = normal(random);
    mask[i] = i % 3 != 0;
  }
  auto run = runCpuKernel;
  auto rounded = [](cdp::plan::Instruction &instruction) {
    cdp::plan::Attribute *rounding = instruction.add_attributes();
    rounding->set_name("round_result");
    rounding->set_s("bf16");
  };
  cdp::plan::Instruction dropoutGrad;
  dropoutGrad.set_op("dropout_grad");
  rounded(dropoutGrad);
  cdp::plan::Attribute *ratio = dropoutGrad.add_attributes();
  ratio->set_name("ratio");
  ratio->set_f(0.1f);
  const float keepScale = 1.0f / (1.0f - 0.1f); // the kernel's
  std::vector<float> wide(n);
  std::vector<uint16_t> narrow(n);
  for (auto [out, type] :
       {std::pair<void *, cdp::plan::DType>(wide.data(), cdp::plan::F32),
        {narrow.data(), cdp::plan::BF16}})
    run(dropoutGrad,
        {viewOf(dy.data(), {n}, cdp::plan::F32),
         viewOf(mask.data(), {n}, cdp::plan::BOOL)},
        {viewOf(out, {n}, type)});
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(wide[i], roundToBfloat16(mask[i] ? dy[i] * keepScale : 0.0f))
        << "element " << i;
    EXPECT_EQ(narrow[i], bfloat16BitsOf(wide[i])) << "element " << i;
  }

  cdp::plan::Instruction unaryGrad;
  unaryGrad.set_op("unary_grad");
  rounded(unaryGrad);
  cdp::plan::Attribute *kind = unaryGrad.add_attributes();
  kind->set_name("kind");
  kind->set_s("gelu_tanh");
  std::vector<float> fromWide(n), fromNarrow(n);
  run(unaryGrad,
      {viewOf(dy.data(), {n}, cdp::plan::F32),
       viewOf(x.data(), {n}, cdp::plan::F32)},
      {viewOf(fromWide.data(), {n}, cdp::plan::F32)});
  run(unaryGrad,
      {viewOf(dy16.data(), {n}, cdp::plan::BF16),
       viewOf(x.data(), {n}, cdp::plan::F32)},
      {viewOf(fromNarrow.data(), {n}, cdp::plan::F32)});
  EXPECT_EQ(fromNarrow, fromWide);
}

TEST(NarrowFloat, ResidualBranchInTwoBytes) {
  // Dropout reading a 2-byte input and storing a 2-byte output: the same
  // mask and the float32 kernel's rounded values; add reading a 2-byte
  // operand: the float32 sum of the widened values.
  using namespace cdp::runtime;
  std::mt19937 random(19);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int64_t n = 64;
  std::vector<float> x(n), stream(n);
  std::vector<uint16_t> x16(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = roundToBfloat16(normal(random));
    x16[i] = bfloat16BitsOf(x[i]);
    stream[i] = normal(random);
  }
  cdp::plan::Instruction dropout;
  dropout.set_op("dropout");
  for (auto [name, value] :
       {std::pair<const char *, int64_t>("training_mode", 1), {"seed", 5}}) {
    cdp::plan::Attribute *attribute = dropout.add_attributes();
    attribute->set_name(name);
    attribute->set_i(value);
  }
  cdp::plan::Attribute *ratio = dropout.add_attributes();
  ratio->set_name("ratio");
  ratio->set_f(0.25);
  cdp::plan::Attribute *rounding = dropout.add_attributes();
  rounding->set_name("round_result");
  rounding->set_s("bf16");
  std::vector<float> wide(n);
  std::vector<uint16_t> narrow(n);
  std::vector<uint8_t> wideMask(n), narrowMask(n);
  auto run = [&](void *in, cdp::plan::DType inType, void *out,
                 cdp::plan::DType outType, uint8_t *mask) {
    runCpuKernel(
        dropout, {viewOf(in, {n}, inType)},
        {viewOf(out, {n}, outType), viewOf(mask, {n}, cdp::plan::BOOL)});
  };
  run(x.data(), cdp::plan::F32, wide.data(), cdp::plan::F32, wideMask.data());
  run(x16.data(), cdp::plan::BF16, narrow.data(), cdp::plan::BF16,
      narrowMask.data());
  EXPECT_EQ(narrowMask, wideMask);
  int dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(narrow[i], bfloat16BitsOf(wide[i])) << "element " << i;
    dropped += !wideMask[i];
  }
  EXPECT_GT(dropped, 0);

  cdp::plan::Instruction add;
  add.set_op("add");
  std::vector<float> sum(n);
  runCpuKernel(add,
               {viewOf(x16.data(), {n}, cdp::plan::BF16),
                viewOf(stream.data(), {n}, cdp::plan::F32)},
               {viewOf(sum.data(), {n}, cdp::plan::F32)});
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(sum[i], x[i] + stream[i]) << "element " << i;
}

/// Expects `narrow` to hold the bf16 bits of `wide`'s values (each exact
/// in bf16: a result stored in 2 bytes holds what its float32 twin held).
void expectBitsOf(const std::vector<float> &wide,
                  const std::vector<uint16_t> &narrow) {
  ASSERT_EQ(wide.size(), narrow.size());
  for (size_t i = 0; i < wide.size(); ++i) {
    EXPECT_EQ(wide[i], roundToBfloat16(wide[i])) << "rounded, element " << i;
    EXPECT_EQ(narrow[i], bfloat16BitsOf(wide[i])) << "element " << i;
  }
}

/// An attention (2 x 4 x 3 by 2 x 3 x 5, values 2 x 5 x 4) and its
/// gradient under narrow_operands "bf16", on values exact in bf16.
struct NarrowAttention {
  std::mt19937 random;
  std::normal_distribution<float> normal{0.0f, 1.0f};
  std::vector<float> a, b, v, grad;
  cdp::plan::Instruction forward, backward;

  explicit NarrowAttention(unsigned seed) : random(seed) {
    a = bfloat16Values(random, normal, 2 * 4 * 3);
    b = bfloat16Values(random, normal, 2 * 3 * 5);
    v = bfloat16Values(random, normal, 2 * 5 * 4);
    grad = bfloat16Values(random, normal, 2 * 4 * 4);
    forward.set_op("attention");
    backward.set_op("attention_grad");
    for (cdp::plan::Instruction *instruction : {&forward, &backward}) {
      cdp::plan::Attribute *narrow = instruction->add_attributes();
      narrow->set_name("narrow_operands");
      narrow->set_s("bf16");
    }
  }
  static cdp::runtime::TensorView f32(std::vector<float> &values,
                                      std::vector<int64_t> shape) {
    return viewOf(values.data(), std::move(shape), cdp::plan::F32);
  }
  static cdp::runtime::TensorView bf16(std::vector<uint16_t> &values,
                                       std::vector<int64_t> shape) {
    return viewOf(values.data(), std::move(shape), cdp::plan::BF16);
  }
  std::vector<cdp::runtime::TensorView> operands() {
    return {f32(a, {2, 4, 3}), f32(b, {2, 3, 5}), f32(v, {2, 5, 4})};
  }
};

TEST(NarrowFloat, AttentionGradReadsATwoByteIncomingGradient) {
  // attention_grad under narrow_operands with its incoming gradient stored
  // in 2 bytes computes what it computes from the same values in float32.
  NarrowAttention t(23);
  auto f32 = NarrowAttention::f32;
  std::vector<uint16_t> grad16(t.grad.size());
  for (size_t i = 0; i < t.grad.size(); ++i)
    grad16[i] = bfloat16BitsOf(t.grad[i]);
  std::vector<float> out(2 * 4 * 4), stats(2 * 4 * 2);
  runCpuKernel(t.forward, t.operands(),
               {f32(out, {2, 4, 4}), f32(stats, {2, 4, 2})});
  std::vector<float> da(t.a.size()), db(t.b.size()), dv(t.v.size());
  std::vector<float> da16(t.a.size()), db16(t.b.size()), dv16(t.v.size());
  for (auto incoming :
       {f32(t.grad, {2, 4, 4}), NarrowAttention::bf16(grad16, {2, 4, 4})}) {
    bool narrow = incoming.dtype == cdp::plan::BF16;
    std::vector<cdp::runtime::TensorView> inputs = t.operands();
    inputs.insert(inputs.begin(), incoming);
    inputs.push_back(f32(stats, {2, 4, 2}));
    runCpuKernel(t.backward, inputs,
                 {f32(narrow ? da16 : da, {2, 4, 3}),
                  f32(narrow ? db16 : db, {2, 3, 5}),
                  f32(narrow ? dv16 : dv, {2, 5, 4})});
  }
  EXPECT_EQ(da16, da);
  EXPECT_EQ(db16, db);
  EXPECT_EQ(dv16, dv);
}

TEST(NarrowFloat, AttentionStoresTwoByteResults) {
  // attention with round_result and attention_grad under narrow_operands
  // store in 2 bytes exactly the rounded values they compute in float32
  // (cdp-narrow-results: the result moved to the output projection, the
  // gradients of q, k and v concatenated for the input projection's).
  NarrowAttention t(31);
  auto f32 = NarrowAttention::f32;
  auto bf16 = NarrowAttention::bf16;
  cdp::plan::Attribute *rounding = t.forward.add_attributes();
  rounding->set_name("round_result");
  rounding->set_s("bf16");
  std::vector<float> out(2 * 4 * 4), stats(2 * 4 * 2), stats16(stats.size());
  std::vector<uint16_t> out16(out.size());
  runCpuKernel(t.forward, t.operands(),
               {f32(out, {2, 4, 4}), f32(stats, {2, 4, 2})});
  runCpuKernel(t.forward, t.operands(),
               {bf16(out16, {2, 4, 4}), f32(stats16, {2, 4, 2})});
  expectBitsOf(out, out16);
  EXPECT_EQ(stats16, stats);
  std::vector<float> da(t.a.size()), db(t.b.size()), dv(t.v.size());
  std::vector<uint16_t> da16(t.a.size()), db16(t.b.size()), dv16(t.v.size());
  std::vector<cdp::runtime::TensorView> inputs = t.operands();
  inputs.insert(inputs.begin(), f32(t.grad, {2, 4, 4}));
  inputs.push_back(f32(stats, {2, 4, 2}));
  runCpuKernel(t.backward, inputs,
               {f32(da, {2, 4, 3}), f32(db, {2, 3, 5}), f32(dv, {2, 5, 4})});
  runCpuKernel(
      t.backward, inputs,
      {bf16(da16, {2, 4, 3}), bf16(db16, {2, 3, 5}), bf16(dv16, {2, 5, 4})});
  expectBitsOf(da, da16);
  expectBitsOf(db, db16);
  expectBitsOf(dv, dv16);
}

TEST(NarrowFloat, LayerNormStoresItsRoundedOutput) {
  // layer_norm with round_result stores in 2 bytes the bits of the float32
  // output it rounds (and the same statistics).
  using namespace cdp::runtime;
  std::mt19937 random(37);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 3, width = 8;
  std::vector<float> x(rows * width), scale(width), bias(width);
  for (std::vector<float> *values : {&x, &scale, &bias})
    for (float &value : *values)
      value = normal(random);
  cdp::plan::Instruction norm;
  norm.set_op("layer_norm");
  cdp::plan::Attribute *rounding = norm.add_attributes();
  rounding->set_name("round_result");
  rounding->set_s("bf16");
  auto f32 = [](std::vector<float> &values, std::vector<int64_t> shape) {
    return viewOf(values.data(), std::move(shape), cdp::plan::F32);
  };
  std::vector<float> y(x.size()), mean(rows), inv(rows), mean16(rows),
      inv16(rows);
  std::vector<uint16_t> y16(x.size());
  std::vector<TensorView> inputs{f32(x, {rows, width}), f32(scale, {width}),
                                 f32(bias, {width})};
  runCpuKernel(
      norm, inputs,
      {f32(y, {rows, width}), f32(mean, {rows, 1}), f32(inv, {rows, 1})});
  runCpuKernel(norm, inputs,
               {viewOf(y16.data(), {rows, width}, cdp::plan::BF16),
                f32(mean16, {rows, 1}), f32(inv16, {rows, 1})});
  expectBitsOf(y, y16);
  EXPECT_EQ(mean16, mean);
  EXPECT_EQ(inv16, inv);
}

TEST(NarrowFloat, LayerNormGradReadsATwoByteIncomingGradient) {
  // layer_norm_grad with its incoming gradient stored in 2 bytes computes
  // what it computes from the same values in float32; with an addend (a
  // gradient sum cdp-fuse-gradient-sums fused) its dx is the addend plus
  // that dx, bit for bit, as the add computed it.
  using namespace cdp::runtime;
  std::mt19937 random(29);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 3, width = 8;
  std::vector<float> dy(rows * width), x(rows * width), scale(width),
      mean(rows), inv(rows);
  std::vector<uint16_t> dy16(dy.size());
  for (size_t i = 0; i < dy.size(); ++i) {
    dy[i] = roundToBfloat16(normal(random));
    dy16[i] = bfloat16BitsOf(dy[i]);
    x[i] = normal(random);
  }
  for (float &s : scale)
    s = normal(random);
  for (int64_t r = 0; r < rows; ++r) {
    mean[r] = normal(random);
    inv[r] = 1.0f + std::abs(normal(random));
  }
  cdp::plan::Instruction grad;
  grad.set_op("layer_norm_grad");
  auto run = [&](void *dyData, cdp::plan::DType type, std::vector<float> &dx,
                 std::vector<float> &dscale, std::vector<float> &dbias,
                 std::vector<float> *addend = nullptr) {
    std::vector<TensorView> inputs{
        viewOf(dyData, {rows, width}, type),
        viewOf(x.data(), {rows, width}, cdp::plan::F32),
        viewOf(scale.data(), {width}, cdp::plan::F32),
        viewOf(mean.data(), {rows, 1}, cdp::plan::F32),
        viewOf(inv.data(), {rows, 1}, cdp::plan::F32)};
    if (addend)
      inputs.push_back(viewOf(addend->data(), {rows, width}, cdp::plan::F32));
    runCpuKernel(grad, inputs,
                 {viewOf(dx.data(), {rows, width}, cdp::plan::F32),
                  viewOf(dscale.data(), {width}, cdp::plan::F32),
                  viewOf(dbias.data(), {width}, cdp::plan::F32)});
  };
  std::vector<float> dx(dy.size()), dscale(width), dbias(width);
  std::vector<float> dx16(dy.size()), dscale16(width), dbias16(width);
  run(dy.data(), cdp::plan::F32, dx, dscale, dbias);
  run(dy16.data(), cdp::plan::BF16, dx16, dscale16, dbias16);
  EXPECT_EQ(dx16, dx);
  EXPECT_EQ(dscale16, dscale);
  EXPECT_EQ(dbias16, dbias);
  std::vector<float> past(dy.size()), sum(dy.size());
  for (float &value : past)
    value = normal(random);
  run(dy.data(), cdp::plan::F32, sum, dscale16, dbias16, &past);
  for (size_t i = 0; i < sum.size(); ++i)
    EXPECT_EQ(sum[i], past[i] + dx[i]) << "element " << i;
  EXPECT_EQ(dscale16, dscale);
  EXPECT_EQ(dbias16, dbias);
}

} // namespace
