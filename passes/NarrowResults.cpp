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
// mul's (GPT-2's scaling of q and k), and attention's result and its
// gradient's gradients of q, k and v. Where every reader takes the 2-byte
// values, in the op's stage (through reshapes, transposes, splits and
// concats, which then move 2-byte values: the c_attn product to the scaling
// and the packs for attention), the op stores its result in 2 bytes: the
// packs go (their readers read the result), the products and reductions
// read it in place. Values joined by such moves are stored in one format
// together: a concat's inputs only where every one of them can be (the
// attention backward's three gradients joined for c_attn's backward).
// A layer norm's output, which autocast keeps in float32, is stored in 2
// bytes (rounded by the layer norm) only where every reader rounds it to
// that format anyway: the packs for the next linear layer's products. A
// cdp.round_to whose result may be stored so becomes a pack, rounding alike.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

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

/// The format a pack or a product marked narrow_operands rounds `use`'s
/// values to as it reads them (operand A or B), in the stage.
std::optional<StringRef> roundedAsRead(OpOperand &use, Attribute stage) {
  Operation *reader = use.getOwner();
  if (reader->getAttr("cdp.stage") != stage)
    return std::nullopt;
  if (auto pack = dyn_cast<PackNarrowOp>(reader))
    return pack.getFormat();
  auto marked = reader->getAttrOfType<StringAttr>("narrow_operands");
  if (isa<GemmOp, MatMulOp>(reader) && marked && use.getOperandNumber() < 2)
    return marked.getValue();
  return std::nullopt;
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
  if (std::optional<StringRef> rounded = roundedAsRead(use, stage))
    return *rounded == format;
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
  return false;
}

/// Whether `op`, in the stage, only moves values from its operands into
/// its results: a reshape (a view at its address), a transpose, a split or
/// a concat (copies whose kernels move bytes of any width).
bool movesValues(Operation *op, Attribute stage) {
  if (!op || op->getAttr("cdp.stage") != stage)
    return false;
  return isa<ConcatOp>(op) || (isa<ReshapeOp, TransposeOp, SplitOp>(op) &&
                               op->getNumOperands() == 1);
}

/// The values joined to `start` by ops that move values in the stage, in
/// either direction: they hold one element type together (a concat's
/// inputs and result, a split's input and pieces, a transpose's input and
/// result).
SmallVector<Value> joinedValues(Value start, Attribute stage) {
  SmallVector<Value> values{start};
  DenseSet<Value> seen{start};
  auto visit = [&](Value v) {
    if (seen.insert(v).second)
      values.push_back(v);
  };
  auto join = [&](Operation *mover) {
    llvm::for_each(mover->getOperands(), visit);
    llvm::for_each(mover->getResults(), visit);
  };
  for (size_t i = 0; i < values.size(); ++i) {
    if (Operation *producer = values[i].getDefiningOp();
        movesValues(producer, stage))
      join(producer);
    for (Operation *user : values[i].getUsers())
      if (movesValues(user, stage))
        join(user);
  }
  return values;
}

/// The 2-byte format `value` holds rounded values of where its op can store
/// it so: round_result of a rounding op's first result (a product's or an
/// attention's only where it multiplies operands of that format, which its
/// backends write the result from), narrow_operands for attention_grad's
/// gradients of a, b and v.
std::optional<StringRef> storableFormat(Value value) {
  Operation *op = value.getDefiningOp();
  if (!op)
    return std::nullopt;
  if (auto round = dyn_cast<RoundToOp>(op)) // becomes a pack (narrow below)
    return round.getFormat();
  if (auto grad = dyn_cast<AttentionGradOp>(op))
    return cast<OpResult>(value).getResultNumber() < 3
               ? grad.getNarrowOperands()
               : std::nullopt;
  if (!isa<SoftmaxGradOp, UnaryGradOp, SoftmaxCrossEntropyLossGradOp, GemmOp,
           MatMulOp, AttentionOp, GeluOp, MulOp, DropoutGradOp, DropoutOp>(
          op) ||
      value != op->getResult(0))
    return std::nullopt;
  auto rounding = op->getAttrOfType<StringAttr>("round_result");
  if (!rounding || (isa<GemmOp, MatMulOp, AttentionOp>(op) &&
                    op->getAttr("narrow_operands") != Attribute(rounding)))
    return std::nullopt;
  return rounding.getValue();
}

