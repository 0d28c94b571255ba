//===- MaterializeSchedule.cpp - decisions written out as streams ---------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Dialect/Sched/SchedOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SlotSchedule.h"
#include "cdp/Schedule/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cdp {
#define GEN_PASS_DEF_MATERIALIZESCHEDULE
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

struct MaterializeSchedulePass
    : public cdp::impl::MaterializeScheduleBase<MaterializeSchedulePass> {
  using MaterializeScheduleBase::MaterializeScheduleBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<SlotSchedule> recorded = readSlotSchedule(module);
    if (!recorded)
      return signalPassFailure();
    func::FuncOp func = recorded->func;
    int64_t N = recorded->devices, L = recorded->stages;
    DenseI64ArrayAttr offsets = recorded->offsets,
                      reduceAt = recorded->reduceAt, idle = recorded->idle;
    ArrayAttr delays = recorded->delays;
    // Stages that own parameters reduce and update; the others do not.
    SmallVector<bool> trained(L + 1, false);
    func.walk([&](GradientOp gradient) {
      if (auto stage = gradient->getAttrOfType<IntegerAttr>("cdp.stage"))
        trained[stage.getInt()] = true;
    });
    // Gradient clipping: cdp reduces after the whole backward; dp takes
    // every stage's mean at the step's start (the clip needs them all).
    bool afterBackward = recorded->reduceAfterBackward, meansFirst = false;
    func.walk([&](ClipGradNormOp) { meansFirst = !afterBackward; });
    auto startAt = [&](int64_t l) {
      return pipeline::reductionStart(l, L, afterBackward);
    };
    OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
    auto i64 = [&](int64_t v) { return builder.getI64IntegerAttr(v); };
    auto program = builder.create<sched::ProgramOp>(
        func.getLoc(), recorded->strategy, i64(N), i64(L), i64(steps),
        recorded->rule, IntegerAttr(), DenseI64ArrayAttr(),
        DenseI64ArrayAttr());
    program.getBody().emplaceBlock();
    for (int64_t i = 0; i < N; ++i) {
      builder.setInsertionPointToEnd(&program.getBody().front());
      int64_t s = offsets[i];
      auto device = builder.create<sched::DeviceOp>(
          func.getLoc(), i64(i), i64(s), i64(idle ? idle[i] : 0));
      device.getBody().emplaceBlock();
      builder.setInsertionPointToEnd(&device.getBody().front());
      ArrayRef<int64_t> delay = cast<DenseI64ArrayAttr>(delays[i]).asArrayRef();
      Location loc = func.getLoc();
      for (int64_t t = 0; t < steps; ++t) {
        int64_t base = s + 2 * L * t;
        builder.create<sched::LoadOp>(loc, i64(i), i64(t), i64(base));
        auto waitAndUpdate = [&](int64_t l, int64_t at) {
          int64_t d = delay[l - 1];
          if (!trained[l] || t < 1 + d)
            return;
          builder.create<sched::ReduceWaitOp>(loc, i64(l), i64(t - 1 - d),
                                              i64(at));
          builder.create<sched::UpdateOp>(loc, i64(l), i64(t - d), i64(at));
        };
        for (int64_t l = 1; l <= L && meansFirst; ++l)
          waitAndUpdate(l, base);
        for (int64_t l = 1; l <= L; ++l) {
          int64_t d = delay[l - 1];
          if (!meansFirst)
            waitAndUpdate(l, base + l - 1);
          builder.create<sched::RunOp>(
              loc, builder.getStringAttr("F"), i64(l), i64(i), i64(t),
              i64(std::max<int64_t>(t - d, 0)), i64(base + l - 1));
        }
        for (int64_t l = L; l >= 1; --l) {
          int64_t d = delay[l - 1];
          builder.create<sched::RunOp>(
              loc, builder.getStringAttr("B"), i64(l), i64(i), i64(t),
              i64(std::max<int64_t>(t - d, 0)), i64(base + 2 * L - l));
          if (trained[l] && !afterBackward)
            builder.create<sched::ReduceStartOp>(
                loc, i64(l), i64(t), i64(base + startAt(l)),
                i64(reduceAt[l - 1] + 2 * L * t));
        }
        for (int64_t l = L; l >= 1 && afterBackward; --l)
          if (trained[l])
            builder.create<sched::ReduceStartOp>(
                loc, i64(l), i64(t), i64(base + startAt(l)),
                i64(reduceAt[l - 1] + 2 * L * t));
      }
    }
  }
};

} // namespace
