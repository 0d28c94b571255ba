//===- StopSignal.cpp - SIGTERM and SIGINT end a run at a checkpoint ------===//
//
// Schedulers stop jobs with SIGTERM (Slurm, Kubernetes), users with Ctrl-C.
// With --checkpoint, either one asks the run to stop at the next step
// boundary: a checkpoint is written there and cdp-run exits 0 with a line
// saying where. A second signal ends the process at once (the default
// action is back). Several devices agree on the step: the first to see the
// request picks the step after the furthest any has begun, so that none
// has passed its checkpoint cut.
//
//===----------------------------------------------------------------------===//

#include "Run.h"

#include <atomic>
#include <csignal>

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

void installStopSignals() {
  std::signal(SIGTERM, requestStop);
  std::signal(SIGINT, requestStop);
}

int stopSignal() { return requestedBy; }

bool StopPoint::checkpointBefore(int64_t next) {
  int64_t seen = highest.load();
  while (seen < next && !highest.compare_exchange_weak(seen, next)) {
  }
  int64_t at = stopAt.load();
  if (at == kNone && stopSignal() != 0) {
    int64_t candidate = highest.load() + 1;
    stopAt.compare_exchange_strong(at, candidate);
    at = stopAt.load();
  }
  return at == next;
}

std::string stopLine(const Run &run, int64_t step) {
  return std::string("cdp-run: stopped by ") +
         (stopSignal() == SIGINT ? "SIGINT" : "SIGTERM") +
         ": checkpoint at step " + std::to_string(step) + " of " +
         std::to_string(run.total) + " in " + run.options.checkpoint +
         " (continue with --resume " + run.options.checkpoint + ")";
}

} // namespace cdp::runtime::training
