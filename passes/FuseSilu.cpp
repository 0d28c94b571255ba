//===- FuseSilu.cpp - Sigmoid then Mul into one cdp.silu ------------------===//
//
// torch exports nn.SiLU (Llama's MLP activation) as ONNX Sigmoid then Mul:
// two kernels forward, and a backward that keeps the sigmoid's values and
// x for the product's gradients, adds them and runs the sigmoid's. Where
// the sigmoid's only reader is a product of x and it, this pass makes them
// one cdp.silu, whose gradient reads x alone (PyTorch's silu_backward).
// The forward's values are the same bits (x times the same sigmoid). It
// runs after autocast, which rounds the sigmoid's values in bf16 and fp16
// plans as the exported graph's nodes each round: there the sigmoid feeds
// its rounding and nothing fuses (a fused silu would round once, as torch's
// own kernel does but the exported graph does not).
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

namespace cdp {
#define GEN_PASS_DEF_FUSESILU
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// The x of `mul` = x * sigmoid(x) (either order) whose sigmoid feeds the
/// product only, of the product's float32 type; else null.
SigmoidOp siluSigmoid(MulOp mul) {
  if (mul->hasAttr("round_result") ||
      !cast<RankedTensorType>(mul.getType()).getElementType().isF32())
    return nullptr;
  for (auto [x, other] :
       {std::pair{mul.getLhs(), mul.getRhs()}, {mul.getRhs(), mul.getLhs()}}) {
    auto sigmoid = other.getDefiningOp<SigmoidOp>();
    if (sigmoid && sigmoid.getInput() == x && sigmoid->hasOneUse() &&
        x.getType() == mul.getType())
      return sigmoid;
  }
  return nullptr;
}

struct FuseSiluPass : public cdp::impl::FuseSiluBase<FuseSiluPass> {
  void runOnOperation() override {
    SmallVector<std::pair<MulOp, SigmoidOp>> fusions;
    getOperation().walk([&](MulOp mul) {
      if (SigmoidOp sigmoid = siluSigmoid(mul))
        fusions.push_back({mul, sigmoid});
    });
    for (auto [mul, sigmoid] : fusions) {
      OpBuilder builder(mul);
      auto silu = builder.create<SiluOp>(mul.getLoc(), sigmoid.getInput());
      mul.getOutput().replaceAllUsesWith(silu.getOutput());
      mul->erase();
      sigmoid->erase();
    }
  }
};

} // namespace
