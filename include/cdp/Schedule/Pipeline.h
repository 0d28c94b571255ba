//===- Pipeline.h - stage orders and timing of pipelines -------*- C++ -*-===//
//
// The order in which each stage runs its forwards, backwards and updates
// under gpipe, 1f1b and 2bw (docs/strategies/2bw.md), and their time steps when
// every op takes one step and starts as soon as its device and inputs are
// ready. Shared by cdp-build-pipeline (the sched streams) and the plan
// emitter (the per-device instruction lists).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_SCHEDULE_PIPELINE_H
#define CDP_SCHEDULE_PIPELINE_H

#include "cdp/Schedule/Strategy.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace cdp::pipeline {

/// Forward or backward of a micro-batch (1-indexed over the run), or the
/// update after a step's backwards.
struct StageOp {
  char kind; // 'F', 'B' or 'U'
  int64_t microBatch;
};

/// One piece of a stage device's step program, the work one training step
/// repeats (cdp-schedule-pipeline writes these as sched ops).
struct StepEntry {
  char kind;          ///< 'F', 'B' or 'U' (the update)
  int64_t k;          ///< micro-batch within its step (the device's k-th)
  int64_t stepRel;    ///< 0: this step's; -1: the previous step's
  int64_t time;       ///< time step within the program
  bool readsPrevious; ///< reads the previous weight version
};

/// 2bw's step program for stage s of S with M micro-batches: the steady
/// state of 1F1B without a flush, one backward and one forward per time
/// step pair, so a step's program starts with the previous step's last
/// backwards, and the update of the previous step's gradients follows the
/// last of them.
inline std::vector<StepEntry> twoBwStepProgram(int64_t s, int64_t S,
                                               int64_t M) {
  std::vector<StepEntry> entries;
  int64_t warmup = std::min(S - s + 1, M);
  bool updated = false;
  for (int64_t i = 0; i < M; ++i) {
    if (i < warmup)
      entries.push_back({'B', i - warmup + M, -1, 2 * i, false});
    else
      entries.push_back({'B', i - warmup, 0, 2 * i, true});
    if (i == warmup - 1) {
      entries.push_back({'U', 0, -1, entries.back().time, false});
      updated = true;
    }
    entries.push_back({'F', i, 0, 2 * i + 1, updated});
  }
  // Before the update the previous version is W(t - 2) for the previous
  // step's backwards; after it, W(t - 1) for this step's.
  for (StepEntry &entry : entries)
    if (entry.kind == 'B' && entry.stepRel == -1)
      entry.readsPrevious = true;
  return entries;
}

/// A step program run for `steps` steps, as the plan runs it: step t runs
/// every entry, but the previous step's work (stepRel -1) not in step 0
/// and once more after the last step. Micro-batches are numbered over the
/// run from 1; an update carries the last micro-batch of the step whose
/// gradients it applies.
inline std::vector<StageOp>
unrollStepProgram(const std::vector<StepEntry> &program, int64_t m,
                  int64_t steps) {
  std::vector<StageOp> order;
  for (int64_t t = 0; t <= steps; ++t)
    for (const StepEntry &entry : program) {
      int64_t step = t + entry.stepRel;
      if (step < 0 || (t == steps && entry.stepRel == 0))
        continue;
      order.push_back({entry.kind, entry.kind == 'U' ? (step + 1) * m
                                                     : step * m + entry.k + 1});
    }
  return order;
}

/// The order of stage s (1-indexed) of d with m micro-batches a step (2bw:
/// its step program run for `steps` steps).
inline std::vector<StageOp> stageOrder(Strategy strategy, int64_t s, int64_t d,
                                       int64_t m, int64_t steps) {
  if (strategy == Strategy::TwoBW)
    return unrollStepProgram(twoBwStepProgram(s, d, m), m, steps);
  std::vector<StageOp> order;
  for (int64_t t = 0; t < steps; ++t) {
    int64_t base = t * m;
    if (strategy == Strategy::GPipe) {
      for (int64_t k = 1; k <= m; ++k)
        order.push_back({'F', base + k});
      for (int64_t k = 1; k <= m; ++k)
        order.push_back({'B', base + k});
    } else {
      int64_t warm = std::min(d - s, m), nextF = 1, nextB = 1;
      for (int64_t i = 0; i < warm; ++i)
        order.push_back({'F', base + nextF++});
      while (nextB <= m) {
        if (nextF <= m)
          order.push_back({'F', base + nextF++});
        order.push_back({'B', base + nextB++});
      }
    }
    order.push_back({'U', base + m});
  }
  return order;
}

