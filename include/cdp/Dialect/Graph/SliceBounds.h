//===- SliceBounds.h - ONNX Slice: one axis's first index and count -------===//
//
// ONNX's clamping rules for one sliced axis, shared by the shape rule and
// constant folding so the two cannot disagree. Every step but 0 is valid,
// including steps near +-2^63, so the count is computed without overflow.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_DIALECT_GRAPH_SLICEBOUNDS_H
#define CDP_DIALECT_GRAPH_SLICEBOUNDS_H

#include <algorithm>
#include <cstdint>
#include <limits>

namespace cdp {

/// The elements one axis of a Slice keeps: the first index and how many.
struct SliceAxis {
  int64_t first = 0;
  int64_t count = 0;
};

/// Resolves `start`, `end` and a non-zero `step` on an axis of `dim`
/// elements (negative start and end count from the end, then clamp).
inline SliceAxis resolveSliceAxis(int64_t start, int64_t end, int64_t step,
                                  int64_t dim) {
  if (start < 0)
    start += dim;
  if (end < 0)
    end += dim;
  if (dim == 0)
    return {0, 0};
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    return {start, end > start ? 1 + (end - start - 1) / step : 0};
  }
  start = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  // -step overflows at the lowest int64_t; any stride above dim counts 1.
  int64_t stride = step == std::numeric_limits<int64_t>::min()
                       ? std::numeric_limits<int64_t>::max()
                       : -step;
  return {start, start > end ? 1 + (start - end - 1) / stride : 0};
}

} // namespace cdp

#endif // CDP_DIALECT_GRAPH_SLICEBOUNDS_H
