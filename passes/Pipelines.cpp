//===- Pipelines.cpp - one pass pipeline per training strategy ------------===//

#include "cdp/Passes/Pipelines.h"

#include "cdp/Passes/Passes.h"

#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace cdp {

namespace {

void addPartition(OpPassManager &pm, const TrainingPipelineConfig &config) {
  PartitionStagesOptions partition;
  // single: one stage, so that every op still knows its phase.
  partition.stages =
      planForm(config.strategy) == PlanForm::Single ? 1 : config.stages;
  partition.boundaries = config.boundaries;
  partition.profile = config.profile;
  if (config.deviceMemory > 0) {
    partition.deviceMemory = config.deviceMemory;
    partition.microBatches = config.microBatches;
    partition.optimizerCopies = config.optimizerCopies;
    const char *modes[] = {"stage", "layer", "selective"};
    if (config.recompute)
      partition.recompute = modes[static_cast<int>(*config.recompute)];
  }
  pm.addPass(createPartitionStages(partition));
}

/// dp and cdp: step order, version delays, staggered reductions.
void addDataParallelSchedule(OpPassManager &pm,
                             const TrainingPipelineConfig &config) {
  BuildScheduleOptions schedule;
  schedule.devices = config.devices;
  schedule.zero = config.zero;
  pm.addPass(createBuildSchedule(schedule));
  DelayUpdatesOptions delay;
  delay.rule = config.cdpRule;
  delay.table = config.v2Table;
  pm.addPass(createDelayUpdates(delay));
  StaggerCollectivesOptions stagger;
  stagger.reduce = config.cdpReduce;
  pm.addPass(createStaggerCollectives(stagger));
  pm.addPass(createScheduleSlots());
  pm.addPass(createPlaceGatheredParams());
  if (config.timelineSteps > 0) {
    MaterializeScheduleOptions materialize;
    materialize.steps = config.timelineSteps;
    pm.addPass(createMaterializeSchedule(materialize));
  }
}

/// The pipelines: the step programs the plan emitter lowers.
void addPipelineSchedule(OpPassManager &pm,
                         const TrainingPipelineConfig &config) {
  SchedulePipelineOptions step;
  step.microBatches = config.microBatches;
  step.replicas = config.replicas;
  step.cdpRule = config.cdpRule;
  step.v2Table = config.v2Table;
  step.stagesPerDevice = config.stagesPerDevice;
  step.schedule = config.schedulePath;
  step.zero = config.zero;
  pm.addPass(createSchedulePipeline(step));
  // The time-step timeline of gpipe, 1f1b and 2bw's own schedules.
  if (config.timelineSteps > 0 &&
      inScope(StrategyScope::OrderedPipeline, config.strategy) &&
      config.schedulePath.empty()) {
    BuildPipelineOptions timeline;
    timeline.stages = config.boundaries.empty()
                          ? config.stages
                          : static_cast<int64_t>(config.boundaries.size()) + 1;
    timeline.microBatches = config.microBatches;
    timeline.steps = config.timelineSteps;
    pm.addPass(createBuildPipeline(timeline));
  }
}

} // namespace

