//===- IndexMapTest.cpp - the GPU kernels' offset arithmetic
//---------------===//
//
// An IndexMap must give every index the offset the plain definition gives
// (per dimension, from the innermost: (i mod size) * stride, then i / size),
// whatever it collapsed and however it divided: against that definition
// over the original dimensions for broadcasts, transposes, slices and
// size-1 dimensions, indices past the end (the definition wraps) and
// indices around 2^31, where the 32-bit dividers stop. The dividers
// themselves against `/` over divisors and numerators at their edges.
//
//===----------------------------------------------------------------------===//

#include "kernels/IndexMap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace {

using cdp::runtime::FastDivider;
using cdp::runtime::IndexMap;

int64_t definition(const std::vector<int64_t> &sizes,
                   const std::vector<int64_t> &strides, int64_t base,
                   int64_t i) {
  int64_t offset = base;
  for (size_t d = sizes.size(); d-- > 0;) {
    int64_t size = std::max<int64_t>(sizes[d], 1);
    offset += (i % size) * strides[d];
    i /= size;
  }
  return offset;
}

int64_t product(const std::vector<int64_t> &sizes) {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= std::max<int64_t>(s, 1);
  return n;
}

void expectDefinition(const std::vector<int64_t> &sizes,
                      const std::vector<int64_t> &strides, int64_t base,
                      int expectedRank) {
  IndexMap map;
  ASSERT_TRUE(IndexMap::build(sizes, strides, base, map));
  EXPECT_EQ(map.rank, expectedRank);
  int64_t total = product(sizes);
  for (int64_t i = 0; i < 3 * total + 7; ++i) // past the end: it wraps
    ASSERT_EQ(map(i), definition(sizes, strides, base, i)) << "index " << i;
}

TEST(FastDivider, EqualsDivisionAtTheEdges) {
  std::vector<uint32_t> divisors = {1,        2,
                                    3,        5,
                                    7,        12,
                                    64,       768,
                                    2304,     50257,
                                    65535,    65536,
                                    65537,    (1u << 30) - 1,
                                    1u << 30, (1u << 31) - 1};
  std::vector<uint32_t> numerators = {0,
                                      1,
                                      2,
                                      63,
                                      64,
                                      65,
                                      1000003,
                                      (1u << 30) - 1,
                                      1u << 30,
                                      (1u << 31) - 2,
                                      (1u << 31) - 1};
  std::mt19937 random(7);
  for (uint32_t d : divisors) {
    FastDivider divider(d);
    std::vector<uint32_t> ns = numerators;
    for (uint32_t k = 0; k < 3; ++k) // multiples of d and their neighbours
      for (uint32_t q : {1u, 2u, (1u << 31) / d - 1}) {
        uint64_t at = uint64_t(q) * d + k - 1;
        if (q > 0 && at < (1u << 31))
          ns.push_back(static_cast<uint32_t>(at));
      }
    for (int k = 0; k < 2000; ++k)
      ns.push_back(random() & 0x7fffffffu);
    for (uint32_t n : ns)
      ASSERT_EQ(divider.quotient(n), n / d) << n << " / " << d;
  }
}

TEST(FastDivider, EqualsDivisionForSmallDivisorsExhaustively) {
  for (uint32_t d = 1; d <= 300; ++d) {
    FastDivider divider(d);
    for (uint32_t n = 0; n < 70000; ++n)
      ASSERT_EQ(divider.quotient(n), n / d) << n << " / " << d;
  }
}

TEST(IndexMap, ATransposeKeepsItsDimensions) {
  // [B, S, H, D] read as [B, H, S, D]: GPT-2's heads.
  expectDefinition({2, 3, 4, 5}, {60, 5, 15, 1}, 0, 4);
}

TEST(IndexMap, ContiguousDimensionsMergeIntoOne) {
  expectDefinition({2, 3, 4, 5}, {60, 20, 5, 1}, 9, 1);
  // A slice of the last dimension: rows stay apart, the rest merges.
  expectDefinition({2, 3, 4}, {36, 12, 1}, 4, 2);
}

TEST(IndexMap, BroadcastDimensionsMergeAndSizeOneDrops) {
  // A bias [1, 1, 5] over [2, 3, 5]: the two repeated dimensions merge.
  expectDefinition({2, 3, 5}, {0, 0, 1}, 0, 2);
  // A scale [C, 1, 1] over [N, C, H, W].
  expectDefinition({2, 3, 4, 4}, {0, 1, 0, 0}, 0, 3);
  expectDefinition({1, 6, 1, 1}, {6, 1, 1, 1}, 0, 1);
  expectDefinition({1, 1}, {3, 1}, 5, 0);
  expectDefinition({}, {}, 2, 0);
}

