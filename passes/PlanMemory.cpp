//===- PlanMemory.cpp - static arena offsets from liveness ----------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Dialect/Graph/StorageBytes.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SharedStorage.h"
#include "cdp/Plan/ArenaPacking.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>
#include <optional>

namespace cdp {
#define GEN_PASS_DEF_PLANMEMORY
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// An arena block's bytes: an empty tensor still gets one.
int64_t bytesOf(Type type) {
  return std::max<int64_t>(storageBytes(cast<RankedTensorType>(type)), 1);
}

/// Values that live in the arena, with their live ranges in op indices.
struct Interval {
  Value value;
  int64_t begin, end, bytes;
  /// The end were no gradient released at its hand-off (held to the end of
  /// the step, as without cdp-reuse-layer-memory).
  int64_t heldEnd;
  int64_t offset = -1;
};

/// Needs no arena memory: persistent values and side-effect sinks.
bool persistent(Operation *op) { return isa<ParamOp, ConstantOp>(op); }

/// An op after `op` reads the block `value` lies over under some name, so
/// `op` must not write its result there (a pass that ran after
/// cdp-reuse-layer-memory may have made a view of `value`).
bool readLater(Value value, Operation *op,
               const llvm::DenseMap<Operation *, int64_t> &index,
               const SharedStorage &storage) {
  int64_t at = index.lookup(op);
  for (Value member : storage.groupOf(value))
    for (Operation *user : member.getUsers())
      if (index.lookup(user) > at)
        return true;
  return false;
}

struct PlanMemoryPass : public cdp::impl::PlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func) {
      getOperation().emitError("no func.func @main");
      return signalPassFailure();
    }
    Block &body = func.getBody().front();
    llvm::DenseMap<Operation *, int64_t> index;
    int64_t count = 0;
    for (Operation &op : body)
      index[&op] = count++;
    int64_t end = count;

    // The last op of each time step, for gradients released at a hand-off.
    std::map<int64_t, int64_t> lastOfTime;
    for (Operation &op : body)
      if (auto time = op.getAttrOfType<IntegerAttr>("cdp.time"))
        lastOfTime[time.getInt()] = index[&op];
    int64_t latest = 0;
    for (auto &[time, last] : lastOfTime)
      last = latest = std::max(latest, last);
    auto lastAtOrBefore = [&](int64_t time) {
      auto it = lastOfTime.upper_bound(time);
      return it == lastOfTime.begin() ? int64_t(0) : std::prev(it)->second;
    };

    // A training step's outputs other than its loss end at their last
    // reader (cdp-run copies them as they are written for --save-outputs);
    // the loss, and an inference plan's outputs, are read after the step.
    auto returnOp = cast<func::ReturnOp>(body.getTerminator());
    auto lossIndex = func->getAttrOfType<IntegerAttr>("cdp.loss_index");
    auto heldToEnd = [&](Value value) {
      return !lossIndex || returnOp.getOperand(lossIndex.getInt()) == value;
    };
    std::vector<Interval> intervals;
    llvm::DenseMap<Value, size_t> slot;
    auto lastUse = [&](Value value, int64_t begin, bool releases) {
      int64_t last = begin;
      std::optional<int64_t> released;
      for (Operation *user : value.getUsers()) {
        if (auto gradient = dyn_cast<GradientOp>(user)) {
          if (!releases)
            return end;
          if (auto time =
                  gradient->getAttrOfType<IntegerAttr>("cdp.release_time"))
            released = lastAtOrBefore(time.getInt());
          else if (!gradient->hasAttr("cdp.release_at_last_use"))
            return end; // --dump-grads reads it after the step
        }
        if (isa<func::ReturnOp>(user) && heldToEnd(value))
          return end;
      }
      for (Operation *user : value.getUsers())
        if ((!released || !isa<UpdateOp>(user)) && // the update reads a copy
            !isa<func::ReturnOp>(user))
          last = std::max(last, index.lookup(user));
      return released ? std::max(last, *released) : last;
    };
    for (BlockArgument arg : func.getArguments()) {
      slot[arg] = intervals.size();
      intervals.push_back({arg, -1, end, bytesOf(arg.getType()), end});
    }
    SharedStorage storage(func);
    // Pairs (result, operand): in-place results may share the operand's
    // block, views must.
    std::vector<std::pair<size_t, size_t>> shares, views;
    for (Operation &op : body.without_terminator()) {
      if (persistent(&op))
        continue;
      for (Value result : op.getResults()) {
        slot[result] = intervals.size();
        int64_t begin = index.lookup(&op);
        intervals.push_back({result, begin, lastUse(result, begin, true),
                             bytesOf(result.getType()),
                             lastUse(result, begin, false)});
        Value owner = storage.ownerOf(result);
        if (owner != result)
          views.push_back({slot[result], slot.lookup(owner)});
      }
      auto inPlace = op.getAttrOfType<IntegerAttr>("cdp.in_place");
      if (inPlace &&
          !readLater(op.getOperand(inPlace.getInt()), &op, index, storage))
        shares.push_back({slot.lookup(op.getResult(0)),
                          slot.lookup(op.getOperand(inPlace.getInt()))});
    }

    // Views share their input's block, in-place results may share their
    // operand's. Gradients released at their hand-off shorten ranges, but
    // the packings are heuristics and shorter ranges can pack into more
    // bytes; holding a block longer is always safe, so where releases
    // exist the smaller of the two packings is kept.
    auto pack = [&](bool releases, int64_t &bytes) {
      std::vector<LiveRange> ranges;
      for (const Interval &interval : intervals)
        ranges.push_back({interval.begin,
                          releases ? interval.end : interval.heldEnd,
                          interval.bytes});
      return packArenaViews(ranges, views, shares, bytes);
    };
    int64_t arena = 0, heldArena = 0;
    std::vector<int64_t> offsets = pack(true, arena);
    if (llvm::any_of(intervals, [](const Interval &interval) {
          return interval.end != interval.heldEnd;
        })) {
      std::vector<int64_t> held = pack(false, heldArena);
      if (heldArena < arena) {
        offsets = std::move(held);
        arena = heldArena;
      }
    }
    for (size_t i = 0; i < intervals.size(); ++i)
      intervals[i].offset = offsets[i];

    OpBuilder builder(func.getContext());
    for (BlockArgument arg : func.getArguments())
      func.setArgAttr(arg.getArgNumber(), "cdp.offset",
                      builder.getI64IntegerAttr(intervals[slot[arg]].offset));
    for (Operation &op : body.without_terminator()) {
      if (persistent(&op) || op.getNumResults() == 0)
        continue;
      SmallVector<int64_t> offsets;
      for (Value result : op.getResults())
        offsets.push_back(intervals[slot[result]].offset);
      op.setAttr("cdp.offsets", builder.getDenseI64ArrayAttr(offsets));
    }
    func->setAttr("cdp.arena_bytes", builder.getI64IntegerAttr(arena));
  }
};

} // namespace
