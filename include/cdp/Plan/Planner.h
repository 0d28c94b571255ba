//===- Planner.h - --plan auto: the 2bw planner -----------------*- C++ -*-===//
//
// PipeDream-2BW's planner, adapted: every split of the devices into
// stages x replicas, with the micro-batches a global batch gives, compiled
// and predicted; the fastest that fits the memory cap wins.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_PLANNER_H
#define CDP_PLAN_PLANNER_H

#include "cdp/Passes/Pipelines.h"
#include "cdp/Plan/CostModel.h"
#include "cdp/Plan/EmitPlan.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace cdp {

/// One candidate: its counts, and once evaluated its predicted step time
/// (-1 when dropped) and peak device bytes, or why it was dropped.
struct PlanCandidate {
  int64_t stages = 1, replicas = 1, microBatches = 1;
  double ms = -1;
  int64_t peak = 0;
  std::string why;
};

/// Every stages x replicas = `devices`, each replica running M = `samples`
/// / (replicas x `batch`) micro-batches a step. Candidates the global batch
/// does not divide, or with fewer micro-batches than stages (2bw needs
/// M >= stages), come back with `why` set.
std::vector<PlanCandidate> planCandidates(int64_t devices, int64_t samples,
                                          int64_t batch);

/// Compiles `source` (left untouched) with `config` at the candidate's
/// counts and predicts the plan: step time over 3 steps by `cost`, peak
/// bytes over 2 steps. Sets `why` when it does not compile (the first
/// line of the diagnostic), cannot be timed, or peaks above `memoryCap`
/// (`capName` says which cap).
void evaluateCandidate(mlir::ModuleOp source, TrainingPipelineConfig config,
                       const EmitOptions &emit, const InstructionCost &cost,
                       double memoryCap, const std::string &capName,
                       PlanCandidate &candidate);

/// The index of the fastest candidate without a `why`, or -1.
int bestCandidate(const std::vector<PlanCandidate> &candidates);

} // namespace cdp

#endif // CDP_PLAN_PLANNER_H
