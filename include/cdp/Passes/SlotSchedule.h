//===- SlotSchedule.h - the dp/cdp decisions recorded on @main ----*- C++
//-*-===//
//
// cdp-build-schedule, cdp-delay-updates and cdp-stagger-collectives record
// their decisions as attributes of @main; cdp-schedule-slots (the step
// program) and cdp-materialize-schedule (the timeline) both read them here.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PASSES_SLOTSCHEDULE_H
#define CDP_PASSES_SLOTSCHEDULE_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>

namespace cdp {

struct SlotSchedule {
  mlir::func::FuncOp func;
  sched::StrategyAttr strategy;
  mlir::StringAttr rule; ///< "" before cdp-delay-updates
  int64_t devices = 1, stages = 1;
  /// cdp with gradient clipping: reductions start after the last backward.
  bool reduceAfterBackward = false;
  /// The ZeRO stage of the updates (0: none; 1: sharded optimizer state;
  /// 2: and gradients).
  int64_t zero = 0;
  mlir::DenseI64ArrayAttr offsets, reduceAt;
  mlir::ArrayAttr delays;
  /// Present once cdp-delay-updates ran (null otherwise).
  mlir::DenseI64ArrayAttr live, idle;
};

/// Whether cdp-build-schedule moved the reductions after the last backward.
inline bool reducesAfterBackward(mlir::DictionaryAttr schedule) {
  auto flag = schedule.getAs<mlir::BoolAttr>("reduce_after_backward");
  return flag && flag.getValue();
}

/// @main's recorded schedule, or none after reporting what is missing.
inline std::optional<SlotSchedule> readSlotSchedule(mlir::ModuleOp module) {
  SlotSchedule result;
  result.func = module.lookupSymbol<mlir::func::FuncOp>("main");
  mlir::Operation *func = result.func;
  auto schedule =
      func ? func->getAttrOfType<mlir::DictionaryAttr>("cdp.schedule")
           : nullptr;
  if (func) {
    result.offsets =
        func->getAttrOfType<mlir::DenseI64ArrayAttr>("cdp.offsets");
    result.delays = func->getAttrOfType<mlir::ArrayAttr>("cdp.version_delay");
    result.reduceAt =
        func->getAttrOfType<mlir::DenseI64ArrayAttr>("cdp.reduce_at");
    result.live =
        func->getAttrOfType<mlir::DenseI64ArrayAttr>("cdp.live_versions");
    result.idle = func->getAttrOfType<mlir::DenseI64ArrayAttr>("cdp.idle");
    result.rule = func->getAttrOfType<mlir::StringAttr>("cdp.rule");
  }
  if (!schedule || !result.offsets || !result.delays || !result.reduceAt) {
    module.emitError("no complete schedule; run cdp-build-schedule, "
                     "cdp-delay-updates and cdp-stagger-collectives first");
    return std::nullopt;
  }
  result.strategy = mlir::cast<sched::StrategyAttr>(schedule.get("strategy"));
  if (!result.rule)
    result.rule = mlir::StringAttr::get(module.getContext(), "");
  result.devices =
      mlir::cast<mlir::IntegerAttr>(schedule.get("devices")).getInt();
  result.stages =
      mlir::cast<mlir::IntegerAttr>(schedule.get("stages")).getInt();
  result.reduceAfterBackward = reducesAfterBackward(schedule);
  if (auto zero = schedule.getAs<mlir::IntegerAttr>("zero"))
    result.zero = zero.getInt();
  return result;
}

} // namespace cdp

#endif // CDP_PASSES_SLOTSCHEDULE_H
