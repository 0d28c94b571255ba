//===- Planner.cpp - --plan auto: the 2bw planner -------------------------===//

#include "cdp/Plan/Planner.h"

#include "cdp/Runtime/Report.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"

#include <google/protobuf/arena.h>

namespace cdp {

std::vector<PlanCandidate> planCandidates(int64_t devices, int64_t samples,
                                          int64_t batch) {
  std::vector<PlanCandidate> candidates;
  for (int64_t S = 1; S <= devices; ++S) {
    if (devices % S)
      continue;
    PlanCandidate candidate;
    candidate.stages = S;
    candidate.replicas = devices / S;
    candidate.microBatches = samples / (candidate.replicas * batch);
    if (samples % (candidate.replicas * batch))
      candidate.why = "global batch is not a multiple of replicas x "
                      "micro-batch";
    else if (candidate.microBatches < S)
      candidate.why = "fewer micro-batches than stages";
    candidates.push_back(candidate);
  }
  return candidates;
}

void evaluateCandidate(mlir::ModuleOp source, TrainingPipelineConfig config,
                       const EmitOptions &emit, const InstructionCost &cost,
                       double memoryCap, const std::string &capName,
                       PlanCandidate &candidate) {
  config.stages = candidate.stages;
  config.replicas = candidate.replicas;
  config.microBatches = candidate.microBatches;
  config.planMemory = true;
  const EmitOptions &options = emit;
  mlir::OwningOpRef<mlir::ModuleOp> copy(source.clone());
  std::string diagnostic;
  mlir::ScopedDiagnosticHandler handler(source.getContext(),
                                        [&](mlir::Diagnostic &d) {
                                          if (diagnostic.empty())
                                            diagnostic = d.str();
                                          return mlir::success();
                                        });
  google::protobuf::Arena arena;
  plan::Plan &plan =
      *google::protobuf::Arena::CreateMessage<plan::Plan>(&arena);
  mlir::PassManager pm(source.getContext());
  buildTrainingPipeline(pm, config);
  if (mlir::failed(pm.run(*copy)) ||
      mlir::failed(buildPlan(*copy, options, plan))) {
    candidate.why = llvm::StringRef(diagnostic).split('\n').first.str();
    if (candidate.why.empty())
      candidate.why = "does not compile";
    return;
  }
  plan::SimulatedTime time = predictStepMs(plan, cost, 3);
  for (int64_t bytes : runtime::predictDeviceNeeds(plan, 2))
    candidate.peak = std::max(candidate.peak, bytes);
  using Status = plan::SimulatedTime::Status;
  if (time.status == Status::UnknownCost)
    candidate.why = "the profile lacks an instruction of the plan";
  else if (time.status == Status::WouldHang)
    candidate.why = "the timing model would hang (a compiler bug)";
  else if (candidate.peak > memoryCap)
    candidate.why = "above " + capName;
  if (time.status == Status::Ok)
    candidate.ms = time.end;
}

int bestCandidate(const std::vector<PlanCandidate> &candidates) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i)
    if (candidates[i].why.empty() &&
        (best < 0 || candidates[i].ms < candidates[best].ms))
      best = i;
  return best;
}

} // namespace cdp
