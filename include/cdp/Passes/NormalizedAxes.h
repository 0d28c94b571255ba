//===- NormalizedAxes.h - the trailing axes a norm's chain reduces -*- C++
//-*-===//
//
// The LayerNorm and RMSNorm fusions match reductions over a tensor's
// trailing dimensions and parameters shaped as those dimensions: one reading
// of both for the two passes.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PASSES_NORMALIZEDAXES_H
#define CDP_PASSES_NORMALIZEDAXES_H

#include "cdp/Dialect/Graph/GraphOps.h"

#include <optional>

namespace cdp {

/// The axis `mean` normalises from: its axes must be the trailing
/// dimensions k..r-1, kept.
inline std::optional<int64_t> trailingAxis(ReduceMeanOp mean) {
  auto type = mlir::cast<mlir::RankedTensorType>(mean.getInput().getType());
  llvm::ArrayRef<int64_t> axes = mean.getAxes();
  if (!mean.getKeepdims() || axes.empty())
    return std::nullopt;
  int64_t first = type.getRank() - static_cast<int64_t>(axes.size());
  for (auto [i, axis] : llvm::enumerate(axes))
    if (axis != first + static_cast<int64_t>(i))
      return std::nullopt;
  return first;
}

/// A parameter-like operand (a norm's scale or bias) shaped exactly as the
/// dimensions of `x` from `axis` on.
inline bool shapedAsNormalised(mlir::Value value, mlir::RankedTensorType x,
                               int64_t axis) {
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(value.getType());
  return type && type.getShape() == x.getShape().drop_front(axis);
}

} // namespace cdp

#endif // CDP_PASSES_NORMALIZEDAXES_H
