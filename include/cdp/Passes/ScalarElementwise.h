//===- ScalarElementwise.h - ops that move through layouts ------*- C++ -*-===//
//
// Between a projection and cdp.attention the exporters and autocast put
// ops that work value by value with at most a scalar beside the tensor (the
// 1 / sqrt(sqrt(d)) scalings of q and k, autocast's roundings). They commute
// with a permutation of the tensor and with a repetition of its heads, bit
// for bit, so the passes that move those (cdp-fold-attention-transposes,
// cdp-fold-repeated-heads) look through them alike.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PASSES_SCALARELEMENTWISE_H
#define CDP_PASSES_SCALARELEMENTWISE_H

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/SplatConstant.h"

namespace cdp {

/// Whether `op` is element by element with at most a one-element constant
/// beside its one tensor input: a rounding, or a product by a scalar.
inline bool isScalarElementwise(mlir::Operation *op) {
  if (mlir::isa<RoundToOp>(op))
    return true;
  auto mul = mlir::dyn_cast<MulOp>(op);
  if (!mul)
    return false;
  auto shapeOf = [](mlir::Value v) {
    return mlir::cast<mlir::RankedTensorType>(v.getType()).getShape();
  };
  for (int side = 0; side < 2; ++side) {
    mlir::Value other = mul->getOperand(1 - side);
    auto type = mlir::cast<mlir::RankedTensorType>(other.getType());
    if (type.getNumElements() == 1 && splatValue(other) &&
        shapeOf(mul->getOperand(side)) == shapeOf(mul.getOutput()))
      return true;
  }
  return false;
}

/// The operand of `op` that carries the tensor (not the scalar).
inline mlir::OpOperand &carriedOperand(mlir::Operation *op) {
  auto shapeOf = [](mlir::Value v) {
    return mlir::cast<mlir::RankedTensorType>(v.getType()).getShape();
  };
  for (mlir::OpOperand &use : op->getOpOperands())
    if (shapeOf(use.get()) == shapeOf(op->getResult(0)))
      return use;
  return op->getOpOperand(0);
}

} // namespace cdp

#endif // CDP_PASSES_SCALARELEMENTWISE_H
