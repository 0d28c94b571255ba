//===- ArenaPacking.h - packing live ranges into an arena ------*- C++ -*-===//
//
// cdp-plan-memory packs the one-micro-batch arena with it, the pipeline
// emitter a stage's tensors that live within one forward or backward, and
// the plan emitter the evaluation stream's own tensors. Three packers, the
// smallest arena kept: first fit in op order; greedy by size (TFLite's
// GreedyBySize: the largest values first, each into the tightest gap among
// the values live with it), which follows the live peak where first fit
// leaves holes too small for what comes later; and greedy by breadth
// (TFLite's GreedyByBreadth: the values of the busiest moments first), which
// reaches the live peak where sizes alone interleave badly.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_ARENAPACKING_H
#define CDP_PLAN_ARENAPACKING_H

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
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

/// The ranges live at some point of a query range: the ranges sorted by
/// begin under a segment tree holding each node's latest end, so that a
/// query for k answers visits O((k + 1) log n) nodes.
class OverlapIndex {
public:
  explicit OverlapIndex(const std::vector<LiveRange> &ranges)
      : ranges(ranges), order(ranges.size()) {
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return ranges[a].begin < ranges[b].begin;
    });
    while (leaves < order.size())
      leaves *= 2;
    latestEnd.assign(2 * leaves, std::numeric_limits<int64_t>::min());
    for (size_t k = 0; k < order.size(); ++k)
      latestEnd[leaves + k] = ranges[order[k]].end;
    for (size_t node = leaves - 1; node >= 1; --node)
      latestEnd[node] = std::max(latestEnd[2 * node], latestEnd[2 * node + 1]);
  }

  /// Calls `f(i)` for every range i live at some point of [begin, end].
  template <typename F>
  void forEachOverlapping(int64_t begin, int64_t end, F &&f) const {
    size_t started = std::upper_bound(order.begin(), order.end(), end,
                                      [&](int64_t at, size_t i) {
                                        return at < ranges[i].begin;
                                      }) -
                     order.begin();
    visit(1, 0, leaves, started, begin, f);
  }

private:
  /// Node `node` covers sorted positions [low, high); those at or above
  /// `started` begin after the query ends.
  template <typename F>
  void visit(size_t node, size_t low, size_t high, size_t started,
             int64_t begin, F &f) const {
    if (low >= started || latestEnd[node] < begin)
      return;
    if (high - low == 1) {
      f(order[low]);
      return;
    }
    size_t middle = (low + high) / 2;
    visit(2 * node, low, middle, started, begin, f);
    visit(2 * node + 1, middle, high, started, begin, f);
  }

  const std::vector<LiveRange> &ranges;
  std::vector<size_t> order; // by begin
  size_t leaves = 1;
  std::vector<int64_t> latestEnd; // by node
};

} // namespace detail

namespace detail {

/// The bytes a range's block takes in the arena (at least one alignment).
inline int64_t blockBytes(const LiveRange &range) {
  return alignToArena(std::max<int64_t>(range.bytes, 1));
}

/// The ranges in `order`, each into the smallest gap between the blocks
/// already placed for ranges live with it that holds it (the lowest of
/// equal gaps), else above them all. Two ranges live at one position never
/// share bytes, so an op's results never overlap its operands.
inline std::vector<int64_t> packGreedy(const std::vector<LiveRange> &ranges,
                                       const std::vector<size_t> &order,
                                       int64_t &arenaBytes) {
  std::vector<int64_t> offsets(ranges.size(), -1);
  auto size = [&](size_t i) { return blockBytes(ranges[i]); };
  OverlapIndex index(ranges);
  std::vector<std::pair<int64_t, int64_t>> taken; // [from, to) of live blocks
  arenaBytes = 0;
  for (size_t i : order) {
    taken.clear();
    index.forEachOverlapping(ranges[i].begin, ranges[i].end, [&](size_t j) {
      if (offsets[j] >= 0)
        taken.push_back({offsets[j], offsets[j] + size(j)});
    });
    std::sort(taken.begin(), taken.end());
    int64_t top = 0, best = -1;
    int64_t bestGap = std::numeric_limits<int64_t>::max();
    for (auto [from, to] : taken) {
      if (from - top >= size(i) && from - top < bestGap) {
        best = top;
        bestGap = from - top;
      }
      top = std::max(top, to);
    }
    offsets[i] = best >= 0 ? best : top;
    arenaBytes = std::max(arenaBytes, offsets[i] + size(i));
  }
  return offsets;
}

/// The ranges largest first, ties in the order given.
inline std::vector<size_t> bySize(const std::vector<LiveRange> &ranges) {
  std::vector<size_t> order(ranges.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return blockBytes(ranges[a]) > blockBytes(ranges[b]);
  });
  return order;
}

/// TFLite's greedy by breadth order: the positions by the bytes live there,
/// most first, and at each the ranges live there not yet taken, largest
/// first; the busiest moments are laid out before the quiet ones.
inline std::vector<size_t> byBreadth(const std::vector<LiveRange> &ranges) {
  std::vector<std::pair<int64_t, int64_t>> events; // position, bytes
  for (const LiveRange &range : ranges) {
    events.push_back({range.begin, blockBytes(range)});
    events.push_back({range.end + 1, -blockBytes(range)});
  }
  std::sort(events.begin(), events.end());
  std::vector<std::pair<int64_t, int64_t>> breadth; // bytes, position
  int64_t live = 0;
  for (size_t k = 0; k < events.size(); ++k) {
    live += events[k].second;
    if (k + 1 == events.size() || events[k + 1].first != events[k].first)
      breadth.push_back({live, events[k].first});
  }
  std::stable_sort(breadth.begin(), breadth.end(),
                   [](auto a, auto b) { return a.first > b.first; });
  OverlapIndex index(ranges);
  std::vector<bool> taken(ranges.size(), false);
  std::vector<size_t> order, here;
  for (auto [bytes, position] : breadth) {
    here.clear();
    index.forEachOverlapping(position, position, [&](size_t i) {
      if (!taken[i])
        here.push_back(i);
    });
    std::sort(here.begin(), here.end()); // the order given, for ties
    std::stable_sort(here.begin(), here.end(), [&](size_t a, size_t b) {
      return blockBytes(ranges[a]) > blockBytes(ranges[b]);
    });
    for (size_t i : here) {
      taken[i] = true;
      order.push_back(i);
    }
  }
  return order;
}

} // namespace detail

