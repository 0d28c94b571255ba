//===- StepReplayTest.cpp - a step's launches recorded and replayed -------===//
//
// StepReplay (cdp-run --cuda-graphs) on a device that records as a GPU's
// stream capture does: what a kernel queues while recording is kept, not
// run, and a replay runs it. Checked: which runs it finds, that every step
// does what running each kernel would (the same work in the same order,
// with the per-step kernels' own work between), that a run is recorded
// the second time a pattern of skips occurs and then only replayed, that
// each pattern is recorded apart, that a stale recording is recorded again,
// and that a device that cannot record (or refuses a run) leaves the
// kernels running one by one, with nothing run twice.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/StepReplay.h"

#include "StubDevice.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace cdp::runtime;

namespace {

/// Records launches onto a tape as a stream capture does; `refuse` makes
/// record() fail after the launches were queued (a capture invalidated),
/// `moved` makes every earlier recording stale.
class TapeDevice : public cdp::test::StubGpuDevice {
public:
  /// Runs `work` now, or keeps it on the tape being recorded.
  void enqueue(std::function<void()> work) {
    if (tape)
      tape->push_back(std::move(work));
    else
      work();
  }

  std::unique_ptr<Recording>
  record(const std::function<void()> &launches) override {
    auto recorded = std::make_shared<std::vector<std::function<void()>>>();
    tape = recorded.get();
    launches();
    tape = nullptr;
    if (refuse)
      return nullptr;
    return std::make_unique<Tape>(recorded, moved);
  }

  bool refuse = false;
  int moved = 0;

private:
  class Tape : public Recording {
  public:
    Tape(std::shared_ptr<std::vector<std::function<void()>>> work,
         const int &moved)
        : work(std::move(work)), moved(moved), recordedAt(moved) {}
    bool replay() override {
      if (moved != recordedAt)
        return false;
      for (const auto &launch : *work)
        launch();
      return true;
    }

  private:
    std::shared_ptr<std::vector<std::function<void()>>> work;
    const int &moved;
    int recordedAt;
  };
  std::vector<std::function<void()>> *tape = nullptr;
};

/// Queues "name" (same every step) or "name@step" (per step) onto the log.
class LoggingKernel : public Kernel {
public:
  LoggingKernel(TapeDevice &device, std::vector<std::string> &log,
                std::string name, bool same)
      : device(device), log(log), name(std::move(name)), same(same) {}
  void run(const StepContext &context) override {
    ++runs;
    std::string entry = same ? name : name + "@" + std::to_string(context.step);
    std::vector<std::string> *into = &log;
    device.enqueue([into, entry] { into->push_back(entry); });
  }
  bool sameEveryStep() const override { return same; }
  int runs = 0;

private:
  TapeDevice &device;
  std::vector<std::string> &log;
  std::string name;
  bool same;
};

/// Kernels from a pattern: 'S' same every step, 'P' per step.
struct Stream {
  TapeDevice device;
  std::vector<std::string> log;
  std::vector<std::unique_ptr<Kernel>> kernels;

