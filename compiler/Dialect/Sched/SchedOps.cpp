//===- SchedOps.cpp - the schedule level of cdp ---------------------------===//

#include "cdp/Dialect/Sched/SchedOps.h"

#include "cdp/Schedule/Strategy.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace cdp::sched;

#include "cdp/Dialect/Sched/SchedDialect.cpp.inc"
#include "cdp/Dialect/Sched/SchedEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "cdp/Dialect/Sched/SchedAttrs.cpp.inc"

void SchedDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "cdp/Dialect/Sched/SchedAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "cdp/Dialect/Sched/SchedOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// #sched.strategy<"name">
//===----------------------------------------------------------------------===//

Attribute StrategyAttr::parse(AsmParser &parser, Type) {
  std::string name;
  SMLoc at = parser.getCurrentLocation();
  if (parser.parseLess() || parser.parseString(&name) || parser.parseGreater())
    return {};
  std::optional<cdp::Strategy> strategy = cdp::parseStrategy(name);
  if (!strategy) {
    parser.emitError(at, "'") << name << "' is not a strategy ("
                              << cdp::strategyNames(nullptr, " or ") << ")";
    return {};
  }
  return StrategyAttr::get(parser.getContext(), *strategy);
}

void StrategyAttr::print(AsmPrinter &printer) const {
  printer << "<\"" << cdp::strategyName(getValue()) << "\">";
}

StrategyAttr StrategyAttr::ofModule(ModuleOp module) {
  auto strategy = module->getAttrOfType<StrategyAttr>("sched.strategy");
  if (!strategy)
    module.emitError("the module names no strategy (sched.strategy); run "
                     "cdp-set-strategy first");
  return strategy;
}

//===----------------------------------------------------------------------===//
// Verifiers
//===----------------------------------------------------------------------===//

LogicalResult StepProgramOp::verify() {
  if (getStages() < 1 || getMicroBatches() < 1 || getCycle() < 1)
    return emitOpError("stages, micro_batches and cycle must be positive");
  if (getWeightVersions() != 1 && getWeightVersions() != 2)
    return emitOpError("weight_versions must be 1 or 2, got ")
           << getWeightVersions();
  // Devices are numbered in order (a device running several stages has
  // one sched.stage_device per stage, next to each other); every peer a
  // device names is one of them.
  int64_t replicas = getReplicaCount();
  if (replicas < 1)
    return emitOpError("replicas must be positive, got ") << replicas;
  int64_t devices = 0;
  for (Operation &op : getBody().front()) {
    std::optional<int64_t> index;
    if (auto device = dyn_cast<StageDeviceOp>(op)) {
      if (replicas > 1 && device.getReplica() != 0)
        return op.emitOpError("spells replica ")
               << device.getReplica() << " in a program of " << replicas
               << " alike replicas (only the first is spelled)";
      index = device.getIndex();
    }
    if (auto device = dyn_cast<SlotDeviceOp>(op))
      index = device.getIndex();
    if (!index)
      continue;
    bool sameDevice =
        isa<StageDeviceOp>(op) && devices > 0 && *index == devices - 1;
    if (!sameDevice && *index != devices)
      return op.emitOpError("has index ")
             << *index << " where " << devices
             << " is expected (devices are numbered in order)";
    devices = *index + 1;
  }
  // Peers may name any replica's device.
  devices *= replicas;
  WalkResult peers = walk([&](Operation *op) {
    auto check = [&](int64_t peer) {
      if (peer >= 0 && peer < devices)
        return WalkResult::advance();
      op->emitOpError("names device ")
          << peer << "; the program has " << devices;
      return WalkResult::interrupt();
    };
    return llvm::TypeSwitch<Operation *, WalkResult>(op)
        .Case([&](ParamSendOp send) { return check(send.getTo()); })
        .Case([&](ParamRecvOp recv) { return check(recv.getFrom()); })
        .Case([&](ParamRefreshOp refresh) { return check(refresh.getFrom()); })
        .Case([&](ExchangeGradientsOp exchange) {
          for (int64_t peer : exchange.getPeers())
            if (check(peer).wasInterrupted())
              return WalkResult::interrupt();
          return WalkResult::advance();
        })
        .Default([](Operation *) { return WalkResult::advance(); });
  });
  return failure(peers.wasInterrupted());
}

LogicalResult StageDeviceOp::verify() {
  auto program = cast<StepProgramOp>((*this)->getParentOp());
  if (getStage() < 1 || getStage() > program.getStages())
    return emitOpError("runs stage ")
           << getStage() << " of a program with " << program.getStages();
  if (getSlots() < 1)
    return emitOpError("needs at least one stash slot");
  llvm::DenseSet<int64_t> seen;
  for (int64_t j : getMicroBatches())
    if (j < 0 || j >= program.getMicroBatches() || !seen.insert(j).second)
      return emitOpError("lists micro-batch ")
             << j << " twice or outside 0.." << program.getMicroBatches() - 1;
  return success();
}

