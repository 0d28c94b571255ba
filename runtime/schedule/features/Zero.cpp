//===- Zero.cpp - --zero: sharded model states ----------------------------===//
//
// dp shards the optimizer state (1), the gradients (2) and the parameters
// (3) over its devices; cdp only all three (CDP-ZeRO, point to point along
// the chain); a pipeline with --replicas shards each stage's optimizer
// state over the stage's replicas (1). The strategy's descriptor says
// which stages it takes (zeroStages); pipelines take 1 through --replicas.
//
//===----------------------------------------------------------------------===//

#include "Checks.h"
#include "Features.h"

namespace cdp {

namespace {

/// CDP-ZeRO moves every model state point to point along the chain.
void checkCdpZero(const LayoutRequest &request, int64_t zero) {
  const std::string &text = request.value("zero");
  if (zero < 3)
    layout::refuse(
        "--zero " + text +
        " with --strategy cdp is not built: CDP-ZeRO (--zero 3) moves "
        "every model state point to point; sharding only the optimizer "
        "state or the gradients would bring back dp's collectives (use "
        "--strategy dp --zero " +
        text + ")");
  if (request.value("cdp-rule") != "v1")
    layout::refuse(
        "--zero 3 with --strategy cdp (CDP-ZeRO) runs update rule v1 only: "
        "give --cdp-rule v1 (under v2 a stage's owner would keep and send "
        "two versions)");
  if (request.has("cdp-reduce") && request.value("cdp-reduce") != "chain")
    layout::refuse("--zero 3 with --strategy cdp (CDP-ZeRO) reduces gradients "
                   "along the chain of devices; drop --cdp-reduce " +
                   request.value("cdp-reduce"));
  if (request.has("clip-grad-norm"))
    layout::refuse(
        "--clip-grad-norm with --strategy cdp --zero 3 is not built yet: "
        "CDP-ZeRO's devices never hold a whole step's gradients; use "
        "--strategy dp --zero 3 to clip");
}

/// A pipeline shards each stage's optimizer state over its replicas.
void checkReplicaZero(const LayoutRequest &request, const Layout &layout,
                      int64_t zero) {
  const std::string name = layout.traits->name;
  if (zero > 1)
    layout::refuse("--zero " + request.value("zero") + " with --strategy " +
                   name +
                   " is not built yet: a pipeline shards its optimizer state "
                   "over a stage's --replicas with --zero 1");
  if (layout.replicas < 2)
    layout::refuse("--zero 1 with --strategy " + name +
                   " shards each stage's optimizer state over the stage's "
                   "replicas; give --replicas 2 or more");
}

void checkZero(const LayoutRequest &request, Layout &layout) {
  const StrategyTraits &traits = *layout.traits;
  int64_t zero = layout::count("--zero", request.value("zero"), 0, 3);
  layout.zero = zero;
  if (zero == 0)
    return;
  if (traits.dataParallel && traits.cyclic)
    checkCdpZero(request, zero);
  if (traits.replicable)
    checkReplicaZero(request, layout, zero);
  else if (!(traits.zeroStages >> zero & 1))
    layout::refuseFlag("zero", "--strategy dp and cdp, and the --replicas of " +
                                   strategyNames([](const StrategyTraits &t) {
                                     return t.replicable;
                                   }) +
                                   ", not " + traits.name);
}

} // namespace

const FeatureTraits kZeroFeature = {"zero", checkZero};

} // namespace cdp
