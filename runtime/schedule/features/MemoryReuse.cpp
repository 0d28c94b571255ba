//===- MemoryReuse.cpp - --memory-reuse: layer-centric reuse --------------===//
//
// LaySA's memory reuse (one activation arena per layer, reused across
// layers whose lifetimes do not overlap) applies to every strategy.
//
//===----------------------------------------------------------------------===//

#include "Checks.h"
#include "Features.h"

namespace cdp {

namespace {

void checkMemoryReuse(const LayoutRequest &request, Layout &layout) {
  const std::string &reuse = request.value("memory-reuse");
  if (reuse != "none" && reuse != "layer")
    layout::refuse("--memory-reuse takes none or layer, got '" + reuse + "'");
  layout.layerReuse = reuse == "layer";
}

} // namespace

const FeatureTraits kMemoryReuseFeature = {"memory-reuse", checkMemoryReuse};

} // namespace cdp
