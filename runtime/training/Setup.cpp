//===- Setup.cpp - a training run's plan, flags and devices ---------------===//
//
// Reads and checks the plan against the flags, makes the devices and their
// fabric (in-process or over mpirun), and counts the steps.
//
//===----------------------------------------------------------------------===//

#include "Run.h"

#include "cdp/Plan/Paths.h"
#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/PlanWeights.h"
#include "cdp/Plan/StepWork.h"
#include "cdp/Runtime/MpiCommunicator.h"
#include "cdp/Runtime/OnnxInferenceMode.h"

#include <omp.h>
#include <onnx/onnx_pb.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace cdp::runtime::training {

/// The outputs written as files, by flag.
static std::vector<std::pair<const char *, const std::string *>>
fileOutputs(const RunOptions &options) {
  return {{"--metrics", &options.metrics},
          {"--save-onnx", &options.saveOnnx},
          {"--save-onnx-eval", &options.saveOnnxEval},
          {"--report", &options.report},
          {"--report-svg", &options.reportSvg},
          {"--trace", &options.trace},
          {"--profile", &options.profile}};
}

/// Whether an output flag saves a model, whose values may go beside it
/// as FILE.data (external data).
static bool savesModel(const char *flag) {
  return std::string(flag).rfind("--save-onnx", 0) == 0;
}

/// Before any work: no output names an input, and every output's folder
/// exists.
void checkOutputPaths(const RunOptions &options) {
  std::vector<std::string> inputs{options.plan, options.compareReport};
  for (const auto &[name, file] : options.feeds)
    inputs.push_back(file);
  for (const auto &[name, file] : options.evalFeeds)
    inputs.push_back(file);
  for (const char *split : {"train", "t10k"})
    if (!options.data.empty())
      try {
        for (const std::string &file :
             idxSplitFiles(dataFolder(options), split))
          inputs.push_back(file);
      } catch (const RuntimeError &) {
        // Missing: loading the data says so.
      }
  std::error_code ec;
  if (!options.resume.empty())
    for (const auto &entry :
         std::filesystem::directory_iterator(options.resume, ec))
      inputs.push_back(entry.path().string());
  for (auto [flag, path] : fileOutputs(options)) {
    std::string problem =
        checkOutputPath(flag, *path, inputs,
                        /*replaced=*/std::string(flag) != "--metrics");
    if (!problem.empty())
      fail(problem);
    if (savesModel(flag) && !path->empty() && *path != "-")
      if (std::string data = checkOutputPath(flag, *path + ".data", inputs);
          !data.empty())
        fail(data);
  }
  std::vector<std::pair<std::string, std::string>> written;
  for (auto [flag, path] : fileOutputs(options)) {
    written.emplace_back(flag, *path);
    if (savesModel(flag) && !path->empty())
      written.emplace_back(std::string(flag) + "'s external data",
                           *path + ".data");
  }
  if (std::string problem = checkDistinctOutputs(written); !problem.empty())
    fail(problem);
  // One folder cannot take both kinds of checkpoint: the portable one
  // replaces its folder whole, and a resume prefers checkpoint.json.
  auto resolved = [](const std::string &path) {
    std::error_code ignored;
    return std::filesystem::weakly_canonical(std::filesystem::absolute(path),
                                             ignored);
  };
  if (!options.checkpoint.empty() && !options.portableCheckpoint.empty() &&
      resolved(options.checkpoint) == resolved(options.portableCheckpoint))
    fail("--checkpoint and --portable-checkpoint name the same folder (" +
         options.checkpoint + "); give each a folder of its own");
  if (!options.checkpoint.empty() && isPortableCheckpoint(options.checkpoint))
    fail("--checkpoint " + options.checkpoint +
         " holds a portable checkpoint (checkpoint.json); give --checkpoint "
         "a folder of its own");
  auto dumped = [](const std::string &file) {
    return file == "index.json" || file == "checkpoint.json" ||
           (file.size() > 4 && file.compare(file.size() - 4, 4, ".npy") == 0);
  };
  for (auto [flag, path] :
       {std::pair<const char *, const std::string *>{"--dump-params",
                                                     &options.dumpParams},
        {"--dump-grads", &options.dumpGrads},
        {"--save-outputs", &options.saveOutputs},
        {"--checkpoint", &options.checkpoint},
        {"--portable-checkpoint", &options.portableCheckpoint},
        {"--tensorboard", &options.tensorboard}}) {
    // A checkpoint's and TensorBoard's folders are written into, the
    // others replaced whole.
    bool replaced = std::string(flag) != "--checkpoint" &&
                    std::string(flag) != "--tensorboard";
    std::string problem = checkOutputFolder(flag, *path, replaced);
    if (problem.empty() && replaced)
      problem = checkReplaceableFolder(flag, *path, dumped);
    if (!problem.empty())
      fail(problem);
  }
}

