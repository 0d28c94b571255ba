//===- InsertOptimizer.cpp - one optimizer update per gradient ------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Dialect/Sched/SchedOps.h"
#include "cdp/Passes/Passes.h"

#include "llvm/Support/GlobPattern.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cdp {
#define GEN_PASS_DEF_INSERTOPTIMIZER
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

struct InsertOptimizerPass
    : public cdp::impl::InsertOptimizerBase<InsertOptimizerPass> {
  using InsertOptimizerBase::InsertOptimizerBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func) {
      getOperation().emitError("no func.func @main");
      return signalPassFailure();
    }
    bool adam = optimizer == "adam" || optimizer == "adamw";
    if (optimizer != "sgd" && optimizer != "momentum" && !adam) {
      func.emitError("optimizer must be sgd, momentum, adam or adamw, got '")
          << optimizer << "'";
      return signalPassFailure();
    }
    double mu =
        momentum >= 0 ? momentum : (optimizer == "momentum" ? 0.9 : 0.0);
    if (lrSchedule != "constant" && lrSchedule != "step" &&
        lrSchedule != "cosine" && lrSchedule != "linear") {
      func.emitError("lr-schedule must be constant, step, cosine or linear, "
                     "got '")
          << lrSchedule << "'";
      return signalPassFailure();
    }
    if (lr <= 0 || mu < 0 || weightDecay < 0 || beta1 < 0 || beta1 >= 1 ||
        beta2 < 0 || beta2 >= 1 || epsilon <= 0 || lrPeriod < 1 ||
        lrGamma <= 0 || lrMin < 0 || lrStart <= 0 || lrEnd < 0 || warmup < 0 ||
        warmupStart <= 0) {
      func.emitError("optimizer settings out of range (lr > 0, momentum >= 0, "
                     "weight decay >= 0, 0 <= betas < 1, epsilon > 0, "
                     "lr period >= 1, lr gamma > 0, lr min >= 0)");
      return signalPassFailure();
    }
    SmallVector<llvm::GlobPattern> exempt;
    for (const std::string &text : noDecay) {
      llvm::Expected<llvm::GlobPattern> pattern =
          llvm::GlobPattern::create(text);
      if (!pattern) {
        func.emitError("no-decay pattern '")
            << text
            << "' is not a glob: " << llvm::toString(pattern.takeError());
        return signalPassFailure();
      }
      exempt.push_back(std::move(*pattern));
    }
    // Parameter groups: the matching parameters take no weight decay.
    auto decayOf = [&](StringRef name) {
      for (const llvm::GlobPattern &pattern : exempt)
        if (pattern.match(name))
          return 0.0;
      return static_cast<double>(weightDecay);
    };
    llvm::StringMap<ParamOp> params;
    func.walk([&](ParamOp param) { params[param.getName()] = param; });
    SmallVector<GradientOp> gradients;
    func.walk([&](GradientOp gradient) { gradients.push_back(gradient); });
    if (gradients.empty()) {
      func.emitError("no gradients to apply; run cdp-autodiff first");
      return signalPassFailure();
    }
    // Updates go last, after every use of the old values.
    if (clipGradNorm < 0) {
      func.emitError("clip-grad-norm must be positive (0: off), got ")
          << clipGradNorm;
      return signalPassFailure();
    }
    OpBuilder builder(func.getBody().front().getTerminator());
    auto f32 = [&](double value) {
      return builder.getF32FloatAttr(static_cast<float>(value));
    };
    // Dynamic loss scaling (a cdp.loss_scale seed): the gradients are
    // divided by the scale before the clip reads them, and an update skips
    // its step when they overflowed.
    Value lossScale;
    func.walk([&](LossScaleOp seed) { lossScale = seed.getState(); });
    if (lossScale && failed(unscale(func, builder, gradients, lossScale)))
      return signalPassFailure();
    if (clipGradNorm > 0) {
      SmallVector<Value> grads;
      for (GradientOp gradient : gradients)
        grads.push_back(gradient.getGrad());
      auto clip = builder.create<ClipGradNormOp>(func.getLoc(), grads,
                                                 f32(clipGradNorm));
      clip->setAttr("cdp.phase", builder.getStringAttr("update"));
    }
    for (GradientOp gradient : gradients) {
      ParamOp param = params.lookup(gradient.getName());
      auto update = builder.create<UpdateOp>(
          gradient.getLoc(), gradient.getNameAttr(), param.getResult(),
          gradient.getGrad(), lossScale,
          builder.getStringAttr(adam ? optimizer.getValue() : "sgd"), f32(lr),
          f32(adam ? 0.0 : mu), f32(decayOf(gradient.getName())), f32(beta1),
          f32(beta2), f32(epsilon), /*lr_schedule=*/StringAttr(),
          /*lr_period=*/IntegerAttr(), /*lr_gamma=*/FloatAttr(),
          /*lr_min=*/FloatAttr(), /*lr_start=*/FloatAttr(),
          /*lr_end=*/FloatAttr(), /*lr_warmup=*/IntegerAttr(),
          /*lr_warmup_start=*/FloatAttr());
      if (lrSchedule != "constant") {
        update.setLrScheduleAttr(builder.getStringAttr(lrSchedule));
        update.setLrPeriodAttr(builder.getI64IntegerAttr(lrPeriod));
        if (lrSchedule == "step")
          update.setLrGammaAttr(f32(lrGamma));
        if (lrSchedule == "cosine")
          update.setLrMinAttr(f32(lrMin));
        if (lrSchedule == "linear") {
          update.setLrStartAttr(f32(lrStart));
          update.setLrEndAttr(f32(lrEnd));
        }
      }
      if (warmup > 0) {
        update.setLrWarmupAttr(builder.getI64IntegerAttr(warmup));
        update.setLrWarmupStartAttr(f32(warmupStart));
      }
      if (auto stage = gradient->getAttr("cdp.stage")) {
        update->setAttr("cdp.stage", stage);
        update->setAttr("cdp.phase", builder.getStringAttr("update"));
      }
    }
  }

  LogicalResult unscale(func::FuncOp func, OpBuilder &builder,
                        ArrayRef<GradientOp> gradients, Value lossScale) {
    // Every device must learn whether any gradient of the step overflowed
    // before its updates: single; dp, whose updates wait for every stage's
    // mean; the pipelines but cdp-mp, whose stages exchange flags
    // (cdp-schedule-pipeline). Not yet where CDP's slots update a stage at
    // different time steps (cdp, cdp-mp) or devices exchange sparse ones.
    auto strategy =
        getOperation()->getAttrOfType<sched::StrategyAttr>("sched.strategy");
    if (strategy && !inScope(StrategyScope::LossScaled, strategy.getValue()))
      return func.emitError("dynamic loss scaling (--precision fp16) runs "
                            "under ")
             << scopeNames(StrategyScope::LossScaled) << " only so far, not "
             << strategyName(strategy.getValue())
             << "; use --precision bf16, which needs no scaling";
    if (lossScaleInterval < 1)
      return func.emitError("loss-scale-interval must be at least 1, got ")
             << lossScaleInterval;
    SmallVector<Value> grads;
    for (GradientOp gradient : gradients)
      grads.push_back(gradient.getGrad());
    // PyTorch's GradScaler: x2 after the interval's clean steps, x0.5 on
    // an overflow.
    auto op = builder.create<UnscaleGradsOp>(
        func.getLoc(), lossScale, grads, builder.getF32FloatAttr(2.0f),
        builder.getF32FloatAttr(0.5f),
        builder.getI64IntegerAttr(lossScaleInterval));
    op->setAttr("cdp.phase", builder.getStringAttr("update"));
    return success();
  }
};

} // namespace
