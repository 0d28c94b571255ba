//===- Strategy.h - the strategies and what sets them apart ----*- C++ -*-===//
//
// The one place a strategy's name is read (cdp-compile's --strategy, a
// plan's `strategy`, the passes' options) and the one place its traits are
// stated: the partitioner's estimate, the passes, the emitter, the report
// and the runtime ask here instead of comparing names. No MLIR: the runtime
// uses it too.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_SCHEDULE_STRATEGY_H
#define CDP_SCHEDULE_STRATEGY_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cdp {

enum class Strategy {
  Single,
  DP,
  CDP,
  GPipe,
  OneFOneB,
  TwoBW,
  CDPMP,
  Interleaved1F1B,
  ZBH1,
  LaySA,
};

/// What a strategy does, in the terms the compiler and the runtime need.
struct StrategyTraits {
  Strategy strategy;
  const char *name; ///< as --strategy and the plan spell it
  /// Every device runs the whole model on its own micro-batch, gradients
  /// reduced per stage (dp, cdp).
  bool dataParallel;
  /// Devices run stages: one device per stage and replica (gpipe, 1f1b,
  /// 2bw), or per stage and CDP slot group (cdp-mp).
  bool pipelined;
  /// Weight versions a pipeline stage keeps: 2 where micro-batches in
  /// flight read the previous one (2bw, cdp-mp), else 1.
  int weightVersions;
  /// The pipeline flushes every step: all backwards before the update
  /// (gpipe, 1f1b).
  bool flushes;
  /// Takes --replicas: data-parallel copies of the whole pipeline.
  bool replicable;
  /// Micro-batches are CDP slots (cdp, cdp-mp): start offsets, a version
  /// table and the v1/v2 rules.
  bool cyclic;
  /// A device runs several stages (interleaved-1f1b: --stages-per-device).
  bool interleaved;
};

/// The strategy `name` spells, if any.
std::optional<Strategy> parseStrategy(std::string_view name);

/// The traits of `strategy`.
const StrategyTraits &traitsOf(Strategy strategy);

/// Every strategy's name, for messages: "single, dp, cdp, ... and cdp-mp".
std::string strategyNames();

/// Activation stash slots stage s (1-indexed) of d keeps with m
/// micro-batches a step: gpipe holds all m; 1f1b and 2bw at most
/// d - s + 1 in flight (2bw: the smallest divisor of m not below that, so
/// that micro-batch k uses slot k mod slots in every step); cdp-mp one per
/// micro-batch a device of the stage runs, the most any of them runs. The
/// partitioner's memory estimate and cdp-schedule-pipeline both read it.
int64_t stashSlots(Strategy strategy, int64_t s, int64_t d, int64_t m);

/// laysa: the entries a parameter of `elements` sends per device and step
/// at `density`: max(1, ceil(density * elements)), at most `elements`; all
/// of them (sent whole) below `denseBelow`. cdp-sparsify-gradients decides
/// with it; the kernels select what the plan says.
int64_t sparseCount(int64_t elements, double density, int64_t denseBelow = 0);

} // namespace cdp

#endif // CDP_SCHEDULE_STRATEGY_H
