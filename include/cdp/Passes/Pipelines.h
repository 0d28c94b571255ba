//===- Pipelines.h - one pass pipeline per training strategy ----*- C++ -*-===//
//
// The passes cdp-compile runs for a strategy, built in one place so that
// cdp-opt runs the same pipeline from a .mlir file: cdp-dp, cdp-cyclic,
// cdp-gpipe, cdp-1f1b, cdp-2bw and cdp-mp.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PASSES_PIPELINES_H
#define CDP_PASSES_PIPELINES_H

#include "cdp/Passes/RecomputeMode.h"
#include "cdp/Schedule/Strategy.h"

#include "mlir/Pass/PassManager.h"

#include <optional>
#include <string>
#include <vector>

namespace cdp {

/// Everything the training pipeline of a strategy depends on; the defaults
/// are cdp-compile's.
struct TrainingPipelineConfig {
  Strategy strategy = Strategy::Single;
  /// cdp-attach-loss.
  std::string loss = "softmax-cross-entropy", labelsName = "labels", lossOutput;
  /// Where the scores' classes are ("", "1" or "last") and the label that
  /// counts for nothing.
  std::string classAxis;
  int64_t ignoreIndex = -100;
  /// cdp-partition-stages: the stage count (0: its default) or the names of
  /// the nodes to cut after; a profile; the per-device memory cap (0: none)
  /// and the optimizer state per parameter byte it counts.
  int64_t stages = 0;
  std::vector<std::string> boundaries;
  std::string profile;
  int64_t deviceMemory = 0, optimizerCopies = 0;
  /// cdp-autodiff.
  std::vector<std::string> freeze;
  std::string bnRunningVar = "unbiased";
  /// cdp-insert-optimizer.
  std::string optimizer = "sgd";
  double lr = 0.01, momentum = -1, weightDecay = 0, beta1 = 0.9, beta2 = 0.999,
         epsilon = 1e-8;
  /// Glob patterns of parameters updated without weight decay.
  std::vector<std::string> noDecay;
  /// The learning-rate schedule: constant, step or cosine.
  std::string lrSchedule = "constant";
  int64_t lrPeriod = 1;
  double lrGamma = 0.1, lrMin = 0, lrStart = 1.0 / 3, lrEnd = 1;
  /// Updates of linear warmup from warmupStart x lr, before the schedule.
  int64_t warmup = 0;
  double warmupStart = 1.0 / 3;
  /// Greater than 0: the gradients' global L2 norm is clipped to it.
  double clipGradNorm = 0;
  /// Fusion passes on the forward graph (cdp-fuse-layer-norm).
  bool fuse = true;
  /// The schedule: devices (dp, cdp), micro-batches per step and replicas
  /// (pipelines), the CDP rule and v2 table (cdp, cdp-mp), the reduction
  /// (cdp).
  int64_t devices = 1, microBatches = 1, replicas = 1;
  /// ZeRO stage (dp): 0 none, 1 the optimizer state sharded over devices.
  int64_t zero = 0;
  std::string cdpRule = "v2", v2Table = "timing", cdpReduce = "allreduce";
  /// laysa: the fraction of each parameter's entries sent per step, the
  /// size below which a parameter goes whole, and the naive baseline (an
  /// explicit residual instead of the mirror).
  double density = 0.01;
  int64_t denseBelow = 1024;
  bool sparseResidual = false;
  /// interleaved-1f1b: stages each device runs. Any non-cyclic pipeline:
  /// a schedule CSV to follow instead of the strategy's own.
  int64_t stagesPerDevice = 1;
  std::string schedulePath;
  /// Greater than 0: also the time-step timeline over that many steps
  /// (sched.program: dp, cdp, gpipe, 1f1b, 2bw), for reading and checking.
  int64_t timelineSteps = 0;
  /// Ends with cdp-plan-memory, as a plan needs.
  bool planMemory = true;
  /// --memory-reuse layer: cdp-reuse-layer-memory before the memory plan.
  bool layerReuse = false;
  /// --recompute: cdp-recompute after autodiff (none without it).
  std::optional<RecomputeMode> recompute;
  /// --precision bf16 (or f16): cdp-autocast before autodiff ("": float32).
  std::string autocast;
  /// Dynamic loss scaling (fp16): the initial scale (0: none) and the clean
  /// steps before it doubles.
  double lossScale = 0;
  int64_t lossScaleInterval = 2000;
};

/// Appends the training passes of `config.strategy` to `pm` (a pass manager
/// on builtin.module): loss, partition, autodiff, optimizer, the
/// strategy's schedule passes and, if asked, the memory plan.
void buildTrainingPipeline(mlir::OpPassManager &pm,
                           const TrainingPipelineConfig &config);

/// Registers cdp-dp, cdp-cyclic, cdp-gpipe, cdp-1f1b, cdp-2bw, cdp-mp,
/// cdp-interleaved-1f1b and cdp-zb-h1
/// with the pass registry (for cdp-opt's --pass-pipeline and flags).
void registerStrategyPipelines();

} // namespace cdp

#endif // CDP_PASSES_PIPELINES_H
