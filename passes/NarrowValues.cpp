//===- NarrowValues.cpp - which values are exact in bf16 or fp16 ----------===//

#include "cdp/Passes/NarrowValues.h"

#include "cdp/Dialect/Graph/GraphOps.h"

namespace cdp {

bool movesValuesOnly(mlir::Operation *op) {
  return mlir::isa<IdentityOp, ReshapeOp, FlattenOp, TransposeOp, ConcatOp,
                   SplitOp, SliceOp, SqueezeOp, UnsqueezeOp, ExpandOp, GatherOp,
                   GatherElementsOp, GatherNDOp, MaxPoolOp, MaxPoolIndicesOp,
                   ReluOp, WhereOp, MaxOp, MinOp>(op);
}

namespace {
bool isFloat(mlir::Value value) {
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(value.getType());
  return type && type.getElementType().isF32();
}
} // namespace

llvm::StringRef ExactValues::formatOf(mlir::Value value) {
  auto found = known.find(value);
  if (found != known.end())
    return found->second;
  known[value] = ""; // a value is not exact through itself
  llvm::StringRef format = compute(value);
  known[value] = format;
  return format;
}

llvm::StringRef ExactValues::compute(mlir::Value value) {
  mlir::Operation *op = value.getDefiningOp();
  if (!op)
    return "";
  if (auto round = mlir::dyn_cast<RoundToOp>(op))
    return round.getFormat();
  if (auto unpack = mlir::dyn_cast<UnpackNarrowOp>(op))
    return unpack.getFormat();
  if (auto mark = op->getAttrOfType<mlir::StringAttr>("cdp.narrow"))
    return mark.getValue();
  // attention_grad rounds its operands' gradients, not its bias's.
  if (auto grad = mlir::dyn_cast<AttentionGradOp>(op)) {
    std::optional<llvm::StringRef> format = grad.getNarrowOperands();
    return format && value != grad.getBiasGrad() ? *format : "";
  }
  // cdp-fuse-roundings moved a round_to here (the op's first result: a
  // dropout's mask is not rounded).
  if (auto rounded = op->getAttrOfType<mlir::StringAttr>("round_result"))
    return value == op->getResult(0) ? rounded.getValue() : "";
  if (!movesValuesOnly(op))
    return "";
  // Moved values are exact when every float value moved is.
  llvm::StringRef format;
  for (mlir::Value operand : op->getOperands()) {
    if (!isFloat(operand))
      continue;
    llvm::StringRef operandFormat = formatOf(operand);
    if (operandFormat.empty() || (!format.empty() && format != operandFormat))
      return "";
    format = operandFormat;
  }
  return format;
}

} // namespace cdp
