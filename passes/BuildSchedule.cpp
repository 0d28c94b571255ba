//===- BuildSchedule.cpp - data-parallel step order and start offsets -----===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Schedule/Versions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>

namespace cdp {
#define GEN_PASS_DEF_BUILDSCHEDULE
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

struct BuildSchedulePass
    : public cdp::impl::BuildScheduleBase<BuildSchedulePass> {
  using BuildScheduleBase::BuildScheduleBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation().lookupSymbol<func::FuncOp>("main");
    auto stagesAttr =
        func ? func->getAttrOfType<IntegerAttr>("cdp.stages") : nullptr;
    if (!stagesAttr) {
      getOperation().emitError(
          "@main is not partitioned; run cdp-partition-stages first");
      return signalPassFailure();
    }
    auto strategyAttr = sched::StrategyAttr::ofModule(getOperation());
    if (!strategyAttr)
      return signalPassFailure();
    std::optional<Strategy> kind = strategyAttr.getValue();
    if (!inScope(StrategyScope::Replicated, *kind)) {
      func.emitError("build-schedule handles ")
          << scopeNames(StrategyScope::Replicated, " and ") << ", not '"
          << strategyName(*kind) << "'";
      return signalPassFailure();
    }
    if (devices < 1) {
      func.emitError("--devices must be at least 1");
      return signalPassFailure();
    }
    int64_t L = stagesAttr.getInt(), N = devices;
    Block &body = func.getBody().front();

    // Sort key: parameters and constants first, then F_1..F_L (buffer writes
    // after their stage's forward), B_L..B_1, updates. The sort is stable,
    // so the order inside a group stays topological.
    auto key = [&](Operation *op) -> int64_t {
      if (isa<ParamOp, ConstantOp>(op))
        return 0;
      auto stage = op->getAttrOfType<IntegerAttr>("cdp.stage");
      int64_t l = stage ? stage.getInt() : L;
      auto phase = op->getAttrOfType<StringAttr>("cdp.phase");
      if (isa<AssignOp>(op))
        return 2 * l;
      if (!phase)
        return 2 * l - 1;
      if (phase.getValue() == "backward")
        return 2 * L + 1 + (L - l);
      return 4 * L; // updates
    };
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    std::stable_sort(ops.begin(), ops.end(), [&](Operation *a, Operation *b) {
      return key(a) < key(b);
    });
    Operation *terminator = body.getTerminator();
    for (Operation *op : ops)
      op->moveBefore(terminator);

    OpBuilder builder(func.getContext());
    for (Operation *op : ops) {
      auto stage = op->getAttrOfType<IntegerAttr>("cdp.stage");
      if (!stage || isa<ParamOp, ConstantOp>(op))
        continue;
      int64_t l = stage.getInt();
      auto phase = op->getAttrOfType<StringAttr>("cdp.phase");
      int64_t time = !phase ? l - 1 : 2 * L - l;
      if (phase && phase.getValue() == "update")
        continue;
      op->setAttr("cdp.time", builder.getI64IntegerAttr(time));
    }
    func->setAttr("cdp.offsets",
                  builder.getDenseI64ArrayAttr(slotOffsets(*kind, L, N)));
    func->setAttr(
        "cdp.schedule",
        builder.getDictionaryAttr(
            {builder.getNamedAttr("strategy", strategyAttr),
             builder.getNamedAttr("devices", builder.getI64IntegerAttr(N)),
             builder.getNamedAttr("stages", builder.getI64IntegerAttr(L)),
             builder.getNamedAttr("slots", builder.getI64IntegerAttr(N))}));
    if (zero != 0) {
      // The strategy's descriptor names the stages built for it (dp 1 to
      // 3, cdp 3: CDP-ZeRO); cdp-compile refuses the others where the flag
      // is read, this for cdp-opt.
      if (!buildsZero(*kind, zero)) {
        func.emitError() << "ZeRO stage " << zero.getValue() << " with "
                         << strategyName(*kind)
                         << " is not supported (stages 1 to 3 with dp and 3 "
                            "with cdp are)";
        return signalPassFailure();
      }
      NamedAttrList schedule(
          func->getAttrOfType<DictionaryAttr>("cdp.schedule"));
      schedule.set("zero", builder.getI64IntegerAttr(zero));
      func->setAttr("cdp.schedule", schedule.getDictionary(func.getContext()));
    }
    // Clipping and loss scaling read every stage's gradients of the step.
    bool clips = false;
    func.walk([&](Operation *op) {
      clips |= isa<ClipGradNormOp, UnscaleGradsOp>(op);
    });
    if (reducesAfterBackward(*kind, clips)) {
      NamedAttrList schedule(
          func->getAttrOfType<DictionaryAttr>("cdp.schedule"));
      schedule.set("reduce_after_backward", builder.getBoolAttr(true));
      func->setAttr("cdp.schedule", schedule.getDictionary(func.getContext()));
    }
  }
};

} // namespace
