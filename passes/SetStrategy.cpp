//===- SetStrategy.cpp - the strategy as typed IR on the module -----------===//
//
// The one place a strategy's name becomes IR: the passes that depend on the
// strategy read `sched.strategy` from the module, never an option.
//
//===----------------------------------------------------------------------===//

#include "cdp/Passes/Passes.h"

namespace cdp {
#define GEN_PASS_DEF_SETSTRATEGY
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

struct SetStrategyPass : public cdp::impl::SetStrategyBase<SetStrategyPass> {
  using SetStrategyBase::SetStrategyBase;

  void runOnOperation() override {
    std::optional<Strategy> kind = parseStrategy(strategy.getValue());
    if (!kind) {
      getOperation().emitError("cdp-set-strategy: '")
          << strategy << "' is not a strategy ("
          << strategyNames(nullptr, " or ") << ")";
      return signalPassFailure();
    }
    getOperation()->setAttr("sched.strategy",
                            sched::StrategyAttr::get(&getContext(), *kind));
  }
};

} // namespace
