//===- ReductionTransposeTest.cpp - reduce_to and transpose kernels -------===//
//
// The blocked reduction must equal, bit for bit, the element-by-element loop
// it replaced (out[index[i]] += in[i] in the order of i), on one thread and
// on several: pipelines and single-device runs compare parameters exactly.
//
//===----------------------------------------------------------------------===//

#include "kernels/cpu/BroadcastReduction.h"
#include "kernels/cpu/Transposition.h"

#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <random>

namespace {

using cdp::runtime::cpu::BroadcastReduction;
using cdp::runtime::cpu::Transposition;

/// The loop reduce_to ran before: y[offset of x's element in y] += x[i].
std::vector<float> elementLoop(const std::vector<int64_t> &outShape,
                               const std::vector<int64_t> &inShape,
                               const std::vector<float> &x) {
  size_t rank = inShape.size(), shift = rank - outShape.size();
  std::vector<int64_t> outStride(rank, 0);
  int64_t stride = 1, count = 1;
  for (int64_t d = static_cast<int64_t>(outShape.size()) - 1; d >= 0; --d) {
    if (outShape[d] != 1)
      outStride[d + shift] = stride;
    stride *= outShape[d];
  }
  count = stride;
  std::vector<float> y(count, 0.0f);
  std::vector<int64_t> position(rank, 0);
  for (float value : x) {
    int64_t offset = 0;
    for (size_t d = 0; d < rank; ++d)
      offset += position[d] * outStride[d];
    y[offset] += value;
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d)
      if (++position[d] < inShape[d])
        break;
      else
        position[d] = 0;
  }
  return y;
}

TEST(BroadcastReduction, EqualsTheElementLoopBitForBit) {
  std::mt19937 rng(7);
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{64}, {300, 64}},               // a bias gradient: reduced, kept
      {{1, 8, 1, 1}, {40, 8, 30, 30}}, // BatchNorm-like: reduced, kept, reduced
      {{300, 1}, {300, 500}},          // kept, reduced
      {{}, {7, 9}},                    // to a scalar
      {{1}, {5}},                      // a rank-1 scalar
      {{6, 8, 32}, {6, 8, 32}},        // nothing reduced
      {{8, 1, 32}, {3, 8, 100, 32}},   // reduced, kept, reduced, kept
      {{1, 1, 5}, {2, 1, 3, 5}},       // size-1 dimensions of x
      {{3, 1}, {2, 3, 4000}},
      // Bias gradients the threads split into stripes of columns (one a
      // thread, at least 256): 1, 2 and 3 stripes, the last short.
      {{1000}, {200, 1000}},
      {{1, 700}, {3, 40, 700}},
  };
  for (auto &[outShape, inShape] : cases) {
    int64_t n = 1;
    for (int64_t d : inShape)
      n *= d;
    std::vector<float> x(n);
    std::uniform_real_distribution<float> value(-1, 1);
    for (float &v : x)
      v = value(rng);
    std::vector<float> expected = elementLoop(outShape, inShape, x);
    BroadcastReduction reduction(outShape, inShape);
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      std::vector<float> y(expected.size(), 42.0f);
      reduction.run(x.data(), y.data());
      EXPECT_EQ(
          0, std::memcmp(y.data(), expected.data(), y.size() * sizeof(float)))
          << "case of rank " << inShape.size() << " -> " << outShape.size()
          << ", " << threads << " threads";
    }
  }
}

