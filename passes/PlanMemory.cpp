//===- PlanMemory.cpp - static arena offsets from liveness ----------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/FirstFit.h"
#include "cdp/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cdp {
#define GEN_PASS_DEF_PLANMEMORY
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

int64_t bytesOf(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  Type element = tensor.getElementType();
  int64_t width = element.isF32() ? 4 : element.isInteger(1) ? 1 : 8;
  return std::max<int64_t>(tensor.getNumElements() * width, 1);
}

/// Values that live in the arena, with their live ranges in op indices.
struct Interval {
  Value value;
  int64_t begin, end, bytes;
  int64_t offset = -1;
};

/// Needs no arena memory: persistent values and side-effect sinks.
bool persistent(Operation *op) { return isa<ParamOp, ConstantOp>(op); }

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

    std::vector<Interval> intervals;
    llvm::DenseMap<Value, size_t> slot;
    auto lastUse = [&](Value value, int64_t begin) {
      int64_t last = begin;
      for (OpOperand &use : value.getUses()) {
        Operation *user = use.getOwner();
        if (isa<func::ReturnOp, GradientOp>(user))
          return end;
        last = std::max(last, index.lookup(user));
      }
      return last;
    };
    for (BlockArgument arg : func.getArguments()) {
      slot[arg] = intervals.size();
      intervals.push_back({arg, -1, end, bytesOf(arg.getType())});
    }
    for (Operation &op : body.without_terminator()) {
      if (persistent(&op))
        continue;
      for (Value result : op.getResults()) {
        slot[result] = intervals.size();
        int64_t begin = index.lookup(&op);
        intervals.push_back(
            {result, begin, lastUse(result, begin), bytesOf(result.getType())});
      }
    }

    // First fit in order of definition.
    std::vector<LiveRange> ranges;
    for (const Interval &interval : intervals)
      ranges.push_back({interval.begin, interval.end, interval.bytes});
    int64_t arena = 0;
    std::vector<int64_t> offsets = packFirstFit(ranges, arena);
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
