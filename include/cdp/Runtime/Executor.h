//===- Executor.h - runs a plan's instruction streams -----------*- C++ -*-===//
//
// Loads a plan: allocates the device arena and the persistent tensors
// (parameters, buffers, constants), binds every instruction to a kernel
// once, and then runs steps without allocating.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_EXECUTOR_H
#define CDP_RUNTIME_EXECUTOR_H

#include "cdp/Plan/PlanWeights.h"
#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Device.h"
#include "cdp/Runtime/Kernel.h"
#include "cdp/Runtime/StepReplay.h"

#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cdp::runtime {

/// Spans of work per device for a Chrome trace (cdp-run --trace): one span
/// per stage forward, backward, update and communication of a step.
class TraceRecorder {
public:
  explicit TraceRecorder(int devices);
  void record(int device, const plan::Instruction &instruction, int64_t step,
              std::chrono::steady_clock::time_point start,
              std::chrono::steady_clock::time_point end);
  /// Chrome trace-event JSON; `cycle` turns time steps into absolute ones.
  std::string json(int64_t cycle) const;
  /// Times count from now on (every process of an MPI run after a
  /// barrier, so that their tracks line up).
  void restartClock() { origin = std::chrono::steady_clock::now(); }
  /// The spans and flows of the devices this process ran, as bytes, and
  /// their import on the process that writes the trace.
  std::string exportDevices() const;
  void importDevices(const std::string &bytes);

private:
  void recordChainFlows(int device, const plan::Instruction &instruction,
                        int64_t step, double from, double to);

  struct Span {
    std::string name;
    const char *category;
    int64_t step;
    int microBatch;
    int64_t timeStep;
    double begin, end;
  };
  /// One end of a send -> recv arrow: the message's id names sender,
  /// receiver, micro-batch over the run and value.
  struct FlowEnd {
    std::string id;
    bool isSend;
    double at;
  };
  std::chrono::steady_clock::time_point origin;
  std::vector<std::vector<Span>> spans;
  std::vector<std::vector<FlowEnd>> flows;
};

/// A tensor host code may read: the tensor itself where the device's
/// memory is the host's, else a copy staged out of the device.
class HostTensor {
public:
  const TensorView &view() const { return hostView; }

private:
  friend class Executor;
  TensorView hostView;
  std::vector<uint64_t> storage; // the staged copy, 8-byte aligned
};

/// Instructions [begin, end) of a device's stream (end < 0: to its end).
struct InstructionRange {
  int begin = 0, end = -1;
};

class Executor {
public:
  /// Throws RuntimeError when the plan is inconsistent or needs a kernel
  /// this build lacks. Initial values come from `weights` (the plan's
  /// weights file, read for the tensors this device holds) or, without it,
  /// from the tensors' inline data.
  Executor(const plan::Plan &plan, int threads, int device = 0,
           Communicator *communicator = nullptr,
           const plan::PlanWeights *weights = nullptr);
  ~Executor();

  const plan::Plan &plan() const { return planRef; }
  /// Tensor `id` in the device's memory (its `space` says whose): for
  /// kernels and the communicator. Host code stages through stageIn and
  /// stageOut instead.
  const TensorView &view(int id) const { return views.at(id); }
  const plan::Tensor &tensor(int id) const { return planRef.tensors(id); }

  /// Fills tensor `id` from the host: `fill` writes a host view of it (the
  /// tensor itself on the CPU, else a staging buffer uploaded afterwards).
  void stageIn(int id, const std::function<void(const TensorView &)> &fill);
  /// stageIn for a `fill` that writes every byte (a micro-batch of input
  /// rows): nothing is copied out first. On a GPU the bytes go through
  /// page-locked memory kept per tensor (two buffers, alternating) and are
  /// uploaded into staging memory on a stream of their own; the next
  /// runStep or runEval copies them into the tensor before its kernels.
  /// So a GPU's next micro-batch may be staged while a step runs (see
  /// runStep's `whileRunning` and stagesAhead).
  void stageInWhole(int id,
                    const std::function<void(const TensorView &)> &fill);
  /// Whether stageInWhole leaves the tensor itself alone until the next
  /// step (a GPU), so that it may run while a step runs; the CPU's fills
  /// the tensor in place.
  bool stagesAhead() const;
  /// Tensor `id`'s view; throws when another device holds it (an edited
  /// plan naming another stage's tensor as its loss or output).
  const TensorView &held(int id) const;
  /// Tensor `id` (or any view of this device's memory) for host code.
  HostTensor stageOut(int id) const { return stageOut(held(id)); }
  HostTensor stageOut(const TensorView &view) const;
  /// A copy of the view in host memory, wherever it lies.
  HostTensor hostCopy(const TensorView &view) const;
  /// --save-outputs: from now on, tensors `ids` are copied to the host as
  /// the instructions of step `step` write them, a copy per micro-batch
  /// slot (a training plan reuses the block of an output other than the
  /// loss once its last reader ran, and the next slot writes it again).
  void keepOutputsOfStep(int64_t step, const std::vector<int> &ids);
  /// Tensor `id` as each of that step's slots this device ran wrote it, by
  /// slot; empty when no kept instruction wrote it (a graph input).
  const std::map<int64_t, HostTensor> &keptOutputs(int id) const;
  /// Copies a view of this device's memory to or from host bytes.
  void download(const TensorView &view, void *host) const;
  void upload(const TensorView &view, const void *host);
  /// The whole arena as one view of bytes (a pipeline's stash, for
  /// checkpoints).
  TensorView arenaView() const;

