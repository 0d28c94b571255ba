//===- AttentionGeometry.h - attention sizes, every backend -----*- C++ -*-===//
//
// cdp.attention multiplies `count` slices (the batch dimensions, shared by
// its three operands): scores S = A B (m x n from m x k and k x n), then
// O = softmax(S + bias) V (m x d). Its stats hold two floats per scores row
// (the row's maximum and the log of its sum of exponentials), from which
// attention_grad recomputes the probabilities. One definition for the CPU
// and CUDA kernels.
//
// Under `layout = "bshd"` the operands are 4-D and keep the heads after the
// sequence, as the projections write them: a (B, M, H, K), b the keys
// (B, N, H, K), v (B, N, H, D), the result (B, M, H, D); slice (o, h) is
// sequence rows H * K (or H * D) values apart, and b's slice is the
// transpose of the k x n matrix the product reads. The stats and the bias
// stay in the logical (B, H, M, ...) order.
//
// Grouped-query attention: b and v may have H / group heads; query slice i
// reads their slice i / group (the heads are the last batch dimension, so
// (b H + h) / group = b H_kv + h / group). attention_grad writes the
// gradients of b and v per query slice, laid out as b and v with H heads:
// the compiler sums each group's.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_ATTENTIONGEOMETRY_H
#define CDP_RUNTIME_KERNELS_ATTENTIONGEOMETRY_H

#include "cdp/Support/AttentionLayout.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace cdp::runtime {

/// Where an operand's slices lie: slice i's matrix (rows x cols, row-major,
/// rows `ld` apart) starts at offset(i). Contiguous slices, or the heads of
/// a (B, rows, H, cols) tensor.
struct SliceLayout {
  int64_t rows = 0, cols = 0, heads = 1, ld = 0;
  bool interleaved = false; ///< (B, rows, H, cols)

  static SliceLayout contiguous(int64_t rows, int64_t cols) {
    return {rows, cols, 1, cols, false};
  }
  static SliceLayout headsInterleaved(int64_t rows, int64_t heads,
                                      int64_t cols) {
    return {rows, cols, heads, heads * cols, true};
  }
  int64_t offset(int64_t slice) const {
    if (!interleaved)
      return slice * rows * cols;
    return (slice / heads) * rows * heads * cols + (slice % heads) * cols;
  }
  /// How far apart the matrices of consecutive slices of one batch row
  /// are (all slices when contiguous).
  int64_t stride() const { return interleaved ? cols : rows * cols; }
};

/// The layout attribute's values.
inline bool isHeadsInterleaved(const std::string &layout) {
  return layout == "bshd";
}

/// The logical (..., M, N) shape of `shape` (a, v or the result under
/// "bshd": (B, S, H, X) -> (B, H, S, X); b: (B, N, H, K) -> (B, H, K, N)).
inline std::vector<int64_t> logicalShape(const std::vector<int64_t> &shape,
                                         bool interleaved, bool keys) {
  if (!interleaved || shape.size() != 4)
    return shape;
  return headsFirst<std::vector<int64_t>>(shape, keys);
}

struct AttentionGeometry {
  int64_t count = 1, m = 0, k = 0, n = 0, d = 0;
  /// Query slices per slice of b and v (grouped-query attention), 1 else.
  int64_t group = 1;
  /// The scores' shape: the batch dimensions, then m and n.
  std::vector<int64_t> scores;
  /// Where a, b (as stored: n x k under bshd), v and the result (or its
  /// gradient) lie; b's and v's slices are kv slices (i / group).
  SliceLayout aAt, bAt, vAt, outAt;
  /// Where the gradients of b and v lie: one slice per query slice.
  SliceLayout bGradAt, vGradAt;
  bool interleaved = false;

  AttentionGeometry(const std::vector<int64_t> &aShape,
                    const std::vector<int64_t> &bShape,
                    const std::vector<int64_t> &vShape,
                    const std::string &layout = "") {
    interleaved = isHeadsInterleaved(layout) && aShape.size() == 4;
    std::vector<int64_t> a = logicalShape(aShape, interleaved, false),
                         b = logicalShape(bShape, interleaved, true),
                         v = logicalShape(vShape, interleaved, false);
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
    group = std::max<int64_t>(1, queryHeadsPerKeyHead(a, b));
    if (interleaved) {
      int64_t heads = a[1], kvHeads = heads / group;
      aAt = SliceLayout::headsInterleaved(m, heads, k);
      bAt = SliceLayout::headsInterleaved(n, kvHeads, k);
      vAt = SliceLayout::headsInterleaved(n, kvHeads, d);
      outAt = SliceLayout::headsInterleaved(m, heads, d);
      bGradAt = SliceLayout::headsInterleaved(n, heads, k);
      vGradAt = SliceLayout::headsInterleaved(n, heads, d);
    } else {
      aAt = SliceLayout::contiguous(m, k);
      bAt = bGradAt = SliceLayout::contiguous(k, n);
      vAt = vGradAt = SliceLayout::contiguous(n, d);
      outAt = SliceLayout::contiguous(m, d);
    }
  }
  /// The slice of b and v that query slice `i` reads.
  int64_t kvSlice(int64_t i) const { return i / group; }
  int64_t scoresPerSlice() const { return m * n; }
  /// Slices of one batch row: a chunk of interleaved slices stays in one.
  int64_t slicesPerRow() const { return interleaved ? aAt.heads : count; }
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_ATTENTIONGEOMETRY_H
