//===- MessageTagsTest.cpp - no two kinds of message share a tag ----------===//
//
// Every kind of point-to-point message, at both ends of its payload's
// range (steps up to 2^36, tensor ids and shards up to 2^31, stages up to
// 4095, collective tags up to 2^56), decodes back to its own kind: two
// kinds that shared a form (ZeRO-1's replica shards and the MPI reduction
// contributions did) fail here.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/MessageTags.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

using namespace cdp::runtime::tags;

namespace {

constexpr int64_t kSteps = bit(36), kIds = bit(31) - 1, kStage = 4095;

/// Tags of every kind with their kind, at the ends of their payloads.
std::vector<std::pair<int64_t, Kind>> samples() {
  std::vector<std::pair<int64_t, Kind>> all;
  for (int64_t step : {int64_t(0), int64_t(1), kSteps})
    for (int64_t stage : {int64_t(0), kStage}) {
      all.push_back({chainPartial(step, stage), Kind::Chain});
      all.push_back({chainMean(step, stage), Kind::Chain});
      all.push_back({contribution(reduction(step, stage)), Kind::Contribution});
      all.push_back({replicaShard(step, stage), Kind::ReplicaShard});
    }
  for (int64_t id : {int64_t(0), int64_t(1), kIds}) {
    all.push_back({shardGather(id), Kind::ShardGather});
    all.push_back({shardReady(id), Kind::ShardReady});
    all.push_back({gather(id), Kind::Gather});
    all.push_back({gatherReady(id), Kind::GatherReady});
    for (int64_t step : {int64_t(0), bit(27) - 1})
      all.push_back({replicaSum(step, id), Kind::ReplicaSum});
  }
  for (int64_t tag : {int64_t(0), bit(56) - 1})
    for (int phase : {0, 7})
      all.push_back({collective(tag, phase), Kind::Collective});
  for (int64_t absolute : {int64_t(0), bit(37) - 1})
    for (int64_t value : {int64_t(0), bit(24) - 1})
      all.push_back({pipeline(absolute, value), Kind::Pipeline});
  all.push_back({fetchRequest(), Kind::FetchRequest});
  all.push_back({fetchReply(), Kind::FetchReply});
  return all;
}

TEST(MessageTagsTest, EveryKindDecodesToItself) {
  for (auto [tag, kind] : samples())
    EXPECT_EQ(static_cast<int>(kindOf(tag)), static_cast<int>(kind))
        << "tag " << tag;
}

TEST(MessageTagsTest, NoTagOfTwoKinds) {
  std::set<int64_t> seen;
  std::vector<std::pair<int64_t, Kind>> all = samples();
  for (auto [tag, kind] : all)
    for (auto [other, otherKind] : all)
      if (tag == other)
        EXPECT_EQ(static_cast<int>(kind), static_cast<int>(otherKind))
            << "tag " << tag;
}

TEST(MessageTagsTest, CheckpointedFormsStayPut) {
  // Messages in flight at a step boundary are saved by tag: these values
  // are what checkpoints written before the registry hold.
  EXPECT_EQ(chainPartial(3, 2), 2 * (3 * 4096 + 2));
  EXPECT_EQ(chainMean(3, 2), 2 * (3 * 4096 + 2) + 1);
  EXPECT_EQ(contribution(reduction(3, 2)),
            (reduction(3, 2)) ^ (int64_t(1) << 61));
  EXPECT_EQ(replicaSum(3, 7), (int64_t(1) << 59) | (int64_t(3) << 32) | 7);
  EXPECT_EQ(pipeline(5, 9), (int64_t(1) << 62) | ((int64_t(5) << 24) + 9));
  EXPECT_EQ(collective(5, 2), (int64_t(1) << 60) | (5 << 3) | 2);
}

TEST(MessageTagsTest, CollectivesApart) {
  using namespace cdp::runtime::tags::collectives;
  namespace collectives = cdp::runtime::tags::collectives;
  using CKind = cdp::runtime::tags::collectives::Kind;
  std::vector<std::pair<int64_t, CKind>> all;
  for (int64_t step : {int64_t(0), bit(27) - 1})
    for (int64_t stage : {int64_t(0), kStage}) {
      all.push_back({shardGather(step, stage), CKind::ShardGather});
      all.push_back({gradientScatter(step, stage), CKind::GradientScatter});
      all.push_back(
          {parameterGather(step, 8191, stage), CKind::ParameterGather});
      all.push_back({parameterGather(step, 0, stage), CKind::ParameterGather});
      all.push_back({normSum(step), CKind::NormSum});
      all.push_back({normSum(step, 1), CKind::NormSum});
      for (int64_t part : {0, 1})
        all.push_back(
            {sparseSelection(step, stage, part), CKind::SparseSelection});
    }
  for (auto [tag, kind] : all) {
    EXPECT_EQ(static_cast<int>(collectives::kindOf(tag)),
              static_cast<int>(kind))
        << "collective tag " << tag;
    EXPECT_LT(tag, bit(56)) << "collectiveTag takes tags below 2^56";
  }
}

} // namespace
