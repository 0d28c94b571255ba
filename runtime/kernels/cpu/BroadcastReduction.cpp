//===- BroadcastReduction.cpp - sums over broadcast dimensions ------------===//

#include "BroadcastReduction.h"

#include "../NarrowFloat.h"
#include "VectorMath.h"

#include <algorithm>
#include <numeric>

#include <omp.h>

namespace cdp::runtime::cpu {

namespace {

/// One merged run of dimensions: its length and whether y keeps it.
struct Run {
  int64_t length;
  bool kept;
};

/// x's dimensions as runs of kept and reduced ones (size-1 dimensions
/// dropped: they change no offset).
std::vector<Run> mergedRuns(const std::vector<int64_t> &outShape,
                            const std::vector<int64_t> &inShape) {
  std::vector<Run> runs;
  size_t shift = inShape.size() - outShape.size();
  for (size_t d = 0; d < inShape.size(); ++d) {
    if (inShape[d] == 1)
      continue;
    bool kept = d >= shift && outShape[d - shift] != 1;
    if (!runs.empty() && runs.back().kept == kept)
      runs.back().length *= inShape[d];
    else
      runs.push_back({inShape[d], kept});
  }
  return runs;
}

/// out[j] += x[j] for j < n, in vectors (CDP_VECTOR_CLONES).
CDP_VECTOR_CLONES void addedRow(const float *x, int64_t n, float *out) {
  for (int64_t j = 0; j < n; ++j)
    out[j] += x[j];
}

/// out[j] += x[j]'s value (bf16, else fp16 bits) for j < n, in vectors.
CDP_VECTOR_CLONES void addedWidenedRow(const uint16_t *x, int64_t n, bool bf16,
                                       float *out) {
  if (bf16)
    for (int64_t j = 0; j < n; ++j)
      out[j] += floatOfBfloat16(x[j]);
  else
    for (int64_t j = 0; j < n; ++j)
      out[j] += floatOfFloat16(x[j]);
}

} // namespace

BroadcastReduction::BroadcastReduction(const std::vector<int64_t> &outShape,
                                       const std::vector<int64_t> &inShape) {
  outCount = 1;
  for (int64_t d : outShape)
    outCount *= d;
  std::vector<Run> runs = mergedRuns(outShape, inShape);
  if (runs.empty())
    runs.push_back({1, true});
  rowLength = runs.back().length;
  innerKept = runs.back().kept;
  runs.pop_back();
  // Each row's first output: the kept runs before the innermost one, in
  // y's order (y's offsets count only kept dimensions).
  int64_t rows = 1;
  for (const Run &run : runs)
    rows *= run.length;
  rowOutput.assign(rows, 0);
  int64_t keptAfter = innerKept ? rowLength : 1; // y elements per unit
  std::vector<int64_t> outStride(runs.size(), 0);
  for (int64_t r = static_cast<int64_t>(runs.size()) - 1; r >= 0; --r)
    if (runs[r].kept) {
      outStride[r] = keptAfter;
      keptAfter *= runs[r].length;
    }
  std::vector<int64_t> position(runs.size(), 0);
  int64_t offset = 0;
  for (int64_t row = 0; row < rows; ++row) {
    rowOutput[row] = offset;
    for (int64_t r = static_cast<int64_t>(runs.size()) - 1; r >= 0; --r) {
      offset += outStride[r];
      if (++position[r] < runs[r].length)
        break;
      offset -= outStride[r] * position[r];
      position[r] = 0;
    }
  }
  if (innerKept)
    return;
  // Rows that sum into the same output, grouped, each in row order.
  groupRows.resize(rows);
  std::iota(groupRows.begin(), groupRows.end(), 0);
  std::stable_sort(
      groupRows.begin(), groupRows.end(),
      [&](int64_t a, int64_t b) { return rowOutput[a] < rowOutput[b]; });
  for (int64_t i = 0; i < rows; ++i)
    if (i == 0 || rowOutput[groupRows[i]] != rowOutput[groupRows[i - 1]])
      groupStart.push_back(i);
  groupStart.push_back(rows);
}

template <typename Load, typename AddRow>
void BroadcastReduction::sum(const Load &load, const AddRow &addRow,
                             float *y) const {
  std::fill(y, y + outCount, 0.0f);
  int64_t rows = static_cast<int64_t>(rowOutput.size()), n = rowLength;
  if (innerKept) {
    // y[base + j] += x[row, j]: threads split j, so every output still
    // adds its rows in order. One stripe of columns per thread (at least
    // 256): each row's part of a stripe is one long contiguous read, where
    // stripes of 256 read 512 bytes a row of a bf16 gradient and jumped on,
    // a twelfth of the memory's streaming rate (4096 x 3072: 8.5 ms).
    bool large = rows * n > (int64_t(1) << 16);
    int64_t threads = large ? omp_get_max_threads() : 1;
    int64_t width = std::max<int64_t>(256, (n + threads - 1) / threads);
    width = (width + 15) / 16 * 16;
#pragma omp parallel for if (large) schedule(static)
    for (int64_t block = 0; block < n; block += width) {
      int64_t end = std::min(n, block + width);
      for (int64_t row = 0; row < rows; ++row)
        addRow(row * n + block, end - block, y + rowOutput[row] + block);
    }
    return;
  }
  // y[base] = (((y[base] + x[row, 0]) + x[row, 1]) ...), rows in order.
  int64_t groups = static_cast<int64_t>(groupStart.size()) - 1;
  bool large = rows * n > (int64_t(1) << 16) && groups > 1;
#pragma omp parallel for if (large) schedule(static)
  for (int64_t g = 0; g < groups; ++g) {
    float total = 0.0f;
    for (int64_t i = groupStart[g]; i < groupStart[g + 1]; ++i) {
      int64_t in = groupRows[i] * n;
      for (int64_t j = 0; j < n; ++j)
        total += load(in + j);
    }
    y[rowOutput[groupRows[groupStart[g]]]] = total;
  }
}

void BroadcastReduction::run(const float *x, float *y) const {
  sum([x](int64_t k) { return x[k]; },
      [x](int64_t from, int64_t count, float *out) {
        addedRow(x + from, count, out);
      },
      y);
}

void BroadcastReduction::run(const uint16_t *x, bool bf16, float *y) const {
  auto addRow = [x, bf16](int64_t from, int64_t count, float *out) {
    addedWidenedRow(x + from, count, bf16, out);
  };
  if (bf16)
    sum([x](int64_t k) { return floatOfBfloat16(x[k]); }, addRow, y);
  else
    sum([x](int64_t k) { return floatOfFloat16(x[k]); }, addRow, y);
}

} // namespace cdp::runtime::cpu
