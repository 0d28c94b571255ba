//===- PlanCheck.h - static checks on a plan's instruction streams -*- C++
//-*-===//
//
// Checks a compiler runs before writing a plan and the runtime before
// starting device threads, so a plan that would hang is refused instead.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_PLANCHECK_H
#define CDP_PLAN_PLANCHECK_H

#include "cdp/Plan/SpelledPlan.h"
#include "cdp/Plan/plan.pb.h"

#include <functional>
#include <string>

namespace cdp::plan {

/// Bounds of the attributes message tags and step arithmetic are made of
/// (a message's micro-batch, micro-batches a step, step offset, a wait's
/// delay): within them no tag or step computation overflows.
constexpr int64_t kMostTagField = int64_t(1) << 20;

/// Simulates three steps and the drain of every device's instruction stream
/// with buffered sends and blocking receives (a recv matches a send by peer,
/// value, micro-batch and step; a reduce_wait waits for every device's
/// reduce_start of its step and stage). Returns an empty string when every
/// device reaches its end, else a multi-line description: each stuck device
/// with the instruction it waits at, and the rounds × devices grid of progress.
/// A message attribute outside kMostTagField's bounds is refused first, in
/// one line (the simulation's step arithmetic would overflow on it).
std::string findSendRecvDeadlock(const Plan &plan);
/// findSendRecvDeadlock's description as one line: its first sentence and
/// each stuck device, joined by "; " (the grid of progress left out).
std::string deadlockLine(const std::string &description);

/// How long an instruction runs on a device (any unit; negative: unknown).
using InstructionTime = std::function<double(int device, const Instruction &)>;

/// The outcome of timing a plan's streams (simulateTime).
struct SimulatedTime {
  enum class Status {
    Ok,          ///< `end` holds the time
    UnknownCost, ///< some instruction's cost was negative
    WouldHang,   ///< a receive never finds its send
  };
  Status status = Status::Ok;
  double end = 0; ///< when the last device ends step `steps - 1`
};

/// The time every device's stream of `steps` steps ends by, each
/// instruction lasting `cost` and starting when its device is free, a recv
/// no earlier than the end of its send (the same buffered-send, blocking-
/// receive semantics as findSendRecvDeadlock, the drain included so that a
/// receive may wait for a send of the next step). The drain's own time is
/// not counted. A format-4 plan's runs (checked) are read in place: `cost`
/// gets the template's instruction, which names slot 0's tensors (the same
/// shapes as every slot's).
SimulatedTime simulateTime(const Plan &plan, int64_t steps,
                           const InstructionTime &cost);

/// --cdp-reduce chain: after `steps` steps of training, the relays of the
/// last steps' means still to run (a relay with min_step k passes step
/// t - k's mean in step t): visit(instruction index, step) in order.
/// A run whose schedule started at step `origin` (a portable resume) has
/// no means before it.
void forEachRelayAfterTraining(
    const Device &device, int64_t steps, int64_t origin,
    const std::function<void(int index, int64_t step)> &visit);
/// The same over device `device` of a spelled-out plan.
void forEachRelayAfterTraining(
    const SpelledPlan &spelled, int device, int64_t steps,
    const std::function<void(int index, int64_t step)> &visit);

/// Where a checkpoint taken before step `next` cuts the devices' streams so
/// that no device waits across it: device d has run the steps before
/// `next - 1` and the first cut[d] instructions of step `next - 1` (all of
/// them, for most devices). A device whose receive in step `next - 1` waits
/// for a later step's send (a tied weight's new value, sent in step t + 1
/// and received at the end of step t) stops before that receive, and so,
/// transitively, does every device that would receive what it has not yet
/// sent. What was sent before the cut and not yet received is in flight.
/// Independent of the run's length, so that a checkpoint taken at the end
/// resumes into a longer run. Empty, with `error` set, when a cut would
/// reach into an earlier step.
std::vector<int> checkpointCut(const Plan &plan, int64_t next,
                               std::string &error);

} // namespace cdp::plan

#endif // CDP_PLAN_PLANCHECK_H
