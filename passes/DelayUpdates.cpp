//===- DelayUpdates.cpp - the weight version of every (slot, stage) -------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SlotSchedule.h"
#include "cdp/Schedule/Versions.h"

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
    bool afterBackward = reducesAfterBackward(schedule);
    int64_t L = cast<IntegerAttr>(schedule.get("stages")).getInt();
    ArrayRef<int64_t> s = offsetsAttr.asArrayRef();
    VersionTable versions = versionTable(
        strategy.getValue(), rule, table,
        std::vector<int64_t>(s.begin(), s.end()), L, afterBackward);
    OpBuilder builder(func.getContext());
    SmallVector<Attribute> rows;
    for (const std::vector<int64_t> &row : versions.delay)
      rows.push_back(builder.getDenseI64ArrayAttr(row));
    // A slot that waits for its version starts later by as much, and the
    // report shows the idle time steps.
    SmallVector<int64_t> shifted(s.begin(), s.end());
    for (size_t i = 0; i < shifted.size(); ++i)
      shifted[i] += versions.idle[i];
    func->setAttr("cdp.offsets", builder.getDenseI64ArrayAttr(shifted));
    func->setAttr("cdp.idle", builder.getDenseI64ArrayAttr(versions.idle));
    func->setAttr("cdp.version_delay", builder.getArrayAttr(rows));
    func->setAttr("cdp.live_versions",
                  builder.getDenseI64ArrayAttr(versions.live));
    func->setAttr("cdp.rule", builder.getStringAttr(versions.rule));
  }
};

} // namespace
