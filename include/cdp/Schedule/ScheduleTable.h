//===- ScheduleTable.h - a pipeline schedule as data ------------*- C++ -*-===//
//
// A pipeline's step as a table: a row per time step, a column per device,
// in each cell the actions the device runs then, in order. Every
// non-cyclic pipeline's schedule is built as one (gpipe, 1f1b, 2bw,
// interleaved-1f1b, zb-h1) or read from a user's CSV
// (docs/user-guide.md, "Writing a schedule"); cdp-schedule-pipeline turns
// it into the step program, and --emit=schedule-csv prints it back. No
// MLIR, so that unit tests and tools read it directly.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_SCHEDULE_SCHEDULETABLE_H
#define CDP_SCHEDULE_SCHEDULETABLE_H

#include "cdp/Schedule/Strategy.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cdp::pipeline {

/// What an action does, with PyTorch pipelining's letters: F forward, B
/// full backward, I the input-gradient half of a backward, W its
/// weight-gradient half, U the stage's update (cdp's own: PyTorch leaves
/// the optimizer out of its schedules).
enum class ActionKind : char {
  Forward = 'F',
  Backward = 'B',
  InputGrad = 'I',
  WeightGrad = 'W',
  Update = 'U',
};

/// One action of a stage. `microBatch` counts the step's micro-batches of
/// one pipeline replica from 0; a negative one is the previous step's
/// (-1 its last), which 1-stale schedules run at the start of a step.
struct Action {
  int64_t stage; ///< 1-based (the CSV writes it 0-based, as PyTorch)
  ActionKind kind;
  int64_t microBatch = 0;

  bool computes() const { return kind != ActionKind::Update; }
  bool operator==(const Action &other) const {
    return stage == other.stage && kind == other.kind &&
           microBatch == other.microBatch;
  }
};

/// The version of the weights a step's work reads: synchronous (every
/// micro-batch reads the weights the step starts with; the update follows
/// all of the stage's backwards) or 1-stale (2bw: a step's forwards read
/// W(t - 1), its backwards what their forward read, and the update of the
/// previous step's gradients runs within the step).
enum class WeightRule { Synchronous, OneStale };

/// "synchronous" or "1-stale".
const char *ruleName(WeightRule rule);

/// A pipeline's step, per device and time step.
struct ScheduleTable {
  int64_t stages = 1, devices = 1, microBatches = 1;
  WeightRule rule = WeightRule::Synchronous;
  /// deviceOf[s - 1]: the device that runs stage s.
  std::vector<int64_t> deviceOf;
  /// rows[t][d]: what device d runs at time step t, in order.
  std::vector<std::vector<std::vector<Action>>> rows;
  /// 1-stale: the time steps from one step's start to the next's (steps
  /// overlap: stage s's part of step t + 1 starts while later stages still
  /// run step t). 0 (synchronous): a step ends before the next starts.
  int64_t period = 0;

  ScheduleTable() = default;
  ScheduleTable(int64_t stages, int64_t devices, int64_t microBatches,
                WeightRule rule);
  void add(int64_t time, Action action);
  /// Time steps of one step: the period, or one past the last computing
  /// action's row.
  int64_t cycle() const;
};

/// One action of stage s's program, at its time step.
struct TimedAction {
  Action action;
  int64_t time;
};

/// Stage s's actions in time order (cell order within a time step).
std::vector<TimedAction> stageActions(const ScheduleTable &table, int64_t s);

/// Whether a stage's action reads the previous weight version (1-stale:
/// forwards after the update; backwards of this step after it and of the
/// previous step before it).
bool readsPreviousVersion(const ScheduleTable &table,
                          const std::vector<TimedAction> &stage, size_t i);

/// The activation stash slots stage s needs: the most micro-batches in
/// flight at once (from a forward to the backward, or the W, that ends
/// them), raised until micro-batch k can use slot k mod slots in every
/// step.
int64_t tableStashSlots(const ScheduleTable &table, int64_t s);

/// The stash slots each stage of S keeps under `strategy` with M
/// micro-batches (V stages per device under interleaved-1f1b), indexed by
/// stage from 1: the table's, built once, or cdp-mp's (stashSlots), as
/// cdp-schedule-pipeline sizes them: the partitioner's memory estimate
/// counts what the step program keeps.
std::vector<int64_t> stashSlotsPerStage(Strategy strategy, int64_t S, int64_t M,
                                        int64_t V = 1);

/// gpipe and 1f1b with S stages and M micro-batches.
ScheduleTable flushedTable(Strategy strategy, int64_t S, int64_t M);
/// 2bw's step program (docs/strategies/2bw.md).
ScheduleTable twoBwTable(int64_t S, int64_t M);
/// Interleaved 1F1B (Narayanan et al., 2021): D devices each run V
/// stages, stage s on device (s - 1) mod D; needs M a multiple of D.
ScheduleTable interleavedTable(int64_t D, int64_t V, int64_t M);
/// ZB-H1 (Qi et al., 2023): 1F1B's order with the backward split into I
/// and W, stage s putting off its W by s - 1 micro-batches, so that the
/// tail bubble shrinks to S - 1 time steps at 1F1B's peak stash.
ScheduleTable zbH1Table(int64_t S, int64_t M);

/// The table of a non-cyclic pipeline strategy; V stages per device for
/// interleaved-1f1b (1 otherwise).
ScheduleTable strategyTable(Strategy strategy, int64_t S, int64_t M, int64_t V);

/// A fault in a table: the row (time step) and column (device) it is at,
/// and what is wrong.
struct TableFault {
  int64_t row = -1, device = -1;
  std::string message;
};

/// The table's actions are the ones a step needs: every stage on one
/// device, its micro-batches in range, every micro-batch's F and B (or I
/// and W) on every stage exactly once, one update per stage, at most one
/// computation per device and time step.
std::optional<TableFault> checkActions(const ScheduleTable &table);

/// The table's order works: every action after what it needs (an F after
/// the previous stage's, a backward after its F and the next stage's input
/// gradient, a W after its I) at an earlier time step, counting the
/// previous step's work (negative micro-batches) a cycle later; every
/// update where the rule puts it (synchronous: after all of its stage's
/// backward work; 1-stale: after the previous step's, before this step's).
std::optional<TableFault> checkOrder(const ScheduleTable &table);

/// checkActions, then checkOrder.
std::optional<TableFault> checkTable(const ScheduleTable &table);

/// The CSV form (a header line naming the rule, a row per time step, a
/// column per device, with sends and receives between devices).
std::string writeScheduleCsv(const ScheduleTable &table);

/// Reads a CSV written by writeScheduleCsv or by hand for S stages and M
/// micro-batches, and checks it (checkTable, and that sends and receives
/// match the stages' dependencies). A fault names its line and column.
struct CsvResult {
  std::optional<ScheduleTable> table;
  std::string error; ///< "line L, column C: ..." when table is empty
};
CsvResult readScheduleCsv(const std::string &text, int64_t S, int64_t M);

/// --schedule: the CSV at `path`, read (readScheduleCsv) and checked
/// against `strategy`'s weight rule; errors start with the path.
CsvResult readScheduleFile(const std::string &path, int64_t S, int64_t M,
                           Strategy strategy);

} // namespace cdp::pipeline

#endif // CDP_SCHEDULE_SCHEDULETABLE_H
