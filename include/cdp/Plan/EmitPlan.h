//===- EmitPlan.h - cdp IR to the plan artefact -----------------*- C++ -*-===//

#ifndef CDP_PLAN_EMITPLAN_H
#define CDP_PLAN_EMITPLAN_H

#include "cdp/Plan/Strategy.h"
#include "cdp/Plan/plan.pb.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace cdp {

struct EmitOptions {
  Strategy strategy = Strategy::Single;
  std::string optimizer;
  bool inference = false;
  /// single: micro-batches whose gradients one update averages; pipelines:
  /// micro-batches per step.
  int64_t microBatches = 1;
  /// Pipelines: data-parallel copies of the pipeline, each running
  /// `microBatches` micro-batches a step; stage gradients are summed over
  /// them before every update.
  int64_t replicas = 1;
  /// cdp-mp: the CDP rule (v1, v2) and v2's freshness table (timing, code).
  std::string cdpRule = "v1";
  std::string v2Table = "timing";
  std::string sourceName;  ///< the ONNX file name
  std::string sourceModel; ///< the ONNX file's bytes, for --save-onnx
};

/// Serializes a module that went through cdp-plan-memory (and, for
/// training, the loss, autodiff and optimizer passes) into `plan`. Reports
/// problems through MLIR diagnostics.
mlir::LogicalResult buildPlan(mlir::ModuleOp module, const EmitOptions &options,
                              plan::Plan &plan);

} // namespace cdp

#endif // CDP_PLAN_EMITPLAN_H
