//===- StopSignal.cpp - SIGTERM and SIGINT end a run at a checkpoint ------===//
//
// Schedulers stop jobs with SIGTERM (Slurm, Kubernetes), users with Ctrl-C.
// With --checkpoint, either one asks the run to stop at the next step
// boundary: a checkpoint is written there and cdp-run exits 0 with a line
// saying where. A second signal ends the process at once (the default
// action is back). Several devices agree on the step: the first to see the
// request picks the step after the furthest any has begun, so that none
// has passed its checkpoint cut; under mpirun the processes' main threads
// agree on it (StopAgreement), whichever process got the signal.
//
//===----------------------------------------------------------------------===//

#include "Run.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

namespace cdp::runtime::training {

namespace {

// Lock-free, so a signal handler may store to it, and threads read it.
std::atomic<int> requestedBy{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void requestStop(int signal) {
  requestedBy = signal;
  std::signal(signal, SIG_DFL); // a second one ends the process
}

} // namespace

void installStopSignals(Fabric *fabric) {
  // Under mpirun the fabric's SIGTERM handler tells mpirun's kill (another
  // process gone) from a stop request.
  if (fabric)
    fabric->onTerminateRequest(requestStop);
  else
    std::signal(SIGTERM, requestStop);
  std::signal(SIGINT, requestStop);
}

int stopSignal() { return requestedBy; }

bool StopPoint::checkpointBefore(int64_t next) {
  int64_t seen = highest.load();
  while (seen < next && !highest.compare_exchange_weak(seen, next)) {
  }
  if (agreed) {
    // Every device that was answered before the freeze raised `highest`
    // before it read `frozen` (both sequentially consistent), so the
    // freeze saw its step, and the agreed step lies beyond it.
    while (frozen.load() && stopAt.load() == kNone)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    return stopAt.load() == next;
  }
  int64_t at = stopAt.load();
  if (at == kNone && stopSignal() != 0) {
    int64_t candidate = highest.load() + 1;
    stopAt.compare_exchange_strong(at, candidate);
    at = stopAt.load();
  }
  return at == next;
}

int64_t StopPoint::freeze() {
  frozen.store(true);
  return highest.load();
}

void StopPoint::decide(int64_t step) { stopAt.store(step); }

namespace {
/// What the processes' notes say (Fabric::postNote).
enum NoteKind : int64_t {
  kAsk = 1,  ///< to the root: this process got a signal
  kFreeze,   ///< from the root: freeze and say your furthest step
  kFurthest, ///< to the root: that step
  kDecide,   ///< from the root: the step to stop at
  kDone,     ///< to the root: this process's devices ended
  kEnd,      ///< from the root: every process's devices ended
};
} // namespace

StopAgreement::StopAgreement(Run &run, StopPoint &stop)
    : run(run), stop(stop), processes(run.fabric->processCount()) {}

void StopAgreement::poll() {
  if (stopSignal() != 0 && !asked) {
    asked = true;
    if (run.root())
      freezeAll();
    else
      run.fabric->postNote(0, kAsk, 0);
  }
  Fabric::Note note;
  while (run.fabric->takeNote(note))
    take(note);
}

/// The root: every process's devices stop asking until the step is
/// decided (once per run).
void StopAgreement::freezeAll() {
  if (deciding || stop.at() >= 0)
    return;
  deciding = true;
  furthest = stop.freeze();
  replies = 0;
  for (int p = 1; p < processes; ++p)
    run.fabric->postNote(p, kFreeze, 0);
  if (processes == 1)
    take({0, kFurthest, furthest});
}

void StopAgreement::take(const Fabric::Note &note) {
  switch (note.kind) {
  case kAsk:
    freezeAll();
    break;
  case kFreeze:
    run.fabric->postNote(0, kFurthest, stop.freeze());
    break;
  case kFurthest:
    furthest = std::max(furthest, note.value);
    if (processes > 1 && ++replies < processes - 1)
      break;
    for (int p = 1; p < processes; ++p)
      run.fabric->postNote(p, kDecide, furthest + 1);
    stop.decide(furthest + 1);
    deciding = false;
    break;
  case kDecide:
    stop.decide(note.value);
    break;
  case kDone:
    ++done;
    break;
  case kEnd:
    ended = true;
    break;
  default:
    fail("process " + std::to_string(note.from) +
         " sent a note this process does not know (" +
         std::to_string(note.kind) + ")");
  }
}

void StopAgreement::finish() {
  if (!run.root())
    run.fabric->postNote(0, kDone, 0);
  while (run.root() ? done < processes - 1 || deciding : !ended) {
    poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (run.root())
    for (int p = 1; p < processes; ++p)
      run.fabric->postNote(p, kEnd, 0);
}

std::string stopLine(const Run &run, int64_t step) {
  return std::string("cdp-run: stopped by ") +
         (stopSignal() == SIGINT ? "SIGINT" : "SIGTERM") +
         ": checkpoint at step " + std::to_string(step) + " of " +
         std::to_string(run.total) + " in " + run.options.checkpoint +
         " (continue with --resume " + run.options.checkpoint + ")";
}

} // namespace cdp::runtime::training
