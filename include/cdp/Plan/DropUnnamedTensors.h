//===- DropUnnamedTensors.h - leave out tensors nothing names ---*- C++ -*-===//
//
// A pipeline plan's devices name their own copies of the one-micro-batch
// graph's activations; of the originals only those device 0's evaluation
// stream reads stay in use. The rest would be dead entries in every plan,
// and the used ones keep the whole training graph's offsets unless packed
// again by the stream's own lifetimes.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_DROPUNNAMEDTENSORS_H
#define CDP_PLAN_DROPUNNAMEDTENSORS_H

#include "cdp/Plan/plan.pb.h"

namespace cdp {

/// Removes the activation tensors nothing in `plan` names (no instruction
/// of a device, an evaluation stream or a template; none of the plan's
/// inputs, outputs, loss, evaluation loss, labels, scores or applied
/// gradients) and
/// renumbers the others in their order, every reference with them.
/// Returns how many it removed.
int dropUnnamedActivations(plan::Plan &plan);

/// Packs the tensors only device 0's evaluation stream uses (a pipeline
/// plan's originals, which no training program names) by their live ranges
/// over that stream, first fit from offset 0 of device 0's arena (the
/// stream runs after training, over the same memory). Returns the bytes
/// they need, for device 0's arena to cover.
int64_t packEvaluationArena(plan::Plan &plan);

} // namespace cdp

#endif // CDP_PLAN_DROPUNNAMEDTENSORS_H
