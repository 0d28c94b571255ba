//===- FuseGradientSums.cpp - a gradient sum added by the op before it ----===//
//
// Autodiff sums a value's gradient contributions with cdp.add. In a pre-norm
// transformer every block's residual stream gets two: the layer norm's
// input gradient and the gradient flowing past the block, so each backward
// block wrote the layer norm's dx and then read it and the other addend to
// write their sum (GPT-2 small: 24 such adds, 0.9 GB a step). Where the add
// is dx's only reader, in its stage and phase, cdp.layer_norm_grad takes the
// other contribution as its `addend` and writes the sum itself: each dx is
// rounded to float32 and added as the add did, the same bits.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

namespace cdp {
#define GEN_PASS_DEF_FUSEGRADIENTSUMS
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// A sum a layer norm gradient can do: the add, the gradient whose dx it
/// reads, and the other addend's operand index.
struct Fusion {
  AddOp sum;
  LayerNormGradOp grad;
  unsigned other;
};

/// The layer norm gradient whose dx `sum` can add itself, and the other
/// addend's operand index; a null gradient where there is none.
std::pair<LayerNormGradOp, unsigned> fusable(AddOp sum) {
  if (sum->hasAttr("round_result"))
    return {};
  for (unsigned k : {0u, 1u}) {
    auto grad = sum->getOperand(k).getDefiningOp<LayerNormGradOp>();
    Value other = sum->getOperand(1 - k);
    if (!grad || grad.getAddend() ||
        sum->getOperand(k) != grad.getInputGrad() ||
        !grad.getInputGrad().hasOneUse() ||
        other.getType() != grad.getInputGrad().getType() ||
        sum.getType() != other.getType())
      continue;
    bool samePlace = llvm::all_of(
        ArrayRef<StringRef>{"cdp.stage", "cdp.phase"}, [&](StringRef place) {
          return grad->getAttr(place) == sum->getAttr(place);
        });
    // The addend must exist where the layer norm gradient runs.
    Operation *producer = other.getDefiningOp();
    if (samePlace && (!producer || producer->isBeforeInBlock(grad)))
      return {grad, 1 - k};
  }
  return {};
}

struct FuseGradientSumsPass
    : public cdp::impl::FuseGradientSumsBase<FuseGradientSumsPass> {
  void runOnOperation() override {
    // Collected first; an addend that is an earlier fused sum is read by
    // its operand index once that sum is replaced by its gradient.
    SmallVector<Fusion> fusions;
    getOperation().walk([&](AddOp sum) {
      if (auto [grad, other] = fusable(sum); grad)
        fusions.push_back({sum, grad, other});
    });
    for (Fusion &fusion : fusions) {
      fusion.grad.getAddendMutable().assign(
          fusion.sum->getOperand(fusion.other));
      fusion.sum.getResult().replaceAllUsesWith(fusion.grad.getInputGrad());
      fusion.sum->erase();
    }
  }
};

} // namespace
