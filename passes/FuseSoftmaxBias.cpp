//===- FuseSoftmaxBias.cpp - attention's mask add into its softmax --------===//
//
// Attention adds its mask (or T5's position bias) to the scores right
// before the softmax:
//
//   %a = add(%scores, %bias); %p = softmax(%a)
//
// a kernel that reads the batch x heads x seq^2 scores and writes them again
// (GPT-2 small: 210 MB a layer at batch 8 x 512), only for the softmax to
// read them once more. When the sum feeds the softmax alone, this pass gives
// the softmax the addend as its `bias` operand: it adds each value as it
// reads it, the same float32 sum, so the same results. The operand shaped
// as the sum is the input, the other the bias (it broadcasts); its gradient,
// where it takes one (T5's bias is trained), is the softmax's input gradient
// summed to its shape, as the add's was.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cdp {
#define GEN_PASS_DEF_FUSESOFTMAXBIAS
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// The add `softmax` reads, when the softmax alone reads it, the softmax
/// has no bias yet and mixed precision leaves the sum float32 (it rounds a
/// sum of narrow operands: a cdp.round_to would then stand between them).
AddOp biasAddOf(SoftmaxOp softmax) {
  auto add = softmax.getInput().getDefiningOp<AddOp>();
  if (!add || softmax.getBias() || !add->hasOneUse() ||
      add->hasAttr("round_result") || add->hasAttr("cdp.narrow"))
    return nullptr;
  return add;
}

struct FuseSoftmaxBiasPass
    : public cdp::impl::FuseSoftmaxBiasBase<FuseSoftmaxBiasPass> {
  void runOnOperation() override {
    SmallVector<SoftmaxOp> softmaxes;
    getOperation().walk([&](SoftmaxOp op) { softmaxes.push_back(op); });
    for (SoftmaxOp softmax : softmaxes) {
      AddOp add = biasAddOf(softmax);
      if (!add)
        continue;
      Value input = add.getLhs(), bias = add.getRhs();
      if (input.getType() != add.getType())
        std::swap(input, bias);
      if (input.getType() != add.getType())
        continue; // both broadcast: no operand is the scores
      softmax->setOperands({input, bias});
      add->erase();
    }
  }
};

} // namespace