void buildTrainingPipeline(OpPassManager &pm,
                           const TrainingPipelineConfig &config) {
  // The strategy as typed IR on the module: the passes below read it there.
  SetStrategyOptions strategy;
  strategy.strategy = strategyName(config.strategy);
  pm.addPass(createSetStrategy(strategy));
  // Not a fusion: it decides a masked attention row's gradient.
  pm.addPass(createFoldSoftmaxGuard());
  if (config.fuse) {
    pm.addPass(createFoldIdentityDropout());
    pm.addPass(createFuseLayerNorm());
    pm.addPass(createFuseRmsNorm());
    pm.addPass(createFuseGelu());
  }
  AttachLossOptions loss;
  loss.loss = config.loss;
  loss.labelsName = config.labelsName;
  loss.lossOutput = config.lossOutput;
  loss.classAxis = config.classAxis;
  loss.ignoreIndex = config.ignoreIndex;
  pm.addPass(createAttachLoss(loss));
  if (!config.autocast.empty()) {
    AutocastOptions autocast;
    autocast.precision = config.autocast;
    pm.addPass(createAutocast(autocast));
  }
  // After autocast: a sum it rounds (narrow operands) keeps its add.
  if (config.fuse) {
    // After autocast: a sigmoid it rounds keeps its own op.
    pm.addPass(createFuseSilu());
    pm.addPass(createFuseRotary());
    pm.addPass(createFuseSoftmaxBias());
    pm.addPass(createFuseAttention());
    pm.addPass(createFoldAttentionScale());
    pm.addPass(createFoldRepeatedHeads());
    pm.addPass(createFoldAttentionTransposes());
    // After the attention passes, which read the projections' products.
    pm.addPass(createFuseMatMulBias());
    // Before the cut: a weight's Transpose read by a product is a flag, not
    // a copy each stage would stash (the memory estimate counts it).
    pm.addPass(createFoldTranspose());
  }
  addPartition(pm, config);
  AutodiffOptions autodiff;
  autodiff.freeze = config.freeze;
  autodiff.bnRunningVar = config.bnRunningVar;
  autodiff.lossScale = config.lossScale;
  pm.addPass(createAutodiff(autodiff));
  if (config.fuse) {
    pm.addPass(createRecomputeLogProbabilities());
    pm.addPass(createFoldTranspose());
  }
  if (config.recompute) {
    RecomputeOptions recompute;
    recompute.mode = *config.recompute;
    pm.addPass(createRecompute(recompute));
  }
  if (!config.autocast.empty()) {
    pm.addPass(createPackNarrowStash());
    pm.addPass(createDropExactRoundings());
    pm.addPass(createFuseRoundings());
    pm.addPass(createMarkNarrowProducts());
    pm.addPass(createReadNarrowOperands());
    pm.addPass(createNarrowResults());
  }
  if (config.fuse) {
    pm.addPass(createFuseGradientSums());
    pm.addPass(createFuseRelu());
  }
  InsertOptimizerOptions optimizer;
  optimizer.optimizer = config.optimizer;
  optimizer.lr = config.lr;
  optimizer.momentum = config.momentum;
  optimizer.weightDecay = config.weightDecay;
  optimizer.beta1 = config.beta1;
  optimizer.beta2 = config.beta2;
  optimizer.epsilon = config.epsilon;
  optimizer.noDecay = config.noDecay;
  optimizer.lrSchedule = config.lrSchedule;
  optimizer.lrPeriod = config.lrPeriod;
  optimizer.lrGamma = config.lrGamma;
  optimizer.lrMin = config.lrMin;
  optimizer.lrStart = config.lrStart;
  optimizer.lrEnd = config.lrEnd;
  optimizer.warmup = config.warmup;
  optimizer.warmupStart = config.warmupStart;
  optimizer.clipGradNorm = config.clipGradNorm;
  optimizer.lossScaleInterval = config.lossScaleInterval;
  pm.addPass(createInsertOptimizer(optimizer));
  if (exchangesSparseGradients(config.strategy)) {
    SparsifyGradientsOptions sparse;
    sparse.density = config.density;
    sparse.denseBelow = config.denseBelow;
    sparse.residual = config.sparseResidual;
    pm.addPass(createSparsifyGradients(sparse));
  }
  switch (planForm(config.strategy)) {
  case PlanForm::Replicated:
    addDataParallelSchedule(pm, config);
    break;
  case PlanForm::Pipeline:
    addPipelineSchedule(pm, config);
    break;
  case PlanForm::Single:
    break;
  }
  if (config.layerReuse)
    pm.addPass(createReuseLayerMemory());
  if (config.planMemory)
    pm.addPass(createPlanMemory());
}

