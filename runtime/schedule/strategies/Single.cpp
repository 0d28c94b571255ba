//===- Single.cpp - single: one device, no parallelism --------------------===//

#include "Descriptors.h"

namespace cdp {

constexpr StrategyTraits kSingleStrategy = [] {
  StrategyTraits traits;
  traits.strategy = Strategy::Single;
  traits.name = "single";
  traits.help = "one device";
  traits.oneDevice = true;
  return traits;
}();

} // namespace cdp