/// Whether `value` is a layer norm's output that it does not round: it can
/// round it as it writes it where every reader rounds it anyway.
bool isRoundableOutput(Value value) {
  auto norm = value.getDefiningOp<LayerNormOp>();
  return norm && value == norm.getOutput() && !norm.getRoundResult();
}

/// The readers of the joined `values` other than the ops that move them.
SmallVector<OpOperand *> readersOf(ArrayRef<Value> values, Attribute stage) {
  SmallVector<OpOperand *> readers;
  for (Value value : values)
    for (OpOperand &use : value.getUses())
      if (!movesValues(use.getOwner(), stage))
        readers.push_back(&use);
  return readers;
}

/// The format the joined `values` would be stored in: the one their ops
/// round them to, else (layer norm outputs) the one their first reader
/// rounds them to.
std::optional<StringRef> formatOf(ArrayRef<Value> values, Attribute stage) {
  for (Value value : values)
    if (std::optional<StringRef> format = storableFormat(value))
      return format;
  SmallVector<OpOperand *> readers = readersOf(values, stage);
  return readers.empty() ? std::nullopt
                         : roundedAsRead(*readers.front(), stage);
}

/// Whether the joined `values` may be stored in `format`: all float32 now,
/// each one an op's result that it can store so (the ops that move values
/// aside), and every reader taking 2-byte values (there is one). A layer
/// norm's output among them is not rounded yet: then every reader must
/// round what it reads to the format itself, so that storing the rounded
/// values changes nothing it computes.
bool storableTogether(ArrayRef<Value> values, StringRef format,
                      Attribute stage) {
  bool unrounded = false;
  for (Value value : values) {
    if (!cast<RankedTensorType>(value.getType()).getElementType().isF32())
      return false;
    Operation *producer = value.getDefiningOp();
    if (movesValues(producer, stage))
      continue;
    if (!producer || producer->getAttr("cdp.stage") != stage)
      return false;
    bool roundable = isRoundableOutput(value);
    unrounded |= roundable;
    if (!roundable && storableFormat(value) != format)
      return false;
  }
  SmallVector<OpOperand *> readers = readersOf(values, stage);
  return !readers.empty() && llvm::all_of(readers, [&](OpOperand *use) {
    return unrounded ? roundedAsRead(*use, stage) == format
                     : takesNarrow(*use, format, stage);
  });
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

/// `round` replaced by the pack that rounds alike into 2-byte storage (its
/// attributes kept: stage, phase, layer); the pack's result.
Value packInstead(RoundToOp round, Type element) {
  OpBuilder builder(round);
  auto type = cast<RankedTensorType>(round.getType());
  auto pack = builder.create<PackNarrowOp>(
      round.getLoc(), RankedTensorType::get(type.getShape(), element),
      round.getInput(), round.getFormatAttr());
  for (NamedAttribute attribute : round->getDiscardableAttrs())
    pack->setAttr(attribute.getName(), attribute.getValue());
  round.getOutput().replaceAllUsesWith(pack.getOutput());
  round->erase();
  return pack.getOutput();
}

/// Stores `result` in 2 bytes, with the values joined to it, where they may
/// all be (the ops that move values between them then move 2-byte values);
/// a layer norm among them rounds its output to the format.
void narrow(Value result) {
  Attribute stage = result.getDefiningOp()->getAttr("cdp.stage");
  SmallVector<Value> values = joinedValues(result, stage);
  std::optional<StringRef> format = formatOf(values, stage);
  if (!format || !storableTogether(values, *format, stage))
    return;
  Builder builder(result.getContext());
  Type element = *format == "bf16" ? Type(builder.getBF16Type())
                                   : Type(builder.getF16Type());
  for (Value value : values) {
    if (isRoundableOutput(value))
      value.getDefiningOp()->setAttr("round_result",
                                     builder.getStringAttr(*format));
    if (auto round = value.getDefiningOp<RoundToOp>())
      value = packInstead(round, element);
    retype(value, element);
  }
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
    SmallVector<Value> results;
    getOperation().walk([&](Operation *op) {
      for (Value result : op->getResults())
        if (storableFormat(result) || isRoundableOutput(result))
          results.push_back(result);
    });
    for (Value result : results)
      narrow(result);
    getOperation().walk(markWidenedOutputs);
  }
};

} // namespace
