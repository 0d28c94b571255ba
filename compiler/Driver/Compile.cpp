//===- Compile.cpp - a model compiled as the flags say --------------------===//
//
// compileMain: the model imported, the training passes run for the
// strategy (after --plan auto's search), and the result written in the
// form --emit names.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "mlir/IR/Verifier.h"

namespace cdp::driver {

/// --profile FILE's measured costs.
static InstructionCost profileCost(const std::string &path) {
  std::string error;
  InstructionCost cost = cdp::profileCost(path, error);
  if (!cost)
    die("--profile " + path + ": " + error);
  return cost;
}

/// --hw FILE.json, or the default hardware model.
static Hardware readHardware(const std::string &path) {
  Hardware hw;
  if (path.empty())
    return hw;
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    die("--hw " + path + ": " + buffer.getError().message());
  std::string error;
  if (!cdp::parseHardware((*buffer)->getBuffer().str(), hw, error))
    die("--hw " + path + ": " + error);
  return hw;
}

/// Why a step time could not be predicted, for the user.
std::string unpredictableStep(cdp::plan::SimulatedTime::Status status) {
  if (status == cdp::plan::SimulatedTime::Status::UnknownCost)
    return "--profile " + profilePath.getValue() +
           ": lacks an instruction of the plan; profile this model with "
           "cdp-run --profile on one device";
  return "the timing model finds a receive without its send (a compiler "
         "bug: please report it with the model and flags)";
}

/// The strategy's training pipeline (cdp::buildTrainingPipeline, which
/// cdp-opt runs as cdp-dp, cdp-gpipe, ...) for the flags.
static cdp::TrainingPipelineConfig pipelineConfigFor(const Settings &settings) {
  cdp::TrainingPipelineConfig config;
  config.strategy = settings.kind();
  config.loss = loss;
  config.labelsName = labelsName;
  config.lossOutput = lossOutput;
  config.stages = settings.layout.stages;
  if (!stageBoundaries.empty()) {
    llvm::SmallVector<llvm::StringRef> names;
    llvm::StringRef(stageBoundaries).split(names, ',');
    for (llvm::StringRef name : names)
      config.boundaries.push_back(name.trim().str());
  }
  if (profilePath.getNumOccurrences())
    config.profile = profilePath;
  config.deviceMemory = settings.layout.deviceMemoryBytes;
  bool withMomentum = optimizer == "momentum" ? settings.momentum != 0.0
                                              : settings.momentum > 0.0;
  config.optimizerCopies = optimizer == "adam" || optimizer == "adamw" ? 2
                           : withMomentum                              ? 1
                                                                       : 0;
  config.classAxis = classAxis;
  config.ignoreIndex = settings.ignoreIndex;
  config.bnRunningVar = bnRunningVar;
  config.optimizer = optimizer;
  config.lr = settings.lr;
  config.momentum = settings.momentum;
  config.weightDecay = settings.weightDecay;
  config.beta1 = settings.beta1;
  config.beta2 = settings.beta2;
  config.epsilon = settings.epsilon;
  config.noDecay.assign(noDecay.begin(), noDecay.end());
  config.lrSchedule = lrSchedule;
  config.lrPeriod = settings.lrPeriod;
  config.lrGamma = settings.lrGamma;
  config.lrMin = settings.lrMin;
  config.lrStart = settings.lrStart;
  config.lrEnd = settings.lrEnd;
  config.warmup = settings.warmup;
  config.warmupStart = settings.warmupStart;
  config.clipGradNorm = settings.clipGradNorm;
  config.fuse = !noFusion;
  config.devices = settings.layout.devices;
  config.zero = settings.layout.zero;
  config.density = settings.layout.density;
  config.denseBelow = settings.layout.denseBelow;
  config.sparseResidual = settings.layout.sparseResidual;
  config.layerReuse = settings.layout.layerReuse;
  config.recompute = settings.recompute;
  config.autocast = settings.autocast;
  config.lossScale = settings.lossScale;
  config.lossScaleInterval = settings.lossScaleInterval;
  config.microBatches = settings.layout.microBatches;
  config.replicas = settings.layout.replicas;
  config.cdpRule = cdpRule;
  config.v2Table = v2Table;
  config.cdpReduce = cdpReduce;
  config.stagesPerDevice = settings.layout.stagesPerDevice;
  config.schedulePath = schedulePath;
  if (emit == "sched-mlir")
    config.timelineSteps = settings.reportStepCount;
  config.planMemory = emit == "plan";
  return config;
}

/// The passes for the current stage, replica and micro-batch counts
/// (--plan auto runs them once per candidate on a copy of the module).
static mlir::LogicalResult runTrainingPasses(mlir::MLIRContext &context,
                                             mlir::ModuleOp target,
                                             const Settings &settings) {
  mlir::PassManager pm(&context);
  // The IR is verified once, after the last pass: verifying it after each
  // pass (cdp-opt's and the lit tests' default) took a quarter of a
  // 1,024-device cdp compile, whose schedule holds 200,000 ops.
  pm.enableVerifier(false);
  if (inference) {
    if (!settings.autocast.empty()) {
      cdp::AutocastOptions autocast;
      autocast.precision = settings.autocast;
      pm.addPass(cdp::createAutocast(autocast));
      pm.addPass(cdp::createFuseRoundings());
      pm.addPass(cdp::createMarkNarrowProducts());
    }
    if (emit == "plan")
      pm.addPass(cdp::createPlanMemory());
  } else {
    cdp::buildTrainingPipeline(pm, pipelineConfigFor(settings));
  }
  if (mlir::failed(pm.run(target)))
    return mlir::failure();
  return mlir::verify(target);
}

cdp::EmitOptions emitOptionsFor(const Settings &settings) {
  cdp::EmitOptions emitOptions;
  emitOptions.strategy = settings.kind();
  emitOptions.microBatches = settings.form() == cdp::PlanForm::Replicated
                                 ? 1
                                 : settings.layout.microBatches;
  emitOptions.inference = inference;
  emitOptions.optimizer = inference ? std::string() : optimizer.getValue();
  emitOptions.sourceName = llvm::sys::path::filename(inputPath).str();
  emitOptions.backend = backendName;
  return emitOptions;
}

/// Predicted step times: measured per-op times when profiled, else the
/// hardware model's.
static InstructionCost stepCostFor(const Settings &settings,
                                   const Hardware &hardware) {
  if (settings.form() != cdp::PlanForm::Pipeline ||
      !profilePath.getNumOccurrences())
    return cdp::hardwareCost(hardware);
  return profileCost(profilePath);
}

/// The batch of the model's first input with a batch axis (0: none).
static int64_t modelBatch(mlir::ModuleOp source) {
  int64_t batch = 0;
  source.walk([&](mlir::func::FuncOp func) {
    for (unsigned i = 0; i < func.getNumArguments() && !batch; ++i)
      if (auto axis =
              func.getArgAttrOfType<mlir::IntegerAttr>(i, "cdp.batch_axis"))
        if (axis.getInt() >= 0)
          batch =
              mlir::cast<mlir::RankedTensorType>(func.getArgument(i).getType())
                  .getDimSize(axis.getInt());
  });
  return batch;
}

/// Prints a --plan auto candidate's row.
static void printCandidate(const cdp::PlanCandidate &candidate) {
  auto count = [](int64_t n) { return static_cast<long long>(n); };
  if (candidate.ms >= 0) {
    std::printf("%8lld %9lld %14lld %12.3f %14lld  %s\n",
                count(candidate.stages), count(candidate.replicas),
                count(candidate.microBatches), candidate.ms,
                count(candidate.peak), candidate.why.c_str());
    return;
  }
  std::string micro = candidate.why == "fewer micro-batches than stages"
                          ? std::to_string(candidate.microBatches)
                          : "-";
  std::printf("%8lld %9lld %14s %12s %14s  %s\n", count(candidate.stages),
              count(candidate.replicas), micro.c_str(), "-", "-",
              candidate.why.c_str());
}

/// --plan auto (the 2BW planner, cdp::planCandidates): every stages x
/// replicas = --devices with M = G / (replicas x B) micro-batches,
/// M >= stages; each candidate is compiled and its plan predicted (step
/// time from the profile or the hardware model, peak memory from the
/// report's accounting); the fastest that fits the cap wins and its counts
/// go into `settings`.
static void planAutomatically(mlir::ModuleOp source, Settings &settings,
                              const InstructionCost &stepCost,
                              double memoryCap) {
  int64_t samples = 0;
  if (!globalBatch.getNumOccurrences() ||
      !llvm::to_integer(llvm::StringRef(globalBatch), samples, 10) ||
      samples < 1)
    die("--plan auto needs --global-batch G, a positive number of "
        "samples per step");
  if (!devices.getNumOccurrences())
    die("--plan auto needs --devices N");
  int64_t batch = modelBatch(source), deviceCount = settings.layout.devices;
  if (batch <= 0)
    die("--plan auto: the model has no input with a batch axis");
  std::printf("--plan auto: 2bw on %lld devices, global batch %lld "
              "(micro-batch %lld)\n",
              (long long)deviceCount, (long long)samples, (long long)batch);
  std::printf("%8s %9s %14s %12s %14s  %s\n", "stages", "replicas",
              "micro-batches", "step ms", "needs bytes", "");
  std::vector<cdp::PlanCandidate> candidates =
      cdp::planCandidates(deviceCount, samples, batch);
  std::string capName = settings.layout.deviceMemoryBytes > 0
                            ? "--device-memory"
                            : "the --hw memory";
  for (cdp::PlanCandidate &candidate : candidates) {
    if (candidate.why.empty())
      cdp::evaluateCandidate(source, pipelineConfigFor(settings),
                             emitOptionsFor(settings), stepCost, memoryCap,
                             capName, candidate);
    printCandidate(candidate);
  }
  int best = cdp::bestCandidate(candidates);
  if (best < 0)
    die("--plan auto: no candidate fits (see the table above)");
  const cdp::PlanCandidate &chosen = candidates[best];
  settings.layout.stages = chosen.stages;
  settings.layout.replicas = chosen.replicas;
  settings.layout.microBatches = chosen.microBatches;
  std::printf("chosen: %lld stages x %lld replicas, %lld micro-batches "
              "per step, %.3f ms per step predicted\n",
              (long long)chosen.stages, (long long)chosen.replicas,
              (long long)chosen.microBatches, chosen.ms);
  std::fflush(stdout);
}

/// Training needs samples: an input whose batch axis is 0 long is refused
/// (ONNX allows empty tensors, and inference plans may take them).
static void checkTrainingBatch(mlir::ModuleOp module) {
  module.walk([](mlir::func::FuncOp func) {
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto axis = func.getArgAttrOfType<mlir::IntegerAttr>(i, "cdp.batch_axis");
      auto type =
          mlir::dyn_cast<mlir::RankedTensorType>(func.getArgument(i).getType());
      if (!axis || axis.getInt() < 0 || !type ||
          type.getDimSize(axis.getInt()) != 0)
        continue;
      auto name = func.getArgAttrOfType<mlir::StringAttr>(i, "cdp.name");
      die(inputPath + ": graph input '" + (name ? name.str() : "?") +
          "' has a batch of 0 (axis " + std::to_string(axis.getInt()) +
          "); training needs at least one sample per micro-batch");
    }
  });
}