TEST(IndexMap, RandomViewsEqualTheDefinition) {
  std::mt19937 random(11);
  for (int trial = 0; trial < 400; ++trial) {
    int rank = 1 + random() % 6;
    std::vector<int64_t> sizes(rank), strides(rank);
    for (int d = 0; d < rank; ++d) {
      sizes[d] = 1 + random() % 4;
      strides[d] = random() % 3 == 0 ? 0 : int64_t(random() % 50);
    }
    if (trial % 2) { // half of them strides of a real layout, permuted
      int64_t step = 1;
      for (int d = rank - 1; d >= 0; --d)
        strides[d] = step, step *= sizes[d];
      std::shuffle(strides.begin(), strides.end(), random);
    }
    IndexMap map;
    ASSERT_TRUE(IndexMap::build(sizes, strides, 3, map));
    int64_t total = product(sizes);
    for (int64_t i = 0; i < 2 * total + 3; ++i)
      ASSERT_EQ(map(i), definition(sizes, strides, 3, i))
          << "trial " << trial << " index " << i;
  }
}

TEST(IndexMap, IndicesAroundTwoToTheThirtyOne) {
  // The 32-bit path stops at 2^31 - 1; beyond it the 64-bit one answers.
  std::vector<int64_t> sizes = {3, 50257, 7, 2048},
                       strides = {1, 3 * 7 * 2048, 3, 21};
  IndexMap map;
  ASSERT_TRUE(IndexMap::build(sizes, strides, 0, map));
  ASSERT_TRUE(map.fast);
  for (int64_t i :
       {int64_t(INT32_MAX) - 2, int64_t(INT32_MAX) - 1, int64_t(INT32_MAX),
        int64_t(INT32_MAX) + 1, int64_t(1) << 32, (int64_t(1) << 33) + 12345})
    EXPECT_EQ(map(i), definition(sizes, strides, 0, i)) << "index " << i;
}

TEST(IndexMap, ASizeOverTwoToTheThirtyOneDividesIn64Bits) {
  std::vector<int64_t> sizes = {3, int64_t(1) << 32}, strides = {0, 2};
  IndexMap map;
  ASSERT_TRUE(IndexMap::build(sizes, strides, 0, map));
  EXPECT_FALSE(map.fast);
  for (int64_t i : {int64_t(5), (int64_t(1) << 32) + 9, int64_t(3) << 32})
    EXPECT_EQ(map(i), definition(sizes, strides, 0, i)) << "index " << i;
}

TEST(IndexMap, ValuesOfRepeatedBlocks) {
  // A batched product's operand of batch [2, 1, 3] broadcast to [2, 4, 3],
  // matrices of 6 values: value e reads blocks(e / 6) * 6 + e % 6.
  IndexMap blocks, values;
  ASSERT_TRUE(IndexMap::build({2, 4, 3}, {3, 0, 1}, 1, blocks));
  ASSERT_TRUE(IndexMap::ofBlocks(blocks, 6, values));
  for (int64_t e = 0; e < 2 * 2 * 4 * 3 * 6; ++e)
    ASSERT_EQ(values(e), blocks(e / 6) * 6 + e % 6) << "value " << e;
  // One matrix for all (no batch): the identity.
  ASSERT_TRUE(IndexMap::ofBlocks(IndexMap(), 10, values));
  EXPECT_EQ(values.rank, 1);
  for (int64_t e = 0; e < 10; ++e)
    ASSERT_EQ(values(e), e);
}

TEST(IndexMap, MoreDimensionsThanTheKernelsTakeAfterCollapsing) {
  std::vector<int64_t> sizes(9, 2), permuted(9), contiguous(9);
  int64_t step = 1;
  for (int d = 8; d >= 0; --d)
    contiguous[d] = step, step *= 2;
  for (int d = 0; d < 9; ++d)
    permuted[d] = contiguous[8 - d];
  IndexMap map;
  EXPECT_FALSE(IndexMap::build(sizes, permuted, 0, map));
  EXPECT_TRUE(IndexMap::build(sizes, contiguous, 0, map));
  EXPECT_EQ(map.rank, 1);
}

} // namespace
