//===- Report.h - memory and communication per time step --------*- C++ -*-===//
//
// The accounting of the report (docs/strategies/cdp.md): per device and time
// step, bytes live by category, activation units and bytes sent; per time step,
// the gradient bytes that become complete (G(tau)), and the gradients a device
// has handed to a reduction whose result it has not taken back yet.
//
// One builder serves both sides: `cdp-compile --report` feeds it the events
// the plan implies (predictReport), `cdp-run --report` the events the
// runtime observes while it executes (tensors born and freed by use counts,
// bytes handed to the communicator). The two agree key by key when the run
// follows its plan; workspace is measured only.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_REPORT_H
#define CDP_RUNTIME_REPORT_H

#include "cdp/Plan/SpelledPlan.h"
#include "cdp/Plan/plan.pb.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace cdp::runtime {

/// How the report sees a tensor: Gathered, ZeRO stage 3's parameters
/// between a shard_gather and its shard_release; Comm, laysa's selections
/// (sent and received) between the selection and the apply.
enum class Category { None, Activation, Gradient, Gathered, Comm };

/// The byte series of a device the report keeps, one per kind of memory
/// that comes and goes: activations, gradients, reductions in flight (from
/// a device's reduce_start to its own reduce_wait), gathered parameters,
/// communication buffers, and point-to-point messages in flight (a copy
/// of each from its send to its receipt, on the sending device).
constexpr int kByteSeries = 6;

/// Facts about a plan the accounting needs, computed once.
struct PlanFacts {
  explicit PlanFacts(const plan::SpelledPlan &spelled);
  int64_t cycle = 1; ///< time steps per step on one device
  /// Per tensor, stash-slot copies included (SpelledPlan's numbering).
  std::vector<Category> category;
  std::vector<int64_t> bytes;
  /// Per tensor, the tensor whose storage it is: itself, or for a view (a
  /// reshape whose output lies at its input's offset, which the kernels
  /// then copy nothing for) its input's storage. A view counts no bytes of
  /// its own; its reads keep its storage's write live.
  std::vector<int> storageOf;
  /// Per device: resident bytes. Weights count the latest version;
  /// weightVersionBytes the extra versions (2bw's previous one).
  std::vector<int64_t> weightBytes, weightVersionBytes, reducedBytes,
      optimizerBytes;
  /// laysa: the error feedback (mirrors, or the baseline's residuals).
  std::vector<int64_t> feedbackBytes;
  /// Per device and instruction: whether an activation unit begins there
  /// (the first forward instruction of a stage's micro-batch) or ends
  /// there (its last backward instruction).
  std::vector<std::vector<char>> unitBegins, unitEnds;
  /// Per device: reads of each fed input by the instructions of a step
  /// (maps: a pipeline device touches few of the plan's tensors).
  std::vector<std::unordered_map<int, int>> uses;
  /// Where a message is taken: the receive's time step in its program and
  /// how many steps after the send's step it runs; and its bytes.
  struct Receipt {
    int64_t timeStep = 0, stepDelta = 0, bytes = 0;
  };
  /// Per device, by the index of a send to another device (or a chain
  /// instruction that passes a partial sum or mean on): its receipt
  /// (absent where no receive takes it).
  std::vector<std::unordered_map<int, Receipt>> receiptOf;
  /// Per device: reads of a tensor an instruction writes, up to its next
  /// write (wrapping into the next step: 2bw's backwards of the previous
  /// step's micro-batches; pipelines reuse stash slots within a step).
  /// Flat per device: the counts of instruction i's outputs start at
  /// outputStart[d][i] in readsOfWrite[d], in output order.
  std::vector<std::vector<int>> readsOfWrite, outputStart;
  int64_t lastTime(int64_t steps) const;
  /// The absolute time step of `instruction` on `device` in step `t`.
  int64_t timeOf(const plan::SpelledInstruction &instruction, int64_t t) const {
    return instruction.timeStep + cycle * t;
  }

private:
  struct TensorRoles;
  void scanPrograms(const plan::SpelledPlan &spelled, TensorRoles &roles);
  void noteView(const plan::SpelledPlan &spelled,
                const plan::Instruction &instruction, plan::IdRange inputs,
                plan::IdRange outputs);
  void categorize(const plan::SpelledPlan &spelled, TensorRoles &roles);
  void countReadsOfWrites(const plan::SpelledPlan &spelled);
  void matchMessages(const plan::SpelledPlan &spelled);
  void matchChainMessages(const plan::SpelledPlan &spelled);
};

class ReportBuilder {
public:
  ReportBuilder(const plan::Plan &plan, int64_t steps);
  /// Records the devices `keep` accepts alone (the others' programs are
  /// not spelled out; copyDevice fills them in).
  ReportBuilder(const plan::Plan &plan, int64_t steps,
                const std::function<bool(int)> &keep);

