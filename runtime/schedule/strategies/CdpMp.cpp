//===- CdpMp.cpp - cdp-mp: CDP under model parallelism --------------------===//
//
// CDP's slots on shared stage devices: N micro-batches share the devices
// of L stages, each stage on as many devices as it has work at one time
// step of CDP's cycle (docs/strategies/cdp-mp.md).
//
//===----------------------------------------------------------------------===//

#include "Descriptors.h"

#include "cdp/Schedule/Pipeline.h"

#include <algorithm>

namespace cdp {

namespace {

/// Each device of the stage stashes every micro-batch it runs (the stage's
/// devices from CDP's edge colouring): the most any of them runs.
int64_t cdpMpStash(int64_t s, int64_t S, int64_t M) {
  std::vector<int64_t> device = pipeline::cdpStageDevices(s, S, M);
  std::vector<int64_t> count(M, 0);
  for (int64_t c : device)
    ++count[c];
  return *std::max_element(count.begin(), count.end());
}

} // namespace

constexpr StrategyTraits kCDPMPStrategy = [] {
  StrategyTraits traits;
  traits.strategy = Strategy::CDPMP;
  traits.name = "cdp-mp";
  traits.help = "CDP with model parallelism: --micro-batches N share the "
                "devices of --stages L";
  traits.passPipeline = "cdp-mp";
  traits.summary = "CDP under model parallelism: CDP's slots on shared stage "
                   "devices";
  traits.pipelined = true;
  traits.weightVersions = 2;
  traits.cyclic = true;
  traits.stash = cdpMpStash;
  return traits;
}();

} // namespace cdp
