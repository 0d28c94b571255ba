//===- RecomputeLogProbabilities.cpp - the loss keeps no log-probabilities ===//
//
// A softmax cross-entropy loss writes the log-probabilities of every class
// of every row, and its gradient reads them back in the backward. For a
// language model those are the logits' size in float32 (GPT-2 small at
// batch 8 x 512: 823 MB written, kept across the loss and read once more),
// while the scores they come from are in memory anyway. Where only the
// loss's gradients read them, the loss stops writing them and the gradients
// read the scores, recomputing each row's log-softmax with the loss's own
// arithmetic (same bits; a row's max and log-sum cost one more pass over a
// row the kernel reads anyway).
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cdp {
#define GEN_PASS_DEF_RECOMPUTELOGPROBABILITIES
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// The loss's gradients, when they are the only readers of its
/// log-probabilities and lie in its stage.
std::optional<SmallVector<SoftmaxCrossEntropyLossGradOp>>
onlyGradientsRead(SoftmaxCrossEntropyLossOp loss) {
  Value logProb = loss.getLogProb();
  if (!logProb)
    return std::nullopt;
  SmallVector<SoftmaxCrossEntropyLossGradOp> grads;
  for (OpOperand &use : logProb.getUses()) {
    auto grad = dyn_cast<SoftmaxCrossEntropyLossGradOp>(use.getOwner());
    if (!grad || use.getOperandNumber() != 1 || grad.getFromScores() ||
        grad->getAttr("cdp.stage") != loss->getAttr("cdp.stage"))
      return std::nullopt;
    grads.push_back(grad);
  }
  return grads;
}

/// `loss` rebuilt with its loss result alone.
void dropLogProbabilities(SoftmaxCrossEntropyLossOp loss) {
  OpBuilder builder(loss);
  OperationState state(loss.getLoc(), loss->getName());
  state.addOperands(loss->getOperands());
  state.addAttributes(loss->getAttrs());
  state.addTypes(loss.getLoss().getType());
  Operation *lean = builder.create(state);
  loss.getLoss().replaceAllUsesWith(lean->getResult(0));
  loss->erase();
}

struct RecomputeLogProbabilitiesPass
    : public cdp::impl::RecomputeLogProbabilitiesBase<
          RecomputeLogProbabilitiesPass> {
  void runOnOperation() override {
    SmallVector<SoftmaxCrossEntropyLossOp> losses;
    getOperation().walk(
        [&](SoftmaxCrossEntropyLossOp loss) { losses.push_back(loss); });
    for (SoftmaxCrossEntropyLossOp loss : losses) {
      auto grads = onlyGradientsRead(loss);
      if (!grads)
        continue;
      BoolAttr fromScores = BoolAttr::get(&getContext(), true);
      for (SoftmaxCrossEntropyLossGradOp grad : *grads) {
        grad->setOperand(1, loss.getScores());
        grad.setFromScoresAttr(fromScores);
      }
      dropLogProbabilities(loss);
    }
  }
};

} // namespace
