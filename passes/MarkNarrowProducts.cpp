//===- MarkNarrowProducts.cpp - products a backend may run narrow ---------===//
//
// Under --precision bf16 or fp16 the plan computes in float32 and rounds
// where autocast computes narrow, so a product's operands are float32
// tensors holding narrow values. A GPU (or a CPU with bf16 dot products)
// multiplies such operands fastest in the narrow format itself (float32
// sums); the backends can not see that the values are exact, so this pass
// says so on each matrix product and convolution (forward and both
// gradients) where it holds, from how the operands were computed. The CPU
// backend checks the claim on each product's first runs (a wrong mark
// fails the step).
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/NarrowValues.h"
#include "cdp/Passes/Passes.h"

namespace cdp {
#define GEN_PASS_DEF_MARKNARROWPRODUCTS
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// Marks `product` when its two operands `a` and `b` are exact in one
/// format.
template <typename Product>
void markIfNarrow(Product product, Value a, Value b, ExactValues &exact) {
  StringRef format = exact.formatOf(a);
  if (format.empty() || exact.formatOf(b) != format)
    return;
  product.setNarrowOperandsAttr(StringAttr::get(product.getContext(), format));
}

struct MarkNarrowProductsPass
    : public cdp::impl::MarkNarrowProductsBase<MarkNarrowProductsPass> {
  void runOnOperation() override {
    ExactValues exact;
    getOperation().walk([&](Operation *op) {
      if (auto matmul = dyn_cast<MatMulOp>(op))
        markIfNarrow(matmul, matmul.getA(), matmul.getB(), exact);
      else if (auto gemm = dyn_cast<GemmOp>(op))
        markIfNarrow(gemm, gemm.getA(), gemm.getB(), exact);
      else if (auto conv = dyn_cast<ConvOp>(op))
        markIfNarrow(conv, conv.getInput(), conv.getWeight(), exact);
      else if (auto gradInput = dyn_cast<ConvGradInputOp>(op))
        markIfNarrow(gradInput, gradInput.getGrad(), gradInput.getWeight(),
                     exact);
      else if (auto gradWeight = dyn_cast<ConvGradWeightOp>(op))
        markIfNarrow(gradWeight, gradWeight.getGrad(), gradWeight.getInput(),
                     exact);
    });
  }
};

} // namespace