void checkWeightsNotAnOutput(const RunOptions &options,
                             const plan::Plan &plan) {
  std::string weights = options.weights.empty()
                            ? plan::weightsPathOf(plan, options.plan)
                            : options.weights;
  if (weights.empty())
    return;
  auto names = [&](const std::string &file) { return samePath(file, weights); };
  for (auto [flag, path] : fileOutputs(options)) {
    if (names(*path))
      fail(std::string(flag) + " " + *path +
           " is the plan's weights file, an input of this run; give another "
           "path");
    if (savesModel(flag) && names(*path + ".data"))
      fail(std::string(flag) + " " + *path + " would write its values to " +
           *path + ".data, the plan's weights file; give another path");
  }
}

/// Flags that mean nothing for this plan or beside the other flags are
/// refused rather than ignored.
static void checkMeaningfulFlags(const RunOptions &options,
                                 const plan::Plan &plan) {
  if (plan.inference()) {
    for (auto [flag, given] :
         {std::pair<const char *, bool>{"--steps", options.steps >= 0},
          {"--epochs", options.epochs >= 0},
          {"--eval", options.eval},
          {"--eval-feed", !options.evalFeeds.empty()},
          {"--dump-grads", !options.dumpGrads.empty()},
          {"--checkpoint", !options.checkpoint.empty()},
          {"--portable-checkpoint", !options.portableCheckpoint.empty()},
          {"--resume", !options.resume.empty()},
          {"--report", !options.report.empty()},
          {"--metrics", !options.metrics.empty()},
          {"--tensorboard", !options.tensorboard.empty()}})
      if (given)
        fail(std::string(flag) + " applies to training plans; " + options.plan +
             " is forward-only");
  }
  if (options.saveOnnxExternalData && options.saveOnnx.empty() &&
      options.saveOnnxEval.empty())
    fail("--save-onnx-external-data goes with --save-onnx or "
         "--save-onnx-eval");
  if (!options.dumpGrads.empty() && plan.memory_reuse() == "layer" &&
      plan.applied_gradients_size() == 0)
    fail("--dump-grads reads the gradients at the step's end, but " +
         options.plan +
         " reuses their memory once they are handed off (cdp-compile "
         "--memory-reuse layer); compile without it to dump them");
  if (!options.dumpGrads.empty() && plan.schedule().zero() >= 2)
    fail("--dump-grads writes the mean gradients, which a --zero " +
         std::to_string(plan.schedule().zero()) +
         " plan never holds whole on every device (dp: one shard per "
         "device; cdp: on each stage's owner); compile with --strategy dp "
         "--zero 1 to dump them");
  bool owned = std::any_of(plan.schedule().shard_groups().begin(),
                           plan.schedule().shard_groups().end(),
                           [](const auto &group) { return group.has_owner(); });
  // A portable checkpoint has nothing in flight: the owners start afresh.
  bool exactResume =
      !options.resume.empty() && !isPortableCheckpoint(options.resume);
  if (owned && (!options.checkpoint.empty() || exactResume))
    fail(std::string(options.checkpoint.empty() ? "--resume" : "--checkpoint") +
         " is not built yet for a cdp --zero 3 plan (its stage owners send "
         "the next step's parameters before the step starts); compile with "
         "--strategy dp --zero 3 to checkpoint sharded model states, or "
         "write a --portable-checkpoint after the run");
  if (options.eval && options.data.empty())
    fail("--eval evaluates on the test split of --data; with --feed give the "
         "held-out data with --eval-feed NAME=FILE");
  if (!options.evalFeeds.empty() && !options.data.empty())
    fail("--eval-feed is held-out data for --feed training; with --data, "
         "--eval evaluates on its test split");
  if (options.checkpointEvery > 0 && options.checkpoint.empty())
    fail("--checkpoint-every needs --checkpoint DIR");
  if (options.reportSteps > 0 && options.report.empty())
    fail("--report-steps needs --report FILE.json");
  if (options.allowNonfinite && options.feeds.empty())
    fail("--allow-nonfinite applies to --feed data (a data set's pixels are "
         "always finite)");
  if (options.partialBatch != "wrap" && options.feeds.empty())
    fail("--partial-batch applies to --feed training (--data drops an "
         "epoch's incomplete last step already)");
  if (options.shuffle && options.feeds.empty())
    fail("--shuffle applies to --feed data (--data is shuffled every epoch "
         "already)");
}