  /// One training (or inference) step, or the part [begin, end) of its
  /// instructions (a checkpoint cuts a step in two: checkpointCut); only the
  /// part that starts at 0 counts as a step.
  /// `whileRunning`, when given, runs once the instructions are queued and
  /// before the device finishes them: on a GPU, host work (staging the next
  /// micro-batch) that overlaps the step.
  void runStep(const StepContext &context, InstructionRange range = {},
               const std::function<void()> &whileRunning = {});

  /// Times every instruction of later steps (seconds, summed over steps).
  void enableProfiling() {
    profile.assign(train.size(), 0.0);
    firstStepProfile.assign(train.size(), 0.0);
  }
  /// From now on runs of training instructions whose kernels launch the
  /// same work every step are recorded once and replayed (cdp-run
  /// --cuda-graphs; StepReplay.h): where the device records (a GPU's), in
  /// steps that neither profile, trace, report nor keep outputs.
  void enableReplay();
  /// What the replay did so far; null without enableReplay.
  const StepReplay::Counts *replayCounts() const {
    return replay ? &replay->counts() : nullptr;
  }
  /// Mean seconds per step of every instruction, leaving out the first
  /// step (kernel setup, oneDNN primitive creation) when more ran.
  std::vector<double> profileSeconds() const;
  /// Training steps run so far.
  int64_t stepsRun() const { return steps; }
  /// The run trains steps up to `total` - 1: instructions marked `ahead`
  /// (they do the next step's work) are skipped in that last step, and so
  /// are those marked `next_step_only` unless `checkpointAtEnd` (the
  /// checkpoint after the last step carries their messages).
  void setTotalSteps(int64_t total, bool checkpointAtEnd) {
    totalSteps = total;
    sendsAfterLastStep = checkpointAtEnd;
  }
  /// A run resumed from a portable checkpoint starts its schedule afresh
  /// at step `origin`: an instruction with `min_step` k first runs at step
  /// origin + k, as k steps into a new run (nothing was in flight), and
  /// the flush counts the delayed reductions from there.
  void setStepOrigin(int64_t origin) { scheduleOrigin = origin; }
  int64_t stepOrigin() const { return scheduleOrigin; }
  /// After the last of `steps` steps: applies the reductions still pending
  /// (delayed updates), so that the parameters are theta_T. 2bw and
  /// cdp-mp: the drain (the last micro-batches' backwards and the
  /// last update) runs as step `steps`, reported like any step. The
  /// pending blocks run step by step, `afterStep(st)` after each.
  void flush(int64_t steps, const Loader *loader = nullptr,
             InstructionRange range = {},
             const std::function<void(int64_t)> &afterStep = nullptr);

  int device() const { return deviceIndex; }

  /// Records what this device's steps do into `report` (cdp-run --report).
  void setReport(class ReportBuilder *builder) { report = builder; }
  void setTrace(TraceRecorder *recorder) { trace = recorder; }
  /// Bytes kernels sized at load (oneDNN reorder buffers, columns, ...).
  int64_t workspaceBytes() const;
  /// Optimizer state bytes.
  int64_t optimizerBytes();
  /// Bytes this device read of the plan's weights file at load: its own
  /// tensors' initial values (what --report prints as weights_read_bytes).
  int64_t weightsReadBytes() const { return weightsRead; }

  /// The forward-only evaluation stream.
  void runEval(const StepContext &context);

