//===- MarkNarrowProducts.cpp - products a GPU may run narrow -------------===//
//
// Under --precision bf16 or fp16 the plan computes in float32 and rounds
// where autocast computes narrow, so a product's operands are float32
// tensors holding narrow values. A GPU multiplies such operands fastest in
// the narrow format itself (tensor cores, float32 sums); the backends can
// not see that the values are exact, so this pass says so on each product
// where it holds, from how the operands were computed. The CPU backend
// checks the claim on each product's first runs (a wrong mark fails the
// step).
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

/// Marks `product` when its two operands are exact in one format.
template <typename Product>
void markIfNarrow(Product product, ExactValues &exact) {
  StringRef format = exact.formatOf(product.getA());
  if (format.empty() || exact.formatOf(product.getB()) != format)
    return;
  product.setNarrowOperandsAttr(StringAttr::get(product.getContext(), format));
}

struct MarkNarrowProductsPass
    : public cdp::impl::MarkNarrowProductsBase<MarkNarrowProductsPass> {
  void runOnOperation() override {
    ExactValues exact;
    getOperation().walk([&](Operation *op) {
      if (auto matmul = dyn_cast<MatMulOp>(op))
        markIfNarrow(matmul, exact);
      else if (auto gemm = dyn_cast<GemmOp>(op))
        markIfNarrow(gemm, exact);
    });
  }
};

} // namespace
