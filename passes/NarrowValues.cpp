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

} // namespace cdp
