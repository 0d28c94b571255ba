//===- Strategy.h - the strategies and what sets them apart ----*- C++ -*-===//
//
// The one place a strategy's name is read (cdp-compile's --strategy, a
// plan's `strategy`, the passes' options) and the one place its traits are
// stated: the partitioner's estimate, the passes, the emitter, the report
// and the runtime ask here instead of comparing names. Each strategy is a
// descriptor of its own file (runtime/schedule/strategies/), registered in
// Strategies.def. No MLIR: the runtime uses it too.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_SCHEDULE_STRATEGY_H
#define CDP_SCHEDULE_STRATEGY_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cdp {

namespace pipeline {
struct ScheduleTable;
} // namespace pipeline

enum class Strategy {
#define CDP_STRATEGY(Id) Id,
#include "cdp/Schedule/Strategies.def"
};

/// What a strategy does, in the terms the compiler and the runtime need:
/// one descriptor per strategy, constant-initialized.
struct StrategyTraits {
  Strategy strategy = Strategy::Single;
  const char *name = ""; ///< as --strategy and the plan spell it
  /// What --strategy's help says after the name: "data parallel".
  const char *help = nullptr;
  /// cdp-opt's one line for its pass pipeline.
  const char *summary = "";
  /// cdp-opt's pass pipeline for the strategy (nullptr: none).
  const char *passPipeline = nullptr;
  /// Every device runs the whole model on its own micro-batch, gradients
  /// reduced per stage (dp, cdp).
  bool dataParallel = false;
  /// Devices run stages: one device per stage and replica (gpipe, 1f1b,
  /// 2bw), or per stage and CDP slot group (cdp-mp).
  bool pipelined = false;
  /// Weight versions a pipeline stage keeps: 2 where micro-batches in
  /// flight read the previous one (2bw, cdp-mp), else 1.
  int weightVersions = 1;
  /// The pipeline flushes every step: all backwards before the update
  /// (gpipe, 1f1b).
  bool flushes = false;
  /// Takes --replicas: data-parallel copies of the whole pipeline (and
  /// --zero 1 over them).
  bool replicable = false;
  /// Runs on one device only (single).
  bool oneDevice = false;
  /// The --zero stages built for it outside --replicas: bit k set for
  /// --zero k (dp: 1-3; cdp: 3, CDP-ZeRO).
  unsigned zeroStages = 0;
  /// Exchanges top-k sparse gradients with error feedback (laysa): takes
  /// --density, --dense-below and --sparse-baseline.
  bool sparseExchange = false;
  /// Micro-batches are CDP slots (cdp, cdp-mp): start offsets, a version
  /// table and the v1/v2 rules.
  bool cyclic = false;
  /// Stages each device of a pipeline replica runs: 1, or 0 where
  /// --stages-per-device says (interleaved-1f1b).
  int stagesPerDevice = 1;
  /// cdp-build-pipeline's stage orders give its time-step timeline (gpipe,
  /// 1f1b, 2bw).
  bool ordersStages = false;
  /// --plan auto searches its stages, replicas and micro-batches (2bw).
  bool autoPlans = false;
  /// A pipeline that follows a schedule table: the step's table for S
  /// stages, M micro-batches and V stages per device (nullptr otherwise).
  pipeline::ScheduleTable (*table)(int64_t S, int64_t M, int64_t V) = nullptr;
  /// Activation stash slots stage s (1-indexed) of S keeps with M
  /// micro-batches a step (nullptr: 1).
  int64_t (*stash)(int64_t s, int64_t S, int64_t M) = nullptr;
  /// What the strategy asks of S stages, M micro-batches and V stages per
  /// device: the problem, in a whole message, or "" (nullptr: nothing).
  std::string (*checkShape)(int64_t S, int64_t M, int64_t V) = nullptr;
};

