//===- TrainingRunTest.cpp - the training run library ---------------------===//
//
// The run cdp-run hands its flags to: the rows each step feeds, the epoch
// shuffle, a whole run against plain SGD computed here, and refusals that
// must come before anything is written.
//
//===----------------------------------------------------------------------===//

#include "training/Run.h"

#include "cdp/InitAll.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Plan/EmitPlan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

using namespace cdp::runtime;
using namespace cdp::runtime::training;
namespace fs = std::filesystem;

namespace {

/// A float32 array of `rows` rows of `width`, row r holding r * 10 + j.
Array rowsArray(int64_t rows, int64_t width) {
  Array array;
  array.shape = {rows, width};
  array.bytes.resize(rows * width * sizeof(float));
  float *values = reinterpret_cast<float *>(array.bytes.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j)
      values[r * width + j] = static_cast<float>(r * 10 + j);
  return array;
}

/// The first column of each row of `values` (rows of `width`): which
/// source row it came from, times 10.
std::vector<float> firstColumn(const std::vector<float> &values,
                               int64_t width) {
  std::vector<float> column;
  for (size_t i = 0; i < values.size(); i += width)
    column.push_back(values[i]);
  return column;
}

TEST(TrainingRun, CopyRowsWrapsAroundTheFeed) {
  Array source = rowsArray(5, 3);
  std::vector<float> target(2 * 3);
  TensorView view{target.data(), {2, 3}, cdp::plan::F32, MemorySpace::Host};
  copyRows(source, view, /*batchAxis=*/0, /*first=*/4);
  EXPECT_EQ(firstColumn(target, 3), (std::vector<float>{40, 0}));
  std::vector<int64_t> order{4, 3, 2, 1, 0};
  copyRows(source, view, 0, 1, &order);
  EXPECT_EQ(firstColumn(target, 3), (std::vector<float>{30, 20}));
}

TEST(TrainingRun, CopyRowsAlongAnInnerBatchAxis) {
  // (2, 5, 1) cut along axis 1: both outer entries take rows 3 and 4.
  Array source = rowsArray(10, 1);
  source.shape = {2, 5, 1};
  std::vector<float> target(2 * 2);
  TensorView view{target.data(), {2, 2, 1}, cdp::plan::F32, MemorySpace::Host};
  copyRows(source, view, /*batchAxis=*/1, /*first=*/3);
  EXPECT_EQ(target, (std::vector<float>{30, 40, 80, 90}));
}

TEST(TrainingRun, EachEpochShufflesEverySampleOnce) {
  std::vector<int64_t> first = shuffledOrder(7, 0, 100);
  std::vector<int64_t> sorted = first, all(100);
  std::sort(sorted.begin(), sorted.end());
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);
  EXPECT_EQ(first, shuffledOrder(7, 0, 100)) << "the same seed and epoch";
  EXPECT_NE(first, shuffledOrder(7, 1, 100)) << "another epoch";
  EXPECT_NE(first, shuffledOrder(8, 0, 100)) << "another seed";
}

/// x (2 rows of 3) @ w (3 x 2) against targets by mean squared error,
/// SGD with lr 0.1: compiled by the real passes into a plan file.
constexpr float kLr = 0.1f;
const float kInitialW[6] = {0.5f, -0.25f, 0.125f, 0.75f, -0.5f, 0.25f};

void writeLinearPlan(const std::string &path) {
  std::string ir =
      "func.func @main(%x: tensor<2x3xf32> {cdp.name = \"x\", "
      "cdp.batch_axis = 0 : i64}) -> (tensor<2x2xf32> {cdp.name = "
      "\"logits\"}) {\n"
      "  %w = cdp.param \"w\" {value = dense<[[0.5, -0.25], [0.125, 0.75], "
      "[-0.5, 0.25]]> : tensor<3x2xf32>} : tensor<3x2xf32>\n"
      "  %y = cdp.matmul %x, %w : (tensor<2x3xf32>, tensor<3x2xf32>) -> "
      "tensor<2x2xf32>\n"
      "  return %y : tensor<2x2xf32>\n}\n";
  mlir::DialectRegistry registry;
  cdp::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(ir, &context);
  ASSERT_TRUE(module);
  mlir::PassManager pm(&context);
  cdp::AttachLossOptions loss;
  loss.loss = "mse";
  pm.addPass(cdp::createAttachLoss(loss));
  pm.addPass(cdp::createAutodiff());
  cdp::InsertOptimizerOptions optimizer;
  optimizer.lr = kLr;
  pm.addPass(cdp::createInsertOptimizer(optimizer));
  pm.addPass(cdp::createPlanMemory());
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  cdp::plan::Plan plan;
  ASSERT_TRUE(
      mlir::succeeded(cdp::buildPlan(*module, cdp::EmitOptions(), plan)));
  std::string error;
  ASSERT_TRUE(cdp::plan::writePlan(plan, path, error)) << error;
}

