//===- FuseProductRelu.cpp - a ReLU applied by the gemm before it ---------===//
//
// A Linear followed by ReLU wrote the gemm's result, read it to write the
// ReLU's, and kept the gemm's result for the backward, whose ReLU gradient
// read it (dx = dy where x > 0). Since relu(x) > 0 exactly where x > 0 (a
// NaN is neither), the gradient may read the ReLU's output instead; then
// nothing but the ReLU reads the gemm's result, and the gemm applies the
// ReLU as it writes (`activation = "relu"`, a cuBLASLt epilogue on GPUs):
// one pass over the result and one activation buffer fewer per layer.
// Float32 products only: a rounded or 2-byte result is left as it is.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

namespace cdp {
#define GEN_PASS_DEF_FUSEPRODUCTRELU
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// Whether `value` is a float32 tensor.
bool isFloat32(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.getElementType().isF32();
}

/// The ReLU `product` can apply itself: the one ReLU of its result, in its
/// stage, where every other reader is a ReLU gradient reading the result as
/// its saved input; else null.
ReluOp fusableRelu(GemmOp product) {
  if (product.getNarrowOperands() || product.getRoundResult() ||
      product->hasAttr("activation") || !isFloat32(product.getOutput()))
    return nullptr;
  ReluOp relu;
  for (OpOperand &use : product.getOutput().getUses()) {
    Operation *reader = use.getOwner();
    if (auto found = dyn_cast<ReluOp>(reader)) {
      if (relu)
        return nullptr;
      relu = found;
      continue;
    }
    auto grad = dyn_cast<UnaryGradOp>(reader);
    if (!grad || grad.getKind() != "relu" ||
        use.getOperandNumber() != grad.getSavedMutable().getOperandNumber())
      return nullptr;
  }
  if (!relu || !isFloat32(relu.getOutput()) ||
      relu->getAttr("cdp.stage") != product->getAttr("cdp.stage"))
    return nullptr;
  return relu;
}

struct FuseProductReluPass
    : public cdp::impl::FuseProductReluBase<FuseProductReluPass> {
  void runOnOperation() override {
    SmallVector<std::pair<GemmOp, ReluOp>> fusions;
    getOperation().walk([&](GemmOp product) {
      if (ReluOp relu = fusableRelu(product))
        fusions.push_back({product, relu});
    });
    for (auto [product, relu] : fusions) {
      Value result = product.getOutput();
      // The gradients read the ReLU's output, the same mask.
      result.replaceUsesWithIf(relu.getOutput(), [&](OpOperand &use) {
        return use.getOwner() != relu.getOperation();
      });
      product->setAttr("activation",
                       StringAttr::get(product.getContext(), "relu"));
      relu.getOutput().replaceAllUsesWith(result);
      relu->erase();
    }
  }
};

} // namespace