/// --backend overrides the plan's devices' backend; --allow-tf32,
/// --allow-nondeterministic and --cuda-graphs need a GPU device to mean
/// something.
static void selectBackend(const RunOptions &options, plan::Plan &plan) {
  if (!options.backend.empty())
    for (plan::Device &device : *plan.mutable_devices())
      device.set_backend(options.backend);
  bool gpu = std::any_of(
      plan.devices().begin(), plan.devices().end(),
      [](const plan::Device &device) { return device.backend() == "cuda"; });
  for (auto [flag, given] :
       {std::pair{"--allow-tf32", options.allowTf32},
        std::pair{"--allow-nondeterministic", options.allowNondeterministic},
        std::pair{"--cuda-graphs", options.cudaGraphs}})
    if (given && !gpu)
      fail(std::string(flag) +
           " applies to the CUDA backend, and this plan's devices run on the "
           "CPU (add --backend cuda)");
  setAllowTf32(options.allowTf32);
  setAllowNondeterministic(options.allowNondeterministic);
}

/// Under mpirun, a GPU plan's communication goes through NCCL where it can:
/// dp's and cdp's reductions where every device has a GPU of its own, and
/// the messages between GPUs of different processes over a communicator
/// per ordered pair of devices. The processes agree on both before their
/// devices' kernels are made (each process calls this at the same point;
/// the plan, the same everywhere, decides what they agree on); process 0
/// says what goes through host memory instead, in one write (mpirun
/// forwards pieces apart).
static void prepareNcclUnderMpirun(Run &run) {
  bool gpu = std::all_of(
      run.plan.devices().begin(), run.plan.devices().end(),
      [](const plan::Device &device) { return device.backend() == "cuda"; });
  if (!gpu)
    return;
  std::string notes;
  const std::string &strategy = run.plan.strategy();
  if (strategy == "dp" || strategy == "cdp")
    if (std::string why = prepareNcclAcrossProcesses(*run.fabric); !why.empty())
      notes += "cdp-run: note: the reductions go through host memory, not "
               "NCCL: " +
               why + "\n";
  for (const std::string &note :
       prepareNcclRoutesAcrossProcesses(*run.fabric, run.plan))
    notes += "cdp-run: note: " + note + "\n";
  if (!notes.empty() && run.fabric->isRoot())
    std::cerr << notes << std::flush;
}

/// Reads the plan and refuses one that would hang or options that do not
/// go together.
void readCheckedPlan(const RunOptions &options, plan::Plan &plan,
                     uint64_t &planChecksum) {
  std::string error;
  if (!plan::readPlan(options.plan, plan, error, options.maxTensorBytes))
    fail(options.plan + ": " + error);
  selectBackend(options, plan);
  // A plan whose sends and receives cannot all match would hang the device
  // threads: refuse it, naming the first stuck device.
  std::string hang = plan::findSendRecvDeadlock(plan);
  if (!hang.empty())
    fail(options.plan + ": " + plan::deadlockLine(hang));
  {
    std::ifstream in(options.plan, std::ios::binary);
    std::stringstream content;
    content << in.rdbuf();
    planChecksum = plan::checksum(content.str().data(), content.str().size());
  }
  if (!options.feeds.empty() && !options.data.empty())
    fail("give --feed or --data, not both");
  bool training = !plan.inference();
  if (training && options.feeds.empty() && options.data.empty())
    fail("nothing to train on: give --data DIR|fashion-mnist or --feed "
         "NAME=FILE");
  if (!options.feeds.empty() && training && options.steps < 0)
    fail("--feed needs --steps T");
  if (options.data.empty() && options.epochs >= 0)
    fail("--epochs goes with --data");
  checkMeaningfulFlags(options, plan);
  // Before training: a model without an inference mode is refused now,
  // not after the run.
  if (!options.saveOnnxEval.empty()) {
    onnx::ModelProto model;
    if (!model.ParseFromString(plan.source_model()))
      fail("--save-onnx-eval: the plan holds no readable ONNX model");
    if (std::string problem = runtime::toInferenceMode(model); !problem.empty())
      fail("--save-onnx-eval: " + problem);
  }
}

/// The last component of `path`: a run's name in the report's legend.
std::string fileName(const std::string &path) {
  return std::filesystem::path(path).filename().string();
}

/// --compare-report: the other run's curves, read before training starts.
static runtime::ReportCurves readComparison(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    fail(path + ": cannot open: " + std::strerror(errno));
  std::stringstream content;
  content << in.rdbuf();
  std::string error;
  std::optional<runtime::ReportCurves> curves =
      runtime::readReportCurves(content.str(), fileName(path), error);
  if (!curves)
    fail("--compare-report " + path + ": " + error);
  return *curves;
}

