//===- BroadcastReduction.h - sums over broadcast dimensions ----*- C++ -*-===//
//
// The gradient of a broadcast (reduce_to): y = the sum of x over the
// dimensions y has as 1 (or lacks). The dimensions are merged into runs of
// kept and reduced ones, and x is read row by row (a row: its innermost
// run), so no per-element index is loaded and the inner loops are
// contiguous. Every output adds its inputs in the order of x's elements,
// as the element-by-element loop did, whatever the threads: results are the
// same bit for bit on one thread or many, and across strategies.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_CPU_BROADCASTREDUCTION_H
#define CDP_RUNTIME_KERNELS_CPU_BROADCASTREDUCTION_H

#include <cstdint>
#include <vector>

namespace cdp::runtime::cpu {

class BroadcastReduction {
public:
  /// y of `outShape` from x of `inShape` (numpy broadcasting: outShape
  /// aligned to the right, each of its dimensions 1 or inShape's).
  BroadcastReduction(const std::vector<int64_t> &outShape,
                     const std::vector<int64_t> &inShape);
  void run(const float *x, float *y) const;
  /// The same over x's 2-byte patterns (bf16, else fp16), each widened
  /// exactly as it is read: the same sums as over their float32 values.
  void run(const uint16_t *x, bool bf16, float *y) const;

private:
  /// y from load(k), x's element k as a float, and addRow(k, count, out),
  /// which adds x's elements [k, k + count) into out's first count.
  template <typename Load, typename AddRow>
  void sum(const Load &load, const AddRow &addRow, float *y) const;

  int64_t outCount = 0;
  int64_t rowLength = 1; ///< x's innermost merged run
  bool innerKept = true; ///< that run is kept (else summed into one output)
  /// Per row of x, in order: the offset in y of its first output.
  std::vector<int64_t> rowOutput;
  /// innerKept false: rows grouped by output, each group in row order
  /// (groupStart[g] .. groupStart[g + 1] index into groupRows).
  std::vector<int64_t> groupRows, groupStart;
};

} // namespace cdp::runtime::cpu

#endif // CDP_RUNTIME_KERNELS_CPU_BROADCASTREDUCTION_H
