//===- Layout.cpp - the strategy flags, checked against each other --------===//
//
// Every message names the flag and says what to do; the order is the
// order the checks ran in when they lived in cdp-compile, so a command
// with two problems still hears of the same one first.
//
//===----------------------------------------------------------------------===//

#include "cdp/Schedule/Layout.h"

#include "features/Checks.h"
#include "features/Features.h"

#include "cdp/Schedule/Pipeline.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace cdp {

using layout::count;
using layout::refuse;
using layout::refuseFlag;

const std::string &LayoutRequest::value(const std::string &flag) const {
  static const std::string none;
  auto it = values.find(flag);
  return it == values.end() ? none : it->second;
}

namespace layout {

/// A signed decimal integer, the whole text (no sign '+', no spaces).
static bool parseInteger(const std::string &text, int64_t &value) {
  const char *end = text.data() + text.size();
  auto [last, error] = std::from_chars(text.data(), end, value);
  return error == std::errc() && last == end && !text.empty();
}

int64_t count(const std::string &flag, const std::string &text, int64_t least,
              int64_t most) {
  int64_t value = 0;
  if (!parseInteger(text, value) || value < least)
    refuse(flag + " must be a positive integer, got '" + text + "'");
  if (value > most)
    refuse(flag + " must be at most " + std::to_string(most) + ", got '" +
           text + "'");
  return value;
}

double real(const std::string &flag, const std::string &text) {
  char *last = nullptr;
  double value =
      text.empty() || std::isspace(static_cast<unsigned char>(text.front()))
          ? NAN
          : std::strtod(text.c_str(), &last);
  if (!std::isfinite(value) || last != text.c_str() + text.size())
    refuse(flag + " must be a number, got '" + text + "'");
  return value;
}

} // namespace layout

