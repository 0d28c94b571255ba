//===- LayerNormKernelTest.cpp - layer_norm's CPU rows and blocks ---------===//
//
// The CPU layer_norm and layer_norm_grad take rows on the threads and sum
// each row in fixed lanes; the gradient's scale and bias sums go through
// blocks of rows, added in block order. Against the formulas in double
// (1e-5 relative to the terms' size) on shapes whose rows end inside the
// lanes and whose last block is short, LayerNorm and RMSNorm, and the same
// bits on 1, 2 and 3 threads.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>

namespace {

using namespace cdp;
using namespace cdp::runtime;

TensorView viewOf(std::vector<float> &values, std::vector<int64_t> shape) {
  TensorView v;
  v.data = values.data();
  v.shape = std::move(shape);
  v.dtype = plan::F32;
  return v;
}

void run(const std::string &op, bool rms, std::vector<TensorView> inputs,
         std::vector<TensorView> outputs) {
  plan::Instruction instruction;
  instruction.set_op(op);
  plan::Attribute *axis = instruction.add_attributes();
  axis->set_name("axis");
  axis->set_i(-1);
  plan::Attribute *attribute = instruction.add_attributes();
  attribute->set_name("rms");
  attribute->set_i(rms ? 1 : 0);
  if (op == "layer_norm") {
    plan::Attribute *epsilon = instruction.add_attributes();
    epsilon->set_name("epsilon");
    epsilon->set_f(1e-5);
  }
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = std::move(inputs);
  args.outputs = std::move(outputs);
  (*KernelRegistry::instance().lookup(op, Backend::CPU))(args)->run(
      StepContext());
}

/// One case's operands and both kernels' results.
struct Case {
  int64_t rows, width;
  bool rms;
  std::vector<float> x, scale, bias, dy;
  std::vector<float> y, mean, inv, dx, dscale, dbias;

  Case(int64_t rows, int64_t width, bool rms)
      : rows(rows), width(width), rms(rms), x(rows * width), scale(width),
        bias(width), dy(rows * width), y(rows * width), mean(rows), inv(rows),
        dx(rows * width), dscale(width), dbias(width) {
    std::mt19937 random(static_cast<unsigned>(rows * 131 + width));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < rows * width; ++i) {
      x[i] = 3.0f * normal(random) + 0.5f;
      dy[i] = normal(random);
    }
    for (int64_t i = 0; i < width; ++i) {
      scale[i] = 1.0f + 0.3f * normal(random);
      bias[i] = normal(random);
    }
  }
  void runBoth() {
    std::vector<TensorView> in{viewOf(x, {rows, width}),
                               viewOf(scale, {width})};
    if (!rms)
      in.push_back(viewOf(bias, {width}));
    run("layer_norm", rms, in,
        {viewOf(y, {rows, width}), viewOf(mean, {rows, 1}),
         viewOf(inv, {rows, 1})});
    run("layer_norm_grad", rms,
        {viewOf(dy, {rows, width}), viewOf(x, {rows, width}),
         viewOf(scale, {width}), viewOf(mean, {rows, 1}),
         viewOf(inv, {rows, 1})},
        {viewOf(dx, {rows, width}), viewOf(dscale, {width}),
         viewOf(dbias, {width})});
  }
};

/// (rows, width): rows ending inside the 8 lanes, blocks of 16 rows with a
/// short last one, and 4100 rows (blocks of 17, the most blocks); the
/// kernels share rows among threads from 65,536 elements, as the last two.
const std::pair<int64_t, int64_t> kShapes[] = {
    {70, 37}, {33, 8}, {4100, 17}, {301, 300}};

TEST(LayerNormKernel, MatchesTheFormulasInDouble) {
  for (bool rms : {false, true})
    for (auto [rows, width] : kShapes) {
      Case c(rows, width, rms);
      c.runBoth();
      std::vector<double> dscale(width), dbias(width);
      for (int64_t r = 0; r < rows; ++r) {
        const float *x = c.x.data() + r * width, *dy = c.dy.data() + r * width;
        double m = 0, squares = 0;
        for (int64_t i = 0; !rms && i < width; ++i)
          m += x[i] / double(width);
        for (int64_t i = 0; i < width; ++i)
          squares += (x[i] - m) * (x[i] - m);
        double inv = 1.0 / std::sqrt(squares / width + 1e-5);
        ASSERT_NEAR(c.mean[r], m, 1e-5 * (1 + std::fabs(m))) << "row " << r;
        ASSERT_NEAR(c.inv[r], inv, 1e-5 * inv) << "row " << r;
        double sumG = 0, sumGXhat = 0;
        for (int64_t i = 0; i < width; ++i) {
          double xhat = (x[i] - m) * inv, g = dy[i] * double(c.scale[i]);
          double want = xhat * c.scale[i] + (rms ? 0.0 : c.bias[i]);
          ASSERT_NEAR(c.y[r * width + i], want, 1e-5 * (1 + std::fabs(want)));
          sumG += rms ? 0.0 : g;
          sumGXhat += g * xhat;
          dscale[i] += dy[i] * xhat;
          dbias[i] += dy[i];
        }
        for (int64_t i = 0; i < width; ++i) {
          double xhat = (x[i] - m) * inv, g = dy[i] * double(c.scale[i]);
          double want = inv * (g - sumG / width - xhat * sumGXhat / width);
          ASSERT_NEAR(c.dx[r * width + i], want,
                      1e-5 * inv *
                          (std::fabs(g) + std::fabs(sumG) / width +
                           std::fabs(xhat * sumGXhat) / width))
              << "rows " << rows << ", element " << r << ", " << i;
        }
      }
      for (int64_t i = 0; i < width; ++i) {
        ASSERT_NEAR(c.dscale[i], dscale[i], 1e-5 * std::sqrt(double(rows)) * 4)
            << "rows " << rows << ", column " << i;
        ASSERT_NEAR(c.dbias[i], dbias[i], 1e-5 * std::sqrt(double(rows)) * 4)
            << "rows " << rows << ", column " << i;
      }
    }
}

TEST(LayerNormKernel, SameBitsOnAnyThreadCount) {
  int threads = omp_get_max_threads();
  for (bool rms : {false, true})
    for (auto [rows, width] : kShapes) {
      omp_set_num_threads(1);
      Case one(rows, width, rms);
      one.runBoth();
      for (int t : {2, 3}) {
        omp_set_num_threads(t);
        Case many(rows, width, rms);
        many.runBoth();
        auto same = [](const std::vector<float> &a,
                       const std::vector<float> &b) {
          return a.size() == b.size() &&
                 std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
        };
        EXPECT_TRUE(same(one.y, many.y)) << t << " threads, rows " << rows;
        EXPECT_TRUE(same(one.mean, many.mean)) << t << " threads";
        EXPECT_TRUE(same(one.inv, many.inv)) << t << " threads";
        EXPECT_TRUE(same(one.dx, many.dx)) << t << " threads, rows " << rows;
        EXPECT_TRUE(same(one.dscale, many.dscale)) << t << " threads";
        EXPECT_TRUE(same(one.dbias, many.dbias)) << t << " threads";
      }
    }
  omp_set_num_threads(threads);
}

} // namespace
