//===- FirstFit.h - packing live ranges into an arena ----------*- C++ -*-===//
//
// cdp-plan-memory packs the one-micro-batch arena with it, and the pipeline
// emitter a stage's tensors that live within one forward or backward.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_FIRSTFIT_H
#define CDP_PLAN_FIRSTFIT_H

#include <algorithm>
#include <cstdint>
#include <limits>
#include <queue>
#include <random>
#include <utility>
#include <vector>

namespace cdp {

/// Offsets in an arena are multiples of this (cache lines, SIMD loads).
constexpr int64_t kArenaAlignment = 64;

inline int64_t alignToArena(int64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

/// A value's live range over op positions, both ends included.
struct LiveRange {
  int64_t begin, end, bytes;
};

namespace detail {

/// The arena's free intervals, ordered by offset, each knowing the longest
/// interval below it in the tree: a treap, so that finding the lowest free
/// interval long enough takes O(log n). The space above every block is one
/// interval of unbounded length.
class FreeIntervals {
public:
  static constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

  FreeIntervals() { root = make(0, kUnbounded); }

  /// The lowest offset of a free interval of at least `bytes`; takes them.
  int64_t take(int64_t bytes) {
    int node = lowestFitting(root, bytes);
    int64_t offset = nodes[node].offset, length = nodes[node].length;
    erase(offset);
    if (length != kUnbounded && length > bytes)
      insert(offset + bytes, length - bytes);
    else if (length == kUnbounded)
      insert(offset + bytes, kUnbounded);
    return offset;
  }

  /// Gives [offset, offset + bytes) back, joined with free neighbours.
  void give(int64_t offset, int64_t bytes) {
    int64_t length = bytes;
    int below = predecessor(offset);
    if (below >= 0 && nodes[below].offset + nodes[below].length == offset) {
      offset = nodes[below].offset;
      length += nodes[below].length;
      erase(offset);
    }
    int above = find(offset + length);
    if (above >= 0) {
      int64_t aboveLength = nodes[above].length;
      erase(offset + length);
      length = aboveLength == kUnbounded ? kUnbounded : length + aboveLength;
    }
    insert(offset, length);
  }

private:
  struct Node {
    int64_t offset, length, longest;
    uint32_t priority;
    int left = -1, right = -1;
  };

  int make(int64_t offset, int64_t length) {
    nodes.push_back({offset, length, length, random(), -1, -1});
    return static_cast<int>(nodes.size()) - 1;
  }
  int64_t longest(int n) const { return n < 0 ? 0 : nodes[n].longest; }
  void update(int n) {
    nodes[n].longest = std::max(
        {nodes[n].length, longest(nodes[n].left), longest(nodes[n].right)});
  }
  /// Splits `n` into offsets below `key` and the rest.
  void split(int n, int64_t key, int &low, int &high) {
    if (n < 0) {
      low = high = -1;
      return;
    }
    if (nodes[n].offset < key) {
      split(nodes[n].right, key, nodes[n].right, high);
      low = n;
    } else {
      split(nodes[n].left, key, low, nodes[n].left);
      high = n;
    }
    update(n);
  }
  int merge(int low, int high) {
    if (low < 0 || high < 0)
      return low < 0 ? high : low;
    if (nodes[low].priority > nodes[high].priority) {
      nodes[low].right = merge(nodes[low].right, high);
      update(low);
      return low;
    }
    nodes[high].left = merge(low, nodes[high].left);
    update(high);
    return high;
  }
  void insert(int64_t offset, int64_t length) {
    int low, high;
    split(root, offset, low, high);
    root = merge(merge(low, make(offset, length)), high);
  }
  void erase(int64_t offset) {
    int low, middle, high;
    split(root, offset, low, high);
    split(high, offset + 1, middle, high);
    root = merge(low, high); // `middle` is dropped (its slot stays unused)
  }
  int find(int64_t offset) const {
    for (int n = root; n >= 0;) {
      if (nodes[n].offset == offset)
        return n;
      n = offset < nodes[n].offset ? nodes[n].left : nodes[n].right;
    }
    return -1;
  }
  /// The interval with the largest offset below `offset`, or -1.
  int predecessor(int64_t offset) const {
    int best = -1;
    for (int n = root; n >= 0;) {
      if (nodes[n].offset < offset) {
        best = n;
        n = nodes[n].right;
      } else {
        n = nodes[n].left;
      }
    }
    return best;
  }
  /// The lowest-offset interval of at least `bytes` under `n` (one exists:
  /// the unbounded one).
  int lowestFitting(int n, int64_t bytes) const {
    while (true) {
      if (longest(nodes[n].left) >= bytes)
        n = nodes[n].left;
      else if (nodes[n].length >= bytes)
        return n;
      else
        n = nodes[n].right;
    }
  }
  uint32_t random() { return static_cast<uint32_t>(generator()); }

  std::vector<Node> nodes;
  int root = -1;
  std::minstd_rand generator{12345}; // fixed: the packing is deterministic
};

} // namespace detail

/// First fit in the order given (by `begin`): a block is free for a range
/// beginning at i when its owner's range ended before i, so an op's results
/// never overlap its operands. Returns each range's offset; `arenaBytes`
/// gets the arena's size. O(n log n): ranges leave through a heap by their
/// end, and the lowest free interval that fits is found in a treap of the
/// free intervals.
inline std::vector<int64_t> packFirstFit(const std::vector<LiveRange> &ranges,
                                         int64_t &arenaBytes) {
  std::vector<int64_t> offsets(ranges.size(), -1);
  auto size = [&](size_t i) {
    return alignToArena(std::max<int64_t>(ranges[i].bytes, 1));
  };
  using Ending = std::pair<int64_t, size_t>; // (end, range)
  std::priority_queue<Ending, std::vector<Ending>, std::greater<Ending>> active;
  detail::FreeIntervals free;
  arenaBytes = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    while (!active.empty() && active.top().first < ranges[i].begin) {
      size_t j = active.top().second;
      active.pop();
      free.give(offsets[j], size(j));
    }
    offsets[i] = free.take(size(i));
    active.push({ranges[i].end, i});
    arenaBytes = std::max(arenaBytes, offsets[i] + size(i));
  }
  return offsets;
}

namespace detail {

/// The ranges each (i, j) of `pairs` (j earlier) joins into one group, in
/// the order of their first members: each over its members' union, as
/// large as the largest; `group` gets each range's group.
inline std::vector<LiveRange>
joinRanges(const std::vector<LiveRange> &ranges,
           const std::vector<std::pair<size_t, size_t>> &pairs,
           std::vector<size_t> &group) {
  std::vector<size_t> root(ranges.size());
  group.assign(ranges.size(), 0);
  for (size_t i = 0; i < ranges.size(); ++i)
    root[i] = i;
  for (auto [i, j] : pairs)
    root[i] = j;
  std::vector<LiveRange> groups;
  for (size_t i = 0; i < ranges.size(); ++i) {
    root[i] = root[i] < i ? root[root[i]] : i;
    if (root[i] == i) {
      group[i] = groups.size();
      groups.push_back(ranges[i]);
      continue;
    }
    group[i] = group[root[i]];
    LiveRange &g = groups[group[i]];
    g.begin = std::min(g.begin, ranges[i].begin);
    g.end = std::max(g.end, ranges[i].end);
    g.bytes = std::max(g.bytes, ranges[i].bytes);
  }
  return groups;
}

} // namespace detail

/// packFirstFit where some ranges share one block (an op writing its result
/// over an operand): each (i, j) of `shares` gives range i the block of
/// range j, an earlier one. A group is packed as one range over its
/// members' union, as large as the largest. Sharing is a permission: where
/// first fit happens to pack the ranges apart into less, that packing is
/// returned.
inline std::vector<int64_t>
packFirstFitShared(const std::vector<LiveRange> &ranges,
                   const std::vector<std::pair<size_t, size_t>> &shares,
                   int64_t &arenaBytes) {
  std::vector<int64_t> apart = packFirstFit(ranges, arenaBytes);
  if (shares.empty())
    return apart;
  std::vector<size_t> group;
  std::vector<LiveRange> groups = detail::joinRanges(ranges, shares, group);
  int64_t sharedBytes = 0;
  std::vector<int64_t> packed = packFirstFit(groups, sharedBytes);
  if (sharedBytes > arenaBytes)
    return apart;
  arenaBytes = sharedBytes;
  std::vector<int64_t> offsets(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i)
    offsets[i] = packed[group[i]];
  return offsets;
}

/// packFirstFitShared where, besides the permitted `shares`, each (i, j) of
/// `views` (j earlier) must give range i the block of range j: a view of a
/// value lies over its bytes. Each group of views is packed as one range
/// over its members' union, as large as the largest; a permitted share
/// within one group is already met.
inline std::vector<int64_t>
packFirstFitViews(const std::vector<LiveRange> &ranges,
                  const std::vector<std::pair<size_t, size_t>> &views,
                  const std::vector<std::pair<size_t, size_t>> &shares,
                  int64_t &arenaBytes) {
  if (views.empty())
    return packFirstFitShared(ranges, shares, arenaBytes);
  std::vector<size_t> group;
  std::vector<LiveRange> groups = detail::joinRanges(ranges, views, group);
  std::vector<std::pair<size_t, size_t>> groupShares;
  for (auto [i, j] : shares)
    if (group[i] != group[j])
      groupShares.push_back({group[i], group[j]});
  std::vector<int64_t> packed =
      packFirstFitShared(groups, groupShares, arenaBytes);
  std::vector<int64_t> offsets(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i)
    offsets[i] = packed[group[i]];
  return offsets;
}

} // namespace cdp

#endif // CDP_PLAN_FIRSTFIT_H
