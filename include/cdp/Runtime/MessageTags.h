//===- MessageTags.h - the tags of point-to-point messages -----*- C++ -*-===//
//
// Every point-to-point message a device sends carries a 63-bit tag that the
// receiver matches with its source. Kernels, the executor, the outputs and
// the MPI communicator each send messages of their own kinds; this header
// is the one list of their forms, so that no two kinds can share a tag (a
// receive matching another kind's message would read the wrong bytes or
// wait forever). `kindOf` tells a tag's kind back; test/unit/MessageTagsTest
// checks that it does for every kind at the ends of its payload's range.
//
// Kinds that can be in flight at a step boundary (pipeline messages, CDP's
// chain, reduction contributions, replica sums) are recorded in checkpoints
// by tag: their forms do not change, or older checkpoints stop resuming.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_MESSAGETAGS_H
#define CDP_RUNTIME_MESSAGETAGS_H

#include <cstdint>

namespace cdp::runtime::tags {

constexpr int64_t bit(int n) { return int64_t(1) << n; }

/// Reductions (and CDP's chain) are named by step and stage.
constexpr int64_t reduction(int64_t step, int64_t stage) {
  return step * 4096 + stage;
}

/// CDP's chain reduction: a partial sum down the chain, the mean back up.
constexpr int64_t chainPartial(int64_t step, int64_t stage) {
  return 2 * reduction(step, stage);
}
constexpr int64_t chainMean(int64_t step, int64_t stage) {
  return 2 * reduction(step, stage) + 1;
}

/// ZeRO-3's end-of-run gather of shard group `shard` onto device 0, and
/// device 0's go-ahead for it (pieces move one at a time, so no more than
/// one is in flight).
constexpr int64_t shardGather(int64_t shard) { return bit(52) | shard; }
constexpr int64_t shardReady(int64_t shard) {
  return bit(52) | bit(40) | shard;
}

/// A pipeline stage's gradient (tensor `value`) summed over the replicas.
constexpr int64_t replicaSum(int64_t step, int64_t value) {
  return bit(59) | (step << 32) | value;
}

/// A collective's internal messages (Communicator::collectiveTag): the
/// collective's own tag (below 2^56) and its phase (below 8).
constexpr int64_t collective(int64_t tag, int phase) {
  return bit(60) | (tag << 3) | phase;
}

/// A device's contribution to mean-reduction `reductionTag` (the MPI
/// communicator's reduceStart).
constexpr int64_t contribution(int64_t reductionTag) {
  return bit(61) | reductionTag;
}

/// ZeRO-1 over pipeline replicas: a replica's updated shard of a stage.
constexpr int64_t replicaShard(int64_t step, int64_t stage) {
  return bit(61) | bit(59) | reduction(step, stage);
}

/// After training: trained tensor `id` from its stage's device to device
/// 0, device 0's go-ahead for it, and device 0's requests for a tensor
/// held by another process and their answers.
constexpr int64_t gather(int64_t id) { return bit(61) | bit(60) | id; }
constexpr int64_t gatherReady(int64_t id) {
  return bit(61) | bit(60) | bit(40) | id;
}
constexpr int64_t fetchRequest() { return bit(61) | bit(60) | bit(44); }
constexpr int64_t fetchReply() { return bit(61) | bit(60) | bit(45); }

/// A pipeline's tensor `value` of micro-batch `absolute` (counted over the
/// run) between stages.
constexpr int64_t pipeline(int64_t absolute, int64_t value) {
  return bit(62) | ((absolute << 24) + value);
}

/// The collectives' own tags (below 2^56; `collective` puts each in the
/// messages it sends), by what they move.
namespace collectives {
/// ZeRO: a stage's updated shards gathered, its gradients reduce-scattered.
constexpr int64_t shardGather(int64_t step, int64_t stage) {
  return bit(55) | reduction(step, stage);
}
constexpr int64_t gradientScatter(int64_t step, int64_t stage) {
  return bit(54) | reduction(step, stage);
}
/// ZeRO-3: a stage's parameters gathered, several times a step (its
/// forward, its backward, a tied weight's reader), told apart by the time
/// step within the cycle (below 8192).
constexpr int64_t parameterGather(int64_t step, int64_t cycleTime,
                                  int64_t stage) {
  return bit(53) | ((step * 8192 + cycleTime) * 4096 + stage);
}
/// Clipping and loss scaling under ZeRO: the devices' shares of the
/// squared norm (`part` 0) or overflow flags (1) summed.
constexpr int64_t normSum(int64_t step, int64_t part = 0) {
  return bit(51) | (step * 2 + part);
}
/// laysa: a stage's top-k values (`part` 0) and indices (1) gathered.
constexpr int64_t sparseSelection(int64_t step, int64_t stage, int64_t part) {
  return bit(50) | (reduction(step, stage) * 2 + part);
}

enum class Kind {
  ShardGather,
  GradientScatter,
  ParameterGather,
  NormSum,
  SparseSelection,
  Unknown
};

/// The kind of collective `tag` names.
constexpr Kind kindOf(int64_t tag) {
  if (tag < 0 || tag >= bit(56))
    return Kind::Unknown;
  if (tag & bit(55))
    return Kind::ShardGather;
  if (tag & bit(54))
    return Kind::GradientScatter;
  if (tag & bit(53))
    return Kind::ParameterGather;
  if (tag & bit(52))
    return Kind::Unknown;
  if (tag & bit(51))
    return Kind::NormSum;
  if (tag & bit(50))
    return Kind::SparseSelection;
  return Kind::Unknown;
}
} // namespace collectives

enum class Kind {
  Chain,
  ShardGather,
  ShardReady,
  ReplicaSum,
  Collective,
  Contribution,
  ReplicaShard,
  Gather,
  GatherReady,
  FetchRequest,
  FetchReply,
  Pipeline,
  Unknown
};

/// The kind of message `tag` is, for messages and checks.
constexpr Kind kindOf(int64_t tag) {
  if (tag < 0)
    return Kind::Unknown;
  if (tag & bit(62))
    return Kind::Pipeline;
  if ((tag & bit(61)) && (tag & bit(60))) {
    if (tag == fetchRequest())
      return Kind::FetchRequest;
    if (tag == fetchReply())
      return Kind::FetchReply;
    return tag & bit(40) ? Kind::GatherReady : Kind::Gather;
  }
  if (tag & bit(61))
    return tag & bit(59) ? Kind::ReplicaShard : Kind::Contribution;
  if (tag & bit(60))
    return Kind::Collective;
  if (tag & bit(59))
    return Kind::ReplicaSum;
  if (tag & bit(52))
    return tag & bit(40) ? Kind::ShardReady : Kind::ShardGather;
  return Kind::Chain;
}

} // namespace cdp::runtime::tags

#endif // CDP_RUNTIME_MESSAGETAGS_H
