//===- Autodiff.cpp - reverse-mode differentiation of @main ---------------===//
//
// Walks @main backwards from its loss. Each op whose result carries a
// gradient contributes gradients to those of its operands that depend on a
// trainable parameter, by its own rule (DifferentiableOp, beside the op in
// GraphGradients.cpp); contributions to one value are summed, which is what
// makes tied weights and skip connections right.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphBuilder.h"
#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Plan/ReservedNames.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>

namespace cdp {
#define GEN_PASS_DEF_AUTODIFF
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// One reverse sweep over @main; each op's rule is its DifferentiableOp
/// implementation.
class Differentiator {
public:
  Differentiator(func::FuncOp func, OpBuilder &builder)
      : func(func), builder(builder), gradients(builder) {}

  LogicalResult run(Value loss, const llvm::StringSet<> &frozen,
                    SmallVectorImpl<ParamOp> &trainable, double lossScale);

private:
  LogicalResult differentiate(Operation *op);
  Value seedOf(Value loss, double lossScale);
  void eraseUnusedBackward(const llvm::DenseSet<Operation *> &forwardOps);

  func::FuncOp func;
  OpBuilder &builder;
  GradientBuilder gradients;
};

LogicalResult Differentiator::differentiate(Operation *op) {
  gradients.setOrigin(op);
  auto rule = dyn_cast<DifferentiableOp>(op);
  if (!rule)
    return op->emitOpError("has no gradient rule");
  return rule.buildGradient(gradients);
}

/// Erases the backward ops whose results nothing reads. A rule builds its
/// contributions before learning which operands take them: an attention
/// score's addend derived from the mask got its gradient reduced from
/// batch x heads x seq^2 values for nothing, one kernel per layer.
void Differentiator::eraseUnusedBackward(
    const llvm::DenseSet<Operation *> &forwardOps) {
  Operation *op = func.getBody().front().getTerminator()->getPrevNode();
  while (op) { // users before their operands, so chains go whole
    Operation *previous = op->getPrevNode();
    if (!forwardOps.contains(op) && op->getNumResults() > 0 &&
        op->use_empty() && !isa<GradientOp, AssignOp>(op))
      op->erase();
    op = previous;
  }
}

/// The gradient the backward starts from: 1, or under dynamic loss scaling
/// the current scale, read from the loss-scale buffer this adds (initial
/// scale `lossScale`, no clean steps yet, no overflow).
Value Differentiator::seedOf(Value loss, double lossScale) {
  auto lossType = cast<ShapedType>(loss.getType());
  if (lossScale <= 0)
    return builder.create<ConstantOp>(
        func.getLoc(),
        cast<ElementsAttr>(DenseElementsAttr::get(lossType, 1.0f)));
  auto stateType = RankedTensorType::get({3}, builder.getF32Type());
  Value state;
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&func.getBody().front());
    float initial[] = {static_cast<float>(lossScale), 0.0f, 0.0f};
    state = builder.create<ParamOp>(func.getLoc(), stateType,
                                    builder.getStringAttr(kLossScaleBuffer),
                                    cast<ElementsAttr>(DenseElementsAttr::get(
                                        stateType, ArrayRef<float>(initial))),
                                    builder.getUnitAttr(), UnitAttr());
  }
  auto seed = builder.create<LossScaleOp>(func.getLoc(), lossType, state);
  // The seed runs in the backward of the loss's stage: the strategies that
  // emit a stage's ops together (dp) place it there.
  if (Operation *producer = loss.getDefiningOp())
    if (auto stage = producer->getAttrOfType<IntegerAttr>("cdp.stage")) {
      seed->setAttr("cdp.stage", stage);
      seed->setAttr("cdp.phase", builder.getStringAttr("backward"));
    }
  return seed;
}

