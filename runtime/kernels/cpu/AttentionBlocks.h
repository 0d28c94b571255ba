//===- AttentionBlocks.h - the scores a mask leaves to compute --*- C++ -*-===//
//
// A causal or padding mask makes many of attention's probabilities exactly
// zero: PyTorch's masks add -inf or the lowest float (finfo.min) to the
// masked scores, so exp(score + bias - max) is 0 in float32 there, and
// those scores add nothing to a row's sum, to the result or to any
// gradient (dS = P (dP - sum) is 0 where P is). The CPU attention takes a
// slice's rows in blocks and computes each block only over the columns
// that some row of it leaves unmasked, rounded out to whole blocks (few
// product shapes): under a causal mask about half the products and the
// exponentials.
//
// A bias value masks where it is <= -1e30 and is live where it is >=
// -1e20; a row holding a value between (a bias of unknown scale), or no
// live value at all (a fully masked row, whose softmax is uniform, or
// zeros under zero_nan_rows), is computed whole. Skipping is then exact
// (the same probabilities; only the float32 sums' order differs) wherever
// the scores are below 1e29 in magnitude; a masked score of NaN or
// infinity, which made its row NaN before, is skipped like any other.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_CPU_ATTENTIONBLOCKS_H
#define CDP_RUNTIME_KERNELS_CPU_ATTENTIONBLOCKS_H

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

namespace cdp::runtime::cpu {

/// Each bias row's live columns [lo, hi): every value outside them masks.
class LiveColumns {
public:
  static constexpr float kMasks = -1e30f, kLive = -1e20f;

  /// Scans `rows` rows of n values each, one after another.
  void scan(const float *bias, int64_t rows, int64_t n) {
    bounds.resize(2 * rows);
#pragma omp parallel for if (rows * n > (1 << 18))
    for (int64_t r = 0; r < rows; ++r)
      scanRow(bias + r * n, n, &bounds[2 * r]);
  }
  int64_t lo(int64_t row) const { return bounds[2 * row]; }
  int64_t hi(int64_t row) const { return bounds[2 * row + 1]; }

private:
  static void scanRow(const float *row, int64_t n, int64_t *range) {
    int64_t lo = n, hi = 0;
    bool unusual = false;
    for (int64_t c = 0; c < n; ++c) {
      if (row[c] <= kMasks)
        continue;
      unusual |= row[c] < kLive;
      lo = std::min(lo, c);
      hi = c + 1;
    }
    if (unusual || lo >= hi) {
      lo = 0;
      hi = n;
    }
    range[0] = lo;
    range[1] = hi;
  }
  std::vector<int64_t> bounds;
};

/// A block of a slice's scores: rows [row, row + rows), columns [lo, lo +
/// width).
struct ScoreBlock {
  int64_t row, rows, lo, width;
};

/// A slice's m x n scores in blocks of `size` rows, each over the columns
/// its rows leave live, widened to multiples of `size` (or to n); one
/// block of everything where nothing is skipped.
class ScoreBlocks {
public:
  ScoreBlocks(int64_t m, int64_t n, bool skipping)
      : m(m), n(n), size(blockSize(m, n)) {
    blocked = skipping && n > size;
    if (!blocked)
      size = std::max<int64_t>(m, 1); // one block
  }
  bool skips() const { return blocked; }
  int64_t count() const { return size == 0 ? 0 : (m + size - 1) / size; }

  /// Block b of a slice whose row r's live columns are live(r) = {lo, hi}.
  template <typename Live> ScoreBlock block(int64_t b, const Live &live) const {
    int64_t row = b * size, rows = std::min(size, m - row);
    if (!blocked)
      return {row, rows, 0, n};
    int64_t lo = n, hi = 0;
    for (int64_t r = row; r < row + rows; ++r) {
      auto [l, h] = live(r);
      lo = std::min(lo, l);
      hi = std::max(hi, h);
    }
    lo = lo / size * size;
    hi = std::min(n, (hi + size - 1) / size * size);
    return {row, rows, lo, hi - lo};
  }

  /// The blocks' possible row counts and widths (the products' shapes).
  std::set<int64_t> rowCounts() const {
    if (m == 0)
      return {};
    return {std::min(size, m), m % size == 0 ? std::min(size, m) : m % size};
  }
  std::set<int64_t> widths() const {
    if (!blocked)
      return {n};
    std::set<int64_t> all;
    for (int64_t lo = 0; lo < n; lo += size)
      for (int64_t hi = lo + size; hi < n + size; hi += size)
        all.insert(std::min(hi, n) - lo);
    return all;
  }

private:
  /// 64 rows, or more for long sequences: at most 16 blocks a side.
  static int64_t blockSize(int64_t m, int64_t n) {
    int64_t side = std::max(m, n), size = 64;
    while (size * 16 < side)
      size *= 2;
    return size;
  }
  int64_t m, n, size;
  bool blocked = false;
};

} // namespace cdp::runtime::cpu

#endif // CDP_RUNTIME_KERNELS_CPU_ATTENTIONBLOCKS_H
