//===- SchedOps.h - the schedule level of cdp -------------------*- C++ -*-===//

#ifndef CDP_DIALECT_SCHED_SCHEDOPS_H
#define CDP_DIALECT_SCHED_SCHEDOPS_H

#include "cdp/Schedule/Strategy.h"

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"

#include "cdp/Dialect/Sched/SchedDialect.h.inc"
#include "cdp/Dialect/Sched/SchedEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "cdp/Dialect/Sched/SchedAttrs.h.inc"

#define GET_OP_CLASSES
#include "cdp/Dialect/Sched/SchedOps.h.inc"

#endif // CDP_DIALECT_SCHED_SCHEDOPS_H
