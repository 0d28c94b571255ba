//===- Features.h - every feature's descriptor, declared --------*- C++ -*-===//

#ifndef CDP_RUNTIME_SCHEDULE_FEATURES_FEATURES_H
#define CDP_RUNTIME_SCHEDULE_FEATURES_FEATURES_H

#include "cdp/Schedule/Layout.h"

namespace cdp {

#define CDP_FEATURE(Id) extern const FeatureTraits k##Id##Feature;
#include "cdp/Schedule/Features.def"

} // namespace cdp

#endif // CDP_RUNTIME_SCHEDULE_FEATURES_FEATURES_H
