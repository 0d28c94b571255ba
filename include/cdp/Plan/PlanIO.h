//===- PlanIO.h - reading and writing plan artefacts ------------*- C++ -*-===//
//
// The container around the protobuf payload: magic, version, size and
// checksum, so that an old, truncated or corrupt artefact is refused with a
// clear message instead of being misread.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_PLANIO_H
#define CDP_PLAN_PLANIO_H

#include "cdp/Plan/plan.pb.h"
#include "cdp/Schedule/Strategy.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace cdp::plan {

/// Bumped whenever plan.proto changes meaning.
constexpr uint32_t kPlanFormatVersion = 7;

/// Writes `plan` to `path` and its tensors' initial values to the weights
/// file beside it (PlanWeights.h), which `plan` then refers to instead of
/// holding them; returns false and sets `error` on failure.
bool writePlan(Plan &plan, const std::string &path, std::string &error);

/// Reads and checks a plan (its header, then validatePlan with every tensor
/// and arena at most `maxBytes`); returns false and sets `error` (one line,
/// no file name) on failure.
bool readPlan(const std::string &path, Plan &plan, std::string &error,
              int64_t maxBytes = int64_t(16) << 30);

/// FNV-1a, 64 bits.
uint64_t checksum(const void *data, size_t size);

/// Bytes per element of a plan dtype.
int64_t dtypeSize(DType type);

/// Integer attribute `name` of `instruction`, or `fallback` when absent.
int64_t intAttribute(const Instruction &instruction, std::string_view name,
                     int64_t fallback = -1);
/// How many values list attribute `name` of `instruction` holds, or
/// `fallback` when it has none.
int64_t listSize(const Instruction &instruction, std::string_view name,
                 int64_t fallback = 0);
/// Adds integer attribute `name` = `value` to `instruction`.
void setIntAttribute(Instruction *instruction, std::string_view name,
                     int64_t value);

/// The form of the plan (Strategy.h), from its strategy: all the runtime
/// needs to know of a strategy.
PlanForm formOf(const Plan &plan);
inline bool isPipeline(const Plan &plan) {
  return formOf(plan) == PlanForm::Pipeline;
}
inline bool isReplicated(const Plan &plan) {
  return formOf(plan) == PlanForm::Replicated;
}

/// Whose stash copies `device` holds in its arena: its own, or where
/// replicas run their first replica's templates (replica_devices), those of
/// the same device of the first replica.
int arenaHome(const Plan &plan, int device);

} // namespace cdp::plan

#endif // CDP_PLAN_PLANIO_H
