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

/// The flags the layout's and the features' checks read, as typed.
static cdp::LayoutRequest layoutRequest() {
  cdp::LayoutRequest request;
  for (const cl::opt<std::string> *flag :
       {&strategy,        &devices,      &stages,       &replicas,
        &stagesPerDevice, &schedulePath, &deviceMemory, &microBatches,
        &planMode,        &cdpRule,      &v2Table,      &cdpReduce,
        &zeroStage,       &density,      &denseBelow,   &sparseBaseline,
        &memoryReuse,     &optimizer,    &clipGradNorm, &hardwarePath}) {
    request.values[flag->ArgStr.str()] = flag->getValue();
    if (flag->getNumOccurrences())
      request.given.insert(flag->ArgStr.str());
  }
  request.emit = emit;
  if (!stageBoundaries.empty())
    request.boundaryStages =
        static_cast<int64_t>(llvm::StringRef(stageBoundaries).count(',') + 2);
  return request;
}

/// --emit, --backend and --plan; then the strategy and its layout, checked
/// by the schedule library (cdp/Schedule/Layout.h): the flags as it read
/// them, for the features' check.
static cdp::LayoutRequest checkStrategyFlags(Settings &settings) {
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
  if (planMode != "auto" && planMode != "manual")
    die("--plan must be auto or manual, got '" + planMode + "'");
  cdp::LayoutRequest request = layoutRequest();
  cdp::LayoutResult checked = cdp::checkLayout(request);
  if (!checked.problem.empty())
    die(checked.problem);
  settings.layout = std::move(checked.layout);
  return request;
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

/// --precision fp16's loss scaling: where it trains, --loss-scale and
/// --loss-scale-interval.
static void checkLossScaleFlags(Settings &settings) {
  if (precision != "fp16" || inference) {
    for (const llvm::cl::Option *flag : {&lossScale, &lossScaleInterval})
      if (flag->getNumOccurrences())
        die("--" + flag->ArgStr.str() +
            " applies to training with --precision fp16");
    return;
  }
  if (!cdp::inScope(cdp::StrategyScope::LossScaled,
                    settings.layout.traits->strategy))
    die("--precision fp16 trains under " +
        cdp::scopeNames(cdp::StrategyScope::LossScaled) +
        " only so far (where cdp-mp's slots update a stage at different time "
        "steps, or laysa's devices exchange sparse updates, an overflow "
        "cannot yet skip the same step everywhere); use --precision bf16, "
        "which needs no scaling");
  // cdp: the overflow flags ride in the reductions' means; CDP-ZeRO's
  // owners take theirs alone.
  if (settings.layout.traits->strategy == cdp::Strategy::CDP &&
      !zeroStage.empty() && zeroStage != "0")
    die("--precision fp16 under cdp is not built for CDP-ZeRO (--zero 3): "
        "its stages' owners alone receive their means and flags");
  settings.lossScale = parseReal("--loss-scale", lossScale);
  if (!(settings.lossScale > 0))
    die("--loss-scale must be a positive number, got '" + lossScale + "'");
  settings.lossScaleInterval = positiveInteger(
      "--loss-scale-interval", lossScaleInterval, 1, int64_t{1} << 24);
}

/// --recompute, --precision and --offload.
static void checkMemoryFlags(Settings &settings) {
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
  if (precision == "bf16" || precision == "fp16")
    settings.autocast = precision == "bf16" ? "bf16" : "f16";
  else if (precision != "fp32")
    die("--precision takes fp32, bf16 or fp16, got '" + precision + "'");
  if (offload && backendName == "cuda")
    die("--offload (activations to host memory between their forward and "
        "backward) is not implemented: the CUDA backend keeps every "
        "activation on the GPU; use --memory-reuse layer to shrink the "
        "activations");
  if (offload)
    die("--offload moves activations between GPU and host memory; the CPU "
        "backend's activations are in host memory already, so there is "
        "nothing to offload (use --memory-reuse layer to shrink them)");
  checkLossScaleFlags(settings);
}

/// A flag given where it means nothing is refused rather than ignored.
static void checkMeaningfulFlags(Settings &settings,
                                 const cdp::LayoutRequest &request) {
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
  if (std::string problem = cdp::checkFeatures(request, settings.layout);
      !problem.empty())
    die(problem);
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
  cdp::LayoutRequest request = checkStrategyFlags(settings);
  readOptimizerFlags(settings);
  readImportFlags(settings);
  checkMeaningfulFlags(settings, request);
  checkOutputPaths(settings);
  return settings;
}

} // namespace cdp::driver
