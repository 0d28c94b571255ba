//===- StepReplay.h - a step's launches recorded and replayed ---*- C++ -*-===//
//
// A GPU step of a large model is thousands of kernel launches, each a few
// microseconds of host time, so the host can fall behind the GPU. Runs of
// consecutive instructions whose kernels queue the same launches every step
// (Kernel::sameEveryStep) are recorded once by the device (a CUDA graph) and
// replayed as one launch from then on (cdp-run --cuda-graphs); the other
// instructions (the optimizer's counted updates, messages, data loads) run
// between them as before. Which instructions of a run a step skips (the
// first steps of a delayed schedule, the last micro-batch's work, the
// drain) decides the recording: each such pattern is recorded apart, the
// second time it runs (the first run readies the libraries' state, as
// PyTorch's warm-up before capture does).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_STEPREPLAY_H
#define CDP_RUNTIME_STEPREPLAY_H

#include "cdp/Runtime/Device.h"
#include "cdp/Runtime/Kernel.h"

#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace cdp::runtime {

class StepReplay {
public:
  /// The runs are found here, once: at least `shortest` kernels each.
  StepReplay(Device &device,
             const std::vector<std::unique_ptr<Kernel>> &kernels,
             size_t shortest = 2);

  /// Runs kernels [begin, end) but those `skipped` names, replaying what
  /// was recorded; a run that [begin, end) cuts (a checkpoint's cut of a
  /// step) runs kernel by kernel.
  void run(const StepContext &context, size_t begin, size_t end,
           const std::function<bool(size_t)> &skipped);

  /// What happened so far, for the run's closing line and tests.
  struct Counts {
    int64_t runs = 0;     ///< runs of same-every-step kernels found
    int64_t kernels = 0;  ///< kernels in them
    int64_t recorded = 0; ///< recordings made
    int64_t replays = 0;  ///< launches of a recording
    int64_t refused = 0;  ///< runs the device could not record

    /// Another device's counts added (a process's devices together).
    Counts &operator+=(const Counts &other) {
      runs += other.runs;
      kernels += other.kernels;
      recorded += other.recorded;
      replays += other.replays;
      refused += other.refused;
      return *this;
    }
  };
  const Counts &counts() const { return tally; }

private:
  /// One pattern of skipped kernels of a run, and its recording.
  struct Pattern {
    int seen = 0;
    std::unique_ptr<Recording> recording;
  };
  struct Run {
    size_t begin, end;
    bool refused = false; ///< the device could not record it: never again
    std::map<std::vector<bool>, Pattern> patterns;
  };

  void runRecorded(Run &run, const StepContext &context,
                   const std::function<bool(size_t)> &skipped);
  void runEach(const StepContext &context, size_t begin, size_t end,
               const std::function<bool(size_t)> &skipped);
  bool recordAndReplay(Run &run, Pattern &pattern, const StepContext &context,
                       const std::function<bool(size_t)> &skipped);

  /// Patterns kept per run: a schedule has a few (first steps, last slot,
  /// drain); beyond that the run goes kernel by kernel rather than hold
  /// ever more recordings.
  static constexpr size_t kMostPatterns = 8;

  Device &device;
  const std::vector<std::unique_ptr<Kernel>> &kernels;
  std::vector<Run> runs;
  std::vector<int> runStartingAt; ///< by kernel: index into runs, or -1
  Counts tally;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_STEPREPLAY_H
