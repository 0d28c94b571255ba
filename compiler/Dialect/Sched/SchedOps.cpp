//===- SchedOps.cpp - the schedule level of cdp ---------------------------===//

#include "cdp/Dialect/Sched/SchedOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace cdp::sched;

#include "cdp/Dialect/Sched/SchedDialect.cpp.inc"

void SchedDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "cdp/Dialect/Sched/SchedOps.cpp.inc"
      >();
}

#define GET_OP_CLASSES
#include "cdp/Dialect/Sched/SchedOps.cpp.inc"
