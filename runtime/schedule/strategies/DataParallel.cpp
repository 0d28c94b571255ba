//===- DataParallel.cpp - dp: data parallelism ----------------------------===//

#include "Descriptors.h"

namespace cdp {

constexpr StrategyTraits kDPStrategy = [] {
  StrategyTraits traits;
  traits.strategy = Strategy::DP;
  traits.name = "dp";
  traits.help = "data parallel";
  traits.passPipeline = "cdp-dp";
  traits.summary = "Data parallelism: every device runs every stage of its "
                   "micro-batch, gradients all-reduced each step";
  traits.dataParallel = true;
  traits.zeroStages = 0b1110;
  return traits;
}();

} // namespace cdp
