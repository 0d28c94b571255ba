//===- LaySA.cpp - laysa: top-k updates, mirror weights -------------------===//
//
// Synchronous data parallelism whose devices exchange each parameter's
// top-k update entries, the rest kept as error feedback in mirror weights
// (docs/strategies/laysa.md); cdp-sparsify-gradients adds the exchange.
//
//===----------------------------------------------------------------------===//

#include "Descriptors.h"

namespace cdp {

constexpr StrategyTraits kLaySAStrategy = [] {
  StrategyTraits traits;
  traits.strategy = Strategy::LaySA;
  traits.name = "laysa";
  traits.help = "dp exchanging top-k updates with error feedback in mirror "
                "weights: --density";
  traits.passPipeline = "cdp-laysa";
  traits.summary = "LaySA: synchronous data parallelism exchanging top-k "
                   "updates with error feedback kept in mirror weights";
  traits.dataParallel = true;
  traits.sparseExchange = true;
  return traits;
}();

} // namespace cdp
