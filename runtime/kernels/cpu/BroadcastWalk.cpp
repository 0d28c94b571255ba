//===- BroadcastWalk.cpp - broadcasting without an index per element ----===//

#include "CpuKernels.h"

namespace cdp::runtime::cpu {

BroadcastWalk::BroadcastWalk(const std::vector<std::vector<int64_t>> &inShapes,
                             const std::vector<int64_t> &outShape) {
  size_t rank = outShape.size(), count = inShapes.size();
  // Each operand's stride along each output axis (0 where it repeats).
  std::vector<std::vector<int64_t>> aligned(count,
                                            std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < count; ++k) {
    const std::vector<int64_t> &shape = inShapes[k];
    std::vector<int64_t> own = stridesOf(shape);
    size_t shift = rank - shape.size();
    for (size_t d = 0; d < shape.size(); ++d)
      aligned[k][d + shift] = shape[d] == 1 ? 0 : own[d];
  }
  // Merge axis d into the axis after it where every operand steps across
  // the pair as across one axis; axes of length 1 drop out.
  std::vector<int64_t> merged;
  std::vector<std::vector<int64_t>> mergedStrides(count);
  for (size_t d = 0; d < rank; ++d) {
    if (outShape[d] == 1)
      continue;
    bool joins = !merged.empty();
    for (size_t k = 0; k < count && joins; ++k)
      joins = mergedStrides[k].back() == aligned[k][d] * outShape[d];
    if (joins) {
      merged.back() *= outShape[d];
      for (size_t k = 0; k < count; ++k)
        mergedStrides[k].back() = aligned[k][d];
      continue;
    }
    merged.push_back(outShape[d]);
    for (size_t k = 0; k < count; ++k)
      mergedStrides[k].push_back(aligned[k][d]);
  }
  steps.assign(count, 0);
  strides = mergedStrides;
  if (merged.empty())
    return;
  length = merged.back();
  for (size_t k = 0; k < count; ++k) {
    steps[k] = strides[k].back();
    strides[k].pop_back();
  }
  merged.pop_back();
  sizes = merged;
  for (int64_t size : sizes)
    rowCount *= size;
}

} // namespace cdp::runtime::cpu
