//===- AttentionGeometry.h - attention sizes, every backend -----*- C++ -*-===//
//
// cdp.attention multiplies `count` slices (the batch dimensions, shared by
// its three operands): scores S = A B (m x n from m x k and k x n), then
// O = softmax(S + bias) V (m x d). Its stats hold two floats per scores row
// (the row's maximum and the log of its sum of exponentials), from which
// attention_grad recomputes the probabilities. One definition for the CPU
// and CUDA kernels.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_ATTENTIONGEOMETRY_H
#define CDP_RUNTIME_KERNELS_ATTENTIONGEOMETRY_H

#include <cstdint>
#include <vector>

namespace cdp::runtime {

struct AttentionGeometry {
  int64_t count = 1, m = 0, k = 0, n = 0, d = 0;
  /// The scores' shape: the batch dimensions, then m and n.
  std::vector<int64_t> scores;

  AttentionGeometry(const std::vector<int64_t> &a,
                    const std::vector<int64_t> &b,
                    const std::vector<int64_t> &v) {
    size_t rank = a.size();
    for (size_t i = 0; i + 2 < rank; ++i)
      count *= a[i];
    m = a[rank - 2];
    k = a[rank - 1];
    n = b[rank - 1];
    d = v[rank - 1];
    scores.assign(a.begin(), a.end() - 2);
    scores.push_back(m);
    scores.push_back(n);
  }
  int64_t scoresPerSlice() const { return m * n; }
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_ATTENTIONGEOMETRY_H