/// Under mpirun without --threads: the node's cores shared among the
/// devices its processes run (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE
/// processes, each running devices / OMPI_COMM_WORLD_SIZE), at least one.
static int mpiThreadsPerDevice(int devices, int cores) {
  auto count = [](const char *name) {
    const char *value = std::getenv(name);
    int n = value ? std::atoi(value) : 0;
    return n > 0 ? n : 1;
  };
  int perProcess = std::max(devices / count("OMPI_COMM_WORLD_SIZE"), 1);
  return std::max(cores / (count("OMPI_COMM_WORLD_LOCAL_SIZE") * perProcess),
                  1);
}

/// --data's folder (fashion-mnist: the packaged one).
std::string dataFolder(const RunOptions &options) {
  return options.data == "fashion-mnist" ? "/usr/share/datasets/fashion-mnist"
                                         : options.data;
}

/// The files --data reads: the training split's, and the test split's
/// with `withTest` (a RuntimeError naming one that is missing).
std::vector<std::string> dataFiles(const RunOptions &options, bool withTest) {
  std::vector<std::string> files;
  if (options.data.empty())
    return files;
  files = idxSplitFiles(dataFolder(options), "train");
  if (withTest)
    for (std::string &file : idxSplitFiles(dataFolder(options), "t10k"))
      files.push_back(std::move(file));
  return files;
}

/// What this process must share with the others of an mpirun job: the
/// plan, the flags, and its data files' sizes and contents (the first and
/// last MiB: another machine's copy of a file has another modification
/// time).
static RunAgreement agreementOf(const Run &run) {
  const RunOptions &options = run.options;
  RunAgreement agreement;
  agreement.plan = run.planChecksum;
  agreement.flags =
      plan::checksum(options.agreedFlags.data(), options.agreedFlags.size());
  auto add = [&](const std::string &flag, const std::string &file) {
    FileFingerprint print = fingerprintFile(file);
    agreement.files.emplace_back(flag, print.hash ^ print.size);
  };
  try {
    for (const auto &[name, file] : options.feeds)
      add("--feed " + name + "=" + file, file);
    for (const auto &[name, file] : options.evalFeeds)
      add("--eval-feed " + name + "=" + file, file);
    for (const std::string &file : dataFiles(options, options.eval))
      add("--data " + file, file);
  } catch (const RuntimeError &e) {
    fail(e.what());
  }
  return agreement;
}

/// Whether every device's step is too small to share among threads: below
/// 50 million multiply-adds (LeNet at batch 8: 9 million; the e2e ResNet:
/// 41 million) 2 threads ran no faster than 1 on this project's 2-core
/// machine, and with another busy process 2-3x slower (docs/results.md,
/// "Threads"); from 74 million (LeNet at batch 64) 2 threads were 1.35-1.7x
/// faster.
static bool smallSteps(const plan::Plan &plan) {
  constexpr double kSharedWork = 5e7;
  for (int d = 0; d < plan.devices_size(); ++d)
    if (plan::stepWork(plan, d) >= kSharedWork)
      return false;
  return true;
}

