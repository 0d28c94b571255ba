//===- Progress.h - the line that says where a run is -----------*- C++ -*-===//
//
// One progress line for every strategy: on a terminal redrawn in place as
// steps end, elsewhere (a log file, a scheduler's output) printed whole
// every --progress-every seconds. It gives the step (and epoch with
// --data), the loss where this process knows it, the samples per second
// over the last interval, the learning rate and the time left.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_TRAINING_PROGRESS_H
#define CDP_RUNTIME_TRAINING_PROGRESS_H

#include <chrono>
#include <cstdint>
#include <string>

namespace cdp::runtime::training {

struct Run;

class ProgressLine {
public:
  /// A run from step `start` (a resume's) to run.total.
  ProgressLine(Run &run, int64_t start);
  /// `done` steps of the run have ended (counted from 0, not `start`); the
  /// last one's loss, or a negative number where this process does not
  /// know it.
  void update(int64_t done, double loss);
  /// Ends the redrawn line on a terminal (before other output).
  void finish();

  /// The line's text (without a carriage return or newline).
  static std::string text(Run &run, int64_t done, double loss,
                          double samplesPerSecond, double secondsLeft);

private:
  using Clock = std::chrono::steady_clock;
  Run &run;
  const int64_t start;
  Clock::time_point lastShown, windowStart;
  int64_t windowSteps;
  double rate = 0, secondsPerStep = 0;
  bool drawn = false;
};

/// "1h02m", "3m05s" or "12s".
std::string formatDuration(double seconds);

} // namespace cdp::runtime::training

#endif // CDP_RUNTIME_TRAINING_PROGRESS_H
