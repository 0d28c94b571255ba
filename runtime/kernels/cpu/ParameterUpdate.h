//===- ParameterUpdate.h - optimizer steps over element ranges --*- C++ -*-===//
//
// The arithmetic of the `update` instruction (PyTorch's SGD with momentum,
// Adam and AdamW) over a range of elements, so that a whole tensor (the
// `update` kernel) and a ZeRO shard that cuts across a stage's tensors
// (ShardedUpdate) run the same float operations in the same order: a
// sharded update equals the unsharded one bit for bit.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_CPU_PARAMETERUPDATE_H
#define CDP_RUNTIME_KERNELS_CPU_PARAMETERUPDATE_H

#include "../LearningRate.h"
#include "cdp/Plan/ShardLayout.h"

#include <vector>

namespace cdp::runtime::cpu {

/// Update number `count` (from 1) at learning rate `rate` of n elements:
/// parameters p, gradients g and the rule's moments (null where it keeps
/// none), all at the same offsets.
void applyUpdate(const UpdateRule &rule, int64_t count, float rate, float *p,
                 const float *g, float *first, float *second, int64_t n);

/// The optimizer step of one device's shard of a stage (ShardLayout): the
/// moments of the shard's elements only (ZeRO's 1/N optimizer state), each
/// tensor's part updated by that tensor's rule (its weight decay).
class ShardedUpdate {
public:
  ShardedUpdate(std::vector<UpdateRule> rules, const ShardLayout &layout,
                int device);

  /// Updates the shard's elements of `params` (every tensor of the stage,
  /// whole) from the same elements of `grads`.
  void run(const std::vector<float *> &params,
           const std::vector<const float *> &grads);
  /// The same from the shard's own gradients (ZeRO stage 2: the device's
  /// shard of the mean, shardSize() elements).
  void runOnShard(const std::vector<float *> &params, const float *shardGrads);
  /// The same on the shard's own parameters (ZeRO stage 3: the device
  /// keeps only its shard of the stage, shardSize() elements).
  void runOnShard(float *shardParams, const float *shardGrads);

  /// The updates run so far (a kernel's state, for checkpoints).
  int64_t *stepCounter() { return &steps; }
  /// fp16: from here the learning-rate schedule counts every step, skipped
  /// or not, as PyTorch's scheduler.step() each iteration beside a
  /// GradScaler; the update count (Adam's bias corrections) only updates.
  void countScheduleApart() { scheduleApart = true; }
  /// A step the loss scale's overflow skips: nothing changes but the
  /// schedule's count.
  void skip() { ++scheduled; }
  /// The schedule's own count where it is kept apart (for checkpoints).
  int64_t *scheduleCounter() { return scheduleApart ? &scheduled : nullptr; }
  /// The moments, shardSize() elements each (empty where the rule keeps
  /// none); padding elements stay 0.
  std::vector<float> first, second;

private:
  /// One update of every piece, its parameters at `paramOf(piece)` and its
  /// gradients at `gradOf(piece)`.
  template <typename ParamOf, typename GradOf>
  void update(const ParamOf &paramOf, const GradOf &gradOf);

  std::vector<UpdateRule> rules;
  std::vector<ShardLayout::Piece> pieces;
  int64_t steps = 0, scheduled = 0;
  bool scheduleApart = false;
};

} // namespace cdp::runtime::cpu

#endif // CDP_RUNTIME_KERNELS_CPU_PARAMETERUPDATE_H