/// Greedy by size: the ranges largest first (ties in the order given), each
/// into the smallest gap that holds it (detail::packGreedy).
inline std::vector<int64_t>
packGreedyBySize(const std::vector<LiveRange> &ranges, int64_t &arenaBytes) {
  return detail::packGreedy(ranges, detail::bySize(ranges), arenaBytes);
}

/// Greedy by breadth: the busiest positions' ranges first
/// (detail::byBreadth), each into the smallest gap that holds it.
inline std::vector<int64_t>
packGreedyByBreadth(const std::vector<LiveRange> &ranges, int64_t &arenaBytes) {
  return detail::packGreedy(ranges, detail::byBreadth(ranges), arenaBytes);
}

/// The pairs of ranges live at one position (each counted from both ends):
/// what greedy by size visits, sorting each range's share. O(n log n).
inline int64_t overlappingPairs(const std::vector<LiveRange> &ranges) {
  std::vector<int64_t> begins, ends;
  for (const LiveRange &range : ranges) {
    begins.push_back(range.begin);
    ends.push_back(range.end);
  }
  std::sort(begins.begin(), begins.end());
  std::sort(ends.begin(), ends.end());
  int64_t pairs = 0;
  for (const LiveRange &range : ranges) // begun by its end, not ended before
    pairs += (std::upper_bound(begins.begin(), begins.end(), range.end) -
              begins.begin()) -
             (std::lower_bound(ends.begin(), ends.end(), range.begin) -
              ends.begin());
  return pairs;
}

/// Greedy by size costs about 20 ns a pair of values live together (half a
/// second at this budget, which GPT-2 small's 2 million stay far below): a
/// graph beyond keeps first fit's packing.
constexpr int64_t kGreedyPairBudget = 30'000'000;

/// The smallest packing of first fit (in the order given, by `begin`),
/// greedy by size and greedy by breadth (the greedy ones where `ranges`
/// have no more than `pairBudget` overlapping pairs); the earlier of equal
/// ones.
inline std::vector<int64_t> packArena(const std::vector<LiveRange> &ranges,
                                      int64_t &arenaBytes,
                                      int64_t pairBudget = kGreedyPairBudget) {
  std::vector<int64_t> firstFit = packFirstFit(ranges, arenaBytes);
  if (overlappingPairs(ranges) > pairBudget)
    return firstFit;
  std::vector<int64_t> best = std::move(firstFit);
  for (auto pack : {packGreedyBySize, packGreedyByBreadth}) {
    int64_t bytes = 0;
    std::vector<int64_t> offsets = pack(ranges, bytes);
    if (bytes < arenaBytes) {
      arenaBytes = bytes;
      best = std::move(offsets);
    }
  }
  return best;
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

/// packArena where some ranges share one block (an op writing its result
/// over an operand): each (i, j) of `shares` gives range i the block of
/// range j, an earlier one. A group is packed as one range over its
/// members' union, as large as the largest. Sharing is a permission: where
/// the ranges happen to pack apart into less, that packing is returned.
inline std::vector<int64_t>
packArenaShared(const std::vector<LiveRange> &ranges,
                const std::vector<std::pair<size_t, size_t>> &shares,
                int64_t &arenaBytes) {
  std::vector<int64_t> apart = packArena(ranges, arenaBytes);
  if (shares.empty())
    return apart;
  std::vector<size_t> group;
  std::vector<LiveRange> groups = detail::joinRanges(ranges, shares, group);
  int64_t sharedBytes = 0;
  std::vector<int64_t> packed = packArena(groups, sharedBytes);
  if (sharedBytes > arenaBytes)
    return apart;
  arenaBytes = sharedBytes;
  std::vector<int64_t> offsets(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i)
    offsets[i] = packed[group[i]];
  return offsets;
}

/// packArenaShared where, besides the permitted `shares`, each (i, j) of
/// `views` (j earlier) must give range i the block of range j: a view of a
/// value lies over its bytes. Each group of views is packed as one range
/// over its members' union, as large as the largest; a permitted share
/// within one group is already met.
inline std::vector<int64_t>
packArenaViews(const std::vector<LiveRange> &ranges,
               const std::vector<std::pair<size_t, size_t>> &views,
               const std::vector<std::pair<size_t, size_t>> &shares,
               int64_t &arenaBytes) {
  if (views.empty())
    return packArenaShared(ranges, shares, arenaBytes);
  std::vector<size_t> group;
  std::vector<LiveRange> groups = detail::joinRanges(ranges, views, group);
  std::vector<std::pair<size_t, size_t>> groupShares;
  for (auto [i, j] : shares)
    if (group[i] != group[j])
      groupShares.push_back({group[i], group[j]});
  std::vector<int64_t> packed =
      packArenaShared(groups, groupShares, arenaBytes);
  std::vector<int64_t> offsets(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i)
    offsets[i] = packed[group[i]];
  return offsets;
}

} // namespace cdp

#endif // CDP_PLAN_ARENAPACKING_H
