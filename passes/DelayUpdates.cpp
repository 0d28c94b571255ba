//===- DelayUpdates.cpp - the weight version of every (slot, stage) -------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SlotSchedule.h"
#include "cdp/Schedule/Pipeline.h"
#include "cdp/Schedule/Strategy.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cdp {
#define GEN_PASS_DEF_DELAYUPDATES
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

struct DelayUpdatesPass : public cdp::impl::DelayUpdatesBase<DelayUpdatesPass> {
  using DelayUpdatesBase::DelayUpdatesBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation().lookupSymbol<func::FuncOp>("main");
    auto schedule =
        func ? func->getAttrOfType<DictionaryAttr>("cdp.schedule") : nullptr;
    auto offsetsAttr =
        func ? func->getAttrOfType<DenseI64ArrayAttr>("cdp.offsets") : nullptr;
    if (!schedule || !offsetsAttr) {
      getOperation().emitError("no schedule; run cdp-build-schedule first");
      return signalPassFailure();
    }
    if (rule != "v1" && rule != "v2") {
      func.emitError("--cdp-rule must be v1 or v2, got '") << rule << "'";
      return signalPassFailure();
    }
    if (table != "timing" && table != "code") {
      func.emitError("--v2-table must be timing or code, got '")
          << table << "'";
      return signalPassFailure();
    }
    auto strategy =
        dyn_cast_or_null<sched::StrategyAttr>(schedule.get("strategy"));
    if (!strategy) {
      func.emitError("cdp.schedule names no strategy");
      return signalPassFailure();
    }
    std::optional<Strategy> kind = strategy.getValue();
    bool cdp = traitsOf(*kind).cyclic;
    bool afterBackward = reducesAfterBackward(schedule);
    int64_t L = cast<IntegerAttr>(schedule.get("stages")).getInt();
    ArrayRef<int64_t> s = offsetsAttr.asArrayRef();
    int64_t N = s.size();
    OpBuilder builder(func.getContext());
    SmallVector<Attribute> rows;
    SmallVector<int64_t> live(L, cdp ? 2 : 1);
    SmallVector<bool> allFresh(L, true);
    for (int64_t i = 0; i < N; ++i) {
      SmallVector<int64_t> row;
      for (int64_t l = 1; l <= L; ++l) {
        int64_t delay = 0;
        if (cdp && rule == "v1")
          delay = 1;
        else if (cdp) {
          bool fresh = pipeline::cdpFresh(table == "code", i, l, L, s[i],
                                          s[N - 1], afterBackward);
          delay = fresh ? 0 : 1;
        }
        allFresh[l - 1] = allFresh[l - 1] && delay == 0;
        row.push_back(delay);
      }
      rows.push_back(builder.getDenseI64ArrayAttr(row));
    }
    // A fresh (i, l) needs theta_{t,l}, made when the stage-l reduction of
    // step t-1 completes at tau*_l(t-1) = s_{N-1} + 2L(t-1) + r_l (r_l =
    // 2L - l, or 2L - 1 when reductions follow the whole backward); its
    // F_l runs at s_i + 2Lt + l - 1. When a table asks for a version that
    // does not exist yet (the code table with N != L can), the slot waits:
    // its offset grows by the shortfall, and the report shows the idle
    // time steps. The last slot is never late, so tau* stays put.
    SmallVector<int64_t> shifted(s.begin(), s.end()), idle(N, 0);
    if (cdp)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t l = 1; l <= L; ++l)
          if (cast<DenseI64ArrayAttr>(rows[i]).asArrayRef()[l - 1] == 0)
            idle[i] = std::max<int64_t>(
                idle[i], s[N - 1] - s[i] +
                             pipeline::reductionStart(l, L, afterBackward) -
                             2 * L - l + 2);
    for (int64_t i = 0; i < N; ++i)
      shifted[i] += idle[i];
    func->setAttr("cdp.offsets", builder.getDenseI64ArrayAttr(shifted));
    func->setAttr("cdp.idle", builder.getDenseI64ArrayAttr(idle));

    // Under v2 a stage every slot reads fresh is updated in place.
    if (cdp && rule == "v2")
      for (int64_t l = 0; l < L; ++l)
        if (allFresh[l])
          live[l] = 1;
    func->setAttr("cdp.version_delay", builder.getArrayAttr(rows));
    func->setAttr("cdp.live_versions", builder.getDenseI64ArrayAttr(live));
    func->setAttr("cdp.rule",
                  builder.getStringAttr(!cdp           ? "dp"
                                        : rule == "v1" ? "v1"
                                                       : "v2-" + table));
  }
};

} // namespace