namespace {

/// --emit=schedule-csv, --stages-per-device and --schedule against the
/// strategy.
void checkScheduleFlags(const LayoutRequest &request, Layout &layout) {
  const StrategyTraits &traits = *layout.traits;
  const std::string name = traits.name;
  bool tabled = traits.table != nullptr;
  std::string tabledNames =
      strategyNames([](const StrategyTraits &t) { return t.table != nullptr; });
  if (request.emit == "schedule-csv" && !tabled)
    refuse("--emit=schedule-csv writes the schedules of " + tabledNames +
           ", not --strategy " + name);
  if (!request.value("schedule").empty() && !tabled)
    refuse("--schedule applies to " + tabledNames + ", not --strategy " + name);
  bool takesFlag = traits.stagesPerDevice == 0;
  if (request.has("stages-per-device") && !takesFlag)
    refuseFlag("stages-per-device", strategyNames([](const StrategyTraits &t) {
                                      return t.stagesPerDevice == 0;
                                    }) + ", not --strategy " +
                                        name);
  layout.stagesPerDevice = stagesPerDevice(
      traits.strategy,
      takesFlag ? count("--stages-per-device",
                        request.value("stages-per-device"), 1, kMostDevices)
                : 1);
}

/// --device-memory: a byte count, for the pipelines of one stage per
/// device whose stages it cuts.
void checkDeviceMemory(const LayoutRequest &request, Layout &layout) {
  if (!request.has("device-memory"))
    return;
  const std::string &text = request.value("device-memory");
  int64_t bytes = 0;
  if (!layout::parseInteger(text, bytes) || bytes < 1)
    refuse("--device-memory must be a positive number of bytes, got '" + text +
           "'");
  layout.deviceMemoryBytes = bytes;
  if (!layout.traits->pipelined)
    refuse("--device-memory applies to the pipelines (" +
           strategyNames([](const StrategyTraits &t) {
             return t.pipelined && t.stagesPerDevice == 1;
           }) +
           "), not --strategy " + layout.traits->name);
  if (layout.boundaryStages)
    refuse("--device-memory cuts the stages itself; drop --stage-boundaries");
  if (layout.stagesPerDevice != 1)
    refuse("--device-memory sizes one stage per device; --strategy " +
           std::string(layout.traits->name) +
           " runs several (not supported yet)");
}

/// cdp-mp: N micro-batches (CDP slots) share the stages' devices; stage l
/// needs as many devices as it has ops at one time step of CDP's cycle (L
/// in all when N | L and 2L/N is even, N when L | N).
void deriveCdpMpDevices(const LayoutRequest &request, Layout &layout,
                        int64_t L) {
  int64_t N = layout.microBatches, derived = 0;
  std::string perStage;
  for (int64_t s = 1; s <= L; ++s) {
    int64_t devices = pipeline::cdpStageDeviceCount(s, L, N);
    derived += devices;
    perStage += (s > 1 ? ", " : "") + std::to_string(devices);
  }
  auto [slot, stage] = pipeline::cdpCodeTableTooEarly(L, N);
  if (request.value("cdp-rule") == "v2" &&
      request.value("v2-table") == "code" && slot >= 0)
    refuse("--strategy cdp-mp --v2-table code: with N = " + std::to_string(N) +
           " and L = " + std::to_string(L) + " the code table makes slot " +
           std::to_string(slot) + " read stage " + std::to_string(stage) +
           "'s new version before the update that makes it "
           "(docs/strategies/cdp.md, update rules); use --v2-table timing");
  if (request.has("devices") && layout.devices != derived)
    refuse("--strategy cdp-mp with N = " + std::to_string(N) +
           " micro-batches on L = " + std::to_string(L) + " stages runs on " +
           std::to_string(derived) + " devices (" + perStage +
           " per stage, docs/strategies/cdp-mp.md): --devices " +
           request.value("devices") + " differs");
  layout.devices = derived;
}

/// "one device per stage", "2 devices a replica" and what --devices
/// should have been, for the refusal of a pipeline's --devices.
std::string pipelineDevicesProblem(const LayoutRequest &request,
                                   const Layout &layout, int64_t stages,
                                   int64_t perReplica) {
  int64_t R = layout.replicas;
  bool perStage = perReplica == stages;
  return "--strategy " + std::string(layout.traits->name) + " runs " +
         (perStage ? std::string("one device per stage")
                   : std::to_string(perReplica) + " devices a replica") +
         (R > 1 && perStage ? " and replica" : "") + ": --devices " +
         request.value("devices") + " differs from the " +
         (perStage ? std::to_string(stages) + " stages"
                   : std::to_string(perReplica) + " devices") +
         (R > 1 ? " x " + std::to_string(R) + " replicas" : "");
}

/// A pipeline's micro-batches (default: its stage count) and devices: the
/// strategy's own shape check, --schedule's table, one replica's devices
/// times the replicas.
void checkPipelineDevices(const LayoutRequest &request, Layout &layout) {
  const StrategyTraits &traits = *layout.traits;
  bool planAuto = request.value("plan") == "auto";
  int64_t stages = layout.flagStages();
  if (!request.has("micro-batches"))
    layout.microBatches = stages;
  bool cyclic = traits.cyclic;
  if (cyclic)
    deriveCdpMpDevices(request, layout, stages);
  int64_t V = layout.stagesPerDevice, M = layout.microBatches;
  if (traits.checkShape && !planAuto)
    if (std::string problem = traits.checkShape(stages, M, V); !problem.empty())
      refuse(problem);
  int64_t perReplica = stages / V;
  if (const std::string &path = request.value("schedule"); !path.empty()) {
    pipeline::CsvResult read =
        pipeline::readScheduleFile(path, stages, M, traits.strategy);
    if (!read.table)
      refuse(read.error);
    layout.schedule = std::move(read.table);
    perReplica = layout.schedule->devices;
  }
  if (planAuto || cyclic)
    return;
  if (request.has("devices") && layout.devices != perReplica * layout.replicas)
    refuse(pipelineDevicesProblem(request, layout, stages, perReplica));
  layout.devices = perReplica * layout.replicas;
}

/// --micro-batches against the devices and stages.
void checkMicroBatches(const LayoutRequest &request, Layout &layout) {
  layout.microBatches = count("--micro-batches", request.value("micro-batches"),
                              1, kMostMicroBatches);
  if (layout.traits->pipelined)
    checkPipelineDevices(request, layout);
  if (layout.traits->dataParallel && request.has("micro-batches") &&
      layout.microBatches != layout.devices)
    refuse("--strategy " + std::string(layout.traits->name) +
           " runs one micro-batch per device: --micro-batches " +
           request.value("micro-batches") + " differs from --devices " +
           request.value("devices"));
}

/// The strategy, its devices and stages, and cdp-mp's update rule.
const StrategyTraits &checkStrategy(const LayoutRequest &request,
                                    Layout &layout) {
  const std::string &name = request.value("strategy");
  std::optional<Strategy> parsed = parseStrategy(name);
  if (!parsed)
    refuse("--strategy " + name +
           " is not available yet (this release "
           "supports " +
           strategyNames() + ")");
  const StrategyTraits &traits = traitsOf(*parsed);
  layout.traits = &traits;
  layout.devices =
      count("--devices", request.value("devices"), 1, kMostDevices);
  layout.stages = count("--stages", request.value("stages"), 0, kMostDevices);
  layout.boundaryStages = request.boundaryStages;
  if (traits.oneDevice && layout.devices != 1)
    refuse("--strategy " + name + " runs on 1 device, not " +
           request.value("devices") + " (use --strategy dp or cdp)");
  bool cyclicPipeline = traits.pipelined && traits.cyclic;
  const std::string &rule = request.value("cdp-rule");
  if (cyclicPipeline && rule != "v1" && rule != "v2")
    refuse("--cdp-rule must be v1 or v2, got '" + rule + "'");
  const std::string &table = request.value("v2-table");
  if (cyclicPipeline && table != "timing" && table != "code")
    refuse("--v2-table must be timing or code, got '" + table + "'");
  if (traits.pipelined && layout.stages == 0 && !layout.boundaryStages)
    layout.stages = 4;
  return traits;
}

Layout layoutOf(const LayoutRequest &request) {
  Layout layout;
  const StrategyTraits &traits = checkStrategy(request, layout);
  if (request.emit == "sched-mlir" && !traits.dataParallel && !traits.pipelined)
    refuse("--emit=sched-mlir writes the schedules of dp, cdp and the "
           "pipelines; --strategy " +
           std::string(traits.name) +
           " has none (--emit=plan-text shows its stream)");
  checkScheduleFlags(request, layout);
  layout.replicas =
      count("--replicas", request.value("replicas"), 1, kMostDevices);
  if (layout.replicas > 1 && !traits.replicable)
    refuseFlag("replicas", strategyNames([](const StrategyTraits &t) {
                             return t.replicable;
                           }) + ", not --strategy " +
                               traits.name);
  checkDeviceMemory(request, layout);
  checkMicroBatches(request, layout);
  return layout;
}

/// The flags of one kind of strategy, given to another.
void checkStrategyOnlyFlags(const LayoutRequest &request,
                            const StrategyTraits &traits) {
  const std::string name = traits.name;
  for (const char *flag : {"cdp-rule", "v2-table"})
    if (request.has(flag) && !traits.cyclic)
      refuseFlag(flag, "--strategy cdp and cdp-mp, not " + name);
  if (request.has("cdp-reduce") && !traits.dataParallel)
    refuseFlag("cdp-reduce", "--strategy dp and cdp, not " + name);
  if (request.value("plan") == "auto" && !traits.autoPlans)
    refuse("--plan auto plans --strategy " +
           strategyNames([](const StrategyTraits &t) { return t.autoPlans; }) +
           " (docs/design/planner.md), not " + name);
}

} // namespace

LayoutResult checkLayout(const LayoutRequest &request) {
  LayoutResult result;
  try {
    result.layout = layoutOf(request);
  } catch (const layout::LayoutProblem &refusal) {
    result.problem = refusal.message;
  }
  return result;
}

std::string checkFeatures(const LayoutRequest &request, Layout &layout) {
  try {
    checkStrategyOnlyFlags(request, *layout.traits);
    for (const FeatureTraits *feature : allFeatures())
      feature->check(request, layout);
    if (request.has("hw") && !layout.traits->pipelined)
      refuseFlag("hw", "the pipelines (" +
                           strategyNames([](const StrategyTraits &t) {
                             return t.pipelined;
                           }) +
                           "), not " + layout.traits->name);
  } catch (const layout::LayoutProblem &refusal) {
    return refusal.message;
  }
  return "";
}

const std::vector<const FeatureTraits *> &allFeatures() {
  static const std::vector<const FeatureTraits *> all = {
#define CDP_FEATURE(Id) &k##Id##Feature,
#include "cdp/Schedule/Features.def"
  };
  return all;
}

} // namespace cdp
