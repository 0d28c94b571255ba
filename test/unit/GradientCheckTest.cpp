//===- GradientCheckTest.cpp - every gradient rule against finite differences
//
// Each case is a small @main: parameters p0, p1, ... feed one op (or a short
// chain), and the loss is sum(y * c) for a fixed random c. The case is
// compiled with the real passes (attach-loss, autodiff, plan-memory, emit)
// and run by the real runtime; the gradients it reports are compared with
// central differences of the same runtime's loss.
//
// Tolerance: float32 kernels and a step of 1e-2 (chosen against float32
// rounding of the loss) give differences within |fd - g| <= 5e-3 + 2e-2 |g|;
// a wrong rule is off by O(1).
//
//===----------------------------------------------------------------------===//

#include "cdp/InitAll.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Plan/EmitPlan.h"
#include "cdp/Runtime/Executor.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

using namespace mlir;

namespace {

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  float low = -1.0f, high = 1.0f; // initial values drawn uniformly from here
};

struct Case {
  std::string name;
  std::vector<Param> params;
  std::string body;                    // IR computing %y from %p0, %p1, ...
  std::string resultType;              // the type of %y
  std::vector<std::string> extra = {}; // lines before the body (constants)
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

std::string typeText(const std::vector<int64_t> &shape) {
  std::string text = "tensor<";
  for (int64_t d : shape)
    text += std::to_string(d) + "x";
  return text + "f32>";
}

std::vector<int64_t> shapeOfType(const std::string &type) {
  std::vector<int64_t> shape;
  std::string dims = type.substr(7, type.size() - 7 - 4);
  std::stringstream stream(dims);
  std::string dim;
  while (std::getline(stream, dim, 'x'))
    if (!dim.empty())
      shape.push_back(std::stoll(dim));
  return shape;
}

/// A dense literal in MLIR's hex form (raw little-endian bytes), which
/// needs no nesting by rank.
std::string denseText(const std::vector<float> &values,
                      const std::string &type) {
  static const char *digits = "0123456789ABCDEF";
  std::string hex = "0x";
  const auto *bytes = reinterpret_cast<const unsigned char *>(values.data());
  for (size_t i = 0; i < values.size() * sizeof(float); ++i) {
    hex += digits[bytes[i] >> 4];
    hex += digits[bytes[i] & 15];
  }
  return "dense<\"" + hex + "\"> : " + type;
}

std::vector<float> random(size_t count, float low, float high, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> values(count);
  for (float &v : values)
    v = dist(rng);
  return values;
}

size_t countOf(const std::vector<int64_t> &shape) {
  size_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

class GradientCheck : public ::testing::TestWithParam<Case> {};

TEST_P(GradientCheck, MatchesFiniteDifferences) {
  const Case &c = GetParam();
  std::ostringstream ir;
  ir << "func.func @main() -> (tensor<f32> {cdp.name = \"loss\"}) {\n";
  for (size_t i = 0; i < c.params.size(); ++i) {
    const Param &p = c.params[i];
    ir << "  %p" << i << " = cdp.param \"" << p.name << "\" {value = "
       << denseText(random(countOf(p.shape), p.low, p.high, 17 + i),
                    typeText(p.shape))
       << "} : " << typeText(p.shape) << "\n";
  }
  for (const std::string &line : c.extra)
    ir << "  " << line << "\n";
  ir << "  " << c.body << "\n";
  std::vector<int64_t> yShape = shapeOfType(c.resultType);
  ir << "  %c = cdp.constant "
     << denseText(random(countOf(yShape), -1.0f, 1.0f, 99), c.resultType)
     << "\n";
  ir << "  %m = cdp.mul %y, %c : (" << c.resultType << ", " << c.resultType
     << ") -> " << c.resultType << "\n";
  ir << "  %loss = cdp.reduce_sum %m {axes = array<i64>, keepdims = false} : ("
     << c.resultType << ") -> tensor<f32>\n";
  ir << "  return %loss : tensor<f32>\n}\n";

  DialectRegistry registry;
  cdp::registerAllDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(ir.str(), &context);
  ASSERT_TRUE(module) << ir.str();
  PassManager pm(&context);
  cdp::AttachLossOptions lossOptions;
  lossOptions.loss = "none";
  lossOptions.lossOutput = "loss";
  pm.addPass(cdp::createFoldSoftmaxGuard()); // as the training pipeline
  pm.addPass(cdp::createAttachLoss(lossOptions));
  pm.addPass(cdp::createAutodiff());
  pm.addPass(cdp::createPlanMemory());
  ASSERT_TRUE(succeeded(pm.run(*module))) << ir.str();
  cdp::plan::Plan plan;
  ASSERT_TRUE(succeeded(cdp::buildPlan(*module, cdp::EmitOptions(), plan)));

  cdp::runtime::Executor executor(plan, 1);
  cdp::runtime::StepContext step;
  executor.runStep(step);
  auto gradients = executor.gradients();
  ASSERT_EQ(gradients.size(), c.params.size())
      << "every parameter gets a gradient";
  auto loss = [&]() {
    executor.runStep(step);
    return static_cast<double>(executor.view(plan.loss()).f32()[0]);
  };
  for (auto &[name, gradId] : gradients) {
    int paramId = -1;
    for (const auto &t : plan.tensors())
      if (t.kind() == cdp::plan::PARAM && t.name() == name)
        paramId = t.id();
    ASSERT_GE(paramId, 0);
    executor.runStep(step);
    std::vector<float> analytic(executor.view(gradId).f32(),
                                executor.view(gradId).f32() +
                                    executor.view(gradId).numel());
    float *data = executor.view(paramId).f32();
    const double h = 1e-2;
    for (size_t i = 0; i < analytic.size(); ++i) {
      float saved = data[i];
      data[i] = saved + h;
      double up = loss();
      data[i] = saved - h;
      double down = loss();
      data[i] = saved;
      double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[i], numeric, 5e-3 + 2e-2 * std::fabs(numeric))
          << c.name << ": d loss / d " << name << "[" << i << "]";
    }
  }
}

const char *kF = "f32";

/// The ops transformer exports bring: element-wise math, selection and
/// the indexing ops (Hugging Face's GPT-2, Llama, BERT, ViT and T5).
void addTransformerCases(std::vector<Case> &list) {
  auto unary = [&](const std::string &op, float low, float high) {
    list.push_back({op,
                    {{"x", {2, 5}, low, high}},
                    "%y = cdp." + op + " %p0 : tensor<2x5xf32>",
                    "tensor<2x5xf32>"});
  };
  unary("reciprocal", 0.5f, 2.0f);
  unary("sin", -3.0f, 3.0f);
  unary("cos", -3.0f, 3.0f);
  unary("abs", -2.0f, 2.0f);
  unary("exp", -2.0f, 2.0f);
  unary("log", 0.5f, 2.0f);
  for (const char *op : {"min", "max"})
    list.push_back({std::string(op) + "_broadcast",
                    {{"a", {2, 3, 4}}, {"b", {3, 1}}},
                    std::string("%y = cdp.") + op +
                        " %p0, %p1 : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> "
                        "tensor<2x3x4xf32>",
                    "tensor<2x3x4xf32>"});
  list.push_back(
      {"where_broadcast",
       {{"a", {2, 3, 4}}, {"b", {3, 1}}},
       "%y = cdp.where %cond, %p0, %p1 : (tensor<2x1x4xi1>, tensor<2x3x4xf32>, "
       "tensor<3x1xf32>) -> tensor<2x3x4xf32>",
       "tensor<2x3x4xf32>",
       {"%cond = cdp.constant dense<[[[true, false, true, true]], [[false, "
        "false, true, false]]]> : tensor<2x1x4xi1>"}});
  list.push_back({"gather_elements_axis1",
                  {{"table", {3, 4}}},
                  "%y = cdp.gather_elements %p0, %ids {axis = 1 : i64} : "
                  "(tensor<3x4xf32>, "
                  "tensor<2x4xi64>) -> tensor<2x4xf32>",
                  "tensor<2x4xf32>",
                  {"%ids = cdp.constant dense<[[3, 0, 0, -1], [1, 1, 2, 0]]> : "
                   "tensor<2x4xi64>"}});
  list.push_back(
      {"gather_nd_repeated",
       {{"data", {3, 4, 2}}},
       "%y = cdp.gather_nd %p0, %ids : (tensor<3x4x2xf32>, tensor<3x2xi64>) "
       "-> tensor<3x2xf32>",
       "tensor<3x2xf32>",
       {"%ids = cdp.constant dense<[[0, 1], [2, 3], [0, 1]]> : "
        "tensor<3x2xi64>"}});
  list.push_back({"gather_nd_batch_dims",
                  {{"data", {2, 3, 4}}},
                  "%y = cdp.gather_nd %p0, %ids {batch_dims = 1 : i64} : "
                  "(tensor<2x3x4xf32>, tensor<2x2x1xi64>) -> tensor<2x2x4xf32>",
                  "tensor<2x2x4xf32>",
                  {"%ids = cdp.constant dense<[[[2], [0]], [[1], [1]]]> : "
                   "tensor<2x2x1xi64>"}});
  list.push_back({"cum_sum_exclusive_reverse",
                  {{"x", {2, 3, 4}}},
                  "%y = cdp.cum_sum %p0 {axis = 1 : i64, exclusive = true, "
                  "reverse = true} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>",
                  "tensor<2x3x4xf32>"});
  for (const char *triangle :
       {"{k = 1 : i64}", "{k = -1 : i64, upper = false}"})
    list.push_back({std::string("trilu") + triangle,
                    {{"x", {2, 3, 4}}},
                    std::string("%y = cdp.trilu %p0 ") + triangle +
                        " : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>",
                    "tensor<2x3x4xf32>"});
}

std::vector<Case> cases() {
  std::vector<Case> list;
  addTransformerCases(list);
  auto unary = [&](const std::string &op, const std::string &attrs = "",
                   float low = -2.0f, float high = 2.0f) {
    list.push_back({op + attrs,
                    {{"x", {2, 5}, low, high}},
                    "%y = cdp." + op + " %p0 " + attrs + " : tensor<2x5xf32>",
                    "tensor<2x5xf32>"});
  };
  unary("relu");
  unary("gelu");
  unary("gelu", "{approximate = \"tanh\"}");
  unary("erf");
  unary("sigmoid");
  unary("tanh");
  unary("sqrt", "", 0.5f, 2.0f);
  unary("identity");
  unary("clip", "{max = 1.5 : f32, min = -1.0 : f32}");
  unary("hard_sigmoid", "{alpha = 0.3 : f32, beta = 0.4 : f32}", -4.0f, 4.0f);
  unary("hard_swish", "", -4.5f, 4.5f);
  unary("silu", "", -4.0f, 4.0f);
  list.push_back({"pad",
                  {{"x", {2, 3}}},
                  "%y = cdp.pad %p0 {pads = array<i64: 1, 0, 2, 3>, value = "
                  "0.5 : f32} : (tensor<2x3xf32>) -> tensor<5x6xf32>",
                  "tensor<5x6xf32>"});
  auto binary = [&](const std::string &op, float low = -1.0f,
                    float high = 1.0f) {
    list.push_back({op + "_broadcast",
                    {{"a", {2, 3, 4}}, {"b", {3, 1}, low, high}},
                    "%y = cdp." + op +
                        " %p0, %p1 : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> "
                        "tensor<2x3x4xf32>",
                    "tensor<2x3x4xf32>"});
  };
  binary("add");
  binary("sub");
  binary("mul");
  binary("div", 0.5f, 2.0f);
  // Every broadcast a real model makes: squeeze-excitation's (N, C, 1, 1)
  // scale over (N, C, H, W) on either side, a per-channel (C, 1, 1) bias,
  // a scalar, and both operands broadcast at once.
  auto broadcast = [&](const std::string &op, std::vector<int64_t> a,
                       std::vector<int64_t> b, std::vector<int64_t> out,
                       float low = -1.0f, float high = 1.0f) {
    auto type = [](const std::vector<int64_t> &shape) {
      std::string text = "tensor<";
      for (int64_t d : shape)
        text += std::to_string(d) + "x";
      return text + "f32>";
    };
    list.push_back({op + "_" + type(a) + "_" + type(b),
                    {{"a", a}, {"b", b, low, high}},
                    "%y = cdp." + op + " %p0, %p1 : (" + type(a) + ", " +
                        type(b) + ") -> " + type(out),
                    type(out)});
  };
  for (const char *op : {"add", "sub", "mul"}) {
    broadcast(op, {2, 3, 1, 1}, {2, 3, 2, 2}, {2, 3, 2, 2});
    broadcast(op, {2, 3, 2, 2}, {2, 3, 1, 1}, {2, 3, 2, 2});
    broadcast(op, {2, 3, 2, 2}, {3, 1, 1}, {2, 3, 2, 2});
    broadcast(op, {2, 1, 3}, {4, 1}, {2, 4, 3});
  }
  broadcast("div", {2, 3, 2, 2}, {2, 3, 1, 1}, {2, 3, 2, 2}, 0.5f, 2.0f);
  broadcast("div", {2, 3, 1, 1}, {2, 3, 2, 2}, {2, 3, 2, 2}, 0.5f, 2.0f);
  broadcast("mul", {2, 3}, {}, {2, 3});
  list.push_back({"pow",
                  {{"a", {2, 3}, 0.5f, 2.0f}},
                  "%y = cdp.pow %p0, %e : (tensor<2x3xf32>, tensor<f32>) -> "
                  "tensor<2x3xf32>",
                  "tensor<2x3xf32>",
                  {"%e = cdp.constant dense<3.0> : tensor<f32>"}});
  list.push_back({"matmul_batched_broadcast",
                  {{"a", {2, 3, 4}}, {"b", {4, 5}}},
                  "%y = cdp.matmul %p0, %p1 : (tensor<2x3x4xf32>, "
                  "tensor<4x5xf32>) -> tensor<2x3x5xf32>",
                  "tensor<2x3x5xf32>"});
  list.push_back({"matmul_vector",
                  {{"a", {4}}, {"b", {2, 4, 3}}},
                  "%y = cdp.matmul %p0, %p1 : (tensor<4xf32>, "
                  "tensor<2x4x3xf32>) -> tensor<2x3xf32>",
                  "tensor<2x3xf32>"});
  // MatMul reading operands transposed (as cdp-fold-transpose leaves
  // them), with broadcast batch dimensions on both sides; and a Linear over
  // a sequence (x W^T), whose weight gradient is one product of the rows.
  auto tensorText = [](const std::vector<int64_t> &shape) {
    std::string text = "tensor<";
    for (int64_t d : shape)
      text += std::to_string(d) + "x";
    return text + "f32>";
  };
  for (auto [ta, tb] :
       {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
    std::vector<int64_t> a = ta ? std::vector<int64_t>{2, 1, 4, 3}
                                : std::vector<int64_t>{2, 1, 3, 4};
    std::vector<int64_t> b =
        tb ? std::vector<int64_t>{2, 5, 4} : std::vector<int64_t>{2, 4, 5};
    std::string flags = std::string("{trans_a = ") + (ta ? "true" : "false") +
                        ", trans_b = " + (tb ? "true" : "false") + "}";
    list.push_back(
        {std::string("matmul_") + (ta ? "T" : "N") + (tb ? "T" : "N"),
         {{"a", a}, {"b", b}},
         "%y = cdp.matmul %p0, %p1 " + flags + " : (" + tensorText(a) + ", " +
             tensorText(b) + ") -> tensor<2x2x3x5xf32>",
         "tensor<2x2x3x5xf32>"});
  }
  list.push_back({"matmul_linear_over_sequence",
                  {{"x", {2, 3, 4}}, {"w", {5, 4}}},
                  "%y = cdp.matmul %p0, %p1 {trans_b = true} : "
                  "(tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>",
                  "tensor<2x3x5xf32>"});
  for (auto [ta, tb] :
       {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
    std::string a = ta ? "tensor<4x3xf32>" : "tensor<3x4xf32>";
    std::string b = tb ? "tensor<5x4xf32>" : "tensor<4x5xf32>";
    list.push_back(
        {std::string("gemm_") + (ta ? "T" : "N") + (tb ? "T" : "N"),
         {{"a", ta ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4}},
          {"b", tb ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5}},
          {"c", {5}}},
         std::string("%y = cdp.gemm %p0, %p1, %p2 {alpha = 0.5 : f32, beta = "
                     "2.0 : f32, trans_a = ") +
             (ta ? "true" : "false") +
             ", trans_b = " + (tb ? "true" : "false") + "} : (" + a + ", " + b +
             ", tensor<5xf32>) -> tensor<3x5xf32>",
         "tensor<3x5xf32>"});
  }
  list.push_back({"conv_strided_padded_grouped",
                  {{"x", {2, 4, 5, 5}}, {"w", {6, 2, 3, 3}}, {"b", {6}}},
                  "%y = cdp.conv %p0, %p1, %p2 {pads = array<i64: 1, 0, 1, 2>, "
                  "strides = array<i64: 2, 1>, dilations = array<i64: 1, 2>, "
                  "group = 2} : (tensor<2x4x5x5xf32>, tensor<6x2x3x3xf32>, "
                  "tensor<6xf32>) -> tensor<2x6x3x3xf32>",
                  "tensor<2x6x3x3xf32>"});
  // Depthwise (group = channels) and a group width of 2 (regnet's are 8).
  list.push_back({"conv_depthwise",
                  {{"x", {2, 3, 4, 4}}, {"w", {3, 1, 3, 3}}},
                  "%y = cdp.conv %p0, %p1 {pads = array<i64: 1, 1, 1, 1>, "
                  "strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, "
                  "group = 3} : (tensor<2x3x4x4xf32>, tensor<3x1x3x3xf32>) -> "
                  "tensor<2x3x4x4xf32>",
                  "tensor<2x3x4x4xf32>"});
  list.push_back({"conv_group_width_2",
                  {{"x", {2, 6, 3, 3}}, {"w", {6, 2, 3, 3}}},
                  "%y = cdp.conv %p0, %p1 {pads = array<i64: 1, 1, 1, 1>, "
                  "strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, "
                  "group = 3} : (tensor<2x6x3x3xf32>, tensor<6x2x3x3xf32>) -> "
                  "tensor<2x6x3x3xf32>",
                  "tensor<2x6x3x3xf32>"});
  list.push_back({"max_pool_ceil",
                  {{"x", {1, 2, 5, 5}}},
                  "%y = cdp.max_pool %p0 {kernel_shape = array<i64: 2, 2>, "
                  "pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>, "
                  "dilations = array<i64: 1, 1>, ceil_mode = true} : "
                  "(tensor<1x2x5x5xf32>) -> tensor<1x2x3x3xf32>",
                  "tensor<1x2x3x3xf32>"});
  list.push_back({"average_pool_count_include_pad",
                  {{"x", {1, 2, 5, 5}}},
                  "%y = cdp.average_pool %p0 {kernel_shape = array<i64: 3, 3>, "
                  "pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>, "
                  "dilations = array<i64: 1, 1>, count_include_pad = true} : "
                  "(tensor<1x2x5x5xf32>) -> tensor<1x2x3x3xf32>",
                  "tensor<1x2x3x3xf32>"});
  list.push_back(
      {"average_pool_exclude_pad",
       {{"x", {1, 1, 4, 4}}},
       "%y = cdp.average_pool %p0 {kernel_shape = array<i64: 2, 2>, pads = "
       "array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, dilations = "
       "array<i64: 1, 1>} : (tensor<1x1x4x4xf32>) -> tensor<1x1x5x5xf32>",
       "tensor<1x1x5x5xf32>"});
  // 1-D and 3-D windows (oneDNN's ncw and ncdhw, the project kernel where
  // oneDNN declines): dilated and ceil mode, padding excluded.
  list.push_back({"max_pool_1d_dilated_ceil",
                  {{"x", {2, 2, 10}}},
                  "%y = cdp.max_pool %p0 {kernel_shape = array<i64: 3>, "
                  "pads = array<i64: 1, 1>, strides = array<i64: 2>, "
                  "dilations = array<i64: 2>, ceil_mode = true} : "
                  "(tensor<2x2x10xf32>) -> tensor<2x2x5xf32>",
                  "tensor<2x2x5xf32>"});
  list.push_back({"average_pool_1d_exclude_pad",
                  {{"x", {1, 3, 7}}},
                  "%y = cdp.average_pool %p0 {kernel_shape = array<i64: 3>, "
                  "pads = array<i64: 1, 2>, strides = array<i64: 2>, "
                  "dilations = array<i64: 1>} : (tensor<1x3x7xf32>) -> "
                  "tensor<1x3x4xf32>",
                  "tensor<1x3x4xf32>"});
  // Windows of 12: values spread over [-100, 100] so that no two in a
  // window lie within the difference step of each other.
  list.push_back({"max_pool_3d",
                  {{"x", {1, 2, 4, 5, 5}, -100.0f, 100.0f}},
                  "%y = cdp.max_pool %p0 {kernel_shape = array<i64: 2, 3, 2>, "
                  "pads = array<i64: 0, 1, 1, 0, 1, 1>, strides = array<i64: "
                  "2, 2, 2>, dilations = array<i64: 1, 1, 2>} : "
                  "(tensor<1x2x4x5x5xf32>) -> tensor<1x2x2x3x3xf32>",
                  "tensor<1x2x2x3x3xf32>"});
  list.push_back({"average_pool_3d_count_include_pad",
                  {{"x", {1, 2, 3, 4, 4}}},
                  "%y = cdp.average_pool %p0 {kernel_shape = array<i64: 2, 2, "
                  "3>, pads = array<i64: 1, 0, 1, 1, 0, 1>, strides = "
                  "array<i64: 1, 2, 2>, dilations = array<i64: 1, 1, 1>, "
                  "count_include_pad = true} : (tensor<1x2x3x4x4xf32>) -> "
                  "tensor<1x2x4x2x2xf32>",
                  "tensor<1x2x4x2x2xf32>"});
  list.push_back({"global_average_pool",
                  {{"x", {2, 3, 2, 2}}},
                  "%y = cdp.global_average_pool %p0 : (tensor<2x3x2x2xf32>) -> "
                  "tensor<2x3x1x1xf32>",
                  "tensor<2x3x1x1xf32>"});
  list.push_back({"batch_norm_training",
                  {{"x", {3, 2, 2, 2}}, {"scale", {2}}, {"bias", {2}}},
                  "%y, %rm, %rv = cdp.batch_norm %p0, %p1, %p2, %mean, %var "
                  "{training_mode = true} : (tensor<3x2x2x2xf32>, "
                  "tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) "
                  "-> (tensor<3x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>)",
                  "tensor<3x2x2x2xf32>",
                  {"%mean = cdp.param \"mean\" buffer {value = dense<0.0> : "
                   "tensor<2xf32>} : tensor<2xf32>",
                   "%var = cdp.param \"var\" buffer {value = dense<1.0> : "
                   "tensor<2xf32>} : tensor<2xf32>"}});
  list.push_back(
      {"batch_norm_inference",
       {{"x", {3, 2, 2, 2}}, {"scale", {2}}, {"bias", {2}}},
       "%y, %rm, %rv = cdp.batch_norm %p0, %p1, %p2, %mean, %var : "
       "(tensor<3x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, "
       "tensor<2xf32>) -> (tensor<3x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>)",
       "tensor<3x2x2x2xf32>",
       {"%mean = cdp.param \"mean\" buffer {value = dense<[0.5, -0.5]> : "
        "tensor<2xf32>} : tensor<2xf32>",
        "%var = cdp.param \"var\" buffer {value = dense<[2.0, 0.5]> : "
        "tensor<2xf32>} : tensor<2xf32>"}});
  list.push_back({"layer_norm",
                  {{"x", {2, 3, 4}}, {"scale", {4}}, {"bias", {4}}},
                  "%y, %mu, %inv = cdp.layer_norm %p0, %p1, %p2 {axis = -1 : "
                  "i64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> "
                  "(tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)",
                  "tensor<2x3x4xf32>"});
  // RMSNorm (Llama's, T5's): no mean subtracted, no bias.
  list.push_back({"layer_norm_rms",
                  {{"x", {2, 3, 4}}, {"scale", {4}}},
                  "%y, %mu, %inv = cdp.layer_norm %p0, %p1 {axis = -1 : "
                  "i64, rms = true} : (tensor<2x3x4xf32>, tensor<4xf32>) -> "
                  "(tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)",
                  "tensor<2x3x4xf32>"});
  // The rotary embedding (rotate-half), its tables broadcast over the
  // batch and heads; sin differs between the halves, so an adjoint that
  // read the element's own sin instead of its partner's would fail.
  list.push_back(
      {"rotary",
       {{"x", {2, 3, 4, 6}}},
       "%y = cdp.rotary %p0, %cos, %sin : (tensor<2x3x4x6xf32>, "
       "tensor<4x1xf32>, tensor<1x4x6xf32>) -> tensor<2x3x4x6xf32>",
       "tensor<2x3x4x6xf32>",
       {"%cos = cdp.constant dense<[[0.9], [0.3], [-0.5], [0.1]]> : "
        "tensor<4x1xf32>",
        "%sin = cdp.constant dense<[[[0.5, -0.25, 0.75, 1.5, -1.0, 0.2], "
        "[0.3, 0.2, 0.1, -0.1, -0.2, -0.3], [1.0, 0.0, -1.0, 0.5, -0.5, "
        "0.25], [0.1, 0.9, 0.2, 0.8, 0.3, 0.7]]]> : tensor<1x4x6xf32>"}});
  list.push_back({"softmax_axis1",
                  {{"x", {2, 3, 4}}},
                  "%y = cdp.softmax %p0 {axis = 1 : i64} : (tensor<2x3x4xf32>) "
                  "-> tensor<2x3x4xf32>",
                  "tensor<2x3x4xf32>"});
  // Softmax with a broadcast bias (attention's mask, or T5's trained
  // position bias): both gradients, the bias's summed over the batch.
  list.push_back({"softmax_bias",
                  {{"x", {2, 3, 4}}, {"bias", {1, 3, 4}}},
                  "%y = cdp.softmax %p0, %p1 : (tensor<2x3x4xf32>, "
                  "tensor<1x3x4xf32>) -> tensor<2x3x4xf32>",
                  "tensor<2x3x4xf32>"});
  // The exporters' attention softmax with its NaN guard, one row masked
  // whole (its gradient is zero, as torch's, not NaN) and one in part.
  list.push_back(
      {"softmax_guarded_masked_rows",
       {{"x", {3, 4}}},
       "%x = cdp.add %p0, %mask : (tensor<3x4xf32>, tensor<3x4xf32>) -> "
       "tensor<3x4xf32>\n"
       "  %s = cdp.softmax %x : (tensor<3x4xf32>) -> tensor<3x4xf32>\n"
       "  %n = cdp.is_nan %s : (tensor<3x4xf32>) -> tensor<3x4xi1>\n"
       "  %y = cdp.where %n, %zero, %s : (tensor<3x4xi1>, tensor<1xf32>, "
       "tensor<3x4xf32>) -> tensor<3x4xf32>",
       "tensor<3x4xf32>",
       {"%mask = cdp.constant dense<[[0.0, 0.0, 0.0, 0.0], [0xFF800000, "
        "0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0xFF800000, 0.0, 0.0]]> "
        ": tensor<3x4xf32>",
        "%zero = cdp.constant dense<0.0> : tensor<1xf32>"}});
  // cdp.attention (cdp-fuse-attention's op): the gradients of its three
  // operands and of a trained bias, the probabilities recomputed from the
  // stats; one query row masked whole (zero_nan_rows: zero gradient).
  list.push_back(
      {"attention_trained_bias",
       {{"a", {2, 3, 4}}, {"b", {2, 4, 5}}, {"v", {2, 5, 3}}, {"bias", {3, 5}}},
       "%y, %stats = cdp.attention %p0, %p1, %p2, %p3 : (tensor<2x3x4xf32>, "
       "tensor<2x4x5xf32>, tensor<2x5x3xf32>, tensor<3x5xf32>) -> "
       "(tensor<2x3x3xf32>, tensor<2x3x2xf32>)",
       "tensor<2x3x3xf32>"});
  // A scale of the scores (cdp-fold-attention-scale's): dA and dB scaled
  // by it, the bias's gradient not.
  list.push_back(
      {"attention_scaled",
       {{"a", {2, 3, 4}}, {"b", {2, 4, 5}}, {"v", {2, 5, 3}}, {"bias", {3, 5}}},
       "%y, %stats = cdp.attention %p0, %p1, %p2, %p3 {scale = 0.3 : f32} : "
       "(tensor<2x3x4xf32>, tensor<2x4x5xf32>, tensor<2x5x3xf32>, "
       "tensor<3x5xf32>) -> (tensor<2x3x3xf32>, tensor<2x3x2xf32>)",
       "tensor<2x3x3xf32>"});
  // Grouped-query attention (cdp-fold-repeated-heads): 4 query heads read
  // 2 key/value heads, h / 2; the gradients of the keys and v sum their
  // group's (attention_grad's per query head, then the rule's reduction).
  list.push_back(
      {"attention_grouped",
       {{"a", {1, 4, 3, 4}}, {"b", {1, 2, 4, 5}}, {"v", {1, 2, 5, 3}}},
       "%y, %stats = cdp.attention %p0, %p1, %p2 {scale = 0.5 : f32} : "
       "(tensor<1x4x3x4xf32>, tensor<1x2x4x5xf32>, tensor<1x2x5x3xf32>) -> "
       "(tensor<1x4x3x3xf32>, tensor<1x4x3x2xf32>)",
       "tensor<1x4x3x3xf32>"});
  // The same with the heads after the sequence (layout bshd).
  list.push_back(
      {"attention_grouped_bshd",
       {{"a", {2, 3, 4, 4}}, {"b", {2, 5, 2, 4}}, {"v", {2, 5, 2, 3}}},
       "%y, %stats = cdp.attention %p0, %p1, %p2 {layout = \"bshd\"} : "
       "(tensor<2x3x4x4xf32>, tensor<2x5x2x4xf32>, tensor<2x5x2x3xf32>) -> "
       "(tensor<2x3x4x3xf32>, tensor<2x4x3x2xf32>)",
       "tensor<2x3x4x3xf32>"});
  list.push_back(
      {"attention_masked_rows",
       {{"a", {1, 3, 4}}, {"b", {1, 4, 4}}, {"v", {1, 4, 2}}},
       "%y, %stats = cdp.attention %p0, %p1, %p2, %mask {zero_nan_rows = "
       "true} : (tensor<1x3x4xf32>, tensor<1x4x4xf32>, tensor<1x4x2xf32>, "
       "tensor<3x4xf32>) -> (tensor<1x3x2xf32>, tensor<1x3x2xf32>)",
       "tensor<1x3x2xf32>",
       {"%mask = cdp.constant dense<[[0.0, 0.0, 0.0, 0.0], [0xFF800000, "
        "0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0xFF800000, 0.0, 0.0]]> "
        ": tensor<3x4xf32>"}});
  list.push_back(
      {"log_softmax",
       {{"x", {2, 5}}},
       "%y = cdp.log_softmax %p0 : (tensor<2x5xf32>) -> tensor<2x5xf32>",
       "tensor<2x5xf32>"});
  list.push_back(
      {"dropout_training",
       {{"x", {4, 6}}},
       "%y, %mask = cdp.dropout %p0 {ratio = 0.5 : f32, training_mode = true} "
       ": (tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xi1>)",
       "tensor<4x6xf32>"});
  list.push_back({"reshape_flatten_squeeze_unsqueeze",
                  {{"x", {2, 1, 6}}},
                  "%r = cdp.reshape %p0 {shape = array<i64: 2, 3, 2>} : "
                  "(tensor<2x1x6xf32>) -> tensor<2x3x2xf32>\n"
                  "  %f = cdp.flatten %r {axis = 2 : i64} : "
                  "(tensor<2x3x2xf32>) -> tensor<6x2xf32>\n"
                  "  %u = cdp.unsqueeze %f {axes = array<i64: 0>} : "
                  "(tensor<6x2xf32>) -> tensor<1x6x2xf32>\n"
                  "  %y = cdp.squeeze %u {axes = array<i64: 0>} : "
                  "(tensor<1x6x2xf32>) -> tensor<6x2xf32>",
                  "tensor<6x2xf32>"});
  list.push_back({"transpose",
                  {{"x", {2, 3, 4}}},
                  "%y = cdp.transpose %p0 {perm = array<i64: 2, 0, 1>} : "
                  "(tensor<2x3x4xf32>) -> tensor<4x2x3xf32>",
                  "tensor<4x2x3xf32>"});
  list.push_back({"concat",
                  {{"a", {2, 3}}, {"b", {2, 2}}},
                  "%y = cdp.concat %p0, %p1 {axis = 1 : i64} : "
                  "(tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<2x5xf32>",
                  "tensor<2x5xf32>"});
  list.push_back(
      {"split_one_piece_used",
       {{"x", {2, 5}}},
       "%s:2 = cdp.split %p0 {axis = 1 : i64, split = array<i64: 2, 3>} : "
       "(tensor<2x5xf32>) -> (tensor<2x2xf32>, tensor<2x3xf32>)\n"
       "  %y = cdp.mul %s#1, %s#1 : (tensor<2x3xf32>, tensor<2x3xf32>) -> "
       "tensor<2x3xf32>",
       "tensor<2x3xf32>"});
  list.push_back({"slice_negative_step",
                  {{"x", {3, 6}}},
                  "%y = cdp.slice %p0 {starts = array<i64: -1, 1>, ends = "
                  "array<i64: -100, 6>, axes = array<i64: 1, 0>, steps = "
                  "array<i64: -2, 1>} : (tensor<3x6xf32>) -> tensor<2x3xf32>",
                  "tensor<2x3xf32>"});
  list.push_back({"expand",
                  {{"x", {3, 1}}},
                  "%y = cdp.expand %p0 {shape = array<i64: 2, 1, 4>} : "
                  "(tensor<3x1xf32>) -> tensor<2x3x4xf32>",
                  "tensor<2x3x4xf32>"});
  list.push_back(
      {"gather_repeated_indices",
       {{"table", {5, 3}}},
       "%y = cdp.gather %p0, %ids {axis = 0 : i64} : (tensor<5x3xf32>, "
       "tensor<2x2xi64>) -> tensor<2x2x3xf32>",
       "tensor<2x2x3xf32>",
       {"%ids = cdp.constant dense<[[0, 4], [4, -2]]> : tensor<2x2xi64>"}});
  list.push_back({"reduce_mean_keepdims",
                  {{"x", {2, 3, 4}}},
                  "%y = cdp.reduce_mean %p0 {axes = array<i64: 0, 2>} : "
                  "(tensor<2x3x4xf32>) -> tensor<1x3x1xf32>",
                  "tensor<1x3x1xf32>"});
  list.push_back({"reduce_sum_no_keepdims",
                  {{"x", {2, 3, 4}}},
                  "%y = cdp.reduce_sum %p0 {axes = array<i64: 1>, keepdims = "
                  "false} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>",
                  "tensor<2x4xf32>"});
  list.push_back(
      {"softmax_cross_entropy_weighted_ignore",
       {{"scores", {4, 3, 2}}},
       "%l, %lp = cdp.softmax_cross_entropy_loss %p0, %labels, %w "
       "{ignore_index = 1 : i64} : (tensor<4x3x2xf32>, tensor<4x2xi64>, "
       "tensor<3xf32>) -> (tensor<f32>, tensor<4x3x2xf32>)\n"
       "  %y = cdp.reshape %l {shape = array<i64: 1>} : (tensor<f32>) -> "
       "tensor<1xf32>",
       "tensor<1xf32>",
       {"%labels = cdp.constant dense<[[0, 2], [1, 2], [0, 0], [2, 1]]> : "
        "tensor<4x2xi64>",
        "%w = cdp.constant dense<[0.5, 2.0, 1.5]> : tensor<3xf32>"}});
  // A language model's logits (N, S, C), read with the classes last.
  list.push_back(
      {"softmax_cross_entropy_classes_last_weighted_ignore",
       {{"scores", {2, 3, 4}}},
       "%l, %lp = cdp.softmax_cross_entropy_loss %p0, %labels, %w "
       "{classes_last = true, ignore_index = 1 : i64} : (tensor<2x3x4xf32>, "
       "tensor<2x3xi64>, tensor<4xf32>) -> (tensor<f32>, tensor<2x3x4xf32>)\n"
       "  %y = cdp.reshape %l {shape = array<i64: 1>} : (tensor<f32>) -> "
       "tensor<1xf32>",
       "tensor<1xf32>",
       {"%labels = cdp.constant dense<[[0, 3, 1], [2, 1, 3]]> : "
        "tensor<2x3xi64>",
        "%w = cdp.constant dense<[0.5, 2.0, 1.5, 1.0]> : tensor<4xf32>"}});
  // Without log-probabilities (cdp-recompute-log-probabilities' form): the
  // gradient recomputes them from the scores.
  list.push_back(
      {"softmax_cross_entropy_without_log_prob",
       {{"scores", {2, 3, 4}}},
       "%l = cdp.softmax_cross_entropy_loss %p0, %labels, %w "
       "{classes_last = true, ignore_index = 1 : i64} : (tensor<2x3x4xf32>, "
       "tensor<2x3xi64>, tensor<4xf32>) -> tensor<f32>\n"
       "  %y = cdp.reshape %l {shape = array<i64: 1>} : (tensor<f32>) -> "
       "tensor<1xf32>",
       "tensor<1xf32>",
       {"%labels = cdp.constant dense<[[0, 3, 1], [2, 1, 3]]> : "
        "tensor<2x3xi64>",
        "%w = cdp.constant dense<[0.5, 2.0, 1.5, 1.0]> : tensor<4xf32>"}});
  list.push_back(
      {"softmax_cross_entropy_none_without_log_prob",
       {{"scores", {4, 3, 2}}},
       "%y = cdp.softmax_cross_entropy_loss %p0, %labels {reduction = "
       "\"none\"} : (tensor<4x3x2xf32>, tensor<4x2xi64>) -> tensor<4x2xf32>",
       "tensor<4x2xf32>",
       {"%labels = cdp.constant dense<[[0, 2], [1, 2], [0, 0], [2, 1]]> : "
        "tensor<4x2xi64>"}});
  list.push_back(
      {"softmax_cross_entropy_none",
       {{"scores", {4, 3}}},
       "%y, %lp = cdp.softmax_cross_entropy_loss %p0, %labels {reduction = "
       "\"none\"} : (tensor<4x3xf32>, tensor<4xi64>) -> (tensor<4xf32>, "
       "tensor<4x3xf32>)",
       "tensor<4xf32>",
       {"%labels = cdp.constant dense<[0, 2, 1, 2]> : tensor<4xi64>"}});
  list.push_back(
      {"nll_loss_sum",
       {{"logp", {4, 3}}},
       "%l = cdp.nll_loss %p0, %labels {reduction = \"sum\"} : "
       "(tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32>\n"
       "  %y = cdp.reshape %l {shape = array<i64: 1>} : (tensor<f32>) -> "
       "tensor<1xf32>",
       "tensor<1xf32>",
       {"%labels = cdp.constant dense<[0, 2, 1, 2]> : tensor<4xi64>"}});
  list.push_back({"tied_weight_and_skip",
                  {{"w", {3, 3}}},
                  "%h = cdp.matmul %p0, %p0 : (tensor<3x3xf32>, "
                  "tensor<3x3xf32>) -> tensor<3x3xf32>\n"
                  "  %y = cdp.add %h, %p0 : (tensor<3x3xf32>, tensor<3x3xf32>) "
                  "-> tensor<3x3xf32>",
                  "tensor<3x3xf32>"});
  (void)kF;
  return list;
}

INSTANTIATE_TEST_SUITE_P(Rules, GradientCheck, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           std::string name = info.param.name;
                           for (char &ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch)))
                               ch = '_';
                           return name;
                         });

} // namespace
