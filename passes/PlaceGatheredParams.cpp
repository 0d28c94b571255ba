//===- PlaceGatheredParams.cpp - where ZeRO stage 3 gathers each stage ----===//
//
// A --zero 3 device holds a stage's whole parameters only from a
// sched.gather_params to its sched.release_params. The gathered stages
// share one region after the device's arena: each stage gets one byte
// offset there (the plan's tensors have one place), and stages that are
// ever gathered at the same time get disjoint ranges. Without tied weights
// no two stages are, and the region is one stage (the largest, padded to
// equal shards; CDP-ZeRO's, which arrive whole from one device, are not
// padded); a weight tied across stages keeps its owner's stage gathered
// beside the reader's.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Dialect/Sched/SchedOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Plan/ShardLayout.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>
#include <set>

namespace cdp {
#define GEN_PASS_DEF_PLACEGATHEREDPARAMS
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// Arena tensors start on 64-byte boundaries (oneDNN's and AVX's liking).
constexpr int64_t kAlignment = 64;

/// Bytes of stage l's parameters gathered over `devices`, padding
/// included: its trained parameters are those whose gradients it owns.
std::map<int64_t, int64_t> gatheredBytes(func::FuncOp func, int64_t devices) {
  std::map<int64_t, int64_t> elements;
  func.walk([&](GradientOp gradient) {
    if (auto stage = gradient->getAttrOfType<IntegerAttr>("cdp.stage"))
      elements[stage.getInt()] +=
          cast<RankedTensorType>(gradient.getGrad().getType()).getNumElements();
  });
  std::map<int64_t, int64_t> bytes;
  for (auto [stage, total] : elements)
    bytes[stage] = 4 * ShardLayout({total}, devices).paddedSize();
  return bytes;
}

/// Pairs of stages some device holds gathered at the same time.
std::set<std::pair<int64_t, int64_t>> overlaps(sched::StepProgramOp program) {
  std::set<std::pair<int64_t, int64_t>> pairs;
  program.walk([&](sched::SlotDeviceOp device) {
    std::set<int64_t> open;
    for (Operation &op : device.getBody().front()) {
      if (auto gather = dyn_cast<sched::GatherParamsOp>(op)) {
        for (int64_t other : open) {
          pairs.insert({gather.getStage(), other});
          pairs.insert({other, gather.getStage()});
        }
        open.insert(gather.getStage());
      } else if (auto release = dyn_cast<sched::ReleaseParamsOp>(op)) {
        open.erase(release.getStage());
      }
    }
  });
  return pairs;
}

/// First fit: each stage at the lowest aligned offset clear of the stages
/// it overlaps that are already placed.
std::map<int64_t, int64_t>
place(const std::map<int64_t, int64_t> &bytes,
      const std::set<std::pair<int64_t, int64_t>> &overlapping) {
  std::map<int64_t, int64_t> offsets;
  for (auto [stage, size] : bytes) {
    int64_t offset = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (auto [other, at] : offsets) {
        bool clash = overlapping.count({stage, other}) &&
                     offset < at + bytes.at(other) && at < offset + size;
        if (clash) {
          offset =
              (at + bytes.at(other) + kAlignment - 1) / kAlignment * kAlignment;
          moved = true;
        }
      }
    }
    offsets[stage] = offset;
  }
  return offsets;
}

struct PlaceGatheredParamsPass
    : public cdp::impl::PlaceGatheredParamsBase<PlaceGatheredParamsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp func = module.lookupSymbol<func::FuncOp>("main");
    for (auto program : module.getOps<sched::StepProgramOp>()) {
      bool gathers = false, pointToPoint = false;
      program.walk([&](sched::GatherParamsOp gather) {
        gathers = true;
        pointToPoint |= gather.getFrom() >= 0;
      });
      if (!gathers)
        continue;
      if (!func) {
        module.emitError("no func.func @main");
        return signalPassFailure();
      }
      // CDP-ZeRO's stages travel whole, unpadded (no shards).
      std::map<int64_t, int64_t> bytes =
          gatheredBytes(func, pointToPoint ? 1 : program.getMicroBatches());
      std::map<int64_t, int64_t> offsets = place(bytes, overlaps(program));
      Builder builder(module.getContext());
      WalkResult result = program.walk([&](sched::GatherParamsOp gather) {
        auto it = offsets.find(gather.getStage());
        if (it == offsets.end()) {
          gather.emitOpError("gathers a stage without trained parameters");
          return WalkResult::interrupt();
        }
        gather.setOffsetAttr(builder.getI64IntegerAttr(it->second));
        return WalkResult::advance();
      });
      if (result.wasInterrupted())
        return signalPassFailure();
    }
  }
};

} // namespace
