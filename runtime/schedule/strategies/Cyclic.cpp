//===- Cyclic.cpp - cdp: cyclic data parallelism --------------------------===//
//
// Micro-batches start one after another with a uniform delay; the updates
// follow the v1/v2 rules (docs/strategies/cdp.md), applied by the passes
// from the schedule's version table.
//
//===----------------------------------------------------------------------===//

#include "Descriptors.h"

namespace cdp {

constexpr StrategyTraits kCDPStrategy = [] {
  StrategyTraits traits;
  traits.strategy = Strategy::CDP;
  traits.name = "cdp";
  traits.help = "cyclic data parallel";
  traits.passPipeline = "cdp-cyclic";
  traits.summary = "Cyclic data parallelism: micro-batches start one after "
                   "another, updates delayed by the CDP rule";
  traits.dataParallel = true;
  traits.cyclic = true;
  traits.zeroStages = 0b1000;
  return traits;
}();

} // namespace cdp