/// --emit=sched-mlir: the sched.program ops alone.
static void printSchedules(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  for (mlir::Operation &op : module.getBody()->getOperations())
    if (mlir::isa<cdp::sched::ProgramOp, cdp::sched::StepProgramOp>(op)) {
      op.print(stream);
      stream << "\n";
    }
  writeOutput(outputPath, text);
}

/// --emit=schedule-csv: the step the plan would run, as a table (the
/// strategy's own, which cdp-schedule-pipeline follows, or --schedule's).
static void printScheduleCsv(const Settings &settings) {
  int64_t S = settings.layout.flagStages();
  cdp::pipeline::ScheduleTable table =
      settings.layout.schedule
          ? *settings.layout.schedule
          : cdp::pipeline::strategyTable(settings.kind(), S,
                                         settings.layout.microBatches,
                                         settings.layout.stagesPerDevice);
  writeOutput(outputPath, cdp::pipeline::writeScheduleCsv(table));
}

/// --emit=mlir and train-mlir: the module, parameter data elided unless
/// --print-param-data.
static void printModule(mlir::ModuleOp module) {
  mlir::OpPrintingFlags flags;
  std::string text;
  llvm::raw_string_ostream stream(text);
  if (printParamData) {
    module->print(stream, flags);
    writeOutput(outputPath, text);
    return;
  }
  // Elided resources still print an empty metadata block; drop it so the
  // IR reads as the graph alone.
  flags.elideLargeResourceString(0);
  module->print(stream, flags);
  llvm::StringRef printed(text);
  size_t metadata = printed.rfind("{-#");
  if (metadata != llvm::StringRef::npos &&
      printed.drop_front(metadata + 3).trim() == "#-}")
    printed = printed.take_front(metadata);
  writeOutput(outputPath, printed.rtrim().str() + "\n");
}

