//===- GraphOps.h - cdp graph ops -------------------------------*- C++ -*-===//

#ifndef CDP_DIALECT_GRAPH_GRAPHOPS_H
#define CDP_DIALECT_GRAPH_GRAPHOPS_H

#include "cdp/Dialect/Graph/GradientBuilder.h"
#include "cdp/Dialect/Graph/GraphDialect.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace cdp {

/// See CDP_ElementwiseInPlace in GraphOps.td: the result may take the
/// buffer of an operand of its type whose last use the op is.
template <typename ConcreteType>
class ElementwiseInPlace
    : public mlir::OpTrait::TraitBase<ConcreteType, ElementwiseInPlace> {};

/// See CDP_ViewOfInput in GraphOps.td: the result may lie over its input's
/// storage.
template <typename ConcreteType>
class ViewOfInput : public mlir::OpTrait::TraitBase<ConcreteType, ViewOfInput> {
};

} // namespace cdp

#include "cdp/Dialect/Graph/GradientInterface.h.inc"

#define GET_OP_CLASSES
#include "cdp/Dialect/Graph/GraphOps.h.inc"

namespace cdp {

/// The pipeline stage `op` runs in: its `cdp.stage`; a buffer assignment's,
/// where its new value is computed; else the last stage, `lastStage`.
int64_t stageOf(mlir::Operation *op, int64_t lastStage);

} // namespace cdp

#endif // CDP_DIALECT_GRAPH_GRAPHOPS_H