/// One executor per device, each with its own memory; devices of
/// multi-device plans talk through the in-process communicator.
void createDevices(Run &run, int cores) {
  const RunOptions &options = run.options;
  run.deviceCount = run.plan.devices_size();
  run.lossScaleTensor = findLossScale(run.plan);
  run.threadsPerDevice = options.threads > 0   ? options.threads
                         : run.deviceCount > 1 ? 1
                                               : std::max(cores, 1);
  if (options.threads == 0 && launchedByMpirun())
    run.threadsPerDevice = mpiThreadsPerDevice(run.deviceCount, cores);
  if (options.threads == 0 && smallSteps(run.plan))
    run.threadsPerDevice = 1;
  omp_set_num_threads(run.threadsPerDevice);
  // dp and cdp reduce even on one device (a communicator of one), and their
  // last reductions are applied after training: they run as device threads.
  run.multiDevice = run.deviceCount > 1 || plan::isReplicated(run.plan);
  run.mpi = launchedByMpirun();
  if (run.mpi) {
    std::string error;
    run.fabric = createMpiFabric(run.deviceCount,
                                 static_cast<double>(options.commTimeout),
                                 agreementOf(run), error);
    if (!run.fabric && error.empty())
      throw ReportedElsewhere();
    if (!run.fabric)
      fail(error);
    run.multiDevice = true;
    prepareNcclUnderMpirun(run);
  } else if (run.multiDevice) {
    run.fabric = std::make_unique<LocalFabric>(run.deviceCount);
  }
  for (int d = 0; d < run.deviceCount; ++d)
    run.executors.push_back(
        run.fabric && !run.fabric->owns(d)
            ? std::unique_ptr<Executor>()
            : std::make_unique<Executor>(run.plan, run.threadsPerDevice, d,
                                         run.fabric ? &run.fabric->endpoint(d)
                                                    : nullptr,
                                         run.weights.get()));
  if (options.cudaGraphs)
    for (auto &executor : run.executors)
      if (executor)
        executor->enableReplay();
  if (run.multiDevice && !options.profile.empty())
    fail("--profile is not available yet for dp, cdp and multi-device plans "
         "(" +
         run.plan.strategy() + ")");
  if (run.deviceCount > 1 && !options.saveOutputs.empty() &&
      plan::isPipeline(run.plan))
    fail("--save-outputs is not available for pipeline plans (" +
         run.plan.strategy() + "): the outputs are spread over stash slots");
  if (run.mpi && !options.saveOutputs.empty() && !run.plan.inference() &&
      std::find(run.executors.begin(), run.executors.end(), nullptr) !=
          run.executors.end())
    fail("--save-outputs is not available under mpirun yet (" +
         run.plan.strategy() +
         "): the step's slots run in several processes; run the plan in "
         "one process to save them");
  run.slots = std::max(run.plan.micro_batches(), 1);
  if (!options.reportSvg.empty() && options.report.empty())
    fail("--report-svg needs --report FILE.json");
  if (!options.compareReport.empty() && options.reportSvg.empty())
    fail("--compare-report needs --report-svg FILE.svg");
  if (!options.compareReport.empty())
    run.comparison = readComparison(options.compareReport);
  if (!options.trace.empty()) {
    run.trace = std::make_unique<TraceRecorder>(run.deviceCount);
    for (auto &executor : run.executors)
      if (executor)
        executor->setTrace(run.trace.get());
    if (run.fabric) { // every process's clock starts together
      run.fabric->barrier();
      run.trace->restartClock();
    }
  }
}

/// Steps per epoch, epochs and the total; the report, which covers the
/// first --report-steps of them.
void countSteps(Run &run) {
  const RunOptions &options = run.options;
  const plan::Plan &plan = run.plan;
  for (int id : plan.inputs())
    if (plan.tensors(id).batch_axis() >= 0) {
      run.batch = plan.tensors(id).shape(plan.tensors(id).batch_axis());
      break;
    }
  run.perStep = run.batch * run.slots;
  run.stepsPerEpoch = options.data.empty()
                          ? options.steps
                          : run.train.labels.numel() / run.perStep;
  run.epochs = options.data.empty() ? 1 : std::max<int64_t>(options.epochs, 1);
  if (!options.data.empty() && options.steps >= 0)
    run.stepsPerEpoch = std::min(run.stepsPerEpoch, options.steps);
  if (!options.data.empty() && run.stepsPerEpoch == 0)
    fail("--data: the training split has fewer samples than one step takes "
         "(" +
         std::to_string(run.perStep) + ")");
  run.total = run.stepsPerEpoch * run.epochs;
  if (!options.report.empty()) {
    int64_t covered = options.reportSteps > 0
                          ? std::min(options.reportSteps, run.total)
                          : run.total;
    run.report = std::make_unique<ReportBuilder>(plan, covered);
    for (auto &executor : run.executors)
      if (executor)
        executor->setReport(run.report.get());
  }
}

/// What a checkpoint records of this run, so that --resume continues it:
/// with the data's files as they are when training begins.
RunIdentity runIdentity(const Run &run) {
  RunIdentity identity;
  identity.planChecksum = run.planChecksum;
  identity.seed = run.options.seed;
  if (!run.options.data.empty())
    identity.data = "--data " + run.options.data;
  for (const std::string &file : dataFiles(run.options, false))
    identity.files.push_back(fingerprintFile(file));
  for (const auto &[name, file] : run.options.feeds) {
    identity.data += (identity.data.empty() ? "" : " ") +
                     std::string("--feed ") + name + "=" + file;
    identity.files.push_back(fingerprintFile(file));
  }
  if (run.options.shuffle && !run.options.feeds.empty())
    identity.data += " --shuffle"; // another order: another run
  if (run.options.partialBatch == "drop" && !run.options.feeds.empty())
    identity.data += " --partial-batch drop";
  return identity;
}

} // namespace cdp::runtime::training