/// How a strategy's devices divide the work; what selects the compiler's
/// pass pipeline and emitter and how the runtime runs, checks and reports a
/// plan: one device (Single), every device the whole model on micro-batches
/// of its own with gradients reduced (Replicated: dp, cdp, laysa), or
/// stages on devices, tensors placed on their stage's device and
/// micro-batches loaded where stages read them (Pipeline).
enum class PlanForm { Single, Replicated, Pipeline };

/// The form of plan `strategy` compiles to.
PlanForm planForm(Strategy strategy);

/// `strategy` as --strategy and the plan spell it.
const char *strategyName(Strategy strategy);

/// Whether `zero` (1-3) is a ZeRO stage built for `strategy` outside
/// --replicas (dp: 1-3; cdp: 3, CDP-ZeRO).
bool buildsZero(Strategy strategy, int64_t zero);

/// The strategy `name` spells, if any.
std::optional<Strategy> parseStrategy(std::string_view name);

/// The traits of `strategy`.
const StrategyTraits &traitsOf(Strategy strategy);

/// Every registered strategy, in enum order.
const std::vector<const StrategyTraits *> &allStrategies();

/// The names of the strategies `which` selects, for messages: "gpipe,
/// 1f1b and 2bw" (every strategy's without `which`; `last` joins the last
/// two, " or " for a choice).
std::string strategyNames(bool (*which)(const StrategyTraits &) = nullptr,
                          const char *last = " and ");

/// Stages each device of a replica runs: the strategy's own count, or
/// --stages-per-device's `requested` where it takes the flag.
int64_t stagesPerDevice(Strategy strategy, int64_t requested);

/// The sets of strategies a pass or flag takes, so that the passes ask
/// whether they apply instead of reading traits (their messages name the
/// set with scopeNames).
enum class StrategyScope {
  Replicated,        ///< cdp-build-schedule: every device the whole model
  OrderedPipeline,   ///< cdp-build-pipeline's timeline (gpipe, 1f1b, 2bw)
  OneStagePerDevice, ///< the partitioner's memory estimate
  Pipeline,          ///< cdp-schedule-pipeline
  Replicable,        ///< --replicas (and --zero 1 over them)
  /// Dynamic loss scaling: every device learns whether any gradient of the
  /// step overflowed before its updates, so all skip an overflowed step
  /// alike (single; dp, whose updates wait for every stage's means; cdp,
  /// whose slots' overflow flags ride in every stage's reduction (v1 with
  /// the all-reduce only: cdp-compile refuses the rest); the pipelines,
  /// whose stages exchange their overflow flags before updating; not
  /// cdp-mp, whose slots update a stage at different time steps, nor
  /// laysa's sparse exchange).
  LossScaled,
};

/// Whether `strategy` is one of `scope`'s.
bool inScope(StrategyScope scope, Strategy strategy);

/// The names of `scope`'s strategies for a message, `last` joining the last
/// two: "gpipe, 1f1b or 2bw".
std::string scopeNames(StrategyScope scope, const char *last = " or ");

/// Weight versions a pipeline stage keeps: 2 where micro-batches in flight
/// read the previous one (2bw, cdp-mp), else 1.
int weightVersions(Strategy strategy);

/// Whether micro-batches are CDP slots (cdp, cdp-mp): start offsets, a
/// version table and the v1/v2 rules.
bool runsCyclicSlots(Strategy strategy);

/// Whether the pipeline builds ZeRO stage `zero` over its replicas: 0
/// always; 1 except for cdp-mp (its slots hold the versions instead).
bool buildsReplicaZero(Strategy strategy, int64_t zero);

/// Whether the strategy exchanges top-k sparse gradients with error
/// feedback (laysa), which cdp-sparsify-gradients builds.
bool exchangesSparseGradients(Strategy strategy);

/// What `strategy` asks of S stages, M micro-batches and V stages per
/// device: the problem, in a whole message, or "".
std::string checkPipelineShape(Strategy strategy, int64_t S, int64_t M,
                               int64_t V);

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