/// Start of every op of every stage's order (`at[s-1][i]`), each as early
/// as its device and inputs allow, an op of stage s lasting `duration(s,
/// kind)` (updates: 0).
template <typename Time, typename Duration>
std::vector<std::vector<Time>>
weightedTiming(const std::vector<std::vector<StageOp>> &orders,
               Duration duration) {
  int64_t d = orders.size();
  std::map<std::tuple<int64_t, char, int64_t>, Time> done;
  std::vector<std::vector<Time>> at(d);
  std::vector<size_t> next(d, 0);
  std::vector<Time> free(d, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t s = 1; s <= d; ++s) {
      size_t &i = next[s - 1];
      while (i < orders[s - 1].size()) {
        StageOp op = orders[s - 1][i];
        Time ready = free[s - 1];
        if (op.kind == 'F' && s > 1) {
          auto it = done.find({s - 1, 'F', op.microBatch});
          if (it == done.end())
            break;
          ready = std::max(ready, it->second);
        }
        if (op.kind == 'B') {
          auto own = done.find({s, 'F', op.microBatch});
          auto later = done.find({s + 1, 'B', op.microBatch});
          if (own == done.end() || (s < d && later == done.end()))
            break;
          ready = std::max(ready, own->second);
          if (s < d)
            ready = std::max(ready, later->second);
        }
        at[s - 1].push_back(ready);
        Time end = op.kind == 'U' ? ready : ready + duration(s, op.kind);
        done[{s, op.kind, op.microBatch}] = end;
        free[s - 1] = end;
        ++i;
        progress = true;
      }
    }
  }
  return at;
}

/// Time step of every op of every stage's order: one step per F or B.
inline std::vector<std::vector<int64_t>>
timing(const std::vector<std::vector<StageOp>> &orders) {
  return weightedTiming<int64_t>(orders, [](int64_t, char) { return 1; });
}

/// CDP's start time step of slot i of N with L stages (docs/strategies/cdp.md):
/// floor(2L·i / N).
inline int64_t cdpSlotStart(int64_t i, int64_t L, int64_t N) {
  return 2 * L * i / N;
}

/// The time step of dp's and CDP's cycle of 2L at which a slot hands stage
/// l's gradients to the reduction: right after its B_l (2L - l) or, when
/// each device clips its own gradient by its global norm (cdp), after its
/// last backward (2L - 1), once every stage's gradient is known.
inline int64_t reductionStart(int64_t l, int64_t L, bool afterBackward) {
  return afterBackward ? 2 * L - 1 : 2 * L - l;
}

/// CDP-v2: whether slot i reads stage l's new version (1-based l of L),
/// given its start and the last slot's. The timing table: its F_l comes
/// after stage l's update, which the last slot's reduction start makes
/// (2l - 1 > lastStart - start with reductions after each B_l); the code
/// table (the authors' rule): l >= L - i.
inline bool cdpFresh(bool codeTable, int64_t i, int64_t l, int64_t L,
                     int64_t start, int64_t lastStart,
                     bool afterBackward = false) {
  return codeTable ? l >= L - i
                   : l - 1 + 2 * L - reductionStart(l, L, afterBackward) >
                         lastStart - start;
}

