//===- TrainingRun.h - a plan run as cdp-run runs it ------------*- C++ -*-===//
//
// A run of a plan: its devices (threads, or processes under mpirun), the
// data fed to its inputs, training on one device or several (or an
// inference plan's batches), checkpoints, evaluation and everything it
// writes. cdp-run parses its flags into RunOptions and hands them here;
// every refusal is a RuntimeError of one line.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_TRAININGRUN_H
#define CDP_RUNTIME_TRAININGRUN_H

#include "cdp/Runtime/Kernel.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cdp::runtime {

class Fabric;
namespace training {
struct Run;
} // namespace training

/// What cdp-run's flags ask of a run (cdp-run --help says what each does).
struct RunOptions {
  std::string plan;
  /// The flags and values every process of an mpirun job must share.
  std::string agreedFlags;
  std::vector<std::pair<std::string, std::string>> feeds;
  /// --eval-feed: held-out arrays for the plan's inputs, labels included.
  std::vector<std::pair<std::string, std::string>> evalFeeds;
  std::string data;
  /// --weights: the plan's weights file where it does not lie beside the
  /// plan under the name the plan gives (empty: there).
  std::string weights;
  int64_t steps = -1, epochs = -1;
  uint64_t seed = 0;
  bool eval = false;
  bool allowNonfinite = false; ///< train on fed NaN or infinities
  /// Integer and bool .npy data fed to a float32 input: value * feedScale
  /// + feedOffset (--feed-scale, --feed-offset).
  double feedScale = 1, feedOffset = 0;
  /// --shuffle: epoch e of --feed in the order of NumPy's
  /// default_rng(seed + e).permutation(n).
  bool shuffle = false;
  /// --partial-batch: what --feed training does with the samples an epoch
  /// leaves after its last whole step: "wrap" (into the next epoch's
  /// first step, the default), "drop" them, or "error".
  std::string partialBatch = "wrap";
  int threads = 0;
  int64_t commTimeout = 300; ///< seconds a device waits for a message
  std::string metrics, tensorboard, dumpParams, dumpGrads, saveOutputs,
      saveOnnx, saveOnnxEval;
  std::string checkpoint, resume, profile;
  /// --portable-checkpoint: the state by name, written after the run.
  std::string portableCheckpoint;
  std::string report, reportSvg, compareReport, trace;
  int64_t reportSteps = -1;
  int64_t checkpointEvery = 0;
  int64_t maxTensorBytes = int64_t(16) << 30;
  std::string backend; ///< empty: the plan's
  bool allowTf32 = false, allowNondeterministic = false;
  /// --cuda-graphs: a GPU step's runs of same-every-step kernels recorded
  /// once and replayed (StepReplay.h).
  bool cudaGraphs = false;
  /// --progress-every: seconds between progress lines when standard error
  /// is not a terminal (0: none).
  double progressEvery = 10;
  /// --save-onnx-external-data: the saved models' values in FILE.data.
  bool saveOnnxExternalData = false;
};

/// Thrown by a process of an mpirun job whose error another process prints
/// (the root, which ends with status 1): it ends with status 0 and no line
/// of its own, so that mpirun does not end the job before the root's line.
class ReportedElsewhere : public RuntimeError {
public:
  ReportedElsewhere() : RuntimeError("") {}
};

class TrainingRun {
public:
  /// `abortAll` prints an error and ends every process of an mpirun job;
  /// a device thread that fails under mpirun calls it, since the other
  /// processes would otherwise wait for its messages.
  TrainingRun(const RunOptions &options,
              std::function<void(const std::string &)> abortAll);
  ~TrainingRun();
  /// Checks the outputs and the plan against the flags, then runs it and
  /// writes what was asked for. Throws RuntimeError.
  void execute();
  /// The fabric of an mpirun job once its devices exist (else null): an
  /// error after that must end every process.
  Fabric *mpiFabric() const;

private:
  std::unique_ptr<training::Run> run;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_TRAININGRUN_H
