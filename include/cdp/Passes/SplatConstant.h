//===- SplatConstant.h - the one value of a splat constant ------*- C++ -*-===//
//
// Fusion passes match the scalar constants of exported chains (LayerNorm's
// epsilon and exponent, GELU's 0.5, 1 and sqrt(2)): one reader for them.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PASSES_SPLATCONSTANT_H
#define CDP_PASSES_SPLATCONSTANT_H

#include "cdp/Dialect/Graph/GraphOps.h"

#include <optional>

namespace cdp {

/// The one value of a splat f32 `cdp.constant`, if `value` is one.
inline std::optional<float> splatValue(mlir::Value value) {
  auto constant = value.getDefiningOp<ConstantOp>();
  if (!constant)
    return std::nullopt;
  auto dense = mlir::dyn_cast<mlir::DenseElementsAttr>(constant.getValue());
  if (!dense || !dense.isSplat() || !dense.getElementType().isF32())
    return std::nullopt;
  return dense.getSplatValue<float>();
}

} // namespace cdp

#endif // CDP_PASSES_SPLATCONSTANT_H
