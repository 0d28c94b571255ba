//===- ShapeInferenceTest.cpp - shape rules of the cdp graph ops ----------===//
//
// Builds small functions from IR text and checks the result types the
// verifier accepts, including the edge cases lit tests do not reach easily.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/InitAll.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

class ShapeInference : public ::testing::Test {
protected:
  ShapeInference() {
    DialectRegistry registry;
    cdp::registerAllDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    // Keep expected verifier errors out of the test log.
    context.getDiagEngine().registerHandler([](Diagnostic &) {});
  }

  /// Whether `op` (one line of IR using %x of type `input`) verifies.
  bool verifies(StringRef input, StringRef op, StringRef resultType) {
    std::string text =
        ("func.func @f(%x: " + input + ") -> " + resultType +
         " {\n  %y = " + op + "\n  return %y : " + resultType + "\n}\n")
            .str();
    return static_cast<bool>(parseSourceString<ModuleOp>(text, &context));
  }

  MLIRContext context;
};

TEST_F(ShapeInference, MaxPoolCeilModeDropsWindowStartingInPadding) {
  // 5 inputs, kernel 2, stride 2, ceil: windows start at 0, 2, 4 -> 3.
  EXPECT_TRUE(verifies(
      "tensor<1x1x5x5xf32>",
      "cdp.max_pool %x {kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, "
      "0, 0, 0>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, "
      "ceil_mode = true} : (tensor<1x1x5x5xf32>) -> tensor<1x1x3x3xf32>",
      "tensor<1x1x3x3xf32>"));
  // 5 inputs, pad 1 at each end, kernel 2, stride 2, ceil: ceil(5/2)+1 = 4,
  // but the fourth window would start at 6 = input + begin pad: dropped.
  EXPECT_TRUE(verifies(
      "tensor<1x1x5x5xf32>",
      "cdp.max_pool %x {kernel_shape = array<i64: 2, 2>, pads = array<i64: 1, "
      "1, 1, 1>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, "
      "ceil_mode = true} : (tensor<1x1x5x5xf32>) -> tensor<1x1x3x3xf32>",
      "tensor<1x1x3x3xf32>"));
}

TEST_F(ShapeInference, ConvRejectsWrongGroupChannels) {
  EXPECT_FALSE(verifies(
      "tensor<1x4x5x5xf32>",
      "cdp.conv %x, %x {pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, "
      "1>, dilations = array<i64: 1, 1>, group = 2} : (tensor<1x4x5x5xf32>, "
      "tensor<1x4x5x5xf32>) -> tensor<1x1x1x1xf32>",
      "tensor<1x1x1x1xf32>"));
}

TEST_F(ShapeInference, MatMulPromotesVectorsAndBroadcastsBatches) {
  EXPECT_TRUE(verifies("tensor<3xf32>",
                       "cdp.matmul %x, %x : (tensor<3xf32>, tensor<3xf32>) -> "
                       "tensor<f32>",
                       "tensor<f32>"));
  EXPECT_FALSE(verifies("tensor<3xf32>",
                        "cdp.matmul %x, %x : (tensor<3xf32>, tensor<3xf32>) "
                        "-> tensor<1xf32>",
                        "tensor<1xf32>"));
}

TEST_F(ShapeInference, SliceClampsLikeOnnx) {
  EXPECT_TRUE(verifies(
      "tensor<10xf32>",
      "cdp.slice %x {starts = array<i64: -3>, ends = array<i64: 1000>, axes = "
      "array<i64: 0>, steps = array<i64: 1>} : (tensor<10xf32>) -> "
      "tensor<3xf32>",
      "tensor<3xf32>"));
  EXPECT_TRUE(verifies(
      "tensor<10xf32>",
      "cdp.slice %x {starts = array<i64: 20>, ends = array<i64: -1000>, axes "
      "= array<i64: 0>, steps = array<i64: -3>} : (tensor<10xf32>) -> "
      "tensor<4xf32>",
      "tensor<4xf32>"));
}

TEST_F(ShapeInference, BroadcastRejectsIncompatibleShapes) {
  EXPECT_TRUE(verifies("tensor<2x1x3xf32>",
                       "cdp.add %x, %x : (tensor<2x1x3xf32>, "
                       "tensor<2x1x3xf32>) -> tensor<2x1x3xf32>",
                       "tensor<2x1x3xf32>"));
  EXPECT_FALSE(verifies("tensor<2x1x3xf32>",
                        "cdp.add %x, %x : (tensor<2x1x3xf32>, "
                        "tensor<2x1x3xf32>) -> tensor<2x3x3xf32>",
                        "tensor<2x3x3xf32>"));
}

TEST_F(ShapeInference, ParamValueMustMatchType) {
  EXPECT_FALSE(verifies("tensor<2xf32>",
                        "cdp.param \"w\" {value = dense<1.0> : tensor<3xf32>} "
                        ": tensor<2xf32>",
                        "tensor<2xf32>"));
}

} // namespace
