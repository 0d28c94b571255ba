//===- Autocast.cpp - mixed precision as PyTorch's autocast ---------------===//
//
// Walks @main's forward in order and decides, op by op, whether its results
// are narrow (bf16 or fp16 values held in float32): products and
// convolutions compute narrow from rounded operands; softmax, norms,
// reductions and losses stay float32; the rest follow their operands as
// torch's type promotion does. A narrow result that is not already exactly
// representable gets a cdp.round_to after its op. The policy is the one
// PyTorch's autocast applies on GPUs (docs/design/precision.md lists it);
// its CPU autocast differs in keeping softmax and the norms narrow.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/NarrowValues.h"
#include "cdp/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace cdp {
#define GEN_PASS_DEF_AUTOCAST
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// What an op does with narrow operands: PyTorch's autocast policy on GPUs.
enum class Policy {
  Narrow,   ///< computes narrow: operands rounded, results rounded
  KeepF32,  ///< computes float32 from whatever it reads
  Moves,    ///< moves or selects values: narrow in, narrow out, unrounded
  Follows,  ///< narrow when its float operands are, results rounded
  Normalize ///< batch norm: narrow when its input is, float32 parameters
};

Policy policyOf(Operation *op) {
  if (isa<MatMulOp, GemmOp, ConvOp>(op))
    return Policy::Narrow;
  if (isa<SoftmaxOp, LogSoftmaxOp, LayerNormOp, ReduceSumOp, CumSumOp, ExpOp,
          LogOp, PowOp, ReciprocalOp, SoftmaxCrossEntropyLossOp, NllLossOp>(op))
    return Policy::KeepF32;
  if (movesValuesOnly(op))
    return Policy::Moves;
  if (isa<BatchNormOp>(op))
    return Policy::Normalize;
  return Policy::Follows;
}

bool isFloat(Value value) {
  return cast<RankedTensorType>(value.getType()).getElementType().isF32();
}

/// A float constant of one element: a Python scalar in the exported code,
/// which does not promote a tensor's type.
bool isScalarConstant(Value value) {
  auto constant = value.getDefiningOp<ConstantOp>();
  return constant &&
         cast<RankedTensorType>(value.getType()).getNumElements() == 1;
}

/// The add of a rank-1 parameter to `product`'s result, when that is its
/// only reader: a linear layer exported as MatMul + Add, whose bias torch
/// adds inside the narrow product (one rounding, after the add).
AddOp biasAddOf(MatMulOp product) {
  Value result = product.getResult();
  if (!result.hasOneUse())
    return nullptr;
  auto add = dyn_cast<AddOp>(*result.getUsers().begin());
  if (!add)
    return nullptr;
  Value other = add.getLhs() == result ? add.getRhs() : add.getLhs();
  auto param = other.getDefiningOp<ParamOp>();
  return param && param.getType().getRank() == 1 ? add : nullptr;
}

class Autocaster {
public:
  Autocaster(func::FuncOp func, StringRef format)
      : builder(func.getContext()), format(builder.getStringAttr(format)) {}

  void run(Block &body) {
    for (BlockArgument argument : body.getArguments())
      if (isFloat(argument))
        fromData.insert(argument);
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    for (Operation *op : ops) {
      markFromData(op);
      visit(op);
    }
  }

private:
  /// Values computed from the float inputs or the weights. A product of
  /// none (Llama's rotary angles: buffers times integer positions) stays
  /// float32: the model computes it outside autocast, and positions in
  /// bf16 would be 2 apart past 256.
  void markFromData(Operation *op) {
    auto param = dyn_cast<ParamOp>(op);
    bool derived = param ? !param.getBuffer()
                         : llvm::any_of(op->getOperands(), [&](Value v) {
                             return fromData.contains(v);
                           });
    if (derived)
      for (Value result : op->getResults())
        fromData.insert(result);
  }

  void visit(Operation *op) {
    if (isa<ParamOp, ConstantOp, RoundToOp>(op))
      return;
    if (biasAdds.contains(op))
      return addBias(op);
    switch (policyOf(op)) {
    case Policy::Narrow:
      if (llvm::none_of(op->getOperands(),
                        [&](Value v) { return fromData.contains(v); }))
        return;
      if (auto product = dyn_cast<MatMulOp>(op))
        if (AddOp add = biasAddOf(product)) {
          roundOperands(op);
          biasAdds.insert(add);
          return;
        }
      return computeNarrow(op);
    case Policy::KeepF32:
      return;
    case Policy::Normalize:
      if (narrow.contains(op->getOperand(0)))
        roundResult(op->getResult(0));
      return;
    case Policy::Moves:
    case Policy::Follows:
      return follow(op);
    }
  }

