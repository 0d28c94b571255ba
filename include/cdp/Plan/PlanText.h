//===- PlanText.h - a plan's instruction streams as text --------*- C++ -*-===//
//
// One line per instruction, so that what the devices actually run can be
// read and FileChecked (cdp-compile --emit=plan-text). Write-only: the
// binary plan stays the one format cdp-run reads.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_PLANTEXT_H
#define CDP_PLAN_PLANTEXT_H

#include "cdp/Plan/plan.pb.h"

#include <ostream>

namespace cdp::plan {

/// Prints `plan`: a header line, then per device its arena and its
/// training stream, each instruction as
///   [t=T s=S mb=K min_step=M drain last_slot] PHASE OP INPUTS -> OUTPUTS
///   {ATTRIBUTES} @LOCATION
/// where a tensor prints as %ID:NAME (%ID for unnamed activations) and an
/// absent optional input as _. Initial values are not printed.
void printPlanText(const Plan &plan, std::ostream &os);

} // namespace cdp::plan

#endif // CDP_PLAN_PLANTEXT_H
