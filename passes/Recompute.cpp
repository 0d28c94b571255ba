//===- Recompute.cpp - activations recomputed in the backward -------------===//
//
// torch.utils.checkpoint, Megatron's selective recompute and DeepSpeed's
// activation checkpointing as a rewrite of the training graph: the backward
// reads clones of the forward results it would otherwise keep alive from
// the forward, made just before it needs them from the values the forward
// does keep. Decisions are per forward op (kept, or recomputed whole); the
// memory plan, the pipelines' stash layout and the report follow from the
// IR (a forward result the backward no longer reads dies at its last
// forward use).
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/ForwardLayers.h"
#include "cdp/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"

#include <map>

namespace cdp {
#define GEN_PASS_DEF_RECOMPUTE
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

int64_t stageOf(Operation *op) {
  auto stage = op->getAttrOfType<IntegerAttr>("cdp.stage");
  return stage ? stage.getInt() : 0;
}

/// A forward op whose results a clone can compute again with the same
/// bits: pure (not dropout's random mask, not a buffer write), with
/// results, and neither a parameter nor a constant (persistent already).
bool recomputable(Operation *op) {
  return op->getNumResults() > 0 && isPure(op) &&
         !isa<ParamOp, ConstantOp>(op) && !isBackward(op) && stageOf(op) > 0;
}

/// The forward of `@main` as the pass sees it: ops in order per stage,
/// and where each value comes from (WeightFlow).
struct Forward {
  std::map<int64_t, std::vector<Operation *>> byStage;
  llvm::DenseMap<Operation *, size_t> position;
  WeightFlow flow;

  explicit Forward(Block &body) : flow(body) {
    for (Operation &op : body.without_terminator()) {
      position[&op] = position.size();
      if (recomputable(&op))
        byStage[stageOf(&op)].push_back(&op);
    }
  }
};

struct RecomputePass : public cdp::impl::RecomputeBase<RecomputePass> {
  using RecomputeBase::RecomputeBase;

  llvm::DenseSet<Operation *> recomputed;
  llvm::DenseMap<Value, Value> clones;

  void runOnOperation() override {
    func::FuncOp func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func) {
      getOperation().emitError("no func.func @main");
      return signalPassFailure();
    }
    recomputed.clear(); // a pass instance may run again (--plan auto)
    clones.clear();
    Block &body = func.getBody().front();
    Forward forward(body);
    chooseRecomputed(forward);
    SmallVector<Operation *> backward;
    for (Operation &op : body.without_terminator())
      if (isBackward(&op))
        backward.push_back(&op);
    for (Operation *op : backward)
      for (OpOperand &operand : op->getOpOperands())
        if (Operation *producer = operand.get().getDefiningOp();
            producer && recomputed.contains(producer))
          operand.set(cloneFor(operand.get(), op, forward));
    const char *names[] = {"stage", "layer", "selective"};
    func->setAttr("cdp.recompute",
                  StringAttr::get(func.getContext(),
                                  names[static_cast<int>(mode.getValue())]));
  }

  /// Every recomputable forward op that the mode does not keep.
  void chooseRecomputed(const Forward &forward) {
    int64_t nextLayer = 0;
    for (const auto &[stage, ops] : forward.byStage) {
      std::vector<int64_t> layer = layersOf(ops, forward.flow, nextLayer);
      nextLayer = layer.empty() ? nextLayer : layer.back() + 1;
      llvm::DenseMap<Operation *, int64_t> layerOf;
      for (size_t i = 0; i < ops.size(); ++i)
        layerOf[ops[i]] = layer[i];
      for (Operation *op : ops)
        if (!kept(op, stage, layerOf) &&
            (mode != RecomputeMode::Selective || selective(op, forward)))
          recomputed.insert(op);
    }
  }

  /// Read by another stage, returned, or (layer) by a later layer.
  bool kept(Operation *op, int64_t stage,
            const llvm::DenseMap<Operation *, int64_t> &layerOf) const {
    for (Value result : op->getResults())
      for (Operation *user : result.getUsers()) {
        if (isa<func::ReturnOp>(user) || stageOf(user) != stage)
          return true;
        if (mode == RecomputeMode::Layer && !isBackward(user) &&
            layerOf.lookup(user) != layerOf.lookup(op))
          return true;
      }
    return false;
  }

  /// Megatron's selective recompute: element-wise results, softmax, norms
  /// and attention's products of two activations (QK^T, the scores times V),
  /// each only where what it reads lives into the backward anyway (a
  /// parameter, an input, a value the backward reads, or another such
  /// clone): recomputing a bias add from its product would keep the
  /// product instead, the same bytes.
  bool selective(Operation *op, const Forward &forward) const {
    return forward.flow.cheapToRecompute(op) &&
           llvm::all_of(op->getOperands(), [&](Value operand) {
             Operation *producer = operand.getDefiningOp();
             return !producer || isa<ParamOp, ConstantOp>(producer) ||
                    recomputed.contains(producer) ||
                    llvm::any_of(operand.getUsers(), isBackward);
           });
  }

  /// The clone of `value` (a recomputed op's result) for `reader`: made
  /// once, with the clones it needs, just before the first reader.
  Value cloneFor(Value value, Operation *reader, const Forward &forward) {
    if (Value clone = clones.lookup(value))
      return clone;
    SmallVector<Operation *> needed = closure(value.getDefiningOp());
    llvm::sort(needed, [&](Operation *a, Operation *b) {
      return forward.position.lookup(a) < forward.position.lookup(b);
    });
    OpBuilder builder(reader);
    StringAttr backward = builder.getStringAttr("backward");
    for (Operation *op : needed) {
      IRMapping mapping;
      for (Value operand : op->getOperands())
        if (Value clone = clones.lookup(operand))
          mapping.map(operand, clone);
      Operation *clone = builder.clone(*op, mapping);
      clone->setAttr("cdp.phase", backward);
      for (auto [original, copy] :
           llvm::zip(op->getResults(), clone->getResults()))
        clones[original] = copy;
    }
    return clones.lookup(value);
  }

  /// `root` and the recomputed ops it reads, transitively, not yet cloned
  /// (iterative: a stage's forward chain can be thousands of ops long).
  SmallVector<Operation *> closure(Operation *root) {
    SmallVector<Operation *> needed, work = {root};
    llvm::DenseSet<Operation *> seen = {root};
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      needed.push_back(op);
      for (Value operand : op->getOperands()) {
        Operation *producer = operand.getDefiningOp();
        if (producer && recomputed.contains(producer) &&
            !clones.count(operand) && seen.insert(producer).second)
          work.push_back(producer);
      }
    }
    return needed;
  }
};

} // namespace