/// Transpose against the definition: y[i_0..i_{r-1}] = x at position p
/// with p[perm[d]] = i_d, for element sizes 4, 8 and 1.
TEST(Transposition, EqualsTheDefinition) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{8, 6, 4, 8}, {0, 2, 1, 3}}, {{8, 6, 4, 8}, {0, 2, 3, 1}},
      {{300, 500}, {1, 0}},         {{5}, {0}},
      {{2, 3, 4}, {2, 0, 1}},       {{1, 7, 1}, {2, 1, 0}},
      {{3, 0, 2}, {1, 2, 0}},
  };
  for (auto &[shape, perm] : cases)
    for (int64_t width : {4, 8, 1}) {
      size_t rank = shape.size();
      int64_t n = 1;
      for (int64_t d : shape)
        n *= d;
      std::vector<unsigned char> x(n * width), y(n * width, 0xAB),
          expected(n * width);
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<unsigned char>(i * 31 + 7);
      std::vector<int64_t> outShape(rank), position(rank, 0), inStride(rank, 1);
      for (int64_t d = static_cast<int64_t>(rank) - 2; d >= 0; --d)
        inStride[d] = inStride[d + 1] * shape[d + 1];
      for (size_t d = 0; d < rank; ++d)
        outShape[d] = shape[perm[d]];
      for (int64_t i = 0; i < n; ++i) {
        int64_t source = 0;
        for (size_t d = 0; d < rank; ++d)
          source += position[d] * inStride[perm[d]];
        std::memcpy(&expected[i * width], &x[source * width], width);
        for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d)
          if (++position[d] < outShape[d])
            break;
          else
            position[d] = 0;
      }
      Transposition(shape, perm, width).run(x.data(), y.data());
      EXPECT_EQ(y, expected) << "rank " << rank << ", width " << width;
    }
}

} // namespace

namespace {

/// reduce_sum's kernel from the registry on x of `shape` over `axes`.
std::vector<float> reduceSum(const std::vector<int64_t> &shape,
                             const std::vector<int64_t> &axes,
                             std::vector<float> &x, int64_t outCount) {
  using namespace cdp;
  using namespace cdp::runtime;
  plan::Instruction instruction;
  instruction.set_op("reduce_sum");
  plan::Attribute *a = instruction.add_attributes();
  a->set_name("axes");
  for (int64_t axis : axes)
    a->mutable_ints()->add_values(axis);
  std::vector<float> y(outCount, -1.0f);
  TensorView in, out;
  in.data = x.data();
  in.shape = shape;
  in.dtype = plan::F32;
  out.data = y.data();
  out.shape = {outCount};
  out.dtype = plan::F32;
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = {in};
  args.outputs = {out};
  auto kernel =
      (*KernelRegistry::instance().lookup("reduce_sum", Backend::CPU))(args);
  kernel->run(StepContext());
  return y;
}

} // namespace

// reduce_sum over all axes but one contiguous run (a convolution's bias
// gradient: N, H, W around C) sums rows directly; it must equal the indexed
// loop (double sums in x's element order) bit for bit, as must the cases
// that keep the indexed loop (a reduced axis between kept ones).
TEST(ReduceSum, KeptRunEqualsTheIndexedLoopBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  struct Case {
    std::vector<int64_t> shape, axes;
  };
  for (const Case &c : std::vector<Case>{{{8, 6, 24, 24}, {0, 2, 3}},
                                         {{8, 16, 8, 8}, {0, 2, 3}},
                                         {{300, 7}, {0}},
                                         {{7, 300}, {1}},
                                         {{3, 4, 5}, {}},
                                         {{2, 3, 4, 5}, {0, 2}}}) {
    int64_t count = 1, kept = 1;
    for (int64_t d = 0; d < static_cast<int64_t>(c.shape.size()); ++d) {
      count *= c.shape[d];
      bool reduced = c.axes.empty() ||
                     std::find(c.axes.begin(), c.axes.end(), d) != c.axes.end();
      if (!reduced)
        kept *= c.shape[d];
    }
    std::vector<float> x(count);
    for (float &v : x)
      v = normal(rng);
    // The reference: each element added, in order, to its output's double.
    std::vector<double> sums(kept, 0.0);
    std::vector<int64_t> position(c.shape.size(), 0);
    for (float v : x) {
      int64_t o = 0;
      for (size_t d = 0; d < c.shape.size(); ++d) {
        bool reduced = c.axes.empty() ||
                       std::find(c.axes.begin(), c.axes.end(),
                                 static_cast<int64_t>(d)) != c.axes.end();
        if (!reduced)
          o = o * c.shape[d] + position[d];
      }
      sums[o] += v;
      for (int64_t d = static_cast<int64_t>(c.shape.size()) - 1; d >= 0; --d)
        if (++position[d] < c.shape[d])
          break;
        else
          position[d] = 0;
    }
    std::vector<float> got = reduceSum(c.shape, c.axes, x, kept);
    for (int64_t k = 0; k < kept; ++k)
      ASSERT_EQ(got[k], static_cast<float>(sums[k]))
          << "output " << k << " of shape case with " << c.shape.size()
          << " dims";
  }
}