  explicit Stream(const std::string &pattern) {
    for (size_t i = 0; i < pattern.size(); ++i)
      kernels.push_back(std::make_unique<LoggingKernel>(
          device, log, std::string(1, 'a' + static_cast<char>(i)),
          pattern[i] == 'S'));
  }
  int runsOf(size_t i) const {
    return static_cast<LoggingKernel &>(*kernels[i]).runs;
  }
};

/// What running every kernel not skipped would log for one step.
std::vector<std::string> eager(const std::string &pattern, int64_t step,
                               const std::function<bool(size_t)> &skipped) {
  std::vector<std::string> log;
  for (size_t i = 0; i < pattern.size(); ++i)
    if (!skipped(i)) {
      std::string name(1, 'a' + static_cast<char>(i));
      log.push_back(pattern[i] == 'S' ? name
                                      : name + "@" + std::to_string(step));
    }
  return log;
}

/// Runs `steps` steps of the whole stream, checking each against eager.
void runSteps(Stream &s, StepReplay &replay, const std::string &pattern,
              int64_t steps,
              const std::function<bool(int64_t, size_t)> &skippedAt) {
  for (int64_t step = 0; step < steps; ++step) {
    s.log.clear();
    StepContext context;
    context.step = step;
    auto skipped = [&](size_t i) { return skippedAt(step, i); };
    replay.run(context, 0, s.kernels.size(), skipped);
    EXPECT_EQ(s.log, eager(pattern, step, skipped)) << "step " << step;
  }
}

auto none = [](int64_t, size_t) { return false; };

TEST(StepReplay, FindsRunsOfSameEveryStepKernels) {
  Stream s("SSPSSSPS");
  StepReplay replay(s.device, s.kernels);
  EXPECT_EQ(replay.counts().runs, 2); // a-b and d-f; h alone is no run
  EXPECT_EQ(replay.counts().kernels, 5);
  Stream single("SPS");
  EXPECT_EQ(StepReplay(single.device, single.kernels).counts().runs, 0);
  EXPECT_EQ(StepReplay(single.device, single.kernels, 1).counts().runs, 2);
}

TEST(StepReplay, RecordsOnTheSecondStepThenReplays) {
  const std::string pattern = "SSPSSSPS";
  Stream s(pattern);
  StepReplay replay(s.device, s.kernels);
  runSteps(s, replay, pattern, 5, none);
  // Recorded kernels ran twice (eagerly, then recording); the others and
  // the lone one every step.
  for (size_t i : {0, 1, 3, 4, 5})
    EXPECT_EQ(s.runsOf(i), 2) << i;
  for (size_t i : {2, 6, 7})
    EXPECT_EQ(s.runsOf(i), 5) << i;
  EXPECT_EQ(replay.counts().recorded, 2);
  EXPECT_EQ(replay.counts().replays, 2 * 4);
  EXPECT_EQ(replay.counts().refused, 0);
}

TEST(StepReplay, RecordsEachPatternOfSkipsApart) {
  const std::string pattern = "SSSP";
  Stream s(pattern);
  StepReplay replay(s.device, s.kernels);
  // b runs from step 2 on (a delayed schedule's min_step); c only in odd
  // steps (a last slot).
  auto skipped = [](int64_t step, size_t i) {
    return (i == 1 && step < 2) || (i == 2 && step % 2 == 0);
  };
  runSteps(s, replay, pattern, 10, skipped);
  // Patterns: {b,c skipped} steps 0; {b} 1; {c} 2,4,6,8; {} 3,5,7,9.
  EXPECT_EQ(replay.counts().recorded, 2);
  EXPECT_EQ(replay.counts().replays, 3 + 3);
}

TEST(StepReplay, RecordsAStaleRecordingAgain) {
  const std::string pattern = "SSP";
  Stream s(pattern);
  StepReplay replay(s.device, s.kernels);
  runSteps(s, replay, pattern, 3, none);
  EXPECT_EQ(replay.counts().recorded, 1);
  s.device.moved = 1; // memory a launch reads moved
  runSteps(s, replay, pattern, 3, none);
  EXPECT_EQ(replay.counts().recorded, 2);
  EXPECT_EQ(s.runsOf(0), 3);
}

TEST(StepReplay, RefusedRunsRunKernelByKernelAndNothingTwice) {
  const std::string pattern = "SSPSS";
  Stream s(pattern);
  s.device.refuse = true;
  StepReplay replay(s.device, s.kernels);
  runSteps(s, replay, pattern, 4, none);
  EXPECT_EQ(replay.counts().refused, 2);
  EXPECT_EQ(replay.counts().recorded, 0);
  EXPECT_EQ(replay.counts().replays, 0);
  // Every step ran each kernel once; the refused recordings one more time
  // each, whose work was dropped (the eager log above has it once).
  EXPECT_EQ(s.runsOf(0), 5);
  EXPECT_EQ(s.runsOf(2), 4);
}

TEST(StepReplay, ARangeThatCutsARunRunsItKernelByKernel) {
  const std::string pattern = "PSSSP";
  Stream s(pattern);
  StepReplay replay(s.device, s.kernels);
  for (int64_t step = 0; step < 3; ++step) {
    StepContext context;
    context.step = step;
    s.log.clear();
    replay.run(context, 0, 2, [](size_t) { return false; });
    replay.run(context, 2, 5, [](size_t) { return false; });
    EXPECT_EQ(s.log, eager(pattern, step, [](size_t) { return false; }));
  }
  EXPECT_EQ(replay.counts().recorded, 0);
  EXPECT_EQ(s.runsOf(1), 3);
}

} // namespace
