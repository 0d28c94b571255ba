//===- TrainingRun.cpp - a plan run as cdp-run runs it -----------------===//
//
// The run's order: outputs and plan checked, devices made, data bound,
// then training (or inference) and the outputs.
//
//===----------------------------------------------------------------------===//

#include "Run.h"

#include <cstdio>
#include <omp.h>
#include <unistd.h>

namespace cdp::runtime {
namespace training {
namespace {

/// --cuda-graphs: what this process's devices recorded and replayed, so
/// that a run that could not record says so.
void reportReplay(const Run &run) {
  if (!run.options.cudaGraphs)
    return;
  StepReplay::Counts sum;
  int64_t instructions = 0;
  for (const auto &executor : run.executors)
    if (executor && executor->replayCounts()) {
      sum += *executor->replayCounts();
      instructions +=
          executor->plan().devices(executor->device()).instructions_size();
    }
  if (instructions == 0)
    return;
  std::string line =
      "cdp-run: --cuda-graphs: " + std::to_string(sum.runs) + " runs of " +
      std::to_string(sum.kernels) + " of " + std::to_string(instructions) +
      " instructions launch alike every step; " + std::to_string(sum.recorded) +
      " recordings replayed " + std::to_string(sum.replays) + " times";
  if (sum.refused)
    line += "; " + std::to_string(sum.refused) +
            " runs could not be recorded and ran kernel by kernel";
  std::fprintf(stderr, "%s\n", line.c_str());
}

/// Training, on one device or several, from the start or --resume.
void train(Run &run) {
  countSteps(run);
  keepStepOutputs(run);
  bindPartialBatch(run);
  if (!run.options.checkpoint.empty() && run.root())
    try {
      lockCheckpointFolder(run.options.checkpoint);
    } catch (const RuntimeError &e) {
      fail(e.what());
    }
  if (!run.options.checkpoint.empty() || !run.options.resume.empty() ||
      !run.options.portableCheckpoint.empty())
    run.identity = runIdentity(run);
  ResumePoint resumed;
  if (!run.options.resume.empty() && isPortableCheckpoint(run.options.resume)) {
    resumed.nextStep = resumed.stepOrigin = loadPortableCheckpoint(run);
    run.portableResume = true;
  } else if (!run.options.resume.empty()) {
    try {
      resumed = loadCheckpoint(run.options.resume, run.checkpointScope(),
                               run.identity);
    } catch (const RuntimeError &e) {
      fail(e.what());
    }
  }
  // A run resumed from a portable checkpoint, or from an exact one of such
  // a run, counts its schedule's delays from where it began.
  for (auto &executor : run.executors)
    if (executor)
      executor->setStepOrigin(resumed.stepOrigin);
  int64_t step = resumed.nextStep;
  if (step > run.total)
    fail("--resume: the checkpoint is at step " + std::to_string(step) +
         (run.portableResume
              ? " of this plan (" + std::to_string(step * run.perStep) +
                    " samples)"
              : std::string()) +
         ", past the " + std::to_string(run.total) + " steps asked for");
  if (!run.options.metrics.empty() && run.root())
    run.metrics.open(run.options.metrics, step);
  if (!run.options.tensorboard.empty() && run.root())
    run.tensorboard.open(run.options.tensorboard, step);
  if (!run.options.checkpoint.empty())
    installStopSignals(run.mpi ? run.fabric.get() : nullptr);
  if (run.multiDevice)
    runDevices(run, step);
  else
    runSingleDevice(run, step);
  reportReplay(run);
}

} // namespace
} // namespace training

using namespace training;

TrainingRun::TrainingRun(const RunOptions &options,
                         std::function<void(const std::string &)> abortAll)
    : run(std::make_unique<Run>(options, std::move(abortAll))) {}

TrainingRun::~TrainingRun() = default;

Fabric *TrainingRun::mpiFabric() const {
  return run->mpi ? run->fabric.get() : nullptr;
}

void TrainingRun::execute() {
  const RunOptions &options = run->options;
  checkOutputPaths(options);
  readCheckedPlan(options, run->plan, run->planChecksum);
  checkWeightsNotAnOutput(options, run->plan);
  std::string error;
  run->weights =
      plan::PlanWeights::open(options.plan, run->plan, error, options.weights);
  if (!run->weights)
    fail(error);
  run->training = !run->plan.inference();
  int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  omp_set_num_threads(options.threads > 0 ? options.threads
                                          : std::max(cores, 1));
  createDevices(*run, cores);
  bindFeeds(*run);
  bindEvalFeeds(*run);
  loadDataset(*run);
  if (!options.profile.empty())
    run->first().enableProfiling();
  run->terminal = isatty(2);
  if (run->training)
    train(*run);
  else
    runInference(*run);
  if (run->stoppedAt >= 0)
    return;
  bool served = run->mpi && run->training;
  if (!run->root()) {
    if (served) // the root reads the trained tensors it writes
      serveTrainedTensors(*run);
    return;
  }
  writeOutputs(*run);
  if (served)
    endTrainedFetches(*run);
}

} // namespace cdp::runtime