LogicalResult Differentiator::run(Value loss, const llvm::StringSet<> &frozen,
                                  SmallVectorImpl<ParamOp> &trainable,
                                  double lossScale) {
  Block &body = func.getBody().front();
  SmallVector<ParamOp> candidates;
  for (Operation &op : body.without_terminator()) {
    if (auto param = dyn_cast<ParamOp>(op)) {
      if (!param.getBuffer() && !param.getFrozen() &&
          !frozen.contains(param.getName()) &&
          param.getType().getElementType().isF32()) {
        candidates.push_back(param);
        gradients.markNeeded(param.getResult());
      }
      continue;
    }
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return gradients.needs(v); }))
      for (Value result : op.getResults())
        if (cast<RankedTensorType>(result.getType()).getElementType().isF32())
          gradients.markNeeded(result);
  }
  if (!gradients.needs(loss))
    return func.emitError("the loss depends on no trainable parameter");

  builder.setInsertionPoint(body.getTerminator());
  gradients.seed(loss, seedOf(loss, lossScale));
  SmallVector<Operation *> forward;
  for (Operation &op : body.without_terminator())
    forward.push_back(&op);
  llvm::DenseSet<Operation *> forwardOps(forward.begin(), forward.end());
  Operation *terminator = body.getTerminator();
  auto stageAttr = [](Operation *op) {
    return op ? op->getAttrOfType<IntegerAttr>("cdp.stage") : nullptr;
  };
  // Every op a rule creates belongs to the stage of the op it differentiates
  // and to the backward phase (when the forward is partitioned).
  auto tag = [&](Operation *after, IntegerAttr stage) {
    if (!stage)
      return;
    for (Operation *op = after->getNextNode(); op != terminator;
         op = op->getNextNode()) {
      if (isa<ConstantOp>(op) || op->hasAttr("cdp.stage"))
        continue;
      op->setAttr("cdp.stage", stage);
      op->setAttr("cdp.phase", builder.getStringAttr("backward"));
    }
  };
  for (Operation *op : llvm::reverse(forward)) {
    if (isa<ParamOp, ConstantOp>(op))
      continue;
    if (llvm::none_of(op->getResults(),
                      [&](Value v) { return gradients.gradOf(v); }))
      continue;
    Operation *marker = terminator->getPrevNode();
    if (failed(differentiate(op)))
      return failure();
    tag(marker, stageAttr(op));
  }
  for (ParamOp param : candidates)
    if (Value grad = gradients.gradOf(param.getResult())) {
      auto gradient =
          builder.create<GradientOp>(param.getLoc(), param.getName(), grad);
      // A parameter belongs to the earliest stage that reads it, where its
      // gradient is complete (backward runs from the last stage to the
      // first); a tied weight read first by a later stage (a transposed LM
      // head at the top of the graph) still belongs to its embedding's.
      // (Its users, not every forward op per parameter: that was
      // quadratic, 64 % of compiling a chain of 30k MatMuls.)
      IntegerAttr earliest;
      for (Operation *user : param.getResult().getUsers())
        if (forwardOps.contains(user))
          if (IntegerAttr stage = stageAttr(user))
            if (!earliest || stage.getInt() < earliest.getInt())
              earliest = stage;
      if (earliest) {
        gradient->setAttr("cdp.stage", earliest);
        gradient->setAttr("cdp.phase", builder.getStringAttr("backward"));
      }
      trainable.push_back(param);
    }
  eraseUnusedBackward(forwardOps); // after the gradients are read
  return success();
}

struct AutodiffPass : public cdp::impl::AutodiffBase<AutodiffPass> {
  using AutodiffBase::AutodiffBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation().lookupSymbol<func::FuncOp>("main");
    auto lossIndex =
        func ? func->getAttrOfType<IntegerAttr>("cdp.loss_index") : nullptr;
    if (!lossIndex) {
      getOperation().emitError("@main has no loss; run cdp-attach-loss first");
      return signalPassFailure();
    }
    if (bnRunningVar != "unbiased" && bnRunningVar != "biased") {
      func.emitError("bn-running-var must be unbiased or biased, got '")
          << bnRunningVar << "'";
      return signalPassFailure();
    }
    llvm::StringSet<> frozen;
    llvm::StringSet<> params;
    func.walk([&](ParamOp param) { params.insert(param.getName()); });
    for (const std::string &name : freeze) {
      if (!params.contains(name)) {
        func.emitError("--freeze names '")
            << name << "', which is not a parameter";
        return signalPassFailure();
      }
      frozen.insert(name);
    }
    auto returnOp =
        cast<func::ReturnOp>(func.getBody().front().getTerminator());
    Value loss = returnOp.getOperand(lossIndex.getInt());
    OpBuilder builder(func.getContext());
    Differentiator differentiator(func, builder);
    SmallVector<ParamOp> trainable;
    if (lossScale < 0 || !std::isfinite(static_cast<double>(lossScale))) {
      func.emitError("loss-scale must be a positive number (0: off), got ")
          << lossScale;
      return signalPassFailure();
    }
    if (failed(differentiator.run(loss, frozen, trainable, lossScale)))
      return signalPassFailure();

    // Training-mode BatchNorm writes its running statistics back.
    builder.setInsertionPoint(returnOp);
    func.walk([&](BatchNormOp bn) {
      if (!bn.getTrainingMode())
        return;
      bn.setUnbiasedRunningVar(bnRunningVar == "unbiased");
      for (auto [stat, updated] : {std::pair{bn.getMean(), bn.getRunningMean()},
                                   std::pair{bn.getVar(), bn.getRunningVar()}})
        if (auto buffer = stat.getDefiningOp<ParamOp>())
          builder.create<AssignOp>(bn.getLoc(), buffer.getName(), stat,
                                   updated);
    });
  }
};

} // namespace
