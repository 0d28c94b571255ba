//===- SparseExchange.cpp - laysa's top-k gradient exchange ---------------===//
//
// --density, --dense-below and --sparse-baseline shape the exchange of a
// strategy whose descriptor says it exchanges sparse gradients (laysa).
// Its devices never hold the step's mean gradient, so ZeRO, cdp's
// reductions and clipping do not combine with it; its error feedback
// accumulates SGD steps.
//
//===----------------------------------------------------------------------===//

#include "Checks.h"
#include "Features.h"

namespace cdp {

namespace {

void checkSparseExchange(const LayoutRequest &request, Layout &layout) {
  const StrategyTraits &traits = *layout.traits;
  for (const char *flag : {"density", "dense-below", "sparse-baseline"})
    if (request.has(flag) && !traits.sparseExchange)
      layout::refuse(std::string("--") + flag + " applies to --strategy " +
                     strategyNames([](const StrategyTraits &t) {
                       return t.sparseExchange;
                     }) +
                     ", not " + traits.name);
  if (!traits.sparseExchange)
    return;
  const std::string &density = request.value("density");
  layout.density = layout::real("--density", density);
  if (!(layout.density > 0 && layout.density <= 1))
    layout::refuse("--density must lie in (0, 1], got '" + density + "'");
  layout.denseBelow = layout::count("--dense-below",
                                    request.value("dense-below"), 0, INT64_MAX);
  const std::string &baseline = request.value("sparse-baseline");
  if (request.has("sparse-baseline") && baseline != "residual")
    layout::refuse("--sparse-baseline takes residual, got '" + baseline + "'");
  layout.sparseResidual = request.has("sparse-baseline");
  const std::string &optimizer = request.value("optimizer");
  const std::string name = traits.name;
  if (optimizer == "adam" || optimizer == "adamw")
    layout::refuse("--strategy " + name +
                   " accumulates SGD steps in its error feedback; use "
                   "--optimizer sgd or momentum, not " +
                   optimizer);
  if (layout.zero != 0 || request.has("cdp-reduce") ||
      layout::real("--clip-grad-norm", request.value("clip-grad-norm")) > 0)
    layout::refuse("--strategy " + name +
                   " takes no --zero, --cdp-reduce or --clip-grad-norm (its "
                   "devices never hold the step's mean gradient)");
}

} // namespace

const FeatureTraits kSparseExchangeFeature = {"sparse-exchange",
                                              checkSparseExchange};

} // namespace cdp
