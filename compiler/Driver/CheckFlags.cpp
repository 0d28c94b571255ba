//===- CheckFlags.cpp - the flags checked into Settings -------------------===//
//
// The flags checked against each other and read into Settings: strategy
// and layout, micro-batches, optimizer, import, memory and laysa flags,
// outputs. Every refusal is one line.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "cdp/Plan/PlanWeights.h"

#include <filesystem>

namespace cdp::driver {

int64_t positiveInteger(const std::string &flag, const std::string &text,
                        int64_t least, int64_t most) {
  int64_t value = 0;
  if (!llvm::to_integer(llvm::StringRef(text), value, 10) || value < least)
    die(flag + " must be a positive integer, got '" + text + "'");
  if (value > most)
    die(flag + " must be at most " + std::to_string(most) + ", got '" + text +
        "'");
  return value;
}

static double parseReal(const std::string &flag, const std::string &text) {
  double value = 0;
  if (llvm::StringRef(text).getAsDouble(value) || !std::isfinite(value))
    die(flag + " must be a number, got '" + text + "'");
  return value;
}

/// The strategies that take --replicas, for messages.
static std::string replicableNames() {
  return cdp::strategyNames(
      [](const cdp::StrategyTraits &t) { return t.replicable; });
}

/// --emit=schedule-csv, --stages-per-device and --schedule against the
/// strategy.
static void checkScheduleFlags(Settings &settings) {
  const cdp::StrategyTraits &traits = *settings.traits;
  bool tabled = traits.table != nullptr;
  std::string tabledNames = cdp::strategyNames(
      [](const cdp::StrategyTraits &t) { return t.table != nullptr; });
  if (emit == "schedule-csv" && !tabled)
    die(std::string("--emit=schedule-csv writes the schedules of ") +
        tabledNames + ", not --strategy " + strategy);
  if (!schedulePath.empty() && !tabled)
    die(std::string("--schedule applies to ") + tabledNames +
        ", not --strategy " + strategy);
  bool takesFlag = traits.stagesPerDevice == 0;
  if (stagesPerDevice.getNumOccurrences() && !takesFlag)
    die("--stages-per-device applies to " +
        cdp::strategyNames([](const cdp::StrategyTraits &t) {
          return t.stagesPerDevice == 0;
        }) +
        ", not --strategy " + strategy);
  settings.stagesPerDevice = cdp::stagesPerDevice(
      traits, takesFlag ? positiveInteger("--stages-per-device",
                                          stagesPerDevice, 1, kMostDevices)
                        : 1);
}

/// --schedule: the CSV, read and checked for S stages and M micro-batches.
static void readScheduleFile(Settings &settings, int64_t S, int64_t M) {
  if (schedulePath.empty())
    return;
  cdp::pipeline::CsvResult read =
      cdp::pipeline::readScheduleFile(schedulePath, S, M, settings.kind);
  if (!read.table)
    die(read.error);
  settings.schedule = std::move(read.table);
}

/// --emit, --strategy, --devices, --stages and the flags that depend on
/// the strategy alone.
static void checkStrategyFlags(Settings &settings) {
  if (inputPath.empty())
    die("no input model given (usage: cdp-compile MODEL.onnx --emit=mlir)");
  if (emit != "mlir" && emit != "plan" && emit != "plan-text" &&
      emit != "train-mlir" && emit != "sched-mlir" && emit != "schedule-csv")
    die("--emit must be plan, plan-text, mlir, train-mlir, sched-mlir or "
        "schedule-csv, got '" +
        emit + "'");
  // plan-text is the plan, printed: everything below treats it as a plan.
  settings.planText = emit == "plan-text";
  if (settings.planText)
    emit = "plan";
  if (backendName != "cpu" && backendName != "cuda")
    die("--backend must be cpu or cuda, got '" + backendName + "'");
  std::optional<cdp::Strategy> parsed = cdp::parseStrategy(strategy.getValue());
  if (!parsed)
    die("--strategy " + strategy +
        " is not available yet (this release supports " + cdp::strategyNames() +
        ")");
  settings.kind = *parsed;
  const cdp::StrategyTraits &traits = cdp::traitsOf(settings.kind);
  settings.traits = &traits;
  settings.deviceCount = positiveInteger("--devices", devices, 1, kMostDevices);
  settings.stageCount = positiveInteger("--stages", stages, 0, kMostDevices);
  if (settings.kind == cdp::Strategy::Single && settings.deviceCount != 1)
    die("--strategy single runs on 1 device, not " + devices +
        " (use --strategy dp or cdp)");
  if (settings.cyclicPipeline() && cdpRule != "v1" && cdpRule != "v2")
    die("--cdp-rule must be v1 or v2, got '" + cdpRule + "'");
  if (settings.cyclicPipeline() && v2Table != "timing" && v2Table != "code")
    die("--v2-table must be timing or code, got '" + v2Table + "'");
  if (settings.pipelined() && settings.stageCount == 0 &&
      stageBoundaries.empty())
    settings.stageCount = 4;
  if (emit == "sched-mlir" && !settings.dataParallel() && !settings.pipelined())
    die("--emit=sched-mlir writes the schedules of dp, cdp and the pipelines; "
        "--strategy " +
        strategy + " has none (--emit=plan-text shows its stream)");
  checkScheduleFlags(settings);
  if (planMode != "auto" && planMode != "manual")
    die("--plan must be auto or manual, got '" + planMode + "'");
  settings.replicaCount =
      positiveInteger("--replicas", replicas, 1, kMostDevices);
  if (settings.replicaCount > 1 && !traits.replicable)
    die("--replicas applies to " + replicableNames() + ", not --strategy " +
        strategy);
  if (deviceMemory.getNumOccurrences()) {
    int64_t bytes = 0;
    if (!llvm::to_integer(llvm::StringRef(deviceMemory), bytes, 10) ||
        bytes < 1)
      die("--device-memory must be a positive number of bytes, got '" +
          deviceMemory + "'");
    settings.deviceMemoryBytes = bytes;
    if (!settings.pipelined())
      die("--device-memory applies to the pipelines (" +
          cdp::strategyNames([](const cdp::StrategyTraits &t) {
            return t.pipelined && t.stagesPerDevice == 1;
          }) +
          "), not --strategy " + strategy);
    if (!stageBoundaries.empty())
      die("--device-memory cuts the stages itself; drop --stage-boundaries");
    if (settings.stagesPerDevice != 1)
      die("--device-memory sizes one stage per device; --strategy " + strategy +
          " runs several (not supported yet)");
  }
}

/// cdp-mp: N micro-batches (CDP slots) share the stages' devices; stage l
/// needs as many devices as it has ops at one time step of CDP's cycle (L
/// in all when N | L and 2L/N is even, N when L | N).
static void deriveCdpMpDevices(Settings &settings, int64_t L) {
  int64_t N = settings.microBatchCount, derived = 0;
  std::string perStage;
  for (int64_t s = 1; s <= L; ++s) {
    int64_t count = cdp::pipeline::cdpStageDeviceCount(s, L, N);
    derived += count;
    perStage += (s > 1 ? ", " : "") + std::to_string(count);
  }
  auto [slot, stage] = cdp::pipeline::cdpCodeTableTooEarly(L, N);
  if (cdpRule == "v2" && v2Table == "code" && slot >= 0)
    die("--strategy cdp-mp --v2-table code: with N = " + std::to_string(N) +
        " and L = " + std::to_string(L) + " the code table makes slot " +
        std::to_string(slot) + " read stage " + std::to_string(stage) +
        "'s new version before the update that makes it "
        "(docs/strategies/cdp.md, update rules); use --v2-table timing");
  if (devices.getNumOccurrences() && settings.deviceCount != derived)
    die("--strategy cdp-mp with N = " + std::to_string(N) +
        " micro-batches on L = " + std::to_string(L) + " stages runs on " +
        std::to_string(derived) + " devices (" + perStage +
        " per stage, docs/strategies/cdp-mp.md): --devices " + devices +
        " differs");
  settings.deviceCount = derived;
}

/// What the strategy asks of L stages and the micro-batches (its own
/// check), then the devices of one replica: L / V.
static int64_t devicesPerReplica(const Settings &settings, int64_t L) {
  int64_t V = settings.stagesPerDevice, M = settings.microBatchCount;
  if (settings.traits->checkShape && planMode != "auto") {
    std::string problem = settings.traits->checkShape(L, M, V);
    if (!problem.empty())
      die(problem);
  }
  return L / V;
}

/// --micro-batches against the devices and stages.
static void checkMicroBatches(Settings &settings) {
  settings.microBatchCount =
      positiveInteger("--micro-batches", microBatches, 1, kMostMicroBatches);
  if (settings.pipelined()) {
    // One device per stage; --micro-batches defaults to the stage count.
    int64_t pipelineStages = settings.flagStages();
    if (!microBatches.getNumOccurrences())
      settings.microBatchCount = pipelineStages;
    if (settings.cyclicPipeline())
      deriveCdpMpDevices(settings, pipelineStages);
    int64_t R = settings.replicaCount;
    int64_t perReplica = devicesPerReplica(settings, pipelineStages);
    readScheduleFile(settings, pipelineStages, settings.microBatchCount);
    if (settings.schedule)
      perReplica = settings.schedule->devices;
    if (planMode != "auto" && devices.getNumOccurrences() &&
        !settings.cyclicPipeline() && settings.deviceCount != perReplica * R)
      die("--strategy " + strategy + " runs " +
          (perReplica == pipelineStages
               ? std::string("one device per stage")
               : std::to_string(perReplica) + " devices a replica") +
          (R > 1 && perReplica == pipelineStages ? " and replica" : "") +
          ": --devices " + devices + " differs from the " +
          (perReplica == pipelineStages
               ? std::to_string(pipelineStages) + " stages"
               : std::to_string(perReplica) + " devices") +
          (R > 1 ? " x " + std::to_string(R) + " replicas" : ""));
    if (planMode != "auto" && !settings.cyclicPipeline())
      settings.deviceCount = perReplica * R;
  }
  if (settings.dataParallel() && microBatches.getNumOccurrences() &&
      settings.microBatchCount != settings.deviceCount)
    die("--strategy " + strategy +
        " runs one micro-batch per device: "
        "--micro-batches " +
        microBatches + " differs from --devices " + devices);
}

/// The optimizer's numbers.
static void readOptimizerFlags(Settings &settings) {
  settings.lr = parseReal("--lr", lr);
  settings.weightDecay = parseReal("--weight-decay", weightDecay);
  // AdamW decays by default, as PyTorch's (weight_decay=0.01).
  if (optimizer == "adamw" && !weightDecay.getNumOccurrences())
    settings.weightDecay = 0.01;
  // -1: not given (the optimizer's default), so a given value must not be.
  settings.momentum =
      momentum.getNumOccurrences() ? parseReal("--momentum", momentum) : -1.0;
  if (momentum.getNumOccurrences() && settings.momentum < 0)
    die("--momentum must be a non-negative number, got '" + momentum + "'");
  if (lrSchedule != "constant" && lrSchedule != "step" &&
      lrSchedule != "cosine" && lrSchedule != "linear")
    die("--lr-schedule must be constant, step, cosine or linear, got '" +
        lrSchedule + "'");
  settings.lrStart = parseReal("--lr-start-factor", lrStartFactor);
  settings.lrEnd = parseReal("--lr-end-factor", lrEndFactor);
  settings.warmup = positiveInteger("--warmup-steps", warmupSteps, 0);
  settings.warmupStart = parseReal("--warmup-start-factor", warmupStartFactor);
  if (settings.lrStart <= 0 || settings.lrEnd < 0 || settings.warmupStart <= 0)
    die("--lr-start-factor and --warmup-start-factor must be positive, "
        "--lr-end-factor not negative");
  settings.lrPeriod = positiveInteger("--lr-period", lrPeriod);
  settings.lrGamma = parseReal("--lr-gamma", lrGamma);
  settings.lrMin = parseReal("--lr-min", lrMin);
  if (settings.lrGamma <= 0 || settings.lrMin < 0)
    die("--lr-gamma must be positive and --lr-min not negative");
  settings.clipGradNorm = parseReal("--clip-grad-norm", clipGradNorm);
  if (settings.clipGradNorm < 0)
    die("--clip-grad-norm must be a positive norm (0: off), got '" +
        clipGradNorm + "'");
  settings.epsilon = parseReal("--adam-eps", adamEps);
  auto [beta1Text, beta2Text] = llvm::StringRef(adamBetas).split(',');
  settings.beta1 = parseReal("--adam-betas", beta1Text.str());
  settings.beta2 = parseReal("--adam-betas", beta2Text.str());
}

/// --trainable-from FILE: one parameter per line, its names separated by
/// spaces where torch ties several; blank lines and lines that start with
/// '#' are skipped.
static std::vector<std::vector<std::string>>
readTrainableFile(const std::string &path) {
  if (llvm::sys::fs::exists(path) && !llvm::sys::fs::is_regular_file(path))
    die("--trainable-from " + path +
        ": not a regular file (a FIFO, device or folder)");
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    die("--trainable-from " + path + ": " + buffer.getError().message());
  std::vector<std::vector<std::string>> names;
  llvm::SmallVector<llvm::StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n');
  for (llvm::StringRef line : lines) {
    line = line.trim();
    if (line.empty() || line.starts_with("#"))
      continue;
    llvm::SmallVector<llvm::StringRef> aliases;
    line.split(aliases, ' ', -1, /*KeepEmpty=*/false);
    names.emplace_back();
    for (llvm::StringRef alias : aliases)
      names.back().push_back(alias.trim().str());
  }
  if (names.empty())
    die("--trainable-from " + path + " names no parameter");
  return names;
}

/// Where the plan's initial values go: the weights file beside -o's plan
/// (empty where no plan file is written).
static std::string weightsOutput(const Settings &settings) {
  if (emit != "plan" || settings.planText || settings.reportOnly ||
      outputPath.empty() || outputPath == "-")
    return "";
  return cdp::plan::weightsPathFor(outputPath);
}

/// No output replaces the model's external data (named as the importer
/// finds it, before anything is written): not -o, --report, nor the
/// weights file beside -o's plan (`weights`).
static void checkNotExternalData(const std::string &file,
                                 const std::string &weights) {
  std::error_code ec;
  for (auto [flag, path] :
       {std::pair<const char *, std::string>{"-o", outputPath.getValue()},
        {"--report", reportPath.getValue()}})
    if (!path.empty() && path != "-" &&
        std::filesystem::equivalent(path, file, ec))
      die(std::string(flag) + " " + path + " is the external data of " +
          inputPath + "; give another path");
  if (cdp::samePath(weights, file))
    die("-o " + outputPath + " would write its initial values to " + weights +
        ", the external data of " + inputPath + "; give another path");
}

/// What is trained: the importer decides from these.
static void readTrainableFlags(Settings &settings) {
  cdp::ImportOptions &options = settings.import;
  options.training = !inference;
  if (!trainableFrom.empty())
    options.trainableFrom = readTrainableFile(trainableFrom);
  options.trainable.assign(trainableNames.begin(), trainableNames.end());
  options.freeze.assign(freeze.begin(), freeze.end());
  // Where -o writes the weights: known here, as --emit and -o are (a
  // report alone writes none, and -o is then "-").
  options.externalData =
      [weights = weightsOutput(settings)](const std::string &file) {
        checkNotExternalData(file, weights);
      };
  options.warn = [](const std::string &line) {
    llvm::errs() << "cdp-compile: warning: " << cdp::printable(line) << "\n";
  };
  if (classAxis.getNumOccurrences() && classAxis != "1" && classAxis != "last")
    die("--class-axis takes 1 or last, got '" + classAxis + "'");
  if (!llvm::to_integer(llvm::StringRef(ignoreIndex).trim(),
                        settings.ignoreIndex, 10))
    die("--ignore-index takes an integer, got '" + ignoreIndex + "'");
}

/// What the importer needs, and where the outputs go.
static void readImportFlags(Settings &settings) {
  cdp::ImportOptions &options = settings.import;
  if (batchSize.getNumOccurrences())
    options.batchSize = positiveInteger("--batch-size", batchSize);
  options.maxTensorBytes =
      positiveInteger("--max-tensor-bytes", maxTensorBytes);
  for (const std::string &entry : batchAxis) {
    auto [name, axisText] = llvm::StringRef(entry).rsplit('=');
    int64_t axis = -1;
    if (name.empty() || axisText.empty() ||
        (axisText != "none" &&
         (!llvm::to_integer(axisText, axis, 10) || axis < 0)))
      die("--batch-axis takes NAME=A with A a non-negative axis or none, got "
          "'" +
          entry + "'");
    options.batchAxes[name.str()] = axisText == "none" ? -1 : axis;
  }
  for (const std::string &entry : constInput) {
    auto [name, file] = llvm::StringRef(entry).split('=');
    if (name.empty() || file.empty())
      die("--const-input takes NAME=FILE, got '" + entry + "'");
    options.constInputs[name.str()] = file.str();
  }
  readTrainableFlags(settings);
  settings.reportStepCount =
      positiveInteger("--steps", reportSteps, 1, kMostReportSteps);
  settings.reportOnly = !reportPath.empty() && outputPath == "-" &&
                        emit == "plan" && !settings.planText;
  if (settings.reportOnly)
    options.shapesOnly = true;
  if (emit == "plan" && !settings.planText && outputPath == "-" &&
      reportPath.empty())
    die("give -o FILE.cdp for the plan, --report FILE.json for a prediction, "
        "or --emit=mlir to print IR");
}

/// --memory-reuse and --offload.
static void checkMemoryFlags(Settings &settings) {
  if (memoryReuse != "none" && memoryReuse != "layer")
    die("--memory-reuse takes none or layer, got '" + memoryReuse + "'");
  settings.layerReuse = memoryReuse == "layer";
  static const std::pair<const char *, cdp::RecomputeMode> modes[] = {
      {"stage", cdp::RecomputeMode::Stage},
      {"layer", cdp::RecomputeMode::Layer},
      {"selective", cdp::RecomputeMode::Selective}};
  for (const auto &[name, mode] : modes)
    if (recompute == name)
      settings.recompute = mode;
  if (!settings.recompute && recompute != "none")
    die("--recompute takes none, stage, layer or selective, got '" + recompute +
        "'");
  if (offload && backendName == "cuda")
    die("--offload (activations to host memory between their forward and "
        "backward) is not implemented: the CUDA backend keeps every "
        "activation on the GPU; use --memory-reuse layer to shrink the "
        "activations");
  if (offload)
    die("--offload moves activations between GPU and host memory; the CPU "
        "backend's activations are in host memory already, so there is "
        "nothing to offload (use --memory-reuse layer to shrink them)");
}

/// laysa's flags, and what laysa does not combine with.
static void checkSparseFlags(Settings &settings) {
  bool laysa = settings.kind == cdp::Strategy::LaySA;
  for (const llvm::cl::opt<std::string> *flag :
       {&density, &denseBelow, &sparseBaseline})
    if (flag->getNumOccurrences() && !laysa)
      die("--" + flag->ArgStr.str() + " applies to --strategy laysa, not " +
          strategy);
  if (!laysa)
    return;
  settings.density = parseReal("--density", density);
  if (!(settings.density > 0 && settings.density <= 1))
    die("--density must lie in (0, 1], got '" + density + "'");
  settings.denseBelow = positiveInteger("--dense-below", denseBelow, 0);
  if (sparseBaseline.getNumOccurrences() && sparseBaseline != "residual")
    die("--sparse-baseline takes residual, got '" + sparseBaseline + "'");
  settings.sparseResidual = sparseBaseline.getNumOccurrences() > 0;
  if (optimizer == "adam" || optimizer == "adamw")
    die("--strategy laysa accumulates SGD steps in its error feedback; use "
        "--optimizer sgd or momentum, not " +
        optimizer);
  if (zeroStage != "0" || cdpReduce.getNumOccurrences() ||
      settings.clipGradNorm > 0)
    die("--strategy laysa takes no --zero, --cdp-reduce or "
        "--clip-grad-norm (its devices never hold the step's mean "
        "gradient)");
}

/// A flag given where it means nothing is refused rather than ignored.
static void checkMeaningfulFlags(Settings &settings) {
  const cdp::StrategyTraits &traits = *settings.traits;
  auto given = [](const llvm::cl::Option &flag) {
    return flag.getNumOccurrences() > 0;
  };
  auto refuse = [](const llvm::cl::Option &flag, const std::string &where) {
    die("--" + flag.ArgStr.str() + " applies to " + where);
  };
  using Flags = std::initializer_list<const llvm::cl::Option *>;
  // (--bn-running-var still matters there: a training-mode BatchNorm node
  // returns running statistics.)
  if (inference)
    for (const llvm::cl::Option *flag : Flags{&optimizer,
                                              &lr,
                                              &momentum,
                                              &adamBetas,
                                              &adamEps,
                                              &weightDecay,
                                              &lrSchedule,
                                              &lrPeriod,
                                              &lrGamma,
                                              &lrMin,
                                              &lrStartFactor,
                                              &lrEndFactor,
                                              &warmupSteps,
                                              &warmupStartFactor,
                                              &clipGradNorm,
                                              &zeroStage,
                                              &noFusion,
                                              std::addressof(noDecay),
                                              std::addressof(freeze),
                                              &trainableFrom,
                                              std::addressof(trainableNames),
                                              &classAxis,
                                              &ignoreIndex,
                                              &loss,
                                              &lossOutput,
                                              &labelsName,
                                              &recompute})
      if (given(*flag))
        refuse(*flag, "training plans, not --inference");
  for (const llvm::cl::Option *flag : Flags{&cdpRule, &v2Table})
    if (given(*flag) && !traits.cyclic)
      refuse(*flag, "--strategy cdp and cdp-mp, not " + strategy);
  if (given(cdpReduce) && !traits.dataParallel)
    refuse(cdpReduce, "--strategy dp and cdp, not " + strategy);
  int64_t zero = positiveInteger("--zero", zeroStage, 0, 3);
  if (zero > 0 && zero < 3 && strategy == "cdp")
    die("--zero " + zeroStage +
        " with --strategy cdp is not built: CDP-ZeRO (--zero 3) moves "
        "every model state point to point; sharding only the optimizer "
        "state or the gradients would bring back dp's collectives (use "
        "--strategy dp --zero " +
        zeroStage + ")");
  if (zero == 3 && strategy == "cdp" && cdpRule != "v1")
    die("--zero 3 with --strategy cdp (CDP-ZeRO) runs update rule v1 only: "
        "give --cdp-rule v1 (under v2 a stage's owner would keep and send "
        "two versions)");
  if (zero == 3 && strategy == "cdp" && given(cdpReduce) &&
      cdpReduce != "chain")
    die("--zero 3 with --strategy cdp (CDP-ZeRO) reduces gradients along "
        "the chain of devices; drop --cdp-reduce " +
        cdpReduce);
  if (zero == 3 && strategy == "cdp" && given(clipGradNorm))
    die("--clip-grad-norm with --strategy cdp --zero 3 is not built yet: "
        "CDP-ZeRO's devices never hold a whole step's gradients; use "
        "--strategy dp --zero 3 to clip");
  if (zero > 0 && traits.replicable && zero > 1)
    die("--zero " + zeroStage + " with --strategy " + strategy +
        " is not built yet: a pipeline shards its optimizer state over a "
        "stage's --replicas with --zero 1");
  if (zero > 0 && traits.replicable && settings.replicaCount < 2)
    die("--zero 1 with --strategy " + strategy +
        " shards each stage's optimizer state over the stage's replicas; "
        "give --replicas 2 or more");
  if (zero > 0 && strategy != "dp" && strategy != "cdp" && !traits.replicable)
    refuse(zeroStage, "--strategy dp and cdp, and the --replicas of " +
                          replicableNames() + ", not " + strategy);
  checkSparseFlags(settings);
  checkMemoryFlags(settings);
  if (given(noDecay) && !given(weightDecay) && optimizer != "adamw")
    refuse(noDecay, "a weight decay (--weight-decay, or --optimizer adamw)");
  if (given(lrPeriod) && lrSchedule == "constant")
    refuse(lrPeriod, "--lr-schedule step and cosine");
  if (given(lrGamma) && lrSchedule != "step")
    refuse(lrGamma, "--lr-schedule step");
  if (given(lrMin) && lrSchedule != "cosine")
    refuse(lrMin, "--lr-schedule cosine");
  for (const llvm::cl::Option *flag : Flags{&lrStartFactor, &lrEndFactor})
    if (given(*flag) && lrSchedule != "linear")
      refuse(*flag, "--lr-schedule linear");
  if (given(warmupStartFactor) && !given(warmupSteps))
    refuse(warmupStartFactor, "--warmup-steps");
  bool adam = optimizer == "adam" || optimizer == "adamw";
  if (given(momentum) && adam)
    refuse(momentum, "--optimizer sgd and momentum, not " + optimizer);
  for (const llvm::cl::Option *flag : Flags{&adamBetas, &adamEps})
    if (given(*flag) && !adam)
      refuse(*flag, "--optimizer adam and adamw, not " + optimizer);
  if (given(hardwarePath) && !traits.pipelined)
    refuse(hardwarePath,
           "the pipelines (" +
               cdp::strategyNames(
                   [](const cdp::StrategyTraits &t) { return t.pipelined; }) +
               "), not " + strategy);
  if (given(globalBatch) && planMode != "auto")
    refuse(globalBatch, "--plan auto");
  if (given(reportSteps) && reportPath.empty() && emit != "sched-mlir")
    refuse(reportSteps, "--report and --emit=sched-mlir");
}

/// Before any work: no output names an input, and every output's folder
/// exists.
static void checkOutputPaths(const Settings &settings) {
  std::vector<std::string> inputs{inputPath, profilePath, hardwarePath,
                                  schedulePath};
  for (const std::string &entry : constInput)
    inputs.push_back(llvm::StringRef(entry).split('=').second.str());
  for (auto [flag, path] :
       {std::pair<const char *, std::string>{"-o", outputPath.getValue()},
        {"--report", reportPath.getValue()}}) {
    std::string problem = cdp::checkOutputPath(flag, path, inputs);
    if (!problem.empty())
      die(problem);
  }
  if (std::string problem = cdp::checkDistinctOutputs(
          {{"-o", outputPath.getValue()}, {"--report", reportPath.getValue()}});
      !problem.empty())
    die(problem);
  // The weights file is written beside the plan: it replaces no input and
  // is not the report.
  std::string weights = weightsOutput(settings);
  inputs.push_back(reportPath);
  for (const std::string &input : inputs)
    if (cdp::samePath(weights, input))
      die("-o " + outputPath + " would write its initial values to " + weights +
          ", which " +
          (input == reportPath.getValue() ? "is --report's file"
                                          : "is an input of this run") +
          "; give another path");
}

Settings checkFlags() {
  Settings settings;
  checkStrategyFlags(settings);
  checkMicroBatches(settings);
  readOptimizerFlags(settings);
  readImportFlags(settings);
  checkMeaningfulFlags(settings);
  checkOutputPaths(settings);
  return settings;
}

} // namespace cdp::driver
