//===- StepReplay.cpp - a step's launches recorded and replayed -----------===//

#include "cdp/Runtime/StepReplay.h"

namespace cdp::runtime {

StepReplay::StepReplay(Device &device,
                       const std::vector<std::unique_ptr<Kernel>> &kernels,
                       size_t shortest)
    : device(device), kernels(kernels), runStartingAt(kernels.size(), -1) {
  size_t n = kernels.size();
  for (size_t begin = 0; begin < n;) {
    size_t end = begin;
    while (end < n && kernels[end]->sameEveryStep())
      ++end;
    if (end - begin >= std::max<size_t>(shortest, 1)) {
      runStartingAt[begin] = static_cast<int>(runs.size());
      runs.push_back(Run{begin, end, false, {}});
      ++tally.runs;
      tally.kernels += static_cast<int64_t>(end - begin);
    }
    begin = std::max(end, begin + 1);
  }
}

void StepReplay::run(const StepContext &context, size_t begin, size_t end,
                     const std::function<bool(size_t)> &skipped) {
  for (size_t i = begin; i < end;) {
    int at = runStartingAt[i];
    if (at >= 0 && runs[at].end <= end) {
      runRecorded(runs[at], context, skipped);
      i = runs[at].end;
      continue;
    }
    runEach(context, i, i + 1, skipped);
    ++i;
  }
}

void StepReplay::runEach(const StepContext &context, size_t begin, size_t end,
                         const std::function<bool(size_t)> &skipped) {
  for (size_t i = begin; i < end; ++i)
    if (!skipped(i))
      kernels[i]->run(context);
}

void StepReplay::runRecorded(Run &run, const StepContext &context,
                             const std::function<bool(size_t)> &skipped) {
  std::vector<bool> skips;
  skips.reserve(run.end - run.begin);
  for (size_t i = run.begin; i < run.end; ++i)
    skips.push_back(skipped(i));
  auto known = run.patterns.find(skips);
  if (run.refused ||
      (known == run.patterns.end() && run.patterns.size() >= kMostPatterns))
    return runEach(context, run.begin, run.end, skipped);
  if (known == run.patterns.end())
    known = run.patterns.emplace(std::move(skips), Pattern()).first;
  Pattern &pattern = known->second;
  if (pattern.recording) {
    if (pattern.recording->replay()) {
      ++tally.replays;
      return;
    }
    pattern.recording.reset(); // stale: recorded again below
  }
  if (++pattern.seen >= 2 && recordAndReplay(run, pattern, context, skipped))
    return;
  runEach(context, run.begin, run.end, skipped);
}

/// Records the pattern and replays it, so that this step runs it too;
/// false where the device declined (then nothing ran).
bool StepReplay::recordAndReplay(Run &run, Pattern &pattern,
                                 const StepContext &context,
                                 const std::function<bool(size_t)> &skipped) {
  std::unique_ptr<Recording> recording =
      device.record([&] { runEach(context, run.begin, run.end, skipped); });
  if (!recording) {
    run.refused = true;
    ++tally.refused;
    run.patterns.clear();
    return false;
  }
  ++tally.recorded;
  if (!recording->replay())
    return false;
  ++tally.replays;
  pattern.recording = std::move(recording);
  return true;
}

} // namespace cdp::runtime