/// Plain SGD on the same model: step t takes rows (2t, 2t + 1) mod 3.
std::vector<double> referenceW(const std::vector<float> &x,
                               const std::vector<float> &targets, int steps) {
  std::vector<double> w(kInitialW, kInitialW + 6);
  for (int t = 0; t < steps; ++t) {
    std::vector<double> grad(6, 0.0);
    for (int b = 0; b < 2; ++b) {
      int row = (2 * t + b) % 3;
      for (int c = 0; c < 2; ++c) {
        double y = 0;
        for (int k = 0; k < 3; ++k)
          y += x[row * 3 + k] * w[k * 2 + c];
        double dy = 2.0 * (y - targets[row * 2 + c]) / 4.0; // mean of 4
        for (int k = 0; k < 3; ++k)
          grad[k * 2 + c] += x[row * 3 + k] * dy;
      }
    }
    for (int i = 0; i < 6; ++i)
      w[i] -= kLr * grad[i];
  }
  return w;
}

class TrainingRunFiles : public ::testing::Test {
protected:
  void SetUp() override {
    folder = fs::temp_directory_path() /
             ("cdp-training-run-" + std::to_string(::getpid()));
    fs::remove_all(folder);
    fs::create_directories(folder);
  }
  void TearDown() override { fs::remove_all(folder); }
  std::string path(const std::string &name) const { return folder / name; }
  fs::path folder;
};

TEST_F(TrainingRunFiles, TrainsAsPlainSgdOverTheFedRows) {
  writeLinearPlan(path("plan.cdp"));
  std::vector<float> x = {1, 2, -1, 0.5f, -1, 2, -2, 0, 1};
  std::vector<float> targets = {1, 0, -1, 2, 0.5f, 0.5f};
  writeNpy(path("x.npy"),
           {x.data(), {3, 3}, cdp::plan::F32, MemorySpace::Host});
  writeNpy(path("t.npy"),
           {targets.data(), {3, 2}, cdp::plan::F32, MemorySpace::Host});
  RunOptions options;
  options.plan = path("plan.cdp");
  options.feeds = {{"x", path("x.npy")}, {"labels", path("t.npy")}};
  options.steps = 3;
  options.dumpParams = path("params");
  TrainingRun run(options,
                  [](const std::string &message) { FAIL() << message; });
  run.execute();
  Array w = readArray(path("params/w.npy"));
  ASSERT_EQ(w.shape, (std::vector<int64_t>{3, 2}));
  const float *trained = reinterpret_cast<const float *>(w.bytes.data());
  std::vector<double> expected = referenceW(x, targets, 3);
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(trained[i], expected[i], 1e-5) << "w[" << i << "]";
}

TEST_F(TrainingRunFiles, RefusesAnOutputOntoAnInputBeforeWriting) {
  writeLinearPlan(path("plan.cdp"));
  RunOptions options;
  options.plan = path("plan.cdp");
  options.steps = 1;
  options.feeds = {{"x", path("x.npy")}};
  options.metrics = path("plan.cdp");
  TrainingRun run(options, [](const std::string &) {});
  try {
    run.execute();
    FAIL() << "an output naming the plan was accepted";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("--metrics"), std::string::npos)
        << e.what();
  }
  EXPECT_GT(fs::file_size(path("plan.cdp")), 0u) << "the plan is intact";
}

TEST_F(TrainingRunFiles, RefusesFeedAndDataTogether) {
  writeLinearPlan(path("plan.cdp"));
  RunOptions options;
  options.plan = path("plan.cdp");
  options.feeds = {{"x", path("x.npy")}};
  options.data = path("none");
  TrainingRun run(options, [](const std::string &) {});
  try {
    run.execute();
    FAIL() << "--feed and --data together were accepted";
  } catch (const RuntimeError &e) {
    EXPECT_STREQ(e.what(), "give --feed or --data, not both");
  }
}

} // namespace
