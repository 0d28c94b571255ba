//===- SchedulePipeline.cpp - every pipeline decision as a step program ---===//
//
// The pipelines: places parameters and micro-batches on devices and writes,
// per device, the program one training step repeats (sched.step_program).
// gpipe, 1f1b, 2bw, interleaved-1f1b and zb-h1 follow a schedule table
// (their own, or a user's CSV); cdp-mp follows CDP's cycle. The plan
// emitter lowers the program op by op.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Dialect/Sched/SchedOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Schedule/Pipeline.h"
#include "cdp/Schedule/ScheduleTable.h"
#include "cdp/Schedule/Strategy.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

#include <set>

namespace cdp {
#define GEN_PASS_DEF_SCHEDULEPIPELINE
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

using ProgramEntry = pipeline::StepEntry;

/// cdp-mp's freshness: whether slot j's F at stage s comes after the
/// stage's update, and whether it reads the new version (never under v1;
/// under v2 after the update (timing table) or where s >= L - j (code
/// table, which is let through only where that is after the update too)).
struct CyclicTable {
  int64_t S = 1, MB = 1;
  bool v2 = false, codeTable = false;
  int64_t slotStart(int64_t j) const {
    return pipeline::cdpSlotStart(j, S, MB);
  }
  bool afterUpdate(int64_t j, int64_t s) const {
    return pipeline::cdpFresh(false, j, s, S, slotStart(j), slotStart(MB - 1));
  }
  bool fresh(int64_t j, int64_t s) const {
    return v2 && pipeline::cdpFresh(codeTable, j, s, S, slotStart(j),
                                    slotStart(MB - 1));
  }
};

/// cdp-mp: the stage's ops of one step in CDP's time order: slot j starts
/// at floor(2L·j / N), its F at stage s comes at that + s - 1 and its B at
/// that + 2L - s; a step's program is the window [s - 1, 2L + s - 1) of the
/// stage's clock, so a B past it runs in the next step's program (stepRel
/// -1). The update of step t - 1's gradients follows the last slot's B.
std::vector<ProgramEntry> cyclicProgram(int64_t s, int64_t S, int64_t MB,
                                        ArrayRef<int64_t> mine,
                                        const CyclicTable &table) {
  std::vector<ProgramEntry> entries;
  int64_t windowEnd = 2 * S + s - 1;
  for (int64_t k = 0; k < static_cast<int64_t>(mine.size()); ++k) {
    int64_t start = table.slotStart(mine[k]);
    int64_t forward = start + s - 1, backward = start + 2 * S - s;
    // A stale slot reads the step's stale version (the latest before the
    // update, the previous after it), a fresh one the new one; its B reads
    // what its F read.
    bool fresh = table.fresh(mine[k], s);
    entries.push_back(
        {'F', k, 0, 2 * forward, table.afterUpdate(mine[k], s) && !fresh});
    bool late = backward >= windowEnd;
    entries.push_back({'B', k, late ? -1 : 0,
                       2 * (late ? backward - 2 * S : backward), !fresh});
  }
  // Half a time step after the last slot's B (times doubled above).
  int64_t update = 2 * (table.slotStart(MB - 1) - s) + 1;
  bool sameStep = update < 2 * (s - 1);
  entries.push_back(
      {'U', 0, sameStep ? 0 : -1, sameStep ? update + 4 * S : update, false});
  std::stable_sort(entries.begin(), entries.end(),
                   [](const ProgramEntry &a, const ProgramEntry &b) {
                     return a.time < b.time;
                   });
  for (ProgramEntry &entry : entries)
    entry.time /= 2; // back to whole time steps
  return entries;
}

/// A stage's program from its schedule table: each action at its time
/// step; the previous step's work (a negative micro-batch) with stepRel -1.
std::vector<ProgramEntry> tableProgram(const pipeline::ScheduleTable &table,
                                       int64_t s) {
  std::vector<pipeline::TimedAction> actions = pipeline::stageActions(table, s);
  std::vector<ProgramEntry> entries;
  int64_t M = table.microBatches;
  for (size_t i = 0; i < actions.size(); ++i) {
    const pipeline::Action &action = actions[i].action;
    // 1-stale: the update applies the previous step's gradients.
    bool previousStep =
        action.microBatch < 0 ||
        (!action.computes() && table.rule == pipeline::WeightRule::OneStale);
    // A micro-batch of the step; an update follows the step's last one
    // (synchronous) or starts the step's program (1-stale).
    int64_t k = action.microBatch < 0 ? action.microBatch + M
                : action.computes()   ? action.microBatch
                : previousStep        ? 0
                                      : M - 1;
    entries.push_back({static_cast<char>(action.kind), k, previousStep ? -1 : 0,
                       actions[i].time,
                       pipeline::readsPreviousVersion(table, actions, i)});
  }
  return entries;
}

/// Which devices run each stage, and which micro-batches each runs.
struct DevicePlacement {
  /// placement[s][r]: the step's micro-batches (numbered over all
  /// replicas) stage s's r-th device runs, in order.
  std::vector<std::vector<std::vector<int64_t>>> placement;
  /// deviceAt[s][r]: the number of stage s's r-th device.
  std::vector<std::vector<int64_t>> deviceAt;
  int64_t mostReplicas = 0;
  /// The device of stage q that holds the replica of a tied weight the
  /// r-th device of a stage exchanges values with.
  int64_t tiedPeer(int64_t q, int64_t r) const {
    return deviceAt[q][r % deviceAt[q].size()];
  }
};

/// The table's pipelines: replica r runs r·M .. r·M+M-1 on devices r·D ..
/// r·D + D - 1, stage s on the table's device of s; cdp-mp: as many
/// devices per stage as CDP's slots need there. Devices are numbered
/// replica-major, so stage s's first device is the table's (s - 1 without
/// interleaving).
DevicePlacement placeMicroBatches(const pipeline::ScheduleTable *table,
                                  int64_t S, int64_t M, int64_t R, int64_t MB) {
  DevicePlacement layout;
  auto &placement = layout.placement;
  placement.resize(S + 1);
  layout.deviceAt.resize(S + 1);
  if (table) {
    for (int64_t s = 1; s <= S; ++s)
      for (int64_t r = 0; r < R; ++r) {
        placement[s].emplace_back();
        for (int64_t k = 0; k < M; ++k)
          placement[s][r].push_back(r * M + k);
        layout.deviceAt[s].push_back(r * table->devices +
                                     table->deviceOf[s - 1]);
      }
    layout.mostReplicas = R;
    return layout;
  }
  for (int64_t s = 1; s <= S; ++s) {
    std::vector<int64_t> device = pipeline::cdpStageDevices(s, S, MB);
    for (int64_t j = 0; j < MB; ++j) {
      if (device[j] >= static_cast<int64_t>(placement[s].size()))
        placement[s].resize(device[j] + 1);
      placement[s][device[j]].push_back(j);
    }
  }
  for (int64_t s = 1; s <= S; ++s)
    layout.mostReplicas =
        std::max<int64_t>(layout.mostReplicas, placement[s].size());
  int64_t count = 0;
  for (int64_t r = 0; r < layout.mostReplicas; ++r)
    for (int64_t s = 1; s <= S; ++s)
      if (r < static_cast<int64_t>(placement[s].size()))
        layout.deviceAt[s].push_back(count++);
  return layout;
}

/// Where parameters live: on the stage that updates them (the stage of
/// their gradient: their first user's); a trained parameter other stages
/// read too (a tied weight) has replicas there.
struct ParamPlacement {
  /// Owner stage by parameter, in IR order (deterministic output).
  llvm::MapVector<ParamOp, int64_t> owner;
  /// The other stages reading a tied weight.
  llvm::MapVector<ParamOp, std::set<int64_t>> replicas;
};

/// A parameter's name (by value: map keys are const).
StringAttr nameOf(ParamOp param) { return param.getNameAttr(); }

struct SchedulePipelinePass
    : public cdp::impl::SchedulePipelineBase<SchedulePipelinePass> {
  using SchedulePipelineBase::SchedulePipelineBase;

  void runOnOperation() override;

private:
  int64_t stageOf(Operation *op) const { return cdp::stageOf(op, S); }
  LogicalResult placeParameters(Block &body, ParamPlacement &params);
  LogicalResult checkTiedFreshness(const ParamPlacement &params);
  LogicalResult readModule(ModuleOp module);
  sched::StepProgramOp createProgram(OpBuilder &builder, int64_t cycle,
                                     bool spellFirst);
  LogicalResult checkPlacement(const DevicePlacement &layout,
                               const ParamPlacement &params);
  std::vector<ProgramEntry> programOf(int64_t s, ArrayRef<int64_t> mine) const;
  void buildDevice(OpBuilder &builder, int64_t s, int64_t r,
                   const DevicePlacement &layout, const ParamPlacement &params);
  void buildUpdates(OpBuilder &builder, const ProgramEntry &entry, int64_t s,
                    int64_t r, const DevicePlacement &layout,
                    const ParamPlacement &params);
  void buildCompute(OpBuilder &builder, const ProgramEntry &entry, int64_t s,
                    int64_t slots, ArrayRef<int64_t> mine,
                    const ParamPlacement &params);

  // The strategy's descriptor, read once (readModule): its name for
  // messages, the weight versions a stage keeps, and for a cyclic strategy
  // (cdp-mp) the CDP slot table its micro-batches follow instead of a
  // schedule table.
  Strategy kind = Strategy::GPipe;
  StringRef nameOfStrategy;
  int64_t weightVersions = 1;
  std::optional<CyclicTable> cyclic;
  int64_t S = 1, M = 1, R = 1, MB = 1;
  func::FuncOp func;
  llvm::DenseSet<StringRef> trained;
  llvm::DenseMap<int64_t, SmallVector<UpdateOp>> updates;
  /// The step clips its gradients by their global norm.
  bool clips = false;
  /// The step unscales its gradients (fp16's dynamic loss scaling), and
  /// the stage whose backward starts from the scale.
  bool scales = false;
  int64_t seedStage = 0;
  /// Whether stage s takes part in the step's exchange of norm shares or
  /// overflow flags: every stage with updates, and under loss scaling the
  /// seed's stage, whose copy of the scale must change with the others'.
  bool exchangesAt(int64_t s) {
    return !updates.lookup(s).empty() || (scales && s == seedStage);
  }
  /// The schedule of every pipeline but cdp-mp.
  std::optional<pipeline::ScheduleTable> scheduleTable;
  LogicalResult buildScheduleTable();
};

LogicalResult SchedulePipelinePass::placeParameters(Block &body,
                                                    ParamPlacement &params) {
  body.walk([&](UpdateOp update) {
    params.owner[update.getParam().getDefiningOp<ParamOp>()] = stageOf(update);
  });
  for (Operation &op : body.without_terminator()) {
    if (isa<ParamOp, ConstantOp, UpdateOp, GradientOp>(op))
      continue;
    for (Value operand : op.getOperands()) {
      auto param = operand.getDefiningOp<ParamOp>();
      // Frozen initializers (shapes, masks) are copied to every device.
      if (!param || (!param.getBuffer() && !trained.contains(param.getName())))
        continue;
      auto [it, inserted] = params.owner.try_emplace(param, stageOf(&op));
      if (inserted || it->second == stageOf(&op))
        continue;
      if (param.getBuffer())
        return param.emitOpError("'")
               << param.getName() << "' is used by stages " << it->second
               << " and " << stageOf(&op)
               << "; buffers shared across pipeline stages are not "
                  "supported (cut elsewhere with --stage-boundaries)";
      params.replicas[param].insert(stageOf(&op));
    }
  }
  return success();
}

/// cdp-mp: a tied weight's replica can give a forward the owner's new
/// version only after its own stage's update.
LogicalResult
SchedulePipelinePass::checkTiedFreshness(const ParamPlacement &params) {
  for (auto &[param, stages] : params.replicas)
    for (int64_t q : stages)
      for (int64_t j = 0; j < MB; ++j)
        if (cyclic->fresh(j, params.owner.lookup(param)) &&
            !cyclic->afterUpdate(j, q))
          return func.emitError("cdp-mp: micro-batch ")
                 << j << " reads the new version of a weight tied across "
                 << "stages " << params.owner.lookup(param) << " and " << q
                 << " on the first before stage " << q
                 << " can have it; use --cdp-rule v1 or cut elsewhere";
  return success();
}

std::vector<ProgramEntry>
SchedulePipelinePass::programOf(int64_t s, ArrayRef<int64_t> mine) const {
  if (cyclic)
    return cyclicProgram(s, S, MB, mine, *cyclic);
  return tableProgram(*scheduleTable, s);
}

/// The strategy's own table, or the user's CSV (checked by the reader,
/// and against the strategy's weight versions).
LogicalResult SchedulePipelinePass::buildScheduleTable() {
  if (schedule.empty()) {
    int64_t V = cdp::stagesPerDevice(kind, stagesPerDevice);
    if (V < 1)
      return func.emitError("stages-per-device must be positive, got ") << V;
    std::string problem = checkPipelineShape(kind, S, M, V);
    if (!problem.empty())
      return func.emitError(problem);
    scheduleTable = pipeline::strategyTable(kind, S, M, V);
  } else {
    pipeline::CsvResult read = pipeline::readScheduleFile(schedule, S, M, kind);
    if (!read.table)
      return func.emitError(read.error);
    scheduleTable = std::move(read.table);
  }
  if (std::optional<pipeline::TableFault> fault =
          pipeline::checkTable(*scheduleTable))
    return func.emitError("internal error: the ")
           << nameOfStrategy << " schedule fails its check at time step "
           << fault->row << ", device " << fault->device << ": "
           << fault->message;
  return success();
}

/// The module a pipeline's schedule is built from: a pipeline strategy,
/// @main partitioned, positive counts, ZeRO 1 over a table's replicas.
LogicalResult SchedulePipelinePass::readModule(ModuleOp module) {
  auto strategyAttr = sched::StrategyAttr::ofModule(module);
  if (!strategyAttr)
    return failure();
  kind = strategyAttr.getValue();
  nameOfStrategy = strategyName(kind);
  if (!inScope(StrategyScope::Pipeline, kind))
    return module.emitError("schedule-pipeline handles the pipelines (")
           << scopeNames(StrategyScope::Pipeline, " and ") << "), not '"
           << nameOfStrategy << "'";
  weightVersions = cdp::weightVersions(kind);
  func = module.lookupSymbol<func::FuncOp>("main");
  auto stagesAttr =
      func ? func->getAttrOfType<IntegerAttr>("cdp.stages") : nullptr;
  if (!stagesAttr)
    return module.emitError("@main is not partitioned; run "
                            "cdp-partition-stages first");
  if (microBatches < 1 || replicas < 1)
    return module.emitError("micro-batches and replicas must be positive");
  if (!buildsReplicaZero(kind, zero))
    return module.emitError("ZeRO stage ")
           << zero << " with " << nameOfStrategy
           << " is not supported (stage 1 over the replicas of "
           << scopeNames(StrategyScope::Replicable, " and ") << " is)";
  S = stagesAttr.getInt();
  M = microBatches;
  R = replicas;
  MB = M * R;
  if (runsCyclicSlots(kind))
    cyclic = CyclicTable{S, MB, cdpRule.getValue() == "v2",
                         v2Table.getValue() == "code"};
  return success();
}

/// The step program, empty: its cycle, versions and (cdp-mp) the version
/// table the run follows, as for cdp: slot j reads θ_{t -
/// version_delay[j][s-1]} at stage s.
sched::StepProgramOp SchedulePipelinePass::createProgram(OpBuilder &builder,
                                                         int64_t cycle,
                                                         bool spellFirst) {
  auto program = builder.create<sched::StepProgramOp>(
      func.getLoc(), sched::StrategyAttr::get(builder.getContext(), kind),
      builder.getI64IntegerAttr(S), builder.getI64IntegerAttr(MB),
      builder.getI64IntegerAttr(cycle),
      builder.getI64IntegerAttr(weightVersions),
      builder.getStringAttr(cyclic ? cdpRule.getValue() : nameOfStrategy),
      ArrayAttr(), DenseI64ArrayAttr(), DenseI64ArrayAttr(),
      sched::ReductionAttr(), IntegerAttr());
  if (spellFirst)
    program.setReplicasAttr(builder.getI64IntegerAttr(R));
  if (cyclic) {
    SmallVector<Attribute> delays;
    for (int64_t j = 0; j < MB; ++j) {
      SmallVector<int64_t> row;
      for (int64_t s = 1; s <= S; ++s)
        row.push_back(cyclic->fresh(j, s) ? 0 : 1);
      delays.push_back(builder.getDenseI64ArrayAttr(row));
    }
    program.setVersionDelayAttr(builder.getArrayAttr(delays));
    program.setLiveVersionsAttr(
        builder.getDenseI64ArrayAttr(SmallVector<int64_t>(S, 2)));
  }
  program.getBody().emplaceBlock();
  return program;
}

/// What the devices' placement must allow: under two weight versions a
/// tied weight's stages on different devices; under clipping or loss
/// scaling one trained stage per device (the norm's or the overflow's
/// exchange runs at each stage's update: two on one device would each wait
/// for the other's share).
LogicalResult
SchedulePipelinePass::checkPlacement(const DevicePlacement &layout,
                                     const ParamPlacement &params) {
  if (weightVersions == 2)
    for (auto &[tied, stages] : params.replicas)
      for (int64_t q : stages)
        if (ParamOp param = tied;
            layout.deviceAt[q][0] ==
            layout.tiedPeer(params.owner.lookup(param), 0))
          return func.emitError("'")
                 << param.getName() << "' is tied across stages "
                 << params.owner.lookup(param) << " and " << q
                 << ", which share a device: under the 1-stale rule each "
                    "needs its own (place them on different devices)";
  if (!clips && !scales)
    return success();
  std::map<int64_t, int64_t> trainedStageOf;
  for (int64_t s = 1; s <= S; ++s)
    if (exchangesAt(s))
      for (int64_t device : layout.deviceAt[s])
        if (!trainedStageOf.try_emplace(device, s).second)
          return func.emitError(clips ? "gradient clipping"
                                      : "dynamic loss scaling (fp16)")
                 << " needs one trained stage per device, but device " << device
                 << " runs stages " << trainedStageOf[device] << " and " << s
                 << " (" << nameOfStrategy << ": use 1f1b or zb-h1)";
  return success();
}

void SchedulePipelinePass::runOnOperation() {
  ModuleOp module = getOperation();
  if (failed(readModule(module)))
    return signalPassFailure();
  Block &body = func.getBody().front();
  body.walk([&](GradientOp gradient) { trained.insert(gradient.getName()); });
  body.walk(
      [&](UpdateOp update) { updates[stageOf(update)].push_back(update); });
  body.walk([&](ClipGradNormOp) { clips = true; });
  body.walk([&](UnscaleGradsOp) { scales = true; });
  body.walk([&](LossScaleOp seed) { seedStage = stageOf(seed); });
  if (clips && cyclic) {
    func.emitError("gradient clipping is not supported with cdp-mp: a "
                   "micro-batch's gradient norm spans stage devices that "
                   "reach it at different time steps (use cdp, or 2bw)");
    return signalPassFailure();
  }
  ParamPlacement params;
  if (failed(placeParameters(body, params)))
    return signalPassFailure();
  if (cyclic && failed(checkTiedFreshness(params)))
    return signalPassFailure();

  // The table's step (gpipe and 1f1b: the flushed step's makespan; 2bw's
  // steady state alternates M backwards and M forwards); cdp-mp: CDP's
  // cycle of 2L.
  int64_t cycle = 2 * S;
  if (!cyclic) {
    if (failed(buildScheduleTable()))
      return signalPassFailure();
    cycle = scheduleTable->cycle();
  }

  // A table's replicas are alike pipelines a replica's devices apart: the
  // program spells the first (the emitter the rest), so the passes' work
  // does not grow with the replicas.
  bool spellFirstReplica = !cyclic && R > 1;
  OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
  sched::StepProgramOp program =
      createProgram(builder, cycle, spellFirstReplica);
  builder.setInsertionPointToEnd(&program.getBody().front());
  for (auto &[param, stage] : params.owner) {
    auto tied = params.replicas.find(param);
    SmallVector<int64_t> others;
    if (tied != params.replicas.end())
      others.assign(tied->second.begin(), tied->second.end());
    builder.create<sched::PlaceParamOp>(param.getLoc(), nameOf(param),
                                        builder.getI64IntegerAttr(stage),
                                        builder.getDenseI64ArrayAttr(others));
  }
  DevicePlacement layout =
      placeMicroBatches(scheduleTable ? &*scheduleTable : nullptr, S, M, R, MB);
  if (failed(checkPlacement(layout, params)))
    return signalPassFailure();
  // In device order; a device's stages next to each other.
  std::vector<std::tuple<int64_t, int64_t, int64_t>> devices;
  for (int64_t s = 1; s <= S; ++s)
    for (size_t r = 0; r < layout.deviceAt[s].size(); ++r)
      devices.emplace_back(layout.deviceAt[s][r], s, r);
  llvm::sort(devices);
  for (auto [index, s, r] : devices) {
    if (spellFirstReplica && r != 0)
      continue;
    builder.setInsertionPointToEnd(&program.getBody().front());
    buildDevice(builder, s, r, layout, params);
  }
}

void SchedulePipelinePass::buildDevice(OpBuilder &builder, int64_t s, int64_t r,
                                       const DevicePlacement &layout,
                                       const ParamPlacement &params) {
  const std::vector<int64_t> &mine = layout.placement[s][r];
  // Micro-batch k of a step uses slot k mod slots (the table's); cdp-mp
  // keeps one slot per micro-batch of the device.
  int64_t slots = cyclic ? static_cast<int64_t>(mine.size())
                         : pipeline::tableStashSlots(*scheduleTable, s);
  auto device = builder.create<sched::StageDeviceOp>(
      func.getLoc(), builder.getI64IntegerAttr(layout.deviceAt[s][r]),
      builder.getI64IntegerAttr(s), builder.getI64IntegerAttr(r),
      builder.getDenseI64ArrayAttr(mine), builder.getI64IntegerAttr(slots));
  device.getBody().emplaceBlock();
  builder.setInsertionPointToEnd(&device.getBody().front());
  // Tied weights replicated here: with one version, step t > 0 starts with
  // the value the owner made at the end of step t - 1 (2bw and cdp-mp take
  // it at their own update).
  // A replica on the owner's own device reads the owner's tensor.
  int64_t self = layout.deviceAt[s][r];
  if (weightVersions == 1)
    for (auto &[param, stages] : params.replicas) {
      int64_t owner = layout.tiedPeer(params.owner.lookup(param), r);
      if (stages.count(s) && owner != self)
        builder.create<sched::ParamRefreshOp>(func.getLoc(), nameOf(param),
                                              builder.getI64IntegerAttr(owner));
    }
  for (const ProgramEntry &entry : programOf(s, mine)) {
    if (entry.kind == 'U')
      buildUpdates(builder, entry, s, r, layout, params);
    else
      buildCompute(builder, entry, s, slots, mine, params);
  }
}

void SchedulePipelinePass::buildUpdates(OpBuilder &builder,
                                        const ProgramEntry &entry, int64_t s,
                                        int64_t r,
                                        const DevicePlacement &layout,
                                        const ParamPlacement &params) {
  Location loc = func.getLoc();
  auto i64 = [&](int64_t v) { return builder.getI64IntegerAttr(v); };
  IntegerAttr k = i64(entry.k), time = i64(entry.time),
              step = i64(entry.stepRel);
  auto tiedPeer = [&](int64_t q) { return layout.tiedPeer(q, r); };
  bool twoVersions = weightVersions == 2;
  // 2bw and cdp-mp: a replicated tied weight turns over its versions where
  // this stage would update it: the latest becomes the previous, and the
  // owner's new value the latest. With clipping, after the stage's norm
  // share has left: the owner updates only once it has every share (the
  // same with loss scaling's overflow flags).
  auto turnOverTied = [&] {
    if (twoVersions)
      for (auto &[param, stages] : params.replicas) {
        if (!stages.count(s))
          continue;
        builder.create<sched::KeepPreviousOp>(loc, nameOf(param), k, time,
                                              step);
        builder.create<sched::ParamRecvOp>(
            loc, nameOf(param), i64(tiedPeer(params.owner.lookup(param))), k,
            time, step);
      }
  };
  bool clipsHere = clips && !updates.lookup(s).empty(),
       unscalesHere = scales && exchangesAt(s),
       gathersHere = clipsHere || unscalesHere;
  if (!gathersHere)
    turnOverTied();
  int64_t replicasHere = layout.deviceAt[s].size();
  auto prepare = [&](UpdateOp update) {
    auto param = update.getParam().getDefiningOp<ParamOp>();
    if (twoVersions && !param.getBuffer())
      builder.create<sched::KeepPreviousOp>(loc, update.getNameAttr(), k, time,
                                            step);
    if (replicasHere > 1)
      builder.create<sched::ExchangeGradientsOp>(
          loc, update.getNameAttr(),
          builder.getDenseI64ArrayAttr(layout.deviceAt[s]), i64(r), k, time,
          step);
  };
  // Clipping by the global norm, and loss scaling's overflow check, need
  // every gradient of the replica's stages summed over replicas first: all
  // exchanges, the unscaling (as GradScaler's unscale_ before
  // clip_grad_norm_), the clip, then the updates.
  if (gathersHere) {
    for (UpdateOp update : updates.lookup(s))
      prepare(update);
    // The stages of the exchange and their devices in this replica.
    auto among = [&](bool withSeed) {
      SmallVector<int64_t> stages, devices;
      for (int64_t q = 1; q <= S; ++q)
        if (withSeed ? exchangesAt(q) : !updates.lookup(q).empty()) {
          stages.push_back(q);
          devices.push_back(tiedPeer(q));
        }
      return std::make_pair(builder.getDenseI64ArrayAttr(stages),
                            builder.getDenseI64ArrayAttr(devices));
    };
    if (unscalesHere) {
      auto [stages, devices] = among(true);
      builder.create<sched::UnscaleStagesOp>(loc, stages, devices, k, time,
                                             step);
    }
    if (clipsHere) {
      auto [stages, devices] = among(false);
      builder.create<sched::ClipStagesOp>(loc, stages, devices, k, time, step);
    }
    turnOverTied();
  }
  // A tied weight's new value goes to every replica of the tied stages
  // that takes its value from this device (see tiedPeer).
  auto sendTied = [&](UpdateOp update) {
    auto tied =
        params.replicas.find(update.getParam().getDefiningOp<ParamOp>());
    if (tied == params.replicas.end())
      return;
    for (int64_t q : tied->second)
      for (size_t other = 0; other < layout.deviceAt[q].size(); ++other)
        if (static_cast<int64_t>(other % replicasHere) == r &&
            layout.deviceAt[q][other] != layout.deviceAt[s][r])
          builder.create<sched::ParamSendOp>(
              loc, update.getNameAttr(), i64(layout.deviceAt[q][other]), k,
              time, step, twoVersions ? UnitAttr() : builder.getUnitAttr());
  };
  // ZeRO stage 1 over the replicas: the stage's trained parameters are
  // updated together, each replica its shard, after every exchange; tied
  // weights leave once the shards are back.
  bool sharded = zero == 1 && replicasHere > 1;
  SmallVector<UpdateOp> shardedUpdates;
  for (UpdateOp update : updates.lookup(s)) {
    auto param = update.getParam().getDefiningOp<ParamOp>();
    if (!gathersHere)
      prepare(update);
    if (sharded && !param.getBuffer()) {
      shardedUpdates.push_back(update);
      continue;
    }
    builder.create<sched::ApplyUpdateOp>(loc, update.getNameAttr(), k, time,
                                         step);
    sendTied(update);
  }
  if (shardedUpdates.empty())
    return;
  SmallVector<StringRef> names;
  for (UpdateOp update : shardedUpdates)
    names.push_back(update.getName());
  builder.create<sched::ApplyShardUpdateOp>(
      loc, builder.getStrArrayAttr(names),
      builder.getDenseI64ArrayAttr(layout.deviceAt[s]), i64(r), k, time, step);
  for (UpdateOp update : shardedUpdates)
    sendTied(update);
}

void SchedulePipelinePass::buildCompute(OpBuilder &builder,
                                        const ProgramEntry &entry, int64_t s,
                                        int64_t slots, ArrayRef<int64_t> mine,
                                        const ParamPlacement &params) {
  auto i64 = [&](int64_t v) { return builder.getI64IntegerAttr(v); };
  bool forward = entry.kind == 'F';
  sched::WorkKind work = forward             ? sched::WorkKind::Forward
                         : entry.kind == 'I' ? sched::WorkKind::InputGrad
                         : entry.kind == 'W' ? sched::WorkKind::WeightGrad
                                             : sched::WorkKind::Backward;
  auto version = [&](bool previous) {
    return sched::VersionAttr::get(builder.getContext(),
                                   previous ? sched::Version::Previous
                                            : sched::Version::Latest);
  };
  // cdp-mp: a micro-batch reads one version of a tied weight on every stage
  // that uses it, the one its slot reads on the owner stage (as under cdp,
  // where the owner stage's update precedes every use). A replica here
  // turns over at this stage's update, like the stage's own parameters: at
  // a backward the latest is θ_t and the previous θ_{t-1}; at a forward the
  // latest is θ_t only after the update.
  ArrayAttr tiedPrevious;
  if (cyclic && !params.replicas.empty()) {
    SmallVector<Attribute> names;
    int64_t j = mine[entry.k];
    for (auto &[param, stages] : params.replicas) {
      int64_t owner = params.owner.lookup(param);
      if (owner != s && !stages.count(s))
        continue;
      bool stale = !cyclic->fresh(j, owner);
      if (forward ? stale && cyclic->afterUpdate(j, s) : stale)
        names.push_back(nameOf(param));
    }
    tiedPrevious = builder.getArrayAttr(names);
  }
  builder.create<sched::ComputeOp>(
      func.getLoc(), sched::WorkKindAttr::get(builder.getContext(), work),
      i64(entry.k), i64(entry.k % slots), i64(entry.time), i64(entry.stepRel),
      version(entry.readsPrevious), tiedPrevious);
}

} // namespace
