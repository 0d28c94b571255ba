//===- ScheduleSlots.cpp - dp's and cdp's per-slot step programs ----------===//
//
// Writes the decisions of cdp-build-schedule, cdp-delay-updates and
// cdp-stagger-collectives as a sched.step_program: per device (slot), the
// step's stage work, the waits for reduced gradients, the reduction starts
// and, for the chain reduction, the relays of its return trip, each at its
// time step. The plan emitter lowers it op by op.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Dialect/Sched/SchedOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SlotSchedule.h"
#include "cdp/Schedule/Pipeline.h"
#include "cdp/Schedule/Versions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <set>

namespace cdp {
#define GEN_PASS_DEF_SCHEDULESLOTS
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// One op of a slot's program, before it is built: its kind, stage and
/// time step within the cycle.
struct SlotEntry {
  enum Kind {
    Wait,
    Forward,
    Backward,
    Start,
    Relay,
    ClipMeans,
    ClipOwn,
    Gather,
    Release,
    SendParams,
    OwnerUpdate,
    Absorb,
    SparseSend,
    SparseApply
  } kind;
  int64_t stage, time;
  int64_t delay = 0; ///< Wait: the version delay; Relay, SendParams: the
                     ///< step offset
  /// CDP-ZeRO: Gather's source, SendParams' destination, Start's owner,
  /// OwnerUpdate's source (-1: none).
  int64_t peer = -1;
  int64_t use = 0;     ///< SendParams: the receiver's cycle time
  bool master = false; ///< SendParams: from the owner's master copy
};

/// What the graph says about each stage: whether it has forward and
/// backward ops, whether it owns trained parameters, and whose trained
/// parameters its forward and backward read (its own, and another stage's
/// through a tied weight); and whether the step clips its gradients or
/// unscales them (dynamic loss scaling), which both read every stage's.
struct StageFacts {
  SmallVector<bool> forward, backward, trained;
  SmallVector<std::set<int64_t>> forwardReads, backwardReads;
  bool clip = false, unscale = false;
};

/// The stage that owns each trained parameter: its gradient's.
llvm::DenseMap<Operation *, int64_t> parameterStages(func::FuncOp func) {
  llvm::StringMap<int64_t> byName;
  func.walk([&](GradientOp gradient) {
    if (auto stage = gradient->getAttrOfType<IntegerAttr>("cdp.stage"))
      byName[gradient.getName()] = stage.getInt();
  });
  llvm::DenseMap<Operation *, int64_t> stages;
  func.walk([&](ParamOp param) {
    auto it = byName.find(param.getName());
    if (it != byName.end())
      stages[param] = it->second;
  });
  return stages;
}

StageFacts factsOf(func::FuncOp func, int64_t L) {
  StageFacts facts;
  facts.forward.assign(L + 1, false);
  facts.backward.assign(L + 1, false);
  facts.trained.assign(L + 1, false);
  facts.forwardReads.assign(L + 1, {});
  facts.backwardReads.assign(L + 1, {});
  llvm::DenseMap<Operation *, int64_t> owner = parameterStages(func);
  for (Operation &op : func.getBody().front().without_terminator()) {
    facts.clip |= isa<ClipGradNormOp>(op);
    facts.unscale |= isa<UnscaleGradsOp>(op);
    if (isa<ParamOp, ConstantOp, UpdateOp, ClipGradNormOp, UnscaleGradsOp>(op))
      continue;
    auto stage = op.getAttrOfType<IntegerAttr>("cdp.stage");
    auto phase = op.getAttrOfType<StringAttr>("cdp.phase");
    int64_t l = stage ? stage.getInt() : L;
    bool backward = phase && phase.getValue() == "backward";
    (backward ? facts.backward : facts.forward)[l] = true;
    for (Value operand : op.getOperands())
      if (auto it = owner.find(operand.getDefiningOp()); it != owner.end())
        (backward ? facts.backwardReads : facts.forwardReads)[l].insert(
            it->second);
    if (isa<GradientOp>(op) && stage)
      facts.trained[stage.getInt()] = true;
  }
  return facts;
}

/// Slot j's program: per stage that owns parameters, the wait for its
/// reduced gradients (from step 1 + delay on) before its forward; the
/// forwards F_1..F_L at times 0..L-1, the backwards B_L..B_1 at L..2L-1,
/// each trained stage's reduction starting after its backward.
/// With gradient clipping or loss scaling, dp first takes every stage's
/// mean, unscales and clips them together (sched.clip_means instead of the
/// waits: an overflow anywhere skips every stage's update), and cdp clips
/// the slot's own gradients after its last backward, where every reduction
/// then starts (`afterBackward`).
std::vector<SlotEntry> slotProgram(int64_t L, ArrayRef<int64_t> delay,
                                   const StageFacts &facts,
                                   bool afterBackward) {
  std::vector<SlotEntry> entries;
  bool clipMeans = (facts.clip || facts.unscale) && !afterBackward;
  if (clipMeans)
    entries.push_back({SlotEntry::ClipMeans, 0, 0});
  for (int64_t l = 1; l <= L; ++l) {
    if (!facts.forward[l])
      continue;
    if (facts.trained[l] && !clipMeans)
      entries.push_back({SlotEntry::Wait, l, l - 1, delay[l - 1]});
    entries.push_back({SlotEntry::Forward, l, l - 1});
  }
  for (int64_t l = L; l >= 1; --l) {
    if (!facts.backward[l])
      continue;
    entries.push_back({SlotEntry::Backward, l, 2 * L - l});
    if (facts.trained[l] && !afterBackward)
      entries.push_back({SlotEntry::Start, l, 2 * L - l});
  }
  if (afterBackward) {
    entries.push_back({SlotEntry::ClipOwn, 0, 2 * L - 1});
    for (int64_t l = L; l >= 1; --l)
      if (facts.trained[l])
        entries.push_back({SlotEntry::Start, l, 2 * L - 1});
  }
  return entries;
}

/// laysa's slot program: F_1..F_L at 0..L-1, B_L..B_1 at L..2L-1 as dp's,
/// each trained stage's gradients absorbed into the mirror right after its
/// backward (not with the residual baseline), its selection sent one time
/// step later (overlapping the next backward) and applied one after that,
/// ahead of that time step's own selection, so that only one stage's
/// communication buffers are in use at a time. The cycle is 2L + 2: the
/// last stage's exchange ends two time steps after B_1.
std::vector<SlotEntry> laysaProgram(int64_t L, const StageFacts &facts,
                                    bool residual) {
  std::vector<SlotEntry> entries;
  for (int64_t l = 1; l <= L; ++l)
    if (facts.forward[l])
      entries.push_back({SlotEntry::Forward, l, l - 1});
  // Time t's exchange work: the apply of the stage sent at t - 1, then
  // the selection of the stage whose backward ended at t - 1.
  auto trained = [&](int64_t l) {
    return l >= 1 && l <= L && facts.trained[l];
  };
  auto exchanges = [&](int64_t t) {
    if (trained(2 * L - t + 2))
      entries.push_back({SlotEntry::SparseApply, 2 * L - t + 2, t});
    if (trained(2 * L - t + 1))
      entries.push_back({SlotEntry::SparseSend, 2 * L - t + 1, t});
  };
  for (int64_t t = L; t <= 2 * L + 1; ++t) {
    exchanges(t);
    int64_t l = 2 * L - t; // the backward at t, if any
    if (l < 1 || !facts.backward[l])
      continue;
    entries.push_back({SlotEntry::Backward, l, t});
    if (facts.trained[l] && !residual)
      entries.push_back({SlotEntry::Absorb, l, t});
  }
  return entries;
}

/// ZeRO stage 3: around each stage's forward and backward, the gathers of
/// the stages whose parameters it reads, and their releases after it.
void insertGathers(std::vector<SlotEntry> &entries, const StageFacts &facts) {
  std::vector<SlotEntry> out;
  for (const SlotEntry &entry : entries) {
    bool forward = entry.kind == SlotEntry::Forward;
    if (!forward && entry.kind != SlotEntry::Backward) {
      out.push_back(entry);
      continue;
    }
    const std::set<int64_t> &reads =
        (forward ? facts.forwardReads : facts.backwardReads)[entry.stage];
    for (int64_t k : reads)
      out.push_back({SlotEntry::Gather, k, entry.time});
    out.push_back(entry);
    for (int64_t k : reads)
      out.push_back({SlotEntry::Release, k, entry.time});
  }
  entries = std::move(out);
}

/// --cdp-reduce chain: the mean of step t's stage-l reduction leaves the
/// last slot at tau*_l(t) = s_{N-1} + 2Lt + r_l (r_l its reduction start,
/// pipeline::reductionStart) and reaches slot j at
/// tau*_l(t) + N - 1 - j, one hop a time step: slot j's relay runs then, in
/// its own step t + k at cycle time x, before the first op of a later time
/// (or a wait of the same time).
void insertRelay(std::vector<SlotEntry> &entries, int64_t j, int64_t N,
                 int64_t L, int64_t l, ArrayRef<int64_t> offsets,
                 bool afterBackward) {
  int64_t r = offsets[N - 1] - offsets[j] +
              pipeline::reductionStart(l, L, afterBackward) + (N - 1 - j);
  int64_t k = r / (2 * L), x = r % (2 * L);
  auto at = entries.begin();
  while (at != entries.end() &&
         (at->time < x || (at->time == x && at->kind != SlotEntry::Wait)))
    ++at;
  entries.insert(at, {SlotEntry::Relay, l, x, k});
}

/// CDP-ZeRO: stage k's owner, the device that keeps its master copy and
/// optimizer state. o_k = floor((k - 1) N / L) spreads the stages evenly
/// over the devices, and puts each owner at most 2(k - 1) time steps
/// behind slot 0 (s_o <= 2k - 2): after its own B_k in step t it has
/// updated the stage before slot 0's F_k of step t + 1 needs the result.
int64_t ownerOf(int64_t k, int64_t N, int64_t L) { return (k - 1) * N / L; }

/// CDP-ZeRO (cdp --zero 3, rule v1), slot j's program. Every use of stage
/// k's parameters (a forward or backward reading them, at cycle time c)
/// is a chain along the slots: slot 0 receives them from the owner's
/// master copy, slot j > 0 from slot j - 1 right after that slot's use,
/// and the owner takes its own master copy instead (so its predecessor
/// sends nothing). The gradients go along the same slots (the chain's
/// partial sums) to the last, which hands the mean to the owner; the owner
/// updates the stage after its own B_k. Its sends to slot 0 leave at slot
/// 0's cycle time c, in the owner's step t at time c - s_o, or, where that
/// is negative, in its step t - 1 at 2L + c - s_o, after that step's
/// update (a send one step ahead).
std::vector<SlotEntry> cdpZeroProgram(int64_t j, int64_t N, int64_t L,
                                      ArrayRef<int64_t> offsets,
                                      const StageFacts &facts) {
  std::vector<SlotEntry> entries;
  auto use = [&](const std::set<int64_t> &reads, SlotEntry work) {
    for (int64_t k : reads) {
      int64_t o = ownerOf(k, N, L);
      SlotEntry gather{SlotEntry::Gather, k, work.time};
      gather.peer = j == o ? j : j == 0 ? o : j - 1;
      entries.push_back(gather);
    }
    entries.push_back(work);
    if (work.kind == SlotEntry::Backward && facts.trained[work.stage]) {
      SlotEntry start{SlotEntry::Start, work.stage, work.time};
      start.peer = ownerOf(work.stage, N, L);
      entries.push_back(start);
    }
    for (int64_t k : reads) {
      if (j + 1 == N || j + 1 == ownerOf(k, N, L))
        continue;
      SlotEntry send{SlotEntry::SendParams, k, work.time};
      send.peer = j + 1;
      send.use = work.time;
      entries.push_back(send);
    }
    for (int64_t k : reads)
      entries.push_back({SlotEntry::Release, k, work.time});
    if (work.kind == SlotEntry::Backward && facts.trained[work.stage] &&
        ownerOf(work.stage, N, L) == j) {
      SlotEntry update{SlotEntry::OwnerUpdate, work.stage, work.time};
      update.peer = N - 1;
      entries.push_back(update);
    }
  };
  for (int64_t l = 1; l <= L; ++l)
    if (facts.forward[l])
      use(facts.forwardReads[l], {SlotEntry::Forward, l, l - 1});
  for (int64_t l = L; l >= 1; --l)
    if (facts.backward[l])
      use(facts.backwardReads[l], {SlotEntry::Backward, l, 2 * L - l});
  // The owner's master sends to slot 0, one per use of each stage it owns.
  std::vector<SlotEntry> sends;
  for (int64_t l = 1; l <= L; ++l)
    for (auto [reads, time] : {std::pair(&facts.forwardReads[l], l - 1),
                               std::pair(&facts.backwardReads[l], 2 * L - l)})
      for (int64_t k : *reads) {
        if (ownerOf(k, N, L) != j || j == 0 ||
            (time == l - 1 ? !facts.forward[l] : !facts.backward[l]))
          continue;
        int64_t r = time - offsets[j];
        SlotEntry send{SlotEntry::SendParams, k, r < 0 ? 2 * L + r : r};
        send.delay = r < 0 ? 1 : 0;
        send.peer = 0;
        send.use = time;
        send.master = true;
        sends.push_back(send);
      }
  for (const SlotEntry &send : sends) {
    auto at = entries.begin();
    while (at != entries.end() && at->time <= send.time)
      ++at;
    entries.insert(at, send);
  }
  return entries;
}

/// Where CDP-ZeRO's timing holds: every owner's update of step t comes
/// before its sends of the result (step t + 1's), which follow it in the
/// program. Empty when it does, else what breaks.
std::string checkCdpZero(ArrayRef<SlotEntry> entries) {
  llvm::DenseMap<int64_t, size_t> updateAt;
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].kind == SlotEntry::OwnerUpdate)
      updateAt[entries[i].stage] = i;
  for (size_t i = 0; i < entries.size(); ++i) {
    const SlotEntry &e = entries[i];
    if (e.kind != SlotEntry::SendParams || !e.master)
      continue;
    auto it = updateAt.find(e.stage);
    if (it == updateAt.end())
      return "stage " + std::to_string(e.stage) + "'s owner never updates it";
    if ((e.delay == 1) != (i > it->second))
      return "stage " + std::to_string(e.stage) +
             "'s owner sends a version before it is made";
  }
  return "";
}

