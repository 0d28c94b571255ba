//===- StaggerCollectives.cpp - when each stage's reduction starts --------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SlotSchedule.h"
#include "cdp/Schedule/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cdp {
#define GEN_PASS_DEF_STAGGERCOLLECTIVES
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

struct StaggerCollectivesPass
    : public cdp::impl::StaggerCollectivesBase<StaggerCollectivesPass> {
  using StaggerCollectivesBase::StaggerCollectivesBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation().lookupSymbol<func::FuncOp>("main");
    auto schedule =
        func ? func->getAttrOfType<DictionaryAttr>("cdp.schedule") : nullptr;
    auto offsets =
        func ? func->getAttrOfType<DenseI64ArrayAttr>("cdp.offsets") : nullptr;
    if (!schedule || !offsets) {
      getOperation().emitError("no schedule; run cdp-build-schedule first");
      return signalPassFailure();
    }
    if (reduce != "allreduce" && reduce != "chain") {
      func.emitError("--cdp-reduce must be allreduce or chain, got '")
          << reduce << "'";
      return signalPassFailure();
    }

    int64_t L = cast<IntegerAttr>(schedule.get("stages")).getInt();
    int64_t last = offsets.asArrayRef().back();
    bool afterBackward = reducesAfterBackward(schedule);
    SmallVector<int64_t> at;
    for (int64_t l = 1; l <= L; ++l) // tau*_l(0)
      at.push_back(last + pipeline::reductionStart(l, L, afterBackward));
    if (reduce == "chain") {
      // The mean of step t leaves the last slot at tau*_l(t) and reaches
      // slot j after max(1, N-1-j) time steps; slot j first uses it at its
      // F_l of step t + 1 + d(j, l). Refuse a plan where it comes late.
      auto delays = func->getAttrOfType<ArrayAttr>("cdp.version_delay");
      if (!delays) {
        func.emitError("--cdp-reduce chain needs the version table; run "
                       "cdp-delay-updates first");
        return signalPassFailure();
      }
      ArrayRef<int64_t> s = offsets.asArrayRef();
      int64_t N = s.size();
      for (int64_t j = 0; j < N; ++j)
        for (int64_t l = 1; l <= L; ++l) {
          int64_t d = cast<DenseI64ArrayAttr>(delays[j]).asArrayRef()[l - 1];
          int64_t usable = at[l - 1] + std::max<int64_t>(1, N - 1 - j);
          int64_t use = s[j] + 2 * L * (1 + d) + l - 1;
          if (usable > use) {
            func.emitError("--cdp-reduce chain: the stage-")
                << l << " version reaches slot " << j << " at time step "
                << usable << ", " << usable - use << " time step(s) after its F"
                << l << " needs it at " << use
                << " (use --cdp-reduce allreduce, or --cdp-rule v1)";
            return signalPassFailure();
          }
        }
    }
    OpBuilder builder(func.getContext());
    func->setAttr("cdp.reduce_at", builder.getDenseI64ArrayAttr(at));
    func->setAttr("cdp.reduce", builder.getStringAttr(reduce));
  }
};

} // namespace
