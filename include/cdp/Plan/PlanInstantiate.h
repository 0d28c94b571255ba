//===- PlanInstantiate.h - format 4's runs, spelled out ---------*- C++ -*-===//
//
// A format-4 plan writes what repeats once: a pipeline stage's forward and
// backward for one micro-batch, a data-parallel device's program, as
// templates; each device's training stream is a list of runs (template,
// time step, micro-batch, stash slot, message and dropout batch) and each
// stash tensor one entry with its slot count. cdp-run spells the runs out
// into the instruction streams it executes; the compiler's report and
// checks read the runs directly.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_PLANINSTANTIATE_H
#define CDP_PLAN_PLANINSTANTIATE_H

#include "cdp/Plan/plan.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace cdp::plan {

/// The most instructions and tensors instantiation may create: far beyond
/// any compiled plan (64 x 64 pipelines make under a million), so that a
/// hand-edited run count cannot exhaust memory.
constexpr int64_t kMostInstantiated = int64_t(1) << 24;

/// Checks the runs and slot tensors (templates, slots and counts in range);
/// returns one line naming the first problem, or "".
std::string checkRuns(const Plan &plan, int64_t most = kMostInstantiated);

/// Tensor ids of every stash slot's copy: `slotIds[id][k]` for a tensor
/// with `slots` > 1 (slot 0 is the tensor itself), empty for the others.
/// New ids count up from `plan.tensors_size()` in tensor order.
std::vector<std::vector<int>> slotCopyIds(const Plan &plan);

/// The tensor a run in stash slot `slot` names where its template names
/// `id` (slot 0's copy): that slot's copy for a stash tensor, `id` itself
/// for any other (and for -1).
inline int idInSlot(const std::vector<std::vector<int>> &slotIds, int id,
                    int slot) {
  return id >= 0 && id < static_cast<int>(slotIds.size()) &&
                 !slotIds[id].empty()
             ? slotIds[id][slot]
             : id;
}

/// Spells out a checked plan in place: every slot copy becomes a tensor of
/// its own (ids from slotCopyIds), every device's runs its instructions,
/// and the templates go. A plan without runs or slots is left unchanged.
void instantiate(Plan &plan);

/// Whether some device's stream is written as runs.
bool hasRuns(const Plan &plan);

/// `use` applied to a spelled-out copy of `plan` (on an arena: a pipeline's
/// copy holds hundreds of thousands of instructions, allocated in blocks and
/// freed at once).
template <typename Use> auto onInstantiated(const Plan &plan, Use use) {
  google::protobuf::Arena arena;
  Plan *copy = google::protobuf::Arena::CreateMessage<Plan>(&arena);
  copy->CopyFrom(plan);
  instantiate(*copy);
  return use(static_cast<const Plan &>(*copy));
}

/// Adds (`sign` +1) or removes (-1) what run `run` adds to a template's
/// instruction: its time step, micro-batch, and the batch that load, send
/// and recv's `micro_batch` and dropout's `step_micro_batch` name. The
/// emitter makes templates with -1, instantiation spells them out with +1.
void shiftByRun(Instruction &instruction, const Run &run, int sign);

/// Instruction `instruction` of a template as run `run` executes it;
/// `slotIds` from slotCopyIds.
void instantiateInstruction(const Instruction &instruction, const Run &run,
                            const std::vector<std::vector<int>> &slotIds,
                            Instruction &out);

} // namespace cdp::plan

#endif // CDP_PLAN_PLANINSTANTIATE_H
