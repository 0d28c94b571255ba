//===- SparseMirrorTest.cpp - LaySA's mirror update against top-k with a
// residual ===//
//
// The mirror form (M = W - r, two copies of a layer) must give the weights
// of the explicit-residual form (W, g and r), computed here independently
// in double precision with its own selection; and density 1 must be dense
// SGD on the workers' mean gradient.
//
//===----------------------------------------------------------------------===//

#include "kernels/cpu/SparseMirror.h"

#include "cdp/Schedule/Strategy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

using namespace cdp::runtime::cpu;

namespace {

/// The reference's top-k: a stable sort by magnitude keeps lower indices
/// first among equals.
std::vector<int> referenceTopK(const std::vector<double> &a, int64_t k) {
  std::vector<int> order(a.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    return std::fabs(a[x]) > std::fabs(a[y]);
  });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

struct MirrorRun {
  std::vector<float> weights;
  int differingSelections = 0;
};

/// `steps` steps of N workers on one layer of n weights: the mirror form,
/// and beside it the explicit-residual reference in double; returns the
/// mirror form's weights and checks them against the reference's.
MirrorRun runBoth(int64_t n, int workers, double density, int steps, float lr,
                  double tolerance) {
  std::mt19937 random(7);
  std::normal_distribution<float> normal;
  std::vector<float> w(n);
  for (float &x : w)
    x = normal(random);
  std::vector<double> wRef(w.begin(), w.end());
  std::vector<std::vector<float>> mirrors(workers, w);
  std::vector<std::vector<double>> residuals(workers, std::vector<double>(n));
  int64_t k = cdp::sparseCount(n, density);
  MirrorRun run;
  for (int step = 0; step < steps; ++step) {
    std::vector<SparseSelection> selections;
    std::vector<std::vector<int>> refIndices;
    std::vector<std::vector<double>> refValues;
    for (int worker = 0; worker < workers; ++worker) {
      std::vector<float> g(n);
      for (float &x : g)
        x = normal(random);
      std::vector<float> &mirror = mirrors[worker];
      for (int64_t i = 0; i < n; ++i) // absorb: M <- M - lr g
        mirror[i] -= lr * g[i];
      selections.push_back(
          selectTopK(pendingUpdate(w.data(), mirror.data(), n).data(), n, k));
      std::vector<double> &r = residuals[worker];
      for (int64_t i = 0; i < n; ++i)
        r[i] += static_cast<double>(lr) * g[i];
      refIndices.push_back(referenceTopK(r, k));
      std::vector<double> values;
      for (int i : refIndices.back())
        values.push_back(r[i]);
      refValues.push_back(values);
      std::vector<int> mine(selections.back().indices.begin(),
                            selections.back().indices.end());
      run.differingSelections += mine != refIndices.back();
    }
    // Each worker applies every worker's selection to its own copies; W
    // is the same on all of them.
    std::vector<float> shared = w;
    for (int worker = 0; worker < workers; ++worker) {
      std::vector<float> mine = w;
      applySparseUpdate(mine.data(), mirrors[worker].data(), n, selections,
                        worker);
      if (worker == 0)
        shared = mine;
      else
        EXPECT_EQ(mine, shared);
    }
    w = shared;
    std::vector<double> sum(n, 0.0);
    for (int worker = 0; worker < workers; ++worker)
      for (size_t j = 0; j < refIndices[worker].size(); ++j)
        sum[refIndices[worker][j]] += refValues[worker][j];
    for (int64_t i = 0; i < n; ++i)
      wRef[i] -= sum[i] / workers;
    for (int worker = 0; worker < workers; ++worker)
      for (size_t j = 0; j < refIndices[worker].size(); ++j)
        residuals[worker][refIndices[worker][j]] -= refValues[worker][j];
  }
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(w[i], wRef[i], tolerance) << "weight " << i;
  run.weights = w;
  return run;
}

} // namespace

TEST(SparseMirror, CountIsCeilOfDensityAtLeastOne) {
  using cdp::sparseCount;
  EXPECT_EQ(sparseCount(1000, 0.01), 10);
  EXPECT_EQ(sparseCount(1001, 0.01), 11);
  EXPECT_EQ(sparseCount(50, 0.01), 1);
  EXPECT_EQ(sparseCount(7, 1.0), 7);
  EXPECT_EQ(sparseCount(7, 2.0), 7);
  EXPECT_EQ(sparseCount(1000, 0.01, 1000), 10);
  EXPECT_EQ(sparseCount(999, 0.01, 1000), 999); // below the threshold: whole
}

TEST(SparseMirror, TopKBreaksTiesToTheLowestIndex) {
  std::vector<float> a = {1.0f, -3.0f, 2.0f, 3.0f, -2.0f, 2.0f};
  SparseSelection s = selectTopK(a.data(), 6, 3);
  EXPECT_EQ(s.indices, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(s.values, (std::vector<float>{-3.0f, 2.0f, 3.0f}));
  SparseSelection all = selectTopK(a.data(), 6, 6);
  EXPECT_EQ(all.indices, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
}

TEST(SparseMirror, EqualsTheExplicitResidualForm) {
  // 10 steps, 4 workers, 1 % and 10 % density; every selection the same
  // as the reference's (random normal gradients leave no near-ties here).
  for (double density : {0.01, 0.1}) {
    MirrorRun run = runBoth(2000, 4, density, 10, 0.1f, 1e-6);
    EXPECT_EQ(run.differingSelections, 0) << "density " << density;
  }
}

TEST(SparseMirror, DensityOneIsDenseSgdOnTheMeanGradient) {
  // Everything is sent every step: r stays 0 and W moves by lr times the
  // workers' mean gradient.
  MirrorRun run = runBoth(300, 3, 1.0, 5, 0.05f, 1e-6);
  EXPECT_EQ(run.differingSelections, 0);
}
