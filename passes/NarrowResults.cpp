//===- NarrowResults.cpp - rounded results stored in 2 bytes --------------===//
//
// Under --precision bf16 or fp16 an op that rounds its result (round_result)
// still writes it in float32, 4 bytes a value, and its readers then take
// 2-byte values: products marked narrow_operands (a GPU converts the float32
// operand into a 2-byte copy first) and the packs that keep it for the
// backward. Softmax's gradient (batch x heads x seq^2 values, read by the
// two products of attention's backward) and an activation's gradient (read
// by a linear layer's two backward products and its bias gradient's
// reduce_to) are such results, and so is the loss's gradient (the logits',
// read by the LM head's two products: batch x seq x vocabulary values), and
// so are products' results: the LM head's logits (read by the loss and its
// gradient) and an MLP's first product (read by the pack the backward keeps
// and by GELU, which read them as cdp-read-narrow-operands left them), and
// GELU's own (packed for the next product, which reads the pack), and a
// mul's (GPT-2's scaling of q and k). Where every reader takes the 2-byte
// values, in the op's stage (through reshapes, transposes and splits, which
// then move 2-byte values: the c_attn product to the scaling and the packs
// for attention), the op stores its result in 2 bytes: the packs go (their
// readers read the result), the products and reductions read it in place.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cdp {
#define GEN_PASS_DEF_NARROWRESULTS
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// Whether a returned value may be stored in 2 bytes: a training plan's
/// output other than its loss, which cdp-run writes widened (an inference
/// plan's outputs, and the loss, are read as float32 after the step).
bool isWidenedOutput(OpOperand &use) {
  auto func = use.getOwner()->getParentOfType<func::FuncOp>();
  auto loss = func->getAttrOfType<IntegerAttr>("cdp.loss_index");
  return loss && loss.getInt() != use.getOperandNumber();
}

/// Whether `use` takes the result's values in `format` as they are: operand
/// A or B of a product marked so, a pack to that format, a GELU, mul or
/// dropout rounding to it, or an op whose kernels widen 2-byte values as
/// they read them (an add, a reduce_to's sum, an activation gradient's
/// saved value, and its gradient where it rounds to the format, a loss's
/// scores and its gradient's from_scores), in the producer's stage.
bool takesNarrow(OpOperand &use, StringRef format, Attribute stage) {
  Operation *reader = use.getOwner();
  if (isa<func::ReturnOp>(reader))
    return isWidenedOutput(use);
  if (reader->getAttr("cdp.stage") != stage)
    return false;
  if (auto pack = dyn_cast<PackNarrowOp>(reader))
    return pack.getFormat() == format;
  if (isa<ReduceToOp>(reader))
    return true;
  if (auto gelu = dyn_cast<GeluOp>(reader))
    return gelu.getRoundResult() == format;
  if (auto mul = dyn_cast<MulOp>(reader))
    return mul.getRoundResult() == format;
  if (auto dropout = dyn_cast<DropoutOp>(reader))
    return dropout.getRoundResult() == format;
  if (isa<AddOp>(reader)) // widens whatever it rounds to, as autocast adds
    return true;
  if (isa<LayerNormGradOp>(reader)) // its incoming gradient, widened
    return use.getOperandNumber() == 0;
  if (auto grad = dyn_cast<AttentionGradOp>(reader))
    return use.getOperandNumber() == 0 && grad.getNarrowOperands() == format;
  if (auto grad = dyn_cast<UnaryGradOp>(reader))
    return use.getOperandNumber() == 1 || grad.getRoundResult() == format;
  if (isa<SoftmaxCrossEntropyLossOp>(reader))
    return use.getOperandNumber() == 0;
  if (auto grad = dyn_cast<SoftmaxCrossEntropyLossGradOp>(reader))
    return grad.getFromScores() && use.getOperandNumber() == 1;
  auto marked = reader->getAttrOfType<StringAttr>("narrow_operands");
  return isa<GemmOp, MatMulOp>(reader) && marked &&
         marked.getValue() == format && use.getOperandNumber() < 2;
}

/// Whether `reader`, in the stage, only moves its one operand's values into
/// its results: a reshape (a view at its address), a transpose or a split
/// (copies whose kernels move bytes of any width).
bool movesValues(Operation *reader, Attribute stage) {
  return isa<ReshapeOp, TransposeOp, SplitOp>(reader) &&
         reader->getNumOperands() == 1 && reader->getAttr("cdp.stage") == stage;
}

/// Whether every reader of `value` takes it in `format`, through ops that
/// move values (their results, collected in `carried`, then hold 2-byte
/// values too).
bool allTakeNarrow(Value value, StringRef format, Attribute stage,
                   SmallVectorImpl<Value> &carried) {
  for (OpOperand &use : value.getUses()) {
    if (!movesValues(use.getOwner(), stage)) {
      if (!takesNarrow(use, format, stage))
        return false;
      continue;
    }
    for (Value moved : use.getOwner()->getResults()) {
      carried.push_back(moved);
      if (!allTakeNarrow(moved, format, stage, carried))
        return false;
    }
  }
  return true;
}

/// `value` with its element type `element`; the packs that read it replaced
/// by it.
void retype(Value value, Type element) {
  auto type = cast<RankedTensorType>(value.getType());
  value.setType(RankedTensorType::get(type.getShape(), element));
  for (Operation *reader : llvm::make_early_inc_range(value.getUsers()))
    if (auto pack = dyn_cast<PackNarrowOp>(reader)) {
      pack.getOutput().replaceAllUsesWith(value);
      pack->erase();
    }
}

/// Stores `op`'s rounded result in 2 bytes when every reader takes it so;
/// a product's only where it multiplies 2-byte operands of that format (its
/// backends write the 2-byte result from such a product).
void narrow(Operation *op) {
  auto rounding = op->getAttrOfType<StringAttr>("round_result");
  Value result = op->getResult(0);
  SmallVector<Value> carried;
  if (isa<GemmOp, MatMulOp>(op) &&
      op->getAttr("narrow_operands") != Attribute(rounding))
    return;
  if (!rounding || result.use_empty() ||
      !allTakeNarrow(result, rounding.getValue(), op->getAttr("cdp.stage"),
                     carried))
    return;
  Builder builder(op->getContext());
  Type element = rounding.getValue() == "bf16" ? Type(builder.getBF16Type())
                                               : Type(builder.getF16Type());
  retype(result, element);
  for (Value moved : carried)
    retype(moved, element);
}

/// The function's result types follow its returned values; a result
/// narrowed from float32 is marked `cdp.widened`.
void markWidenedOutputs(func::FuncOp func) {
  if (func.isExternal())
    return;
  auto returned = func.getBody().back().getTerminator()->getOperandTypes();
  FunctionType type = func.getFunctionType();
  for (auto [i, result] : llvm::enumerate(type.getResults()))
    if (result != returned[i])
      func.setResultAttr(i, "cdp.widened", UnitAttr::get(func.getContext()));
  func.setType(
      FunctionType::get(func.getContext(), type.getInputs(), returned));
}

struct NarrowResultsPass
    : public cdp::impl::NarrowResultsBase<NarrowResultsPass> {
  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (isa<SoftmaxGradOp, UnaryGradOp, SoftmaxCrossEntropyLossGradOp, GemmOp,
              MatMulOp, GeluOp, MulOp, DropoutGradOp, DropoutOp>(op))
        ops.push_back(op);
    });
    for (Operation *op : ops)
      narrow(op);
    getOperation().walk(markWidenedOutputs);
  }
};

} // namespace
