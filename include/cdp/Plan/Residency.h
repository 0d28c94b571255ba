//===- Residency.h - what a device allocates at load ------------*- C++ -*-===//
//
// cdp-run's executor allocates, per device, one arena (activations and
// inputs at their planned offsets; ZeRO stage 3's gathered parameters in
// its gather region) and persistent memory for the tensors the device holds
// during training. The executor and the report ask here which those are,
// so that the report's allocated bytes are what the executor allocates.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_RESIDENCY_H
#define CDP_PLAN_RESIDENCY_H

#include "cdp/Plan/plan.pb.h"

#include <vector>

namespace cdp::plan {

/// Per plan tensor: 1 where `device` gives it persistent memory of its own
/// at load. Not an arena tensor; not a stage another device owns
/// (CDP-ZeRO); and in a pipeline, not a tensor of another stage's device
/// (Tensor.device) unless this device's training instructions name it (a
/// tied weight's or a replica's copy). Device 0 takes the other stages'
/// parameters, buffers and accumulators after training, when it gathers
/// the trained model; those are 1 in `gatheredAfterTraining`.
std::vector<char>
persistentOn(const Plan &plan, int device,
             std::vector<char> *gatheredAfterTraining = nullptr);

/// Where the persistent tensors `held` (persistentOn's) lie in the one block
/// their device allocates for them: per tensor its offset (-1 where not
/// held), each piece 64-byte aligned, in plan order; `blockBytes` gets the
/// block's size.
std::vector<int64_t> persistentOffsets(const Plan &plan,
                                       const std::vector<char> &held,
                                       int64_t &blockBytes);

/// The bytes `device` allocates at load: its arena and its persistent
/// block (kernels' workspace aside).
int64_t allocatedBytes(const Plan &plan, int device);

/// allocatedBytes of every device, in time linear in the plan.
std::vector<int64_t> allocatedBytesPerDevice(const Plan &plan);

} // namespace cdp::plan

#endif // CDP_PLAN_RESIDENCY_H
