//===- Dependencies.h - what a pipeline action waits for --------*- C++ -*-===//
//
// Shared by the schedule tables' builders (the strategies' own files),
// checks and CSV reader.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_COMPILER_SCHED_DEPENDENCIES_H
#define CDP_COMPILER_SCHED_DEPENDENCIES_H

#include "cdp/Schedule/ScheduleTable.h"

#include <tuple>
#include <vector>

namespace cdp::pipeline {

/// A piece of work as (stage, kind, micro-batch): 'F' a forward, 'I' the
/// input gradient (made by a B or an I), 'W' the weight gradient.
using WorkKey = std::tuple<int64_t, char, int64_t>;

/// What `action` makes, with its micro-batch taken modulo M (so that the
/// previous step's -1 and this step's M - 1 are one micro-batch).
inline WorkKey keyOf(const Action &action, int64_t M) {
  char kind = static_cast<char>(action.kind);
  if (action.kind == ActionKind::Backward)
    kind = 'I';
  return {action.stage, kind, ((action.microBatch % M) + M) % M};
}

/// What `action` waits for: the previous stage's forward (a forward), its
/// own forward and the next stage's input gradient (B and I), its own I
/// (W); micro-batches modulo M.
inline std::vector<WorkKey> needsOf(const Action &action, int64_t S,
                                    int64_t M) {
  int64_t s = action.stage, k = ((action.microBatch % M) + M) % M;
  switch (action.kind) {
  case ActionKind::Forward:
    if (s > 1)
      return {{s - 1, 'F', k}};
    return {};
  case ActionKind::Backward:
  case ActionKind::InputGrad:
    if (s < S)
      return {{s, 'F', k}, {s + 1, 'I', k}};
    return {{s, 'F', k}};
  case ActionKind::WeightGrad:
    return {{s, 'I', k}};
  case ActionKind::Update:
    return {};
  }
  return {};
}

/// The earliest time step of every action, each lasting one step, given
/// each device's order: an action starts once its device is free and what
/// it needs has ended. Updates take no time and run when their device
/// has finished its step's work. The strategies' tables are built so.
ScheduleTable timeOrders(ScheduleTable table,
                         const std::vector<std::vector<Action>> &orders);

/// The token of an action in a schedule CSV: "0F1", "2B-1", "1U".
std::string actionToken(const Action &action);

} // namespace cdp::pipeline

#endif // CDP_COMPILER_SCHED_DEPENDENCIES_H
