//===- DropExactRoundings.cpp - roundings of values already exact ---------===//
//
// Autodiff rounds every gradient contribution that reaches a narrow value,
// as autograd keeps a bf16 tensor's gradient bf16; where the contribution
// is already exact (a reshape or transpose of a rounded gradient, say) the
// rounding changes nothing and is one more pass over the tensor on every
// step. This pass drops those: a cdp.round_to whose input is exact in its
// format (ExactValues) gives way to its input.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/NarrowValues.h"
#include "cdp/Passes/Passes.h"

namespace cdp {
#define GEN_PASS_DEF_DROPEXACTROUNDINGS
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

struct DropExactRoundingsPass
    : public cdp::impl::DropExactRoundingsBase<DropExactRoundingsPass> {
  void runOnOperation() override {
    // Found first: the analysis remembers values by their ops.
    ExactValues exact;
    SmallVector<RoundToOp> redundant;
    getOperation().walk([&](RoundToOp round) {
      if (exact.formatOf(round.getInput()) == round.getFormat())
        redundant.push_back(round);
    });
    for (RoundToOp round : redundant) {
      round.getResult().replaceAllUsesWith(round.getInput());
      round.erase();
    }
  }
};

} // namespace
