//===- PlanCheck.h - static checks on a plan's instruction streams -*- C++
//-*-===//
//
// Checks a compiler runs before writing a plan and the runtime before
// starting device threads, so a plan that would hang is refused instead.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_PLANCHECK_H
#define CDP_PLAN_PLANCHECK_H

#include "cdp/Plan/plan.pb.h"

#include <string>

namespace cdp::plan {

/// Simulates two steps of every device's instruction stream with buffered
/// sends and blocking receives (a recv matches a send by peer, value,
/// micro-batch and step). Returns an empty string when every device reaches its
/// end, else a multi-line description: each stuck device with the
/// instruction it waits at, and the rounds × devices grid of progress.
std::string findSendRecvDeadlock(const Plan &plan);

} // namespace cdp::plan

#endif // CDP_PLAN_PLANCHECK_H
