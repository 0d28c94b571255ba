//===- SpelledPlan.h - device programs as analyses read them -*- C++ -*-===//
//
// The report's accounting and the step-time simulation read every
// instruction a device runs. A format-4 plan names most of them once, in
// templates that runs place at a time step, a micro-batch and a stash slot;
// copying each run's instructions into protobuf messages (what cdp-run's
// instantiation does before it executes) cost more than the analyses
// themselves on large pipelines. A SpelledPlan lists each device's
// instructions as references to the plan's or a template's instruction plus
// what the run adds (time step, micro-batch, the message's micro-batch) and
// the tensor ids the run's slot names: the same program, without copies.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_SPELLEDPLAN_H
#define CDP_PLAN_SPELLEDPLAN_H

#include "cdp/Plan/plan.pb.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace cdp::plan {

/// Tensor ids of one instruction, as its run names them.
class IdRange {
public:
  IdRange(const int *first, const int *last) : first(first), last(last) {}
  const int *begin() const { return first; }
  const int *end() const { return last; }
  int size() const { return static_cast<int>(last - first); }
  int operator[](int i) const { return first[i]; }

private:
  const int *first, *last;
};

/// One instruction of a device's program. Fields a run does not change
/// (op, phase, stage, attributes, flags) are read from `source`.
struct SpelledInstruction {
  const Instruction *source = nullptr;
  int64_t timeStep = 0;
  int64_t microBatch = 0;
  /// What the run adds to a load's, send's or recv's micro_batch attribute.
  int64_t messageBatch = 0;
  /// What the run adds to a send's or recv's peer attribute.
  int32_t peerOffset = 0;
  uint32_t firstId = 0; ///< its inputs, then its outputs, in SpelledPlan ids
  uint32_t inputs = 0, outputs = 0;
  const Instruction &operator*() const { return *source; }
  const Instruction *operator->() const { return source; }
};

class SpelledPlan {
public:
  /// Spells out the devices `keep` accepts (all without it); the others
  /// have empty programs. The plan's runs are expected checked (checkRuns).
  /// With `only`, a program holds just the instructions it accepts (asked
  /// once per template instruction, not once per run).
  explicit SpelledPlan(
      const Plan &plan, const std::function<bool(int)> &keep = nullptr,
      const std::function<bool(const Instruction &)> &only = nullptr);

  const Plan &plan() const { return *source; }
  int devices() const { return static_cast<int>(programs.size()); }
  int size(int device) const {
    return static_cast<int>(programs[device].size());
  }
  const SpelledInstruction &at(int device, int index) const {
    return programs[device][index];
  }
  const std::vector<SpelledInstruction> &program(int device) const {
    return programs[device];
  }
  IdRange inputs(int device, const SpelledInstruction &instruction) const;
  IdRange outputs(int device, const SpelledInstruction &instruction) const;
  /// The plan's tensors and then their stash-slot copies, numbered as
  /// cdp-run's instantiation numbers them.
  int tensors() const { return static_cast<int>(originalOf.size()); }
  /// Tensor `id`, or for a slot copy the tensor it copies (the same kind,
  /// shape and bytes; only its id and offset differ).
  const Tensor &tensor(int id) const { return source->tensors(originalOf[id]); }

private:
  const Plan *source;
  std::vector<std::vector<SpelledInstruction>> programs;
  std::vector<std::vector<int>> ids; ///< per device
  std::vector<int> originalOf;
};

/// What a run adds to a message's micro_batch attribute, for `instruction`
/// (loads, sends and receives; nothing for others), as shiftByRun adds it.
bool carriesMessageBatch(const Instruction &instruction);

/// Whether a run adds its peer_offset to `instruction`'s peer attribute
/// (sends and receives), as shiftByRun adds it.
bool carriesPeer(const Instruction &instruction);

} // namespace cdp::plan

#endif // CDP_PLAN_SPELLEDPLAN_H
