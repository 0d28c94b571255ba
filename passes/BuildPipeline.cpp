//===- BuildPipeline.cpp - gpipe, 1f1b and 2bw schedules as streams -------===//

#include "cdp/Dialect/Sched/SchedOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Schedule/Pipeline.h"
#include "cdp/Schedule/Strategy.h"

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

using pipeline::StageOp;
using pipeline::stageOrder;

struct BuildPipelinePass
    : public cdp::impl::BuildPipelineBase<BuildPipelinePass> {
  using BuildPipelineBase::BuildPipelineBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto strategyAttr = sched::StrategyAttr::ofModule(module);
    if (!strategyAttr)
      return signalPassFailure();
    std::optional<Strategy> kind = strategyAttr.getValue();
    // The strategies whose stage orders this timeline knows (the others'
    // orders come from their schedule tables: cdp-schedule-pipeline).
    if (!inScope(StrategyScope::OrderedPipeline, *kind)) {
      module.emitError("pipeline strategy must be ")
          << scopeNames(StrategyScope::OrderedPipeline) << ", got '"
          << strategyName(*kind) << "'";
      return signalPassFailure();
    }
    bool stale = weightVersions(*kind) == 2;
    int64_t d = stages, m = microBatches;
    if (d < 1 || m < 1 || steps < 1) {
      module.emitError("stages, micro-batches and steps must be positive");
      return signalPassFailure();
    }
    if (stale && m < d) {
      module.emitError("2bw needs at least as many micro-batches as stages "
                       "(m >= d): got m = ")
          << m << ", d = " << d;
      return signalPassFailure();
    }
    auto version = [&](int64_t k) -> int64_t {
      if (!stale)
        return (k - 1) / m; // the step's own weights
      return std::max<int64_t>((k - 1) / m - 1, 0);
    };

    // Greedy timing: an op starts when its device is free and its input is
    // there (F after the previous stage's F, B after the next stage's B and
    // this stage's F); every op takes one time step; updates take none.
    std::vector<std::vector<StageOp>> orders;
    for (int64_t s = 1; s <= d; ++s)
      orders.push_back(stageOrder(*kind, s, d, m, steps));
    std::vector<std::vector<int64_t>> at = pipeline::timing(orders);
    std::map<std::tuple<int64_t, char, int64_t>, int64_t> done; // end time
    for (int64_t s = 1; s <= d; ++s)
      for (size_t i = 0; i < orders[s - 1].size(); ++i)
        done[{s, orders[s - 1][i].kind, orders[s - 1][i].microBatch}] =
            at[s - 1][i] + (orders[s - 1][i].kind == 'U' ? 0 : 1);

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
        loc, strategyAttr, i64(d), i64(d), i64(steps),
        builder.getStringAttr(stale ? "1-stale" : "synchronous"), i64(makespan),
        builder.getDenseI64ArrayAttr(stashPeak),
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
