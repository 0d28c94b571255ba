//===- PlanValidate.h - a plan's structure, checked on load -----*- C++ -*-===//
//
// A plan's checksum catches accidents, not edits: anyone can rewrite a plan
// and seal it again. Before anything is allocated, every load checks what
// the runtime would otherwise trust: ids, devices, dtypes, shapes, sizes
// and arena offsets (with arithmetic that cannot wrap), the plan's inputs,
// outputs and loss, each instruction's tensor ids, counters and what a
// `load` fills. What each op's kernels need of their tensors is checked when
// they are bound (cdp/Runtime/Signatures.h), and whether the devices'
// streams can complete by the deadlock simulation (PlanCheck.h).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_PLANVALIDATE_H
#define CDP_PLAN_PLANVALIDATE_H

#include "cdp/Plan/plan.pb.h"

#include <cstdint>
#include <string>

namespace cdp::plan {

/// The most devices and micro-batches a plan may have (cdp-compile's
/// bounds).
constexpr int64_t kMostPlanDevices = 4096, kMostPlanMicroBatches = 65536;

/// Empty when `plan` is well formed with every tensor and arena at most
/// `maxBytes`; otherwise one line naming the first fault.
std::string validatePlan(const Plan &plan, int64_t maxBytes);

} // namespace cdp::plan

#endif // CDP_PLAN_PLANVALIDATE_H
