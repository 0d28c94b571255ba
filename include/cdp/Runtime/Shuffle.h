//===- Shuffle.h - NumPy's permutations, for --shuffle ----------*- C++ -*-===//
//
// cdp-run --shuffle orders each epoch of --feed data as
// numpy.random.default_rng(seed + epoch).permutation(n) does, so that a
// user can reproduce it, or feed the same order to PyTorch: NumPy's
// SeedSequence, PCG64 and Generator.shuffle, bit for bit.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_SHUFFLE_H
#define CDP_RUNTIME_SHUFFLE_H

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace cdp::runtime {

/// numpy.random.default_rng(seed).permutation(n).
std::vector<int64_t> numpyPermutation(uint64_t seed, int64_t n);

/// Every epoch's order of n samples, epoch e shuffled with seed + e, made
/// when first asked for; several device threads may ask at once.
class EpochOrders {
public:
  EpochOrders(uint64_t seed, int64_t n) : seed(seed), n(n) {}
  /// The samples rows [first, first + count) of the run take (rows counted
  /// over the epochs): row r is entry r mod n of epoch r / n's order.
  std::vector<int64_t> samples(int64_t first, int64_t count);

private:
  /// One epoch's order, in 32-bit indices where they fit.
  struct Order {
    std::vector<uint32_t> narrow;
    std::vector<int64_t> wide;
  };
  const Order &epoch(int64_t e);
  uint64_t seed;
  int64_t n;
  std::mutex mutex;
  /// The epochs asked for lately (a batch spans at most two; a dropped one
  /// is made again).
  std::map<int64_t, Order> cached;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_SHUFFLE_H
