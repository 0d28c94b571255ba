//===- ShuffleTest.cpp - --shuffle's orders are NumPy's -------------------===//
//
// numpyPermutation against numpy.random.default_rng(seed).permutation(n)
// as NumPy 1.24 prints it (a one-word and a two-word seed, so both of
// SeedSequence's entropy paths); EpochOrders across an epoch's end.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Shuffle.h"

#include <gtest/gtest.h>

using namespace cdp::runtime;

namespace {

TEST(Shuffle, PermutationIsNumPys) {
  // python3 -c "import numpy as np;
  // print(np.random.default_rng(0).permutation(10))"
  EXPECT_EQ(numpyPermutation(0, 10),
            (std::vector<int64_t>{4, 6, 2, 7, 3, 5, 9, 0, 8, 1}));
  // default_rng(2**40 + 7).permutation(12)
  EXPECT_EQ(numpyPermutation((uint64_t(1) << 40) + 7, 12),
            (std::vector<int64_t>{8, 2, 6, 1, 11, 9, 3, 7, 4, 5, 0, 10}));
  EXPECT_EQ(numpyPermutation(3, 1), (std::vector<int64_t>{0}));
  EXPECT_TRUE(numpyPermutation(3, 0).empty());
}

TEST(Shuffle, EpochsFollowOneAnother) {
  EpochOrders orders(5, 4);
  std::vector<int64_t> first = numpyPermutation(5, 4),
                       second = numpyPermutation(6, 4);
  // Rows 2 to 6: the end of epoch 0, then the start of epoch 1.
  EXPECT_EQ(orders.samples(2, 5),
            (std::vector<int64_t>{first[2], first[3], second[0], second[1],
                                  second[2]}));
  // Far ahead (epoch 10: seed 15) and back again: dropped epochs are made
  // again, the same.
  EXPECT_EQ(orders.samples(40, 4), numpyPermutation(15, 4));
  for (int64_t e = 11; e < 20; ++e)
    orders.samples(4 * e, 1);
  EXPECT_EQ(orders.samples(0, 4), first);
}

} // namespace
