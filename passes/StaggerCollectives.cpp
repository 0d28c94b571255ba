//===- StaggerCollectives.cpp - when each stage's reduction starts --------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

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
    if (reduce == "chain") {
      func.emitError("--cdp-reduce chain is not available yet (use allreduce)");
      return signalPassFailure();
    }
    int64_t L = cast<IntegerAttr>(schedule.get("stages")).getInt();
    int64_t last = offsets.asArrayRef().back();
    SmallVector<int64_t> at;
    for (int64_t l = 1; l <= L; ++l)
      at.push_back(last + 2 * L - l); // tau*_l(0)
    OpBuilder builder(func.getContext());
    func->setAttr("cdp.reduce_at", builder.getDenseI64ArrayAttr(at));
    func->setAttr("cdp.reduce", builder.getStringAttr(reduce));
  }
};

} // namespace
