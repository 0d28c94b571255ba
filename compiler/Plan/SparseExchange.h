//===- SparseExchange.h - laysa's tensors and instructions ------*- C++ -*-===//
//
// The plan side of laysa's top-k exchange: per trained parameter its error
// feedback (a SPARSE_STATE tensor), per stage its communication buffers,
// and the instructions sched.absorb_gradients, sched.sparse_send and
// sched.sparse_apply lower to. The emitter collects what the graph says
// (parameters, gradients, counts, update rules) and calls these.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_COMPILER_PLAN_SPARSEEXCHANGE_H
#define CDP_COMPILER_PLAN_SPARSEEXCHANGE_H

#include "cdp/Plan/plan.pb.h"

#include <functional>
#include <vector>

namespace cdp::sparse {

/// One trained parameter of a stage: its tensors, the entries it sends
/// (its size: sent whole) and its optimizer update as first lowered (the
/// rule the absorb copies).
struct Param {
  int param = -1, grad = -1, state = -1;
  int64_t count = 0;
  plan::Instruction update;
};

/// A stage's exchange: its parameters, this device's selection (values
/// and, where some parameter is sparse, indices) and every device's, one
/// after another in device order (the all-gather's buffers). No tensor or
/// instruction names a device, so every device runs one template and the
/// plan grows with the devices as dp's does.
struct Stage {
  std::vector<Param> params;
  int values = -1, indices = -1;
  int allValues = -1, allIndices = -1;
};

struct Exchange {
  int64_t devices = 1, cycle = 2;
  bool residual = false;
  std::vector<Stage> stages; ///< by stage, from 1
};

/// Adds every parameter's error feedback (the mirror, which starts as the
/// parameter, or the residual, which starts at 0) and every stage's
/// communication buffers, in one region after the arena that all stages
/// share (a stage's buffers are free again before the next selection).
/// Returns the arena's size with the region.
int64_t addTensors(plan::Plan &plan, Exchange &exchange, int64_t arenaBytes);

/// Makes an instruction of `op` in `phase`, stamped with the sched op's
/// stage and time step.
using MakeInstruction =
    std::function<plan::Instruction *(const char *op, const char *phase)>;

/// sched.absorb_gradients: one sparse_absorb per parameter.
void lowerAbsorb(const Exchange &exchange, int64_t stage,
                 const MakeInstruction &make);
/// sched.sparse_send: (the residual baseline's absorbs,) the stage's
/// selection.
void lowerSend(const Exchange &exchange, int64_t stage,
               const MakeInstruction &make);
/// sched.sparse_apply: the all-gather of every device's selection
/// (sparse_gather), then the mean of them all.
void lowerApply(const Exchange &exchange, int64_t stage,
                const MakeInstruction &make);

} // namespace cdp::sparse

#endif // CDP_COMPILER_PLAN_SPARSEEXCHANGE_H
