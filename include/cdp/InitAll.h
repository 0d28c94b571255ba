//===- InitAll.h - dialects and passes every cdp tool registers -*- C++ -*-===//
//
// One registration point shared by cdp-opt, cdp-compile and the tests, so
// that every tool parses the same IR.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_INITALL_H
#define CDP_INITALL_H

#include "cdp/Dialect/Graph/GraphDialect.h"
#include "cdp/Dialect/Sched/SchedOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/Pipelines.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"

namespace cdp {

/// Registers the dialects cdp IR uses: only those, to keep tools small.
inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<CDPDialect, sched::SchedDialect, mlir::func::FuncDialect>();
}

/// Registers every cdp pass and strategy pipeline with the pass registry
/// (for cdp-opt).
inline void registerAllPasses() {
  registerCDPPasses();
  registerStrategyPipelines();
}

} // namespace cdp

#endif // CDP_INITALL_H
