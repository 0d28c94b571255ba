//===- BuildPipeline.cpp - gpipe, 1f1b and 2bw schedules as streams -------===//

#include "cdp/Dialect/Sched/SchedOps.h"
#include "cdp/Passes/Passes.h"

#include "mlir/IR/Builders.h"

#include <map>
#include <set>

namespace cdp {
#define GEN_PASS_DEF_BUILDPIPELINE
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// One stage op: forward or backward of a micro-batch (1-indexed over the
/// run), or an update of the stage after a step's backwards.
struct StageOp {
  char kind; // 'F', 'B' or 'U'
  int64_t microBatch;
};

/// The order in which stage s (1-indexed) of d runs its ops.
std::vector<StageOp> stageOrder(const std::string &strategy, int64_t s,
                                int64_t d, int64_t m, int64_t steps) {
  std::vector<StageOp> order;
  if (strategy == "2bw") {
    // No flush: warm up once, alternate across steps, cool down once.
    int64_t total = m * steps, warm = std::min(d - s, total);
    int64_t nextF = 1, nextB = 1;
    for (int64_t i = 0; i < warm; ++i)
      order.push_back({'F', nextF++});
    while (nextB <= total) {
      if (nextF <= total)
        order.push_back({'F', nextF++});
      order.push_back({'B', nextB});
      if (nextB % m == 0)
        order.push_back({'U', nextB}); // after a step's last backward
      ++nextB;
    }
    return order;
  }
  for (int64_t t = 0; t < steps; ++t) {
    int64_t base = t * m;
    if (strategy == "gpipe") {
      for (int64_t k = 1; k <= m; ++k)
        order.push_back({'F', base + k});
      for (int64_t k = 1; k <= m; ++k)
        order.push_back({'B', base + k});
    } else { // 1f1b with a flush per step
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

struct BuildPipelinePass
    : public cdp::impl::BuildPipelineBase<BuildPipelinePass> {
  using BuildPipelineBase::BuildPipelineBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (strategy != "gpipe" && strategy != "1f1b" && strategy != "2bw") {
      module.emitError("pipeline strategy must be gpipe, 1f1b or 2bw, got '")
          << strategy << "'";
      return signalPassFailure();
    }
    int64_t d = stages, m = microBatches;
    if (d < 1 || m < 1 || steps < 1) {
      module.emitError("stages, micro-batches and steps must be positive");
      return signalPassFailure();
    }
    if (strategy == "2bw" && m < d) {
      module.emitError("2bw needs at least as many micro-batches as stages "
                       "(m >= d): got m = ")
          << m << ", d = " << d;
      return signalPassFailure();
    }
    auto version = [&](int64_t k) -> int64_t {
      if (strategy != "2bw")
        return (k - 1) / m; // the step's own weights
      return std::max<int64_t>((k - 1) / m - 1, 0);
    };

    // Greedy timing: an op starts when its device is free and its input is
    // there (F after the previous stage's F, B after the next stage's B and
    // this stage's F); every op takes one time step; updates take none.
    std::vector<std::vector<StageOp>> orders;
    for (int64_t s = 1; s <= d; ++s)
      orders.push_back(stageOrder(strategy, s, d, m, steps));
    std::map<std::tuple<int64_t, char, int64_t>, int64_t> done; // end time
    std::vector<std::vector<int64_t>> at(d);
    std::vector<size_t> next(d, 0);
    std::vector<int64_t> free(d, 0);
    bool progress = true;
    while (progress) {
      progress = false;
      for (int64_t s = 1; s <= d; ++s) {
        size_t &i = next[s - 1];
        while (i < orders[s - 1].size()) {
          StageOp op = orders[s - 1][i];
          int64_t ready = free[s - 1];
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
          int64_t end = op.kind == 'U' ? ready : ready + 1;
          done[{s, op.kind, op.microBatch}] = end;
          free[s - 1] = end;
          ++i;
          progress = true;
        }
      }
    }

    // Stashed activations (during: from F to its B) and live versions.
    SmallVector<int64_t> stashPeak(d, 0), livePeak(d, 0);
    int64_t makespan = 0;
    for (int64_t s = 1; s <= d; ++s) {
      const std::vector<StageOp> &order = orders[s - 1];
      std::map<int64_t, int64_t> delta;
      for (size_t i = 0; i < order.size(); ++i)
        if (order[i].kind == 'F') {
          delta[at[s - 1][i]] += 1;
          delta[done[{s, 'B', order[i].microBatch}]] -= 1; // after B's step
        }
      int64_t live = 0;
      for (auto &[time, change] : delta)
        stashPeak[s - 1] = std::max(stashPeak[s - 1], live += change);
      for (size_t i = 0; i < order.size(); ++i)
        makespan =
            std::max(makespan, at[s - 1][i] + (order[i].kind == 'U' ? 0 : 1));
      // Versions in use at once: those of the micro-batches in flight, plus
      // the newest the stage made.
      int64_t made = 0;
      std::multiset<int64_t> inFlight;
      for (size_t i = 0; i < order.size(); ++i) {
        if (order[i].kind == 'U') {
          ++made;
        } else if (order[i].kind == 'F') {
          inFlight.insert(version(order[i].microBatch));
        } else {
          inFlight.erase(inFlight.find(version(order[i].microBatch)));
        }
        std::set<int64_t> versions(inFlight.begin(), inFlight.end());
        versions.insert(made);
        livePeak[s - 1] = std::max<int64_t>(livePeak[s - 1], versions.size());
      }
    }

    OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
    auto i64 = [&](int64_t v) { return builder.getI64IntegerAttr(v); };
    Location loc = module.getLoc();
    auto program = builder.create<sched::ProgramOp>(
        loc, builder.getStringAttr(strategy), i64(d), i64(d), i64(steps),
        builder.getStringAttr(strategy == "2bw" ? "1-stale" : "synchronous"),
        i64(makespan), builder.getDenseI64ArrayAttr(stashPeak),
        builder.getDenseI64ArrayAttr(livePeak));
    program.getBody().emplaceBlock();
    for (int64_t s = 1; s <= d; ++s) {
      builder.setInsertionPointToEnd(&program.getBody().front());
      auto device =
          builder.create<sched::DeviceOp>(loc, i64(s - 1), i64(0), i64(0));
      device.getBody().emplaceBlock();
      builder.setInsertionPointToEnd(&device.getBody().front());
      int64_t made = 0;
      const std::vector<StageOp> &order = orders[s - 1];
      for (size_t i = 0; i < order.size(); ++i) {
        StageOp op = order[i];
        int64_t time = at[s - 1][i], step = (op.microBatch - 1) / m;
        if (op.kind == 'U') {
          builder.create<sched::UpdateOp>(loc, i64(s), i64(++made), i64(time));
          continue;
        }
        auto kind =
            builder.getStringAttr(op.kind == 'F' ? "activation" : "gradient");
        if (op.kind == 'F' && s > 1)
          builder.create<sched::RecvOp>(
              loc, i64(s - 2), kind, i64(op.microBatch), i64(step), i64(time));
        if (op.kind == 'B' && s < d)
          builder.create<sched::RecvOp>(loc, i64(s), kind, i64(op.microBatch),
                                        i64(step), i64(time));
        builder.create<sched::RunOp>(
            loc, builder.getStringAttr(std::string(1, op.kind)), i64(s),
            i64(op.microBatch), i64(step), i64(version(op.microBatch)),
            i64(time));
        if (op.kind == 'F' && s < d)
          builder.create<sched::SendOp>(loc, i64(s), kind, i64(op.microBatch),
                                        i64(step), i64(time));
        if (op.kind == 'B' && s > 1)
          builder.create<sched::SendOp>(
              loc, i64(s - 2), kind, i64(op.microBatch), i64(step), i64(time));
      }
    }
  }
};

} // namespace