namespace {

/// cdp-opt's options of every strategy pipeline: cdp-compile's flags of the
/// same names.
struct StrategyPipelineOptions
    : public PassPipelineOptions<StrategyPipelineOptions> {
  Option<int64_t> stages{*this, "stages",
                         llvm::cl::desc("Pipeline stages (0: the default)"),
                         llvm::cl::init(0)};
  ListOption<std::string> boundaries{
      *this, "stage-boundaries",
      llvm::cl::desc("Cut after these ONNX nodes instead")};
  Option<int64_t> devices{*this, "devices",
                          llvm::cl::desc("dp, cdp: devices (one slot each)"),
                          llvm::cl::init(4)};
  Option<int64_t> zero{*this, "zero",
                       llvm::cl::desc("dp: ZeRO stage (0 none, 1 sharded "
                                      "optimizer state)"),
                       llvm::cl::init(0)};
  Option<int64_t> microBatches{
      *this, "micro-batches",
      llvm::cl::desc("Pipelines: micro-batches per step and replica"),
      llvm::cl::init(4)};
  Option<int64_t> replicas{
      *this, "replicas",
      llvm::cl::desc("Pipelines but cdp-mp: pipeline copies"),
      llvm::cl::init(1)};
  Option<std::string> cdpRule{*this, "cdp-rule",
                              llvm::cl::desc("cdp, cdp-mp: v1 or v2"),
                              llvm::cl::init("v2")};
  Option<std::string> v2Table{*this, "v2-table",
                              llvm::cl::desc("v2's table: timing or code"),
                              llvm::cl::init("timing")};
  Option<int64_t> stagesPerDevice{
      *this, "stages-per-device",
      llvm::cl::desc("interleaved-1f1b: stages each device runs"),
      llvm::cl::init(2)};
  Option<std::string> schedule{
      *this, "schedule",
      llvm::cl::desc("Pipelines: a schedule CSV to follow instead")};
  Option<std::string> cdpReduce{*this, "cdp-reduce",
                                llvm::cl::desc("cdp: allreduce or chain"),
                                llvm::cl::init("allreduce")};
  Option<std::string> loss{*this, "loss",
                           llvm::cl::desc("softmax-cross-entropy, mse or none"),
                           llvm::cl::init("softmax-cross-entropy")};
  Option<std::string> classAxis{
      *this, "class-axis",
      llvm::cl::desc("Where the scores' classes are: 1 or last (rank >= 3)")};
  Option<int64_t> ignoreIndex{
      *this, "ignore-index",
      llvm::cl::desc("The label that counts for nothing (default -100)"),
      llvm::cl::init(-100)};
  Option<std::string> optimizer{*this, "optimizer",
                                llvm::cl::desc("sgd, momentum, adam or adamw"),
                                llvm::cl::init("sgd")};
  Option<double> lr{*this, "lr", llvm::cl::desc("Learning rate"),
                    llvm::cl::init(0.01)};
  Option<double> clipGradNorm{
      *this, "clip-grad-norm",
      llvm::cl::desc("Clip the gradients' global L2 norm (0: off)"),
      llvm::cl::init(0)};
  Option<bool> fuse{*this, "fusion",
                    llvm::cl::desc("Run the fusion passes (default true)"),
                    llvm::cl::init(true)};
  Option<int64_t> steps{
      *this, "timeline-steps",
      llvm::cl::desc("Also the time-step timeline over this many steps"),
      llvm::cl::init(0)};
  Option<double> density{
      *this, "density",
      llvm::cl::desc("laysa: fraction of each parameter's entries sent"),
      llvm::cl::init(0.01)};
  Option<int64_t> denseBelow{
      *this, "dense-below",
      llvm::cl::desc("laysa: parameters smaller than this go whole"),
      llvm::cl::init(1024)};
  Option<bool> residual{
      *this, "sparse-residual",
      llvm::cl::desc("laysa: the naive explicit-residual baseline"),
      llvm::cl::init(false)};
  Option<std::string> memoryReuse{
      *this, "memory-reuse",
      llvm::cl::desc("none, or layer: cdp-reuse-layer-memory before the "
                     "memory plan"),
      llvm::cl::init("none")};
  /// --recompute's values, none among them (an unknown one is refused by
  /// the option's parser).
  enum class Recompute { None, Stage, Layer, Selective };
  Option<Recompute> recompute{
      *this, "recompute",
      llvm::cl::desc("cdp-recompute after autodiff (default none)"),
      llvm::cl::values(
          clEnumValN(Recompute::None, "none", "keep every activation"),
          clEnumValN(Recompute::Stage, "stage", "keep each stage's inputs"),
          clEnumValN(Recompute::Layer, "layer", "keep each layer's inputs"),
          clEnumValN(Recompute::Selective, "selective",
                     "recompute element-wise, softmax and attention "
                     "products")),
      llvm::cl::init(Recompute::None)};
  Option<std::string> precision{
      *this, "precision",
      llvm::cl::desc("fp32 (default), bf16 or fp16: cdp-autocast before "
                     "autodiff (fp16 with dynamic loss scaling from 65536)"),
      llvm::cl::init("fp32")};
  Option<bool> planMemory{*this, "plan-memory",
                          llvm::cl::desc("End with cdp-plan-memory"),
                          llvm::cl::init(true)};

  TrainingPipelineConfig configFor(Strategy strategy) const {
    TrainingPipelineConfig config;
    config.strategy = strategy;
    config.stages = stages;
    config.boundaries.assign(boundaries.begin(), boundaries.end());
    config.devices = devices;
    config.zero = zero;
    config.microBatches = microBatches;
    config.replicas = replicas;
    config.cdpRule = cdpRule;
    config.v2Table = v2Table;
    config.cdpReduce = cdpReduce;
    config.stagesPerDevice = stagesPerDevice;
    config.schedulePath = schedule;
    config.loss = loss;
    config.classAxis = classAxis;
    config.ignoreIndex = ignoreIndex;
    config.optimizer = optimizer;
    config.lr = lr;
    config.clipGradNorm = clipGradNorm;
    config.fuse = fuse;
    config.timelineSteps = steps;
    config.planMemory = planMemory;
    config.layerReuse = memoryReuse == "layer";
    const std::optional<RecomputeMode> modes[] = {
        std::nullopt, RecomputeMode::Stage, RecomputeMode::Layer,
        RecomputeMode::Selective};
    config.recompute = modes[static_cast<int>(recompute.getValue())];
    if (precision != "fp32")
      config.autocast = precision == "fp16" ? "f16" : precision.getValue();
    if (precision == "fp16")
      config.lossScale = 65536; // GradScaler's initial scale
    config.density = density;
    config.denseBelow = denseBelow;
    config.sparseResidual = residual;
    return config;
  }
};

} // namespace

void registerStrategyPipelines() {
  for (const StrategyTraits *traits : allStrategies()) {
    if (!traits->passPipeline)
      continue;
    Strategy strategy = traits->strategy;
    PassPipelineRegistration<StrategyPipelineOptions>(
        traits->passPipeline, traits->summary,
        [strategy](OpPassManager &pm, const StrategyPipelineOptions &options) {
          buildTrainingPipeline(pm, options.configFor(strategy));
        });
  }
}

} // namespace cdp
