//===- Progress.cpp - the line that says where a run is -------------------===//

#include "Progress.h"
#include "Run.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace cdp::runtime::training {

// The speed is measured over the last second or more: per step it would
// jump with every step of a pipeline's warm-up.
static constexpr double kRateWindowSeconds = 1.0;
static constexpr double kRedrawSeconds = 0.1;

ProgressLine::ProgressLine(Run &run, int64_t start)
    : run(run), start(start), lastShown(Clock::now()), windowStart(lastShown),
      windowSteps(start) {}

std::string formatDuration(double seconds) {
  auto s = static_cast<int64_t>(std::llround(std::max(seconds, 0.0)));
  char text[32];
  if (s >= 3600)
    std::snprintf(text, sizeof(text), "%lldh%02lldm", (long long)(s / 3600),
                  (long long)(s % 3600 / 60));
  else if (s >= 60)
    std::snprintf(text, sizeof(text), "%lldm%02llds", (long long)(s / 60),
                  (long long)(s % 60));
  else
    std::snprintf(text, sizeof(text), "%llds", (long long)s);
  return text;
}

std::string ProgressLine::text(Run &run, int64_t done, double loss,
                               double samplesPerSecond, double secondsLeft) {
  std::string line =
      run.plan.strategy() + " on " + std::to_string(run.deviceCount) +
      (run.deviceCount == 1 ? " device" : " devices") + ": step " +
      std::to_string(done) + "/" + std::to_string(run.total);
  char part[96];
  if (!run.options.data.empty() && run.stepsPerEpoch > 0) {
    std::snprintf(part, sizeof(part), ", epoch %lld/%lld",
                  (long long)std::min(done / run.stepsPerEpoch + 1, run.epochs),
                  (long long)run.epochs);
    line += part;
  }
  if (loss >= 0) {
    std::snprintf(part, sizeof(part), ", loss %.4f", loss);
    line += part;
  }
  if (samplesPerSecond > 0) {
    std::snprintf(part, sizeof(part), ", %.0f samples/s", samplesPerSecond);
    line += part;
  }
  if (double lr = done > 0 ? learningRateAt(run, done - 1) : -1; lr >= 0) {
    std::snprintf(part, sizeof(part), ", lr %.3g", lr);
    line += part;
  }
  if (secondsLeft >= 0 && done < run.total)
    line += ", " + formatDuration(secondsLeft) + " left";
  return line;
}

void ProgressLine::update(int64_t done, double loss) {
  Clock::time_point now = Clock::now();
  double window = std::chrono::duration<double>(now - windowStart).count();
  // Out of a terminal the speed is the interval's since the last line.
  double least = run.terminal
                     ? kRateWindowSeconds
                     : std::min(kRateWindowSeconds, run.options.progressEvery);
  if (window >= least && done > windowSteps) {
    secondsPerStep = window / static_cast<double>(done - windowSteps);
    rate = static_cast<double>(run.perStep) / secondsPerStep;
    windowStart = now;
    windowSteps = done;
  }
  double shown = std::chrono::duration<double>(now - lastShown).count();
  double left = secondsPerStep > 0
                    ? secondsPerStep * static_cast<double>(run.total - done)
                    : -1;
  if (run.terminal) {
    if (shown < kRedrawSeconds && done < run.total && drawn)
      return;
    std::fprintf(stderr, "\r%s   ", text(run, done, loss, rate, left).c_str());
    drawn = true;
  } else {
    double every = run.options.progressEvery;
    if (every <= 0 || shown < every || done <= start || done >= run.total)
      return;
    std::fprintf(stderr, "%s\n", text(run, done, loss, rate, left).c_str());
  }
  std::fflush(stderr);
  lastShown = now;
}

void ProgressLine::finish() {
  if (run.terminal && drawn)
    std::fprintf(stderr, "\n");
  drawn = false;
}

} // namespace cdp::runtime::training