/// cdp-mp (docs/strategies/cdp-mp.md): which device of stage s (1-based) of L
/// runs each of the N CDP slots. Slot j starts at floor(2Lj/N); its F at stage
/// s falls on time step start + s - 1 and its B on start + 2L - s, modulo the
/// cycle of 2L. Two slots on one device never share a time step, and a
/// slot's F and B stay on one device (its stash). Each slot is thus an edge
/// between two time steps of a multigraph, and devices are edge colours.
/// F and B are an odd number of steps apart (2L - 2s + 1) and the cycle is
/// even, so every edge joins an even and an odd step: the multigraph is
/// bipartite, and (König) c_l colours suffice, c_l the most ops at one time
/// step. They are found by the alternating-path method: an edge whose ends
/// have different free colours a and b flips the a/b path from one end,
/// which never reaches the other. Returns, per slot, its device within the
/// stage (0 .. c_l - 1).
inline std::vector<int64_t> cdpStageDevices(int64_t s, int64_t L, int64_t N) {
  int64_t cycle = 2 * L;
  std::vector<int64_t> forward(N), backward(N), load(cycle, 0);
  for (int64_t j = 0; j < N; ++j) {
    int64_t start = cdpSlotStart(j, L, N);
    forward[j] = (start + s - 1) % cycle;
    backward[j] = (start + cycle - s) % cycle;
    ++load[forward[j]];
    ++load[backward[j]];
  }
  int64_t colours = *std::max_element(load.begin(), load.end());
  // slotAt[t * colours + c]: the slot with colour c at time step t, or -1.
  std::vector<int64_t> slotAt(cycle * colours, -1), device(N, -1);
  auto freeAt = [&](int64_t t) {
    for (int64_t c = 0; c < colours; ++c)
      if (slotAt[t * colours + c] < 0)
        return c;
    return colours; // unreachable: a step has at most `colours` slots
  };
  auto other = [&](int64_t j, int64_t t) {
    return forward[j] == t ? backward[j] : forward[j];
  };
  for (int64_t j = 0; j < N; ++j) {
    int64_t u = forward[j], v = backward[j];
    int64_t a = freeAt(u), b = freeAt(v);
    if (slotAt[v * colours + a] >= 0) {
      // Swap a and b along the path from v that starts with colour a.
      std::vector<int64_t> path;
      for (int64_t t = v, c = a; slotAt[t * colours + c] >= 0;
           c = c == a ? b : a) {
        int64_t k = slotAt[t * colours + c];
        path.push_back(k);
        t = other(k, t);
      }
      for (int64_t k : path) {
        slotAt[forward[k] * colours + device[k]] = -1;
        slotAt[backward[k] * colours + device[k]] = -1;
      }
      for (int64_t k : path) {
        device[k] = device[k] == a ? b : a;
        slotAt[forward[k] * colours + device[k]] = k;
        slotAt[backward[k] * colours + device[k]] = k;
      }
    }
    device[j] = a;
    slotAt[u * colours + a] = j;
    slotAt[v * colours + a] = j;
  }
  return device;
}

/// Devices of stage s under cdp-mp: one more than the highest index
/// cdpStageDevices gives.
inline int64_t cdpStageDeviceCount(int64_t s, int64_t L, int64_t N) {
  std::vector<int64_t> device = cdpStageDevices(s, L, N);
  return *std::max_element(device.begin(), device.end()) + 1;
}

/// cdp-v2's code table (fresh where l >= L - i) against its timing table
/// (fresh where slot i's F_l follows stage l's update): the first slot i
/// and stage l the code table makes read l's new version before the update
/// that makes it, or {-1, -1} when there is none (N = L: the two agree).
/// The other way round a slot reads the previous version, as under v1.
inline std::pair<int64_t, int64_t> cdpCodeTableTooEarly(int64_t L, int64_t N) {
  int64_t last = cdpSlotStart(N - 1, L, N);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t l = 1; l <= L; ++l) {
      int64_t start = cdpSlotStart(i, L, N);
      if (!cdpFresh(false, i, l, L, start, last) &&
          cdpFresh(true, i, l, L, start, last))
        return {i, l};
    }
  return {-1, -1};
}

} // namespace cdp::pipeline

#endif // CDP_SCHEDULE_PIPELINE_H
