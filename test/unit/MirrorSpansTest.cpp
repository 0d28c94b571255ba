//===- MirrorSpansTest.cpp - the host mirrors of host-staged GPU kernels --===//

#include "kernels/MirrorSpans.h"

#include <gtest/gtest.h>

namespace cdp::runtime {
namespace {

TEST(MirrorSpans, TouchingViewsShareOneSpan) {
  // shard_gather's outputs: parameters one after another, then padding.
  char memory[64];
  std::vector<MirrorSpan> merged = mergeSpans(
      {{memory + 16, 16, true}, {memory, 16, true}, {memory + 32, 8, true}});
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_EQ(merged[0].begin, memory);
  EXPECT_EQ(merged[0].bytes, 40u);
  EXPECT_EQ(spanHolding(merged, memory + 20), 0u);
}

TEST(MirrorSpans, OverlapKeepsTheLongerEndAndAnyWrite) {
  char memory[64];
  std::vector<MirrorSpan> merged =
      mergeSpans({{memory, 32, false}, {memory + 8, 8, true}});
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_EQ(merged[0].bytes, 32u);
  EXPECT_TRUE(merged[0].written);
}

TEST(MirrorSpans, GapsKeepSpansApartAndFindTheirOwner) {
  char memory[64];
  std::vector<MirrorSpan> merged = mergeSpans(
      {{memory + 40, 8, true}, {memory, 8, false}, {memory + 9, 4, false}});
  ASSERT_EQ(merged.size(), 3u);
  EXPECT_FALSE(merged[0].written);
  EXPECT_TRUE(merged[2].written);
  EXPECT_EQ(spanHolding(merged, memory + 7), 0u);
  EXPECT_EQ(spanHolding(merged, memory + 9), 1u);
  EXPECT_EQ(spanHolding(merged, memory + 47), 2u);
}

} // namespace
} // namespace cdp::runtime
