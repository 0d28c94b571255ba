//===- Run.h - the state of a training run (internal) -----------*- C++ -*-===//
//
// What the files of a training run share: the Run (its devices, data, step
// counts and records) and the functions one file calls in another.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_TRAINING_RUN_H
#define CDP_RUNTIME_TRAINING_RUN_H

#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Checkpoint.h"
#include "cdp/Runtime/Data.h"
#include "cdp/Runtime/Executor.h"
#include "cdp/Runtime/MetricsLog.h"
#include "cdp/Runtime/Report.h"
#include "cdp/Runtime/ReportSvg.h"
#include "cdp/Runtime/Shuffle.h"
#include "cdp/Runtime/TensorBoardLog.h"
#include "cdp/Runtime/TrainingRun.h"

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cdp::runtime {
struct UpdateRule;
} // namespace cdp::runtime

namespace cdp::runtime::training {

/// Throws the run's one-line error.
[[noreturn]] inline void fail(const std::string &message) {
  throw RuntimeError(message);
}

struct Run;

/// Where SIGTERM or SIGINT stops a run of several devices: at the
/// checkpoint before step `at()`. Each device asks before step t whether
/// the checkpoint before t + 1 is it (StopSignal.cpp). In one process the
/// first device to ask after the signal picks the step; under mpirun
/// (`agreed`) the processes pick it together (StopAgreement): a frozen
/// device waits at its question until they have.
class StopPoint {
public:
  explicit StopPoint(bool agreed = false) : agreed(agreed) {}
  bool checkpointBefore(int64_t next);
  /// The step of the stop's checkpoint, or -1 while none is asked for.
  int64_t at() const { return stopAt; }
  /// Agreed stops: devices asking from now on wait for decide(); returns
  /// the furthest step any device of this process has been answered for
  /// (or is waiting at).
  int64_t freeze();
  void decide(int64_t step);

private:
  static constexpr int64_t kNone = -1;
  const bool agreed;
  std::atomic<int64_t> highest{0}, stopAt{kNone};
  std::atomic<bool> frozen{false};
};

/// Under mpirun with --checkpoint: the processes' main threads agree on
/// the step a SIGTERM or SIGINT stops at, whichever process got it. A
/// process that got one asks the root; the root freezes every process's
/// devices, takes each one's furthest step and decides the step after the
/// furthest (no device has passed its checkpoint's cut).
class StopAgreement {
public:
  StopAgreement(Run &run, StopPoint &stop);
  /// While the devices run: the signal, and the notes that arrived.
  void poll();
  /// After this process's devices ended: answers until every process has.
  void finish();

private:
  void take(const Fabric::Note &note);
  void freezeAll();
  Run &run;
  StopPoint &stop;
  const int processes;
  bool asked = false, deciding = false, ended = false;
  int replies = 0, done = 0;
  int64_t furthest = 0;
};

/// One run of a plan: its devices, the data bound to its inputs, the step
/// counts and what records the run.
struct Run {
  Run(const RunOptions &options,
      std::function<void(const std::string &)> abortAll)
      : options(options), abortAll(std::move(abortAll)) {}
  const RunOptions options;
  /// Ends every process of an mpirun job with a message.
  std::function<void(const std::string &)> abortAll;
  plan::Plan plan;
  /// The plan's weights file (format 6), read by each device's executor
  /// for the tensors it holds.
  std::unique_ptr<plan::PlanWeights> weights;
  uint64_t planChecksum = 0;
  /// What its checkpoints record of the run (runIdentity), once the data
  /// are read.
  RunIdentity identity;
  bool training = false, terminal = false;
  int deviceCount = 1, threadsPerDevice = 1;
  /// Devices as threads that communicate (every multi-device plan, and dp
  /// and cdp on one device).
  bool multiDevice = false;
  /// The devices' fabric (in-process, or over mpirun's processes): each
  /// device's executor talks through its own endpoint.
  std::unique_ptr<Fabric> fabric;
  bool mpi = false; ///< started by mpirun: this process runs some devices
  /// Gathered after a multi-device run: every device's send log, workspace
  /// and optimizer bytes (on the root).
  std::vector<std::vector<Communicator::SendRecord>> sendLogs;
  std::vector<double> workspaceBytes, optimizerBytes, weightsReadBytes;
  std::vector<std::unique_ptr<Executor>> executors;
  std::unique_ptr<ReportBuilder> report;
  /// --compare-report: the other run, drawn dashed in --report-svg.
  std::optional<runtime::ReportCurves> comparison;
  std::unique_ptr<TraceRecorder> trace;
  std::map<int, Array> feeds;
  /// --shuffle: each epoch of the feeds in NumPy's order (null: in order).
  std::unique_ptr<EpochOrders> feedOrder;
  /// --feed training: the samples an epoch uses (n, or its whole steps'
  /// with --partial-batch drop) out of the n the feeds hold.
  int64_t feedEpochRows = 0, feedSamples = 0;
  /// Row `first` of the run as the feeds' row (--partial-batch drop skips
  /// each epoch's rest); a slot's rows stay in one epoch.
  int64_t feedRow(int64_t first) const {
    if (feedEpochRows <= 0 || feedEpochRows == feedSamples)
      return first;
    return first / feedEpochRows * feedSamples + first % feedEpochRows;
  }
  std::map<int, Array> evalFeeds; ///< --eval-feed, by input id
  int64_t evalSamples = 0;
  Dataset train, test;
  int imageInput = -1;
  int64_t slots = 1, batch = 1, perStep = 1, stepsPerEpoch = 0, epochs = 1,
          total = 0;
  MetricsLog metrics;
  TensorBoardLog tensorboard;
  /// Whether each step's figures are written somewhere (--metrics,
  /// --tensorboard).
  bool logsSteps() const { return metrics.isOpen() || tensorboard.isOpen(); }
  /// The update rule whose rate --metrics reports, found on its first line
  /// (null: the plan has no update, or not looked for yet).
  std::shared_ptr<const UpdateRule> reportedRule;
  bool reportedRuleFound = false;
  /// --precision fp16: the loss-scale buffer's id (-1: none; set with the
  /// devices), the scale after the last step, whether that step
  /// overflowed (its updates skipped), and how many did in this run.
  int lossScaleTensor = -1;
  /// Whether the plan scales its loss: a non-finite loss then is an
  /// overflow its updates skip (as GradScaler's), not the end of the run.
  bool lossScaled() const { return lossScaleTensor >= 0; }
  float lossScale = 0;
  bool lastStepOverflowed = false;
  int64_t overflowedSteps = 0;
  /// --resume from a portable checkpoint: the schedule starts afresh.
  bool portableResume = false;
  /// --dump-grads and --save-outputs written (before a final evaluation,
  /// which reuses their buffers).
  bool stepOutputsWritten = false;
  /// SIGTERM or SIGINT stopped the run at the checkpoint before this step
  /// (-1: it ran to the end); its outputs are not written.
  int64_t stoppedAt = -1;
  /// An inference plan run batch by batch: its outputs with a batch axis,
  /// one row per fed sample (by tensor id).
  std::map<int, Array> gatheredOutputs;
  /// Whether device 0 holds the whole trained model (gathered for an
  /// evaluation after training); otherwise fetchTrained reads each tensor
  /// where it lies.
  bool modelOnDeviceZero = false;
  /// Device 0: where outputs are read.
  Executor &first() { return *executors[0]; }
  /// A device this process runs (shapes for checking feeds).
  Executor &local() {
    for (auto &executor : executors)
      if (executor)
        return *executor;
    fail("no device runs in this process");
  }
  /// Whether this process writes the outputs.
  bool root() const { return !fabric || fabric->isRoot(); }
  /// What a checkpoint of this process holds.
  CheckpointScope checkpointScope() {
    CheckpointScope scope;
    for (auto &executor : executors)
      if (executor)
        scope.devices.push_back(executor.get());
    scope.fabric = fabric.get();
    return scope;
  }
};

/// What an evaluation measured: the mean test loss over full batches, and
/// the accuracy of a classifier (negative: not measured).
struct Evaluation {
  double loss = -1, accuracy = -1;
};

// Setup.cpp
void checkOutputPaths(const RunOptions &options);
/// The plan's weights file is an input too: no output file names it.
void checkWeightsNotAnOutput(const RunOptions &options, const plan::Plan &plan);
void readCheckedPlan(const RunOptions &options, plan::Plan &plan,
                     uint64_t &planChecksum);
std::string dataFolder(const RunOptions &options);
std::string fileName(const std::string &path);
std::vector<std::string> dataFiles(const RunOptions &options, bool withTest);
void createDevices(Run &run, int cores);
void countSteps(Run &run);
RunIdentity runIdentity(const Run &run);

// Feeds.cpp
void copyRows(const Array &source, const TensorView &target, int64_t batchAxis,
              int64_t first, const std::vector<int64_t> *order = nullptr,
              EpochOrders *shuffled = nullptr);
void stageRows(Executor &executor, int id, const Array &source,
               int64_t batchAxis, int64_t first,
               const std::vector<int64_t> *order = nullptr,
               EpochOrders *shuffled = nullptr);
void stageRowList(Executor &executor, int id, const Array &source,
                  int64_t batchAxis, const std::vector<int64_t> &rows);
std::vector<int64_t> shuffledOrder(uint64_t seed, int64_t epoch, int64_t n);
/// Whether an evaluation's last partial batch is padded and masked: the
/// loss is cdp-compile's own, a mean of per-sample terms.
bool masksPartialBatch(const Run &run);
void bindPartialBatch(Run &run);
std::string nonFiniteName(float value);
std::pair<int64_t, int64_t> feedSamples(const Run &run,
                                        const std::map<int, Array> &feeds,
                                        const std::string &flag);
void bindFeeds(Run &run);
void bindEvalFeeds(Run &run);
void loadDataset(Run &run);

// Evaluation.cpp
/// The learning rate applied to step `step`'s gradients, as the float the
/// kernels use; negative in a plan without updates.
double learningRateAt(Run &run, int64_t step);
/// The id of the plan's loss-scale buffer (fp16), or -1.
int findLossScale(const plan::Plan &plan);
/// An fp16 plan's loss scale after its last unscaling, and whether that
/// found an overflow (the updates skipped).
struct LossScaleState {
  float scale = 0;
  bool overflowed = false;
};
LossScaleState readLossScale(const Run &run, Executor &executor);
/// After a step of an fp16 plan on one device: reads its loss-scale buffer
/// into `run` (nothing for a plan without one).
void noteLossScale(Run &run);
void writeMetricsLine(Run &run, int64_t step, double loss, double rate,
                      const Evaluation &evaluation);
bool evaluates(const Run &run);
void printEvaluation(const Evaluation &evaluation);
Evaluation evaluate(Run &run);
void printHeldOut(const Run &run, const Evaluation &evaluation);
void printRunSummary(const Run &run, int64_t start, double meanLoss,
                     double seconds, const Evaluation &evaluation);

// SingleDevice.cpp
float readLoss(const plan::Plan &plan, const Executor &executor);
std::string nonFiniteLoss(const plan::Plan &plan, Executor &executor,
                          int64_t step, float loss);
void runSingleDevice(Run &run, int64_t step);

// Devices.cpp
bool checkpointDue(const Run &run, int64_t next);

/// With --checkpoint: SIGTERM and SIGINT ask the run to stop at the next
/// step boundary (a second one ends it at once); under mpirun (`fabric`)
/// the processes agree on the step (StopAgreement).
void installStopSignals(Fabric *fabric);
/// The signal that asked for a stop, or 0.
int stopSignal();
/// The line a stopped run ends with: where its checkpoint is.
std::string stopLine(const Run &run, int64_t step);
void runDevices(Run &run, int64_t start);

// TrainedTensors.cpp
/// A trained tensor's value in host memory of its own.
struct TrainedValue {
  TensorView view;
  std::vector<char> storage;
};
/// On the root after training: tensor `id`'s value from the device that
/// holds it (another process's under mpirun, which serveTrainedTensors
/// answers), one tensor at a time.
TrainedValue fetchTrained(Run &run, int id);
/// Elements [first, first + count) of the trained tensor `id` into `out`.
void readTrained(Run &run, int id, int64_t first, int64_t count, char *out);
/// The trained tensor `id` 16 MiB at a time, handed to `visit` (its first
/// element, count and bytes) until it returns false (then false), so that
/// the root never holds a large tensor whole (GPT-2's 206 MB embedding).
bool forEachTrainedChunk(Run &run, int id,
                         const std::function<bool(int64_t first, int64_t count,
                                                  const char *)> &visit);
/// Under mpirun, a process other than the root after training: answers the
/// root's fetchTrained until endTrainedFetches.
void serveTrainedTensors(Run &run);
/// The root, once its outputs are written: the other processes may end.
void endTrainedFetches(Run &run);

/// Optimizer states as PyTorch's optimizers name them; a StateRecord
/// holds the index.
constexpr const char *kStateNames[] = {"momentum_buffer", "exp_avg",
                                       "exp_avg_sq"};
constexpr int kStateNameCount = 3;
/// Where a part of a parameter's optimizer state lies: on `device`, in
/// state tensor `state` of its stateful kernel `kernel` (in
/// Executor::statefulKernels' order; -1: the kernel keeps only a step
/// count), named kStateNames[name], elements [paramOffset, paramOffset +
/// length) of parameter `param` from element `stateOffset` on; `counter`:
/// the updates the kernel has applied.
struct StateRecord {
  int device;
  int64_t kernel, state, name, param, paramOffset, stateOffset, length, counter;
};
/// The records of a device of this process.
std::vector<StateRecord> localStateRecords(Run &run, Executor &executor);
/// The records of any device (on the root: another process's on request).
std::vector<StateRecord> stateRecords(Run &run, int device);
/// A record's elements of its state tensor, on its device.
TensorView stateView(Executor &executor, const StateRecord &record);
/// A record's elements (float32) into `out` (the root, after training).
void readStatePiece(Run &run, const StateRecord &record, char *out);

// PortableCheckpoint.cpp
/// The root after training: --portable-checkpoint's folder.
void writePortableCheckpoint(Run &run);
/// Whether `dir` holds a portable checkpoint (else an exact one).
bool isPortableCheckpoint(const std::string &dir);
/// Every process: puts --resume's portable checkpoint into the devices of
/// this process wherever the plan keeps each value; returns the step the
/// plan starts at (the same samples consumed).
int64_t loadPortableCheckpoint(Run &run);

// Inference.cpp
void runInference(Run &run);

// Outputs.cpp
/// Appends rows [0, count) of `output` (a batch along `axis`) to
/// `gathered`, which holds `total` rows along that axis when complete;
/// `first` is where these rows go.
void gatherRows(const TensorView &output, int64_t axis, int64_t first,
                int64_t count, int64_t total, Array &gathered);
/// --save-outputs: the devices copy the outputs as the last step's slots
/// write them (the plan may reuse their memory later in the step).
void keepStepOutputs(Run &run);
void writeStepOutputs(Run &run);
void writeOutputs(Run &run);

} // namespace cdp::runtime::training

#endif // CDP_RUNTIME_TRAINING_RUN_H
