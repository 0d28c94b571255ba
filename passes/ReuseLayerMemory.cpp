//===- ReuseLayerMemory.cpp - in-place ops and early gradient release -----===//
//
// Layrub's layer-centric reuse, for the one-micro-batch arena and the
// pipelines' stage layouts: results overwrite operands they use last, and a
// gradient's arena buffer returns to the pool where the step hands it off
// (a reduction's copy, laysa's mirror, single's update) instead of living
// to the end of the step. The decisions are attributes; cdp-plan-memory and
// the plan emitter honour them, so every memory figure follows from the IR.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Dialect/Sched/SchedOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SharedStorage.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <map>
#include <set>

namespace cdp {
#define GEN_PASS_DEF_REUSELAYERMEMORY
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// A value the arena holds only while ops read it: not a graph input, a
/// graph output, a parameter or a constant.
bool transient(Value value) {
  Operation *producer = value.getDefiningOp();
  if (!producer || isa<ParamOp, ConstantOp>(producer))
    return false;
  return llvm::none_of(value.getUsers(), [](Operation *user) {
    return isa<func::ReturnOp>(user);
  });
}

/// `op` is the last user of `value` in `@main`'s order.
bool usesLast(Operation *op, Value value) {
  return llvm::all_of(value.getUsers(), [&](Operation *user) {
    return user == op || user->isBeforeInBlock(op);
  });
}

/// Backward ops write the gradient over the forward activation they read
/// (Layrub's aliasing), else over the incoming gradient.
SmallVector<unsigned> preferredOperands(Operation *op) {
  SmallVector<unsigned> order;
  for (unsigned i = op->getNumOperands(); i-- > 0;)
    order.push_back(i);
  if (!isa<UnaryGradOp>(op))
    std::reverse(order.begin(), order.end());
  return order;
}

/// `op` may write over `operand`'s block: every value over that block (a
/// reshape's input and result share one) is transient and read last by
/// `op`.
bool mayWriteOver(Operation *op, Value operand, const SharedStorage &storage) {
  return llvm::all_of(storage.groupOf(operand), [&](Value value) {
    return transient(value) && usesLast(op, value);
  });
}

void markInPlace(func::FuncOp func, OpBuilder &builder) {
  SharedStorage storage(func);
  for (Operation &op : func.getBody().front()) {
    if (!op.hasTrait<ElementwiseInPlace>() || op.getNumResults() != 1)
      continue;
    Type type = op.getResult(0).getType();
    for (unsigned i : preferredOperands(&op)) {
      Value operand = op.getOperand(i);
      if (operand.getType() != type || !mayWriteOver(&op, operand, storage))
        continue;
      op.setAttr("cdp.in_place", builder.getI64IntegerAttr(i));
      break;
    }
  }
}

/// Per stage, the time step (relative to the slot) after which no
/// instruction reads the arena copy of its gradients, where the step
/// program says so: an all-reduce copies the contribution when it starts,
/// laysa absorbs into the mirror, the naive baseline into its residual at
/// the selection. Stages reduced by the chain or into shards read their
/// gradients later and have no entry.
std::map<int64_t, int64_t> handOffTimes(ModuleOp module) {
  std::map<int64_t, int64_t> times;
  std::set<int64_t> unknown;
  module.walk([&](sched::SlotDeviceOp device) {
    auto program = cast<sched::StepProgramOp>(device->getParentOp());
    bool chain = program.getReduction() == sched::Reduction::Chain;
    auto note = [&](int64_t stage, int64_t time) {
      int64_t relative = time - device.getOffset();
      auto [it, added] = times.try_emplace(stage, relative);
      if (!added)
        it->second = std::max(it->second, relative);
    };
    for (Operation &step : device.getBody().front()) {
      if (auto start = dyn_cast<sched::StartReductionOp>(step)) {
        if (chain || start.getZero() >= 2 || start.getOwner() >= 0)
          unknown.insert(start.getStage());
        else
          note(start.getStage(), start.getTimeStep());
      } else if (auto absorb = dyn_cast<sched::AbsorbGradientsOp>(step)) {
        note(absorb.getStage(), absorb.getTimeStep());
      } else if (auto send = dyn_cast<sched::SparseSendOp>(step)) {
        if (send.getResidual())
          note(send.getStage(), send.getTimeStep());
      }
    }
  });
  for (int64_t stage : unknown)
    times.erase(stage);
  return times;
}

void releaseAtHandOff(ModuleOp module, func::FuncOp func, OpBuilder &builder) {
  std::map<int64_t, int64_t> times = handOffTimes(module);
  func.walk([&](GradientOp gradient) {
    auto stage = gradient->getAttrOfType<IntegerAttr>("cdp.stage");
    auto time = stage ? times.find(stage.getInt()) : times.end();
    if (time != times.end())
      gradient->setAttr("cdp.release_time",
                        builder.getI64IntegerAttr(time->second));
  });
}

/// single: each update right after the last op that reads its parameter or
/// its gradient, so the gradient dies there.
void updateInBackward(func::FuncOp func, OpBuilder &builder) {
  bool clips = false;
  func.walk([&](ClipGradNormOp) { clips = true; });
  if (clips)
    return;
  // Autodiff leaves the gradient markers at the end; each goes right after
  // its gradient's producer, so that it holds nothing back.
  func.walk([&](GradientOp gradient) {
    if (Operation *producer = gradient.getGrad().getDefiningOp())
      gradient->moveAfter(producer);
  });
  SmallVector<UpdateOp> updates;
  func.walk([&](UpdateOp update) { updates.push_back(update); });
  for (UpdateOp update : updates) {
    Operation *last = update.getGrad().getDefiningOp();
    if (!last)
      continue;
    for (Value value : {update.getParam(), update.getGrad()})
      for (Operation *user : value.getUsers())
        if (user != update && !isa<UpdateOp>(user) &&
            last->isBeforeInBlock(user))
          last = user;
    update->moveAfter(last);
  }
  func.walk([&](GradientOp gradient) {
    gradient->setAttr("cdp.release_at_last_use", builder.getUnitAttr());
  });
}

struct ReuseLayerMemoryPass
    : public cdp::impl::ReuseLayerMemoryBase<ReuseLayerMemoryPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp func = module.lookupSymbol<func::FuncOp>("main");
    if (!func) {
      module.emitError("no func.func @main");
      return signalPassFailure();
    }
    OpBuilder builder(func.getContext());
    bool dataParallel = false, pipelined = false;
    module.walk([&](sched::SlotDeviceOp) { dataParallel = true; });
    module.walk([&](sched::StageDeviceOp) { pipelined = true; });
    // Moving updates first: in-place decisions follow the final order.
    if (dataParallel)
      releaseAtHandOff(module, func, builder);
    else if (!pipelined)
      updateInBackward(func, builder);
    markInPlace(func, builder);
    func->setAttr("cdp.memory_reuse", builder.getStringAttr("layer"));
  }
};

} // namespace