  /// The first tensor, in instruction order, holding a NaN or infinity
  /// after the last step; -1 when all are finite. `instruction` gets the
  /// producer's index.
  int firstNonFinite(int &instruction) const;
  /// The first non-finite element of float32 tensor `id`, or -1.
  int64_t firstNonFiniteElement(int id) const;

  /// Kernels with state (optimizer updates), with their instructions.
  std::vector<std::pair<const plan::Instruction *, Kernel *>> statefulKernels();
  /// The training instructions whose work another's kernel does in its
  /// launch (Kernel::takeOver: a stage's updates in one), decided at load.
  int64_t launchesTakenOver() const { return takenOver; }

  /// Gradient tensors by parameter name, in plan order.
  std::vector<std::pair<std::string, int>> gradients() const;

  /// After training (and flush), on every device of a multi-device run:
  /// dp's and cdp's float32 buffers (BatchNorm statistics) are averaged
  /// over the devices onto device 0 (summed in double, in device order);
  /// with `wholeModel` (an evaluation after training runs on device 0) a
  /// pipeline's parameters and buffers and ZeRO's sharded parameters
  /// travel to device 0 too. Only through the communicator: no device
  /// reads another's memory.
  void gatherOnDeviceZero(bool wholeModel);

private:
  void allocatePersistentBlock();
  void placeTensor(int id);
  void fillParameterShards();
  void gatherShardedParameters();
  void gatherStageTensors();
  void averageBuffersOntoDeviceZero();
  void handOverShard(const plan::ShardGroup &group);
  void takeShardGroup(const plan::ShardGroup &group);
  void runInstructions(const StepContext &context, InstructionRange range);
  void runAhead(const StepContext &context);
  void offerAdjacentLaunches();
  std::vector<std::unique_ptr<Kernel>>
  bind(const google::protobuf::RepeatedPtrField<plan::Instruction> &stream,
       int threads);

  bool readInitial(const plan::Tensor &t, char *out) const;
  mutable int64_t weightsRead = 0; ///< see weightsReadBytes()

  const plan::Plan &planRef;
  const plan::PlanWeights *weights = nullptr;
  int deviceIndex = 0;
  Communicator *communicator = nullptr;
  class ReportBuilder *report = nullptr;
  TraceRecorder *trace = nullptr;
  std::unique_ptr<Device> backendDevice;
  void *arena = nullptr;
  int64_t arenaBytes = 0;
  void *persistentBlock = nullptr;       // the persistent tensors held at load
  std::vector<int64_t> persistentOffset; // by tensor id, in the block
  std::vector<void *> persistent;   // by tensor id: allocated after training
  std::vector<char> gathered;       // by tensor id: ZeRO stage 3's parameters
  std::vector<char> persistentHere; // by tensor id: own memory at load
  std::vector<char> gatheredLater;  // by tensor id: device 0's after training
  bool evalBound = true; // false on a pipeline's device 0 until the gather
  /// stageInWhole's memory for one tensor on a GPU.
  struct StagedInput {
    void *host[2] = {nullptr, nullptr}; // page-locked, filled alternately
    void *staging = nullptr;            // device memory uploaded into
    int64_t bytes = 0;                  // its size (the report's workspace)
    int nextHost = 0;
    bool pending = false; // uploaded, not yet copied into the tensor
  };
  std::map<int, StagedInput> stagedInputs; // by tensor id
  /// Queues the copies of pending staged inputs into their tensors.
  void takeStagedInputs();
  std::vector<TensorView> views;
  std::vector<std::unique_ptr<Kernel>> train, eval;
  int64_t takenOver = 0;              ///< see launchesTakenOver()
  std::unique_ptr<StepReplay> replay; ///< see enableReplay()
  int evalThreads = 1;                ///< to bind the evaluation stream again
  std::vector<double> profile, firstStepProfile;
  int64_t steps = 0;
  int64_t totalSteps = std::numeric_limits<int64_t>::max();
  int64_t scheduleOrigin = 0; ///< setStepOrigin
  bool sendsAfterLastStep = false;
  bool draining = false; ///< flush: only `drain` instructions run
  int64_t keptStep = -1; ///< keepOutputsOfStep
  /// By tensor id, then slot: what the kept step wrote.
  std::map<int, std::map<int64_t, HostTensor>> kept;
  /// Copies the kept tensors `instruction` wrote in slot `slot`.
  void keepOutputsOf(const plan::Instruction &instruction, int64_t slot);
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_EXECUTOR_H