  /// `instruction`: the writer's index, or -1 for a step's inputs.
  void born(int device, int64_t tau, int tensor, int instruction = -1);
  void used(int device, int64_t tau, int tensor); ///< frees on the last use
  void unitBegins(int device, int64_t tau);
  void unitEnds(int device, int64_t tau);
  /// Bytes a device sends at `tau`; `collective` where they are part of a
  /// collective (all-reduce, reduce-scatter, all-gather), not a message to
  /// one peer.
  void sent(int device, int64_t tau, int64_t bytes, bool collective = false);
  void gradientReady(int device, int64_t tau, int64_t bytes);
  void setWorkspace(int device, int64_t bytes);
  void setOptimizer(int device, int64_t bytes);
  /// A run's measured bytes of the weights file each device read at load
  /// (printed as weights_read_bytes; a prediction has none).
  void setWeightsRead(int device, int64_t bytes);
  /// A run's OpenMP threads per device (the root process's; printed as
  /// threads_per_device; a prediction has none).
  void setThreads(int threadsPerDevice) { threads = threadsPerDevice; }
  /// A device starts step `t`: its inputs are loaded at its first time step.
  void startStep(int device, int64_t t);
  /// Instruction `index` of `device` ran in step `t`: the units, tensors and
  /// gradients it begins or ends, and the reduction it hands over or takes
  /// back. With `countSent`, the bytes it sends too (the prediction; a run
  /// takes those from its communicator's log).
  void ran(int device, int64_t t, int index, bool countSent);

  const PlanFacts &facts() const { return planFacts; }
  const plan::SpelledPlan &spelledPlan() const { return spelled; }
  std::string json() const;
  /// Every device's recorded series, flattened: what the devices of other
  /// processes recorded is summed onto the root's (zero where a process did
  /// not run the device) and imported there.
  std::vector<double> exportSeries() const;
  void importSeries(const std::vector<double> &values);
  /// Each device's most bytes at one time step (the report's
  /// peak.device_bytes).
  std::vector<int64_t> devicePeaks() const;
  /// Per device, what cdp-run holds for it: what it allocates at load, its
  /// optimizer state, workspace and the most the communicator holds for it
  /// at once (messages in flight, gradients in a reduction); or its live
  /// peak where that is more (the report's peak.resident_bytes).
  std::vector<int64_t> residentBytes() const;
  /// Device `to` records what device `from` did (it runs the same program
  /// at the same time steps): series, resident bytes and stream.
  void copyDevice(int from, int to);

private:
  /// One device at one time step, as the report prints it.
  struct Sample {
    int64_t units = 0, activation = 0, gradient = 0, reduction = 0,
            gathered = 0, comm = 0, messages = 0, deviceBytes = 0, sent = 0,
            sentCollective = 0, ready = 0;
    /// What the communicator holds outside the arena: the copies of
    /// messages in flight and the gradients handed to reductions.
    int64_t communicatorBytes() const { return messages + reduction; }
  };
  /// Visits every (time step, device of `visited`) in order, devices inner.
  void forEachSample(
      const std::vector<int> &visited,
      const std::function<void(int64_t, int, const Sample &)> &visit) const;
  /// The report's time-step rows (see seriesRows).
  struct SeriesRows {
    /// By device (recorded ones only): its rows, one per time step, and
    /// where each ends in `text`.
    std::vector<std::string> text;
    std::vector<std::vector<size_t>> ends;
    /// The devices whose rows the report writes, and each device's row.
    std::vector<int> devices, seriesOf;
    /// By device: its live peak, and the most bytes the communicator holds
    /// for it at one time step (Sample::communicatorBytes).
    std::vector<int64_t> ready, peakDevice, peakHeld;
    int64_t peakUnits = 0, peakActivation = 0;
  };
  SeriesRows seriesRows() const;
  std::vector<int64_t> residentBytes(const std::vector<int64_t> &peaks,
                                     const std::vector<int64_t> &held) const;
  std::vector<int> recordedDevices() const;
  double bubbleFraction(int stream) const;

  struct Series {
    std::vector<int64_t> units, unitEnds, bornBytes[kByteSeries],
        diedBytes[kByteSeries], sent, sentCollective, ready;
  };
  const plan::Plan &plan;
  plan::SpelledPlan
      spelled; ///< what the devices run (format 4's runs read in place)
  PlanFacts planFacts;
  int64_t steps, horizon;
  std::vector<Series> devices;
  std::vector<std::unordered_map<int, int>> remaining; // uses left
  std::vector<int64_t> workspace, optimizer;
  std::vector<int64_t> weightsRead; ///< empty: not measured
  int threads = 0;                  ///< 0: not measured
  /// Per device: whose instruction stream it runs (itself, unless copied).
  std::vector<int> streamOf;
};

/// The report the plan predicts for `steps` steps, without running.
std::string predictReport(const plan::Plan &plan, int64_t steps);
/// Its peak.device_bytes alone.
std::vector<int64_t> predictDevicePeaks(const plan::Plan &plan, int64_t steps);
/// Per device, the memory it needs (peak.resident_bytes): what it
/// allocates at load (allocated_bytes), its optimizer state and the most
/// messages in flight at once, or its predicted live peak if that is
/// more; for memory caps.
std::vector<int64_t> predictDeviceNeeds(const plan::Plan &plan, int64_t steps);

} // namespace cdp::runtime

#endif // CDP_RUNTIME_REPORT_H
