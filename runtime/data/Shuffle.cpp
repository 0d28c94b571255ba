//===- Shuffle.cpp - NumPy's default_rng permutations ---------------------===//
//
// numpy/random/bit_generator.pyx (SeedSequence), _pcg64.pyx and pcg64.h
// (PCG64, XSL-RR 128/64 with its buffered 32-bit draws),
// distributions.c (random_interval) and _generator.pyx (shuffle: Fisher-
// Yates from the last element down).
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Shuffle.h"

#include <array>
#include <iterator>
#include <numeric>

namespace cdp::runtime {

namespace {

using u128 = unsigned __int128;

constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875,
                   kInitB = 0x8b51f9dd, kMultB = 0x58f38ded,
                   kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kXShift = 16, kPoolSize = 4;

/// SeedSequence(seed).generate_state(4, np.uint64).
std::array<uint64_t, 4> seedSequenceState(uint64_t seed) {
  // The entropy as 32-bit words, least significant first.
  std::vector<uint32_t> entropy = {static_cast<uint32_t>(seed)};
  if (seed >> 32)
    entropy.push_back(static_cast<uint32_t>(seed >> 32));
  uint32_t hashConst = kInitA;
  auto hashmix = [&](uint32_t value) {
    value ^= hashConst;
    hashConst *= kMultA;
    value *= hashConst;
    return value ^ (value >> kXShift);
  };
  auto mix = [](uint32_t x, uint32_t y) {
    uint32_t result = kMixMultL * x - kMixMultR * y;
    return result ^ (result >> kXShift);
  };
  std::array<uint32_t, kPoolSize> pool{};
  for (int i = 0; i < kPoolSize; ++i)
    pool[i] = hashmix(i < static_cast<int>(entropy.size()) ? entropy[i] : 0);
  for (int src = 0; src < kPoolSize; ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      if (src != dst)
        pool[dst] = mix(pool[dst], hashmix(pool[src]));
  for (size_t src = kPoolSize; src < entropy.size(); ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      pool[dst] = mix(pool[dst], hashmix(entropy[src]));
  hashConst = kInitB;
  std::array<uint64_t, 4> state{};
  for (int word = 0; word < 8; ++word) {
    uint32_t value = pool[word % kPoolSize];
    value ^= hashConst;
    hashConst *= kMultB;
    value *= hashConst;
    value ^= value >> kXShift;
    state[word / 2] |= static_cast<uint64_t>(value) << (32 * (word % 2));
  }
  return state;
}

/// PCG64 as NumPy seeds it, with the spare half of a 64-bit draw kept for
/// the next 32-bit one.
class Pcg64 {
public:
  explicit Pcg64(uint64_t seed) {
    std::array<uint64_t, 4> words = seedSequenceState(seed);
    u128 initState = (u128(words[0]) << 64) | words[1];
    u128 initSeq = (u128(words[2]) << 64) | words[3];
    state = 0;
    increment = (initSeq << 1) | 1;
    step();
    state += initState;
    step();
  }
  uint64_t next64() {
    step();
    uint64_t folded =
        static_cast<uint64_t>(state >> 64) ^ static_cast<uint64_t>(state);
    unsigned rotation = static_cast<unsigned>(state >> 122);
    return (folded >> rotation) | (folded << ((64 - rotation) & 63));
  }
  uint32_t next32() {
    if (hasSpare) {
      hasSpare = false;
      return spare;
    }
    uint64_t next = next64();
    hasSpare = true;
    spare = static_cast<uint32_t>(next >> 32);
    return static_cast<uint32_t>(next);
  }

private:
  void step() { state = state * kMultiplier + increment; }
  static constexpr u128 kMultiplier =
      (u128(2549297995355413924ULL) << 64) | 4865540595714422341ULL;
  u128 state, increment;
  bool hasSpare = false;
  uint32_t spare = 0;
};

/// A uniform draw from [0, max]: masked rejection, as random_interval.
uint64_t randomInterval(Pcg64 &rng, uint64_t max) {
  if (max == 0)
    return 0;
  uint64_t mask = max;
  for (int shift = 1; shift <= 32; shift *= 2)
    mask |= mask >> shift;
  uint64_t value;
  if (max <= 0xffffffffULL) {
    while ((value = rng.next32() & mask) > max) {
    }
  } else {
    while ((value = rng.next64() & mask) > max) {
    }
  }
  return value;
}

} // namespace

namespace {

/// The permutation in indices of type T (uint32_t halves the memory of an
/// epoch's order below 2^32 samples).
template <typename T> std::vector<T> permutation(uint64_t seed, int64_t n) {
  std::vector<T> order(n);
  std::iota(order.begin(), order.end(), T(0));
  Pcg64 rng(seed);
  for (int64_t i = n - 1; i >= 1; --i)
    std::swap(order[i], order[randomInterval(rng, i)]);
  return order;
}

} // namespace

std::vector<int64_t> numpyPermutation(uint64_t seed, int64_t n) {
  return permutation<int64_t>(seed, n);
}

std::vector<int64_t> EpochOrders::samples(int64_t first, int64_t count) {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<int64_t> picked(count);
  for (int64_t j = 0; j < count; ++j) {
    int64_t row = first + j;
    const Order &order = epoch(row / n);
    picked[j] =
        order.narrow.empty() ? order.wide[row % n] : order.narrow[row % n];
  }
  return picked;
}

const EpochOrders::Order &EpochOrders::epoch(int64_t e) {
  auto it = cached.find(e);
  if (it != cached.end())
    return it->second;
  // Two epochs: the one a batch ends and the next it starts (an order of
  // 2^27 samples is half a GiB).
  while (cached.size() >= 2)
    cached.erase(cached.begin()->first < e ? cached.begin()
                                           : std::prev(cached.end()));
  Order order;
  if (n <= (int64_t(1) << 32))
    order.narrow = permutation<uint32_t>(seed + e, n);
  else
    order.wide = permutation<int64_t>(seed + e, n);
  return cached.emplace(e, std::move(order)).first->second;
}

} // namespace cdp::runtime
