//===- GatherGeometry.h - a gather's sizes for every backend ----*- C++ -*-===//
//
// ONNX Gather along `axis` of data (outer x dim x inner), and its gradient's
// padding row: nn.Embedding's padding_idx, whose lookups give that row
// nothing (a negative one counts from the end). One definition for the CPU
// and CUDA kernels.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_GATHERGEOMETRY_H
#define CDP_RUNTIME_KERNELS_GATHERGEOMETRY_H

#include "cdp/Runtime/Kernel.h"

#include <cstdint>
#include <vector>

namespace cdp::runtime {

struct GatherGeometry {
  int64_t outer = 1, dim = 0, inner = 1;
  /// The padding row, or -1 for none.
  int64_t padding = -1;

  /// `data`: the gathered table's shape (gather's input, gather_grad's
  /// result).
  GatherGeometry(const KernelArgs &args, const std::vector<int64_t> &data) {
    int64_t rank = static_cast<int64_t>(data.size()), axis = args.i("axis", 0);
    axis = axis < 0 ? axis + rank : axis;
    for (int64_t d = 0; d < axis; ++d)
      outer *= data[d];
    dim = data[axis];
    for (int64_t d = axis + 1; d < rank; ++d)
      inner *= data[d];
    padding = args.i("padding_idx", -1);
    padding += padding < 0 && args.find("padding_idx") ? dim : 0;
  }
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_GATHERGEOMETRY_H
