//===- BroadcastWalkTest.cpp - broadcasting without an index per element ===//
//
// BroadcastWalk visits the elements NumPy broadcasting pairs: for every
// output element, each operand's offset equals the per-element index the
// kernels held before (broadcastIndex), on shapes a transformer and a CNN
// broadcast (a bias, an attention mask, a (C, 1, 1) scale, a scalar, equal
// shapes, a size-1 axis in the middle).
//
//===----------------------------------------------------------------------===//

#include "kernels/cpu/CpuKernels.h"

#include <gtest/gtest.h>

using namespace cdp::runtime::cpu;

namespace {

using Shape = std::vector<int64_t>;

/// Every operand's offsets through the walk, element by element.
std::vector<Shape> walked(const std::vector<Shape> &in, const Shape &out) {
  BroadcastWalk walk(in, out);
  std::vector<Shape> offsets(in.size());
  for (int64_t row = 0; row < walk.rows(); ++row)
    for (int64_t i = 0; i < walk.rowLength(); ++i)
      for (size_t k = 0; k < in.size(); ++k)
        offsets[k].push_back(walk.rowStart(k, row) + i * walk.step(k));
  return offsets;
}

TEST(BroadcastWalkTest, VisitsWhatBroadcastIndexPairs) {
  struct Case {
    std::vector<Shape> in;
    Shape out;
  };
  std::vector<Case> cases = {
      {{{2, 3, 8}, {8}}, {2, 3, 8}},                     // a bias
      {{{1, 4, 5, 5}, {1, 1, 5, 5}}, {1, 4, 5, 5}},      // a mask
      {{{2, 3, 4, 4}, {3, 1, 1}}, {2, 3, 4, 4}},         // a scale
      {{{6, 7}, {}}, {6, 7}},                            // a scalar
      {{{3, 5}, {3, 5}}, {3, 5}},                        // equal
      {{{3, 1, 5}, {3, 4, 1}}, {3, 4, 5}},               // both repeat
      {{{1, 1, 5, 5}, {2, 3, 1, 1}, {5}}, {2, 3, 5, 5}}, // three
      {{{2, 1, 3}, {1}}, {2, 1, 3}},                     // a size-1 axis
      {{{1}, {1, 1}}, {1, 1}},                           // one element
      {{{4, 1}, {4, 1}}, {4, 1}},                        // a trailing 1
  };
  for (const Case &c : cases) {
    std::vector<Shape> offsets = walked(c.in, c.out);
    for (size_t k = 0; k < c.in.size(); ++k)
      EXPECT_EQ(offsets[k], broadcastIndex(c.in[k], c.out))
          << "operand " << k << " of case " << (&c - cases.data());
  }
}

} // namespace