namespace {

/// The checks every op of a device's program shares.
template <typename StepOp> LogicalResult verifyStep(StepOp op) {
  if (op.getStep() != 0 && op.getStep() != -1)
    return op.emitOpError(
               "step must be 0 (this step) or -1 (the previous step), got ")
           << op.getStep();
  if (op.getTimeStep() < 0)
    return op.emitOpError("has a negative time_step");
  return success();
}

StageDeviceOp deviceOf(Operation *op) {
  return cast<StageDeviceOp>(op->getParentOp());
}

StepProgramOp programOf(Operation *op) {
  return cast<StepProgramOp>(deviceOf(op)->getParentOp());
}

/// A parameter message names another device.
template <typename MessageOp>
LogicalResult verifyPeer(MessageOp op, int64_t peer) {
  if (peer == deviceOf(op).getIndex())
    return op.emitOpError("names its own device as the peer");
  return verifyStep(op);
}

} // namespace

LogicalResult ComputeOp::verify() {
  StageDeviceOp device = deviceOf(*this);
  int64_t count = device.getMicroBatches().size();
  if (getMicroBatch() < 0 || getMicroBatch() >= count)
    return emitOpError("runs micro-batch ")
           << getMicroBatch() << " of a device that has " << count;
  if (getSlot() < 0 || getSlot() >= device.getSlots())
    return emitOpError("uses stash slot ")
           << getSlot() << " of a device that has " << device.getSlots();
  bool previous = getVersion() == Version::Previous ||
                  (getTiedPrevious() && !getTiedPrevious()->empty());
  if (previous && programOf(*this).getWeightVersions() < 2)
    return emitOpError("reads a previous version in a program that keeps one");
  return verifyStep(*this);
}

LogicalResult KeepPreviousOp::verify() {
  if (programOf(*this).getWeightVersions() < 2)
    return emitOpError("keeps a previous version in a program that keeps one");
  return verifyStep(*this);
}

LogicalResult ExchangeGradientsOp::verify() {
  int64_t replicas = getPeers().size();
  if (replicas < 2 || getReplica() < 0 || getReplica() >= replicas ||
      getPeers()[getReplica()] != deviceOf(*this).getIndex())
    return emitOpError("needs two or more peers with this device at "
                       "peers[replica]");
  return verifyStep(*this);
}

LogicalResult ApplyUpdateOp::verify() { return verifyStep(*this); }

LogicalResult ApplyShardUpdateOp::verify() {
  int64_t replicas = getPeers().size();
  if (replicas < 2 || getReplica() < 0 || getReplica() >= replicas ||
      getPeers()[getReplica()] != deviceOf(*this).getIndex())
    return emitOpError("needs two or more peers with this device at "
                       "peers[replica]");
  if (getParams().empty())
    return emitOpError("updates no parameter");
  return verifyStep(*this);
}

/// An exchange among the stages of a replica (clip_stages, unscale_stages):
/// one device per stage, in stage order, this device's stage among them.
template <typename StagesOp> LogicalResult verifyStages(StagesOp op) {
  ArrayRef<int64_t> stages = op.getStages(), devices = op.getDevices();
  auto program = cast<StepProgramOp>(op->getParentOp()->getParentOp());
  int64_t own = deviceOf(op).getStage();
  if (stages.size() != devices.size() || !llvm::is_sorted(stages) ||
      !llvm::is_contained(stages, own))
    return op.emitOpError("needs one device per stage, the stages in order "
                          "and this device's stage among them");
  for (int64_t s : stages)
    if (s < 1 || s > program.getStages())
      return op.emitOpError("names stage ")
             << s << " of a program with " << program.getStages();
  return verifyStep(op);
}

LogicalResult ClipStagesOp::verify() { return verifyStages(*this); }

LogicalResult UnscaleStagesOp::verify() { return verifyStages(*this); }

LogicalResult ParamSendOp::verify() { return verifyPeer(*this, getTo()); }

LogicalResult ParamRecvOp::verify() { return verifyPeer(*this, getFrom()); }

LogicalResult SlotComputeOp::verify() {
  auto program = cast<StepProgramOp>((*this)->getParentOp()->getParentOp());
  if (getStage() < 1 || getStage() > program.getStages())
    return emitOpError("runs stage ")
           << getStage() << " of a program with " << program.getStages();
  return success();
}

LogicalResult WaitReductionOp::verify() {
  if (getDelay() < 0 || getMinStep() != 1 + getDelay())
    return emitOpError("waits from step ")
           << getMinStep() << " with delay " << getDelay()
           << "; a delay d >= 0 waits from step 1 + d";
  return success();
}

#define GET_OP_CLASSES
#include "cdp/Dialect/Sched/SchedOps.cpp.inc"