  void computeNarrow(Operation *op) {
    roundOperands(op);
    for (Value result : op->getResults())
      roundResult(result);
  }

  /// The product's float32 sum plus the rounded bias, rounded once.
  void addBias(Operation *op) {
    for (OpOperand &operand : op->getOpOperands())
      if (operand.get().getDefiningOp<ParamOp>())
        operand.set(narrowed(operand.get(), op));
    roundResult(op->getResult(0));
  }

  void roundOperands(Operation *op) {
    for (OpOperand &operand : op->getOpOperands())
      if (isFloat(operand.get()))
        operand.set(narrowed(operand.get(), op));
  }

  /// Narrow when every float operand is narrow or a scalar constant (and
  /// one is narrow); unrounded for an op that moves narrow values only.
  void follow(Operation *op) {
    bool anyNarrow = false, onlyNarrow = true;
    for (Value operand : op->getOperands()) {
      if (!isFloat(operand))
        continue;
      if (narrow.contains(operand)) {
        anyNarrow = true;
        continue;
      }
      if (!isScalarConstant(operand))
        return; // a float32 tensor: the op is float32
      onlyNarrow = false;
    }
    if (!anyNarrow)
      return;
    if (onlyNarrow && policyOf(op) == Policy::Moves) {
      // Narrow as they are; autodiff reads the mark to round their
      // gradients.
      op->setAttr("cdp.narrow", format);
      for (Value result : op->getResults())
        narrow.insert(result);
      return;
    }
    for (Value result : op->getResults())
      roundResult(result);
  }

  /// `value` rounded, one round per value, placed before its first narrow
  /// reader (so that a weight's copy belongs to the stage that reads it).
  Value narrowed(Value value, Operation *reader) {
    if (narrow.contains(value))
      return value;
    // A weight transposed for its product only (x @ W^T as exported):
    // round the weight and let the transpose move narrow values, so that
    // cdp-fold-transpose still folds it into the product.
    if (auto transpose = value.getDefiningOp<TransposeOp>())
      if (value.hasOneUse()) {
        transpose->setOperand(0, narrowed(transpose.getInput(), transpose));
        transpose->setAttr("cdp.narrow", format);
        narrow.insert(value);
        return value;
      }
    Value &copy = copies[value];
    if (!copy) {
      builder.setInsertionPoint(reader);
      copy = builder.create<RoundToOp>(reader->getLoc(), value, format);
      narrow.insert(copy);
      if (fromData.contains(value))
        fromData.insert(copy);
    }
    return copy;
  }

  /// Rounds float `result` for all its readers.
  void roundResult(Value result) {
    if (!isFloat(result) || result.use_empty())
      return;
    builder.setInsertionPointAfterValue(result);
    auto round = builder.create<RoundToOp>(result.getLoc(), result, format);
    result.replaceAllUsesExcept(round.getResult(), round);
    narrow.insert(round.getResult());
    if (fromData.contains(result))
      fromData.insert(round.getResult());
  }

  OpBuilder builder;
  StringAttr format;
  llvm::DenseSet<Value> narrow, fromData;
  llvm::DenseMap<Value, Value> copies;
  /// Adds of a bias to a product, narrow as one op with it.
  llvm::DenseSet<Operation *> biasAdds;
};

struct AutocastPass : public cdp::impl::AutocastBase<AutocastPass> {
  using AutocastBase::AutocastBase;

  void runOnOperation() override {
    if (precision != "bf16" && precision != "f16") {
      getOperation().emitError("precision must be bf16 or f16, got '")
          << precision << "'";
      return signalPassFailure();
    }
    auto func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func) {
      getOperation().emitError("cdp-autocast needs @main");
      return signalPassFailure();
    }
    // The forward only: autodiff derives the gradients' roundings from
    // the forward's (an inference plan's forward is all there is).
    if (!func.getOps<GradientOp>().empty()) {
      func.emitError("@main is differentiated already; run cdp-autocast "
                     "before cdp-autodiff");
      return signalPassFailure();
    }
    Autocaster(func, precision).run(func.getBody().front());
  }
};

} // namespace
