//===- EmitPlan.h - cdp IR to the plan artefact -----------------*- C++ -*-===//

#ifndef CDP_PLAN_EMITPLAN_H
#define CDP_PLAN_EMITPLAN_H

#include "cdp/Plan/plan.pb.h"
#include "cdp/Schedule/Strategy.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace cdp {

struct EmitOptions {
  Strategy strategy = Strategy::Single;
  std::string optimizer;
  bool inference = false;
  /// single: micro-batches whose gradients one update averages (the
  /// pipelines read theirs from the sched.step_program).
  int64_t microBatches = 1;
  std::string sourceName; ///< the ONNX file name
  /// The backend every device runs on by default ("cpu" or "cuda");
  /// cdp-run --backend overrides it.
  std::string backend = "cpu";
  /// Move each parameter's value out of the module into the plan: its
  /// MLIR resource blob is released once copied, so a model's weights are
  /// in memory once, not twice (the final emission; the planner's
  /// candidates share the blobs and keep them).
  bool moveValues = false;
};

/// Serializes a module that went through cdp-plan-memory (and, for
/// training, the loss, autodiff and optimizer passes; for dp and cdp the
/// schedule passes; for the pipelines cdp-schedule-pipeline, whose
/// sched.step_program it lowers) into `plan`. Reports problems through MLIR
/// diagnostics.
mlir::LogicalResult buildPlan(mlir::ModuleOp module, const EmitOptions &options,
                              plan::Plan &plan);

} // namespace cdp

#endif // CDP_PLAN_EMITPLAN_H
