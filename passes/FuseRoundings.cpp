//===- FuseRoundings.cpp - roundings done by the op before them -----------===//
//
// Mixed precision rounds an op's float32 result in a cdp.round_to of its
// own: one more pass over the tensor. Where the op is element-wise
// arithmetic (add, sub, mul, div, pow, min, max), dropout (and its
// gradient), GELU (and an activation's gradient), softmax's gradient, the
// cross-entropy loss's gradient, a matrix product (gemm, matmul), an
// attention, a batch norm (and its gradient's dx) or a reduce_to (a bias's
// gradient) whose result only the rounding reads, in the same stage and
// phase,
// the op can round each value as it writes it (`round_result`): the same bits,
// one pass or one kernel fewer.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

namespace cdp {
#define GEN_PASS_DEF_FUSEROUNDINGS
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// The op `round` can move into, or null: element-wise arithmetic,
/// dropout (its output, not its mask) and its gradient, GELU, the gradients
/// of an activation, a softmax and the cross-entropy loss, a product, an
/// attention (its output, not its stats), a batch norm (its output, not its
/// statistics) and its gradient (dx), a reduce_to.
Operation *fusableProducer(RoundToOp round) {
  Operation *op = round.getInput().getDefiningOp();
  if (!op ||
      !isa<AddOp, SubOp, MulOp, DivOp, PowOp, MinOp, MaxOp, DropoutOp,
           DropoutGradOp, GeluOp, UnaryGradOp, SoftmaxGradOp,
           SoftmaxCrossEntropyLossGradOp, GemmOp, MatMulOp, AttentionOp,
           BatchNormOp, BatchNormGradOp, ReduceToOp>(op) ||
      round.getInput() != op->getResult(0) || !round.getInput().hasOneUse() ||
      op->hasAttr("round_result"))
    return nullptr;
  for (StringRef place : {"cdp.stage", "cdp.phase"})
    if (op->getAttr(place) != round->getAttr(place))
      return nullptr;
  return op;
}

struct FuseRoundingsPass
    : public cdp::impl::FuseRoundingsBase<FuseRoundingsPass> {
  void runOnOperation() override {
    SmallVector<std::pair<RoundToOp, Operation *>> fused;
    getOperation().walk([&](RoundToOp round) {
      if (Operation *producer = fusableProducer(round))
        fused.push_back({round, producer});
    });
    for (auto [round, producer] : fused) {
      producer->setAttr("round_result", round.getFormatAttr());
      round.getResult().replaceAllUsesWith(round.getInput());
      round.erase();
    }
  }
};

} // namespace