/// What CDP-ZeRO is built for: rule v1 (every device reads a stage's
/// version t - 1 in step t, so the owner keeps one copy), more than one
/// device, no gradient clipping.
LogicalResult checkCdpZeroSchedule(const SlotSchedule &recorded,
                                   const StageFacts &facts) {
  auto refuse = [&](const Twine &why) {
    func::FuncOp func = recorded.func;
    return func.emitError("CDP-ZeRO (cdp with ZeRO stage 3) " + why);
  };
  if (!recorded.rule || recorded.rule.getValue() != "v1")
    return refuse("runs rule v1 only: under v2 a stage's owner would keep two "
                  "versions and send each to a different part of the chain");
  if (recorded.devices < 2)
    return refuse("needs two or more devices");
  if (facts.clip || recorded.reduceAfterBackward)
    return refuse("does not clip gradients yet");
  return success();
}

struct ScheduleSlotsPass
    : public cdp::impl::ScheduleSlotsBase<ScheduleSlotsPass> {
  void runOnOperation() override;
};

void ScheduleSlotsPass::runOnOperation() {
  ModuleOp module = getOperation();
  std::optional<SlotSchedule> recorded = readSlotSchedule(module);
  if (!recorded)
    return signalPassFailure();
  if (!recorded->live) {
    module.emitError("no complete schedule; run cdp-build-schedule, "
                     "cdp-delay-updates and cdp-stagger-collectives first");
    return signalPassFailure();
  }
  func::FuncOp func = recorded->func;
  int64_t N = recorded->devices, L = recorded->stages;
  DenseI64ArrayAttr offsets = recorded->offsets;
  ArrayAttr delays = recorded->delays;
  auto reduce = func->getAttrOfType<StringAttr>("cdp.reduce");
  StageFacts facts = factsOf(func, L);
  // CDP-ZeRO (the cyclic strategy's --zero 3) reduces along the chain, its
  // own way (cdpZeroProgram).
  bool cdpZero = isCdpZero(recorded->strategy.getValue(), recorded->zero);
  if (cdpZero && failed(checkCdpZeroSchedule(*recorded, facts)))
    return signalPassFailure();
  bool chain = (reduce && reduce.getValue() == "chain") || cdpZero;
  auto sparse = func->getAttrOfType<DictionaryAttr>("cdp.sparse");
  auto form = sparse ? sparse.getAs<StringAttr>("form") : nullptr;
  bool residual = form && form.getValue() == "residual";
  if (sparse && (recorded->zero != 0 || chain)) {
    func.emitError("laysa exchanges top-k selections; it takes no --zero "
                   "or --cdp-reduce chain");
    return signalPassFailure();
  }

  OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
  MLIRContext *context = builder.getContext();
  auto i64 = [&](int64_t v) { return builder.getI64IntegerAttr(v); };
  auto program = builder.create<sched::StepProgramOp>(
      func.getLoc(), recorded->strategy, i64(L), i64(N),
      i64(sparse ? 2 * L + 2 : 2 * L), i64(1), recorded->rule, delays,
      recorded->live, recorded->reduceAt,
      sched::ReductionAttr::get(context, chain ? sched::Reduction::Chain
                                               : sched::Reduction::AllReduce),
      IntegerAttr());
  program.getBody().emplaceBlock();
  Location loc = func.getLoc();
  for (int64_t j = 0; j < N; ++j) {
    ArrayRef<int64_t> delay = cast<DenseI64ArrayAttr>(delays[j]).asArrayRef();
    bool afterBackward = recorded->reduceAfterBackward;
    std::vector<SlotEntry> entries =
        sparse    ? laysaProgram(L, facts, residual)
        : cdpZero ? cdpZeroProgram(j, N, L, offsets.asArrayRef(), facts)
                  : slotProgram(L, delay, facts, afterBackward);
    if (cdpZero) {
      std::string broken = checkCdpZero(entries);
      if (!broken.empty()) {
        func.emitError() << "CDP-ZeRO on slot " << j << ": " << broken;
        return signalPassFailure();
      }
    }
    if (recorded->zero == 3 && !cdpZero)
      insertGathers(entries, facts);
    if (chain && j + 1 < N && !cdpZero)
      for (int64_t l = 1; l <= L; ++l)
        if (facts.trained[l])
          insertRelay(entries, j, N, L, l, offsets.asArrayRef(), afterBackward);
    builder.setInsertionPointToEnd(&program.getBody().front());
    auto device =
        builder.create<sched::SlotDeviceOp>(loc, i64(j), i64(offsets[j]));
    device.getBody().emplaceBlock();
    builder.setInsertionPointToEnd(&device.getBody().front());
    for (const SlotEntry &entry : entries) {
      IntegerAttr stage = i64(entry.stage), time = i64(entry.time);
      auto work = [&](sched::WorkKind kind) {
        return sched::WorkKindAttr::get(context, kind);
      };
      switch (entry.kind) {
      case SlotEntry::Wait:
        builder.create<sched::WaitReductionOp>(loc, stage, i64(entry.delay),
                                               i64(1 + entry.delay), time,
                                               i64(recorded->zero));
        break;
      case SlotEntry::Forward:
        builder.create<sched::SlotComputeOp>(
            loc, work(sched::WorkKind::Forward), stage, time);
        break;
      case SlotEntry::Backward:
        builder.create<sched::SlotComputeOp>(
            loc, work(sched::WorkKind::Backward), stage, time);
        break;
      case SlotEntry::Start:
        builder.create<sched::StartReductionOp>(
            loc, stage, time, i64(recorded->zero), i64(entry.peer));
        break;
      case SlotEntry::SendParams:
        builder.create<sched::SendParamsOp>(
            loc, stage, i64(entry.use), i64(entry.peer), time, i64(entry.delay),
            builder.getBoolAttr(entry.master));
        break;
      case SlotEntry::OwnerUpdate:
        builder.create<sched::OwnerUpdateOp>(loc, stage, i64(entry.peer), time);
        break;
      case SlotEntry::Relay:
        builder.create<sched::ChainRelayOp>(loc, stage, i64(entry.delay), time);
        break;
      case SlotEntry::ClipMeans:
        builder.create<sched::ClipMeansOp>(loc, i64(1), time,
                                           i64(recorded->zero));
        break;
      case SlotEntry::ClipOwn:
        builder.create<sched::ClipOwnOp>(loc, time);
        break;
      case SlotEntry::Gather:
        builder.create<sched::GatherParamsOp>(loc, stage, time, i64(0),
                                              i64(entry.peer));
        break;
      case SlotEntry::Release:
        builder.create<sched::ReleaseParamsOp>(loc, stage, time);
        break;
      case SlotEntry::Absorb:
        builder.create<sched::AbsorbGradientsOp>(loc, stage, time);
        break;
      case SlotEntry::SparseSend:
        builder.create<sched::SparseSendOp>(loc, stage, time,
                                            builder.getBoolAttr(residual));
        break;
      case SlotEntry::SparseApply:
        builder.create<sched::SparseApplyOp>(loc, stage, time,
                                             builder.getBoolAttr(residual));
        break;
      }
    }
  }
}

} // namespace
