//===- Descriptors.h - every strategy's descriptor, declared ----*- C++ -*-===//
//
// Declared here, defined constexpr in each strategy's own file (a prior
// extern declaration gives the definition external linkage), so that the
// registry in Strategy.cpp is constant-initialized: tools read it while
// their flags' help is built, before dynamic initialization is ordered.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_SCHEDULE_STRATEGIES_DESCRIPTORS_H
#define CDP_RUNTIME_SCHEDULE_STRATEGIES_DESCRIPTORS_H

#include "cdp/Schedule/Strategy.h"

namespace cdp {

#define CDP_STRATEGY(Id) extern const StrategyTraits k##Id##Strategy;
#include "cdp/Schedule/Strategies.def"

} // namespace cdp

#endif // CDP_RUNTIME_SCHEDULE_STRATEGIES_DESCRIPTORS_H
