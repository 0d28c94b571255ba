//===- FoldIdentityDropout.cpp - dropouts that keep every element ---------===//
//
// torch exports nn.Dropout as an ONNX Dropout whatever its rate. A dropout
// at rate 0 (GPT-2 with its pdrops at 0, nanoGPT's default and most
// pretraining today's) is still, in each attention and MLP block, a pass
// over the activations forward, a mask kept for the backward and a pass
// backward; PyTorch's own dropout returns its input for p = 0. A dropout
// that keeps every element (ratio 0, or outside training mode) is its input,
// bit for bit (x / (1 - 0) = x), so this pass, on the forward graph before
// autodiff, replaces one whose mask nothing reads by its input.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

namespace cdp {
#define GEN_PASS_DEF_FOLDIDENTITYDROPOUT
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// Whether `dropout` keeps every element and nothing reads its mask.
bool isIdentity(DropoutOp dropout) {
  bool keepsAll =
      !dropout.getTrainingMode() || dropout.getRatio().isExactlyValue(0.0);
  return keepsAll && dropout.getMask().use_empty() &&
         dropout.getInput().getType() == dropout.getOutput().getType();
}

struct FoldIdentityDropoutPass
    : public cdp::impl::FoldIdentityDropoutBase<FoldIdentityDropoutPass> {
  void runOnOperation() override {
    SmallVector<DropoutOp> identities;
    getOperation().walk([&](DropoutOp dropout) {
      if (isIdentity(dropout))
        identities.push_back(dropout);
    });
    for (DropoutOp dropout : identities) {
      dropout.getOutput().replaceAllUsesWith(dropout.getInput());
      dropout->erase();
    }
  }
};

} // namespace
