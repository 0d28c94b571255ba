//===- Layout.h - the strategy flags, checked together ---------*- C++ -*-===//
//
// What a user's flags ask of a strategy (devices, stages, replicas,
// micro-batches, a schedule file) and of the features that combine with
// strategies (ZeRO, laysa's sparse exchange, memory reuse), checked here,
// beside the descriptors that state what each strategy takes. cdp-compile
// reads its flags into a LayoutRequest and gets the Layout back, or one
// line saying what is wrong. No MLIR, no LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_SCHEDULE_LAYOUT_H
#define CDP_SCHEDULE_LAYOUT_H

#include "cdp/Schedule/ScheduleTable.h"
#include "cdp/Schedule/Strategy.h"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace cdp {

/// Bounds on counts: a plan holds them in 32-bit fields, and beyond these
/// no machine runs the plan (its instructions grow with their product).
constexpr int64_t kMostDevices = 4096, kMostMicroBatches = 65536,
                  kMostReportSteps = 10000;

/// The flags as the user typed them: every flag the checks read, by its
/// name without "--" ("devices", "zero", "cdp-rule"), with its value or its
/// default; `given` names those on the command line.
struct LayoutRequest {
  std::map<std::string, std::string> values;
  std::set<std::string> given;
  /// --emit, with plan-text read as plan.
  std::string emit = "plan";
  /// The stages --stage-boundaries cuts (0: the flag is absent).
  int64_t boundaryStages = 0;

  const std::string &value(const std::string &flag) const;
  bool has(const std::string &flag) const { return given.count(flag) > 0; }
};

/// The checked layout: what the passes, the planner and the emitter read.
struct Layout {
  const StrategyTraits *traits = nullptr;
  int64_t devices = 1, stages = 0, replicas = 1, microBatches = 1;
  /// interleaved-1f1b's --stages-per-device (1 otherwise).
  int64_t stagesPerDevice = 1;
  int64_t deviceMemoryBytes = 0;
  /// --schedule's table, read and checked.
  std::optional<pipeline::ScheduleTable> schedule;
  /// --zero's stage (0: off).
  int64_t zero = 0;
  /// laysa's --density, --dense-below and --sparse-baseline residual.
  double density = 0.01;
  int64_t denseBelow = 1024;
  bool sparseResidual = false;
  /// --memory-reuse layer.
  bool layerReuse = false;
  /// The stages --stage-boundaries cuts (0: the flag is absent).
  int64_t boundaryStages = 0;

  /// The stage count the flags give: --stage-boundaries', else --stages.
  int64_t flagStages() const {
    return boundaryStages ? boundaryStages : stages;
  }
};

/// The strategy and its layout (--strategy, --devices, --stages,
/// --replicas, --stages-per-device, --schedule, --device-memory,
/// --micro-batches, cdp's update rule), checked in the order cdp-compile
/// has always checked them: the layout, or the first problem in one line.
struct LayoutResult {
  Layout layout;
  std::string problem;
};
LayoutResult checkLayout(const LayoutRequest &request);

/// The features against the layout's strategy, each by its descriptor
/// (Features.def), and the strategy-only flags given to another strategy:
/// "" or the first problem. Sets the features' numbers in `layout`.
std::string checkFeatures(const LayoutRequest &request, Layout &layout);

/// A feature that combines with strategies (ZeRO, laysa's sparse exchange,
/// memory reuse): its flags' checks against the layout's strategy, and
/// their numbers into the layout. One descriptor per feature in
/// runtime/schedule/features/, listed in Features.def.
struct FeatureTraits {
  const char *name = "";
  /// Checks the request's use of the feature, refusing it by throwing the
  /// library's LayoutProblem (checkFeatures returns its line).
  void (*check)(const LayoutRequest &request, Layout &layout) = nullptr;
};

/// Every registered feature, in the order their checks run.
const std::vector<const FeatureTraits *> &allFeatures();

} // namespace cdp

#endif // CDP_SCHEDULE_LAYOUT_H
