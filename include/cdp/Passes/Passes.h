//===- Passes.h - cdp passes ------------------------------------*- C++ -*-===//

#ifndef CDP_PASSES_PASSES_H
#define CDP_PASSES_PASSES_H

#include "cdp/Dialect/Graph/GraphDialect.h"
#include "cdp/Dialect/Sched/SchedOps.h"
#include "cdp/Passes/RecomputeMode.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace cdp {

#define GEN_PASS_DECL
#include "cdp/Passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "cdp/Passes/Passes.h.inc"

} // namespace cdp

#endif // CDP_PASSES_PASSES_H
