//===- SparseMirror.cpp - top-k selection and the mirror weight update ----===//

#include "SparseMirror.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace cdp::runtime::cpu {

SparseSelection selectTopK(const float *a, int64_t n, int64_t k) {
  k = std::clamp<int64_t>(k, 0, n);
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Larger magnitude first; equal magnitudes by index, so the choice at
  // the k-th place is the lowest index (a strict weak order: deterministic).
  auto before = [&](int32_t x, int32_t y) {
    float ax = std::fabs(a[x]), ay = std::fabs(a[y]);
    return ax != ay ? ax > ay : x < y;
  };
  std::nth_element(order.begin(), order.begin() + k, order.end(), before);
  order.resize(static_cast<size_t>(k));
  std::sort(order.begin(), order.end());
  SparseSelection selection;
  selection.indices = order;
  for (int32_t i : order)
    selection.values.push_back(a[i]);
  return selection;
}

std::vector<float> pendingUpdate(const float *weights, const float *mirror,
                                 int64_t n) {
  std::vector<float> pending(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    pending[i] = weights[i] - mirror[i];
  return pending;
}

void applySparseUpdate(float *weights, float *mirror, int64_t n,
                       const std::vector<SparseSelection> &workers, int self) {
  // The sum in worker order, then the mean, as the dense reductions do.
  std::vector<float> sum(static_cast<size_t>(n), 0.0f);
  std::vector<char> touched(static_cast<size_t>(n), 0);
  for (const SparseSelection &worker : workers)
    for (size_t j = 0; j < worker.indices.size(); ++j) {
      sum[worker.indices[j]] += worker.values[j];
      touched[worker.indices[j]] = 1;
    }
  float scale = 1.0f / static_cast<float>(workers.size());
  for (int64_t i = 0; i < n; ++i) {
    if (!touched[i])
      continue;
    float step = sum[i] * scale;
    weights[i] -= step;
    if (mirror)
      mirror[i] -= step;
  }
  if (!mirror)
    return;
  const SparseSelection &own = workers[static_cast<size_t>(self)];
  for (size_t j = 0; j < own.indices.size(); ++j)
    mirror[own.indices[j]] += own.values[j];
}

} // namespace cdp::runtime::cpu