int compileMain(int argc, char **argv) {
  parseCommandLine(argc, argv);
  Settings settings = checkFlags();

  mlir::DialectRegistry registry;
  cdp::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  std::string error;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      cdp::importOnnxModel(context, inputPath, settings.import, error);
  if (!module)
    die(inputPath + ": " + error);
  if (emit == "mlir") {
    printModule(*module);
    return 0;
  }

  if (!inference)
    checkTrainingBatch(*module);
  std::string diagnostic;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    if (diagnostic.empty())
      diagnostic = d.str();
    return mlir::success();
  });
  Hardware hardware = readHardware(hardwarePath);
  InstructionCost stepCost = stepCostFor(settings, hardware);
  double memoryCap =
      settings.layout.deviceMemoryBytes > 0
          ? static_cast<double>(settings.layout.deviceMemoryBytes)
          : hardware.memoryBytes;
  if (planMode == "auto")
    planAutomatically(*module, settings, stepCost, memoryCap);
  if (mlir::failed(runTrainingPasses(context, *module, settings)))
    die(inputPath + ": " +
        (diagnostic.empty() ? "compilation failed" : diagnostic));
  if (emit == "sched-mlir") {
    printSchedules(*module);
    return 0;
  }
  if (emit == "schedule-csv") {
    printScheduleCsv(settings);
    return 0;
  }
  if (emit == "plan")
    writePlanOutputs(*module, settings, stepCost, diagnostic);
  printModule(*module);
  return 0;
}

} // namespace cdp::driver
