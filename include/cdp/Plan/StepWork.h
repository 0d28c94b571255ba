//===- StepWork.h - a device's work per training step -----------*- C++ -*-===//
//
// How much arithmetic one step of a device's stream does: multiply-adds of
// products and convolutions (forward, input and weight gradients), one
// operation per output element elsewhere. cdp-run sizes the default thread
// count by it: kernels of a small step are too short to share.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_STEPWORK_H
#define CDP_PLAN_STEPWORK_H

#include "cdp/Plan/plan.pb.h"

namespace cdp::plan {

/// Multiply-adds (and element operations) of one step of device `d`'s
/// training stream, templates' runs included.
double stepWork(const Plan &plan, int d);

} // namespace cdp::plan

#endif // CDP_PLAN_STEPWORK_H
