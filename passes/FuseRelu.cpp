//===- FuseRelu.cpp - a ReLU applied by the op that writes its input ------===//
//
// A Linear (or a batch norm) followed by ReLU wrote its result and read it
// to write the ReLU's. Where the ReLU is the result's only reader (the ReLU's
// gradient reads the ReLU's output, as autodiff makes it), the op applies
// the ReLU as it writes (`activation = "relu"`; a cuBLASLt epilogue, or the
// batch norm's own kernel, on GPUs): one pass over the result and one
// activation buffer fewer per layer (through a reshape between them, which
// then reshapes the ReLU's values). A batch norm's own gradient reads its
// input, not its result. Float32 results only: a gemm's rounded or 2-byte
// result is left as it is (a batch norm's rounded one fuses); and
// training-mode batch norms (the evaluation's keeps oneDNN's kernel on the
// CPU).
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

namespace cdp {
#define GEN_PASS_DEF_FUSERELU
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

/// Whether `op` may apply a ReLU to its first result: a float32 gemm
/// without rounding, or a training batch norm, rounded or not (its kernels
/// apply the ReLU before the rounding, which commute: both keep 0, NaN and
/// the order of values).
bool canApplyRelu(Operation *op) {
  if (op->hasAttr("activation") || !isFloat32(op->getResult(0)))
    return false;
  if (auto product = dyn_cast<GemmOp>(op))
    return !product.getNarrowOperands() && !product.getRoundResult();
  if (auto norm = dyn_cast<BatchNormOp>(op))
    return norm.getTrainingMode();
  return false;
}

/// The value a ReLU after `op` reads: its first result, or that result's
/// one reader when it is a reshape (a Linear on a transformer's tokens,
/// reshape(gemm) from cdp-fuse-matmul-bias), which moves nothing.
Value reluOperand(Operation *op) {
  Value result = op->getResult(0);
  if (result.hasOneUse())
    if (auto reshape = dyn_cast<ReshapeOp>(*result.getUsers().begin()))
      return reshape.getOutput();
  return result;
}

/// The ReLU `op` can apply itself: the one reader of its first result (or
/// of its reshape), in its stage; else null.
ReluOp fusableRelu(Operation *op) {
  if (!canApplyRelu(op))
    return nullptr;
  Value result = reluOperand(op);
  if (!result.hasOneUse())
    return nullptr;
  auto relu = dyn_cast<ReluOp>(*result.getUsers().begin());
  if (!relu || !isFloat32(relu.getOutput()) ||
      relu->getAttr("cdp.stage") != op->getAttr("cdp.stage"))
    return nullptr;
  return relu;
}

struct FuseReluPass : public cdp::impl::FuseReluBase<FuseReluPass> {
  void runOnOperation() override {
    SmallVector<std::pair<Operation *, ReluOp>> fusions;
    getOperation().walk([&](Operation *op) {
      if (isa<GemmOp, BatchNormOp>(op))
        if (ReluOp relu = fusableRelu(op))
          fusions.push_back({op, relu});
    });
    for (auto [op, relu] : fusions) {
      op->setAttr("activation", StringAttr::get(op->getContext(), "relu"));
      relu.getOutput().replaceAllUsesWith(reluOperand(op));
      relu->erase();
    }
  }
};

} // namespace
