//===- EmitPlan.cpp - cdp IR to the plan artefact -------------------------===//
//
// One plan tensor per SSA value of @main, one instruction per op, in op
// order (the single-device schedule). The forward slice that computes the
// model's first output is emitted again as the evaluation stream, with
// BatchNorm on running statistics and dropout off.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/EmitPlan.h"

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/FirstFit.h"
#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Sched/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

#include <array>
#include <functional>
#include <set>
#include <unordered_map>

using namespace mlir;

namespace cdp {

namespace {

plan::DType dtypeOf(Type element) {
  if (element.isF32())
    return plan::F32;
  return element.isInteger(1) ? plan::BOOL : plan::I64;
}

/// The bytes of an elements attribute, row-major, little-endian.
FailureOr<std::string> elementsBytes(ElementsAttr attr) {
  std::string bytes;
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(attr)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob)
      return failure();
    ArrayRef<char> data = blob->getData();
    return std::string(data.begin(), data.end());
  }
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense)
    return failure();
  Type element = dense.getElementType();
  if (element.isF32())
    for (float v : dense.getValues<float>())
      bytes.append(reinterpret_cast<const char *>(&v), sizeof(v));
  else if (element.isInteger(64))
    for (int64_t v : dense.getValues<int64_t>())
      bytes.append(reinterpret_cast<const char *>(&v), sizeof(v));
  else if (element.isInteger(1))
    for (bool v : dense.getValues<bool>())
      bytes.push_back(v ? 1 : 0);
  else
    return failure();
  return bytes;
}

std::string locationName(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  std::string text;
  llvm::raw_string_ostream os(text);
  loc.print(os);
  return text;
}

class Emitter {
public:
  Emitter(func::FuncOp func, plan::Plan &plan) : func(func), plan(plan) {}

  LogicalResult run(const EmitOptions &options);

private:
  int addTensor(Value value, plan::TensorKind kind, StringRef name);
  LogicalResult addInstruction(Operation *op, plan::Device &device,
                               bool forEval);
  LogicalResult emitDataParallel(DictionaryAttr schedule, int64_t arenaBytes);
  LogicalResult
  placeParameters(Block &body,
                  const std::function<int64_t(Operation *)> &stageOf,
                  llvm::MapVector<Value, int64_t> &paramStage,
                  llvm::MapVector<Value, std::set<int64_t>> &replicas);
  void insertChainRelay(plan::Device &device, int64_t j, int64_t N, int64_t L,
                        int64_t l, ArrayRef<int64_t> offsets,
                        const std::array<int, 2> &buffers);
  void accumulateMicroBatches(plan::Device &device, int64_t slots);
  LogicalResult emitPipeline(const EmitOptions &options, int64_t arenaBytes);
  LogicalResult convertAttribute(Operation *op, NamedAttribute attribute,
                                 plan::Attribute &out);
  const std::string &locationOf(Operation *op);

  func::FuncOp func;
  plan::Plan &plan;
  llvm::DenseMap<Value, int> ids;
  /// Training instructions as first built, per op: pipelines emit every
  /// op once per micro-batch, and copying beats converting it again.
  llvm::DenseMap<Operation *, std::unique_ptr<plan::Instruction>> prototypes;
  llvm::DenseMap<Operation *, std::string> locations;
};

const std::string &Emitter::locationOf(Operation *op) {
  auto [it, inserted] = locations.try_emplace(op);
  if (inserted)
    it->second = locationName(op->getLoc());
  return it->second;
}

int Emitter::addTensor(Value value, plan::TensorKind kind, StringRef name) {
  auto type = cast<RankedTensorType>(value.getType());
  int id = plan.tensors_size();
  plan::Tensor *tensor = plan.add_tensors();
  tensor->set_id(id);
  tensor->set_name(name.str());
  tensor->set_dtype(dtypeOf(type.getElementType()));
  for (int64_t dim : type.getShape())
    tensor->add_shape(dim);
  tensor->set_kind(kind);
  tensor->set_bytes(type.getNumElements() * plan::dtypeSize(tensor->dtype()));
  tensor->set_batch_axis(-1);
  ids[value] = id;
  return id;
}

LogicalResult Emitter::convertAttribute(Operation *op, NamedAttribute attribute,
                                        plan::Attribute &out) {
  out.set_name(attribute.getName().str());
  Attribute value = attribute.getValue();
  if (auto boolean = dyn_cast<BoolAttr>(value))
    out.set_i(boolean.getValue());
  else if (auto integer = dyn_cast<IntegerAttr>(value))
    out.set_i(integer.getInt());
  else if (auto real = dyn_cast<FloatAttr>(value))
    out.set_f(real.getValueAsDouble());
  else if (auto text = dyn_cast<StringAttr>(value))
    out.set_s(text.str());
  else if (auto ints = dyn_cast<DenseI64ArrayAttr>(value))
    for (int64_t v : ints.asArrayRef())
      out.mutable_ints()->add_values(v);
  else if (auto reals = dyn_cast<DenseF32ArrayAttr>(value))
    for (float v : reals.asArrayRef())
      out.mutable_floats()->add_values(v);
  else if (auto type = dyn_cast<TypeAttr>(value))
    out.set_type(dtypeOf(type.getValue()));
  else if (auto elements = dyn_cast<ElementsAttr>(value)) {
    FailureOr<std::string> bytes = elementsBytes(elements);
    if (failed(bytes))
      return op->emitOpError("attribute '")
             << attribute.getName() << "' has data the plan cannot hold";
    plan::Tensor *tensor = out.mutable_tensor();
    tensor->set_dtype(dtypeOf(elements.getElementType()));
    for (int64_t dim : elements.getShapedType().getShape())
      tensor->add_shape(dim);
    tensor->set_data(*bytes);
  } else
    return op->emitOpError("attribute '")
           << attribute.getName() << "' has a kind the plan cannot hold";
  return success();
}

LogicalResult Emitter::addInstruction(Operation *op, plan::Device &device,
                                      bool forEval) {
  plan::Instruction *instruction =
      forEval ? device.add_eval_instructions() : device.add_instructions();
  if (!forEval) {
    auto it = prototypes.find(op);
    if (it != prototypes.end()) {
      *instruction = *it->second;
      instruction->set_time_step(device.instructions_size() - 1);
      return success();
    }
  }
  instruction->set_op(op->getName().stripDialect().str());
  instruction->set_location(locationOf(op));
  if (auto stage = op->getAttrOfType<IntegerAttr>("cdp.stage"))
    instruction->set_stage(stage.getInt());
  auto phase = op->getAttrOfType<StringAttr>("cdp.phase");
  instruction->set_phase(phase ? phase.str() : "forward");
  instruction->set_time_step(device.instructions_size() - 1);
  for (Value operand : op->getOperands())
    instruction->add_inputs(ids.lookup(operand));
  for (Value result : op->getResults())
    instruction->add_outputs(ids.lookup(result));
  for (NamedAttribute attribute : op->getAttrs()) {
    if (attribute.getName().getValue().starts_with("cdp."))
      continue;
    plan::Attribute *out = instruction->add_attributes();
    if (failed(convertAttribute(op, attribute, *out)))
      return failure();
    // Evaluation uses running statistics and no dropout.
    if (forEval && attribute.getName() == "training_mode")
      out->set_i(0);
  }
  if (!forEval)
    prototypes[op] = std::make_unique<plan::Instruction>(*instruction);
  return success();
}

LogicalResult Emitter::run(const EmitOptions &options) {
  auto arena = func->getAttrOfType<IntegerAttr>("cdp.arena_bytes");
  if (!arena)
    return func.emitError("no memory plan; run cdp-plan-memory first");
  plan.set_producer("cdp-compile");
  plan.set_strategy(traitsOf(options.strategy).name);
  plan.set_inference(options.inference);
  plan.set_source_name(options.sourceName);
  plan.set_source_model(options.sourceModel);
  plan.set_optimizer(options.optimizer);
  plan.set_micro_batches(1);
  plan.set_loss(-1);
  plan.set_labels(-1);
  plan.set_scores(-1);
  plan::Device *device = plan.add_devices();
  device->set_index(0);
  device->set_arena_bytes(arena.getInt());

  for (BlockArgument arg : func.getArguments()) {
    auto name =
        func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "cdp.name");
    int id = addTensor(arg, plan::INPUT, name ? name.getValue() : "");
    plan::Tensor *tensor = plan.mutable_tensors(id);
    auto offset =
        func.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(), "cdp.offset");
    tensor->set_offset(offset ? offset.getInt() : 0);
    if (auto axis = func.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                                       "cdp.batch_axis"))
      tensor->set_batch_axis(axis.getInt());
    plan.add_inputs(id);
  }
  if (auto labels = func->getAttrOfType<IntegerAttr>("cdp.labels_index"))
    plan.set_labels(ids.lookup(func.getArgument(labels.getInt())));

  Block &body = func.getBody().front();
  llvm::DenseSet<StringRef> trainable;
  body.walk([&](GradientOp gradient) {
    trainable.insert(gradient.getName());
    plan.add_gradients(gradient.getName().str());
  });
  for (Operation &op : body.without_terminator()) {
    if (auto param = dyn_cast<ParamOp>(op)) {
      int id = addTensor(param, param.getBuffer() ? plan::BUFFER : plan::PARAM,
                         param.getName());
      plan::Tensor *tensor = plan.mutable_tensors(id);
      tensor->set_trainable(trainable.contains(param.getName()));
      if (std::optional<ElementsAttr> value = param.getValue()) {
        FailureOr<std::string> bytes = elementsBytes(*value);
        if (failed(bytes))
          return param.emitOpError("has data the plan cannot hold");
        tensor->set_data(*bytes);
      }
      continue;
    }
    if (auto constant = dyn_cast<ConstantOp>(op)) {
      int id = addTensor(constant, plan::CONSTANT, "");
      FailureOr<std::string> bytes = elementsBytes(constant.getValue());
      if (failed(bytes))
        return constant.emitOpError("has data the plan cannot hold");
      plan.mutable_tensors(id)->set_data(*bytes);
      continue;
    }
    auto offsets = op.getAttrOfType<DenseI64ArrayAttr>("cdp.offsets");
    if (op.getNumResults() &&
        (!offsets || offsets.size() != op.getNumResults()))
      return op.emitOpError("has no memory plan; run cdp-plan-memory first");
    for (auto [i, result] : llvm::enumerate(op.getResults())) {
      int id = addTensor(result, plan::ACTIVATION, "");
      plan.mutable_tensors(id)->set_offset(offsets[i]);
    }
    if (failed(addInstruction(&op, *device, /*forEval=*/false)))
      return failure();
  }

  auto returnOp = cast<func::ReturnOp>(body.getTerminator());
  for (auto [i, value] : llvm::enumerate(returnOp.getOperands())) {
    auto name = func.getResultAttrOfType<StringAttr>(i, "cdp.name");
    plan::Output *output = plan.add_outputs();
    output->set_name(name ? name.str() : "output" + std::to_string(i));
    output->set_tensor(ids.lookup(value));
    plan::Tensor *tensor = plan.mutable_tensors(ids.lookup(value));
    if (tensor->name().empty())
      tensor->set_name(output->name());
    output->set_batch_axis(
        cast<RankedTensorType>(value.getType()).getRank() ? 0 : -1);
  }
  if (auto loss = func->getAttrOfType<IntegerAttr>("cdp.loss_index"))
    plan.set_loss(ids.lookup(returnOp.getOperand(loss.getInt())));

  if (traitsOf(options.strategy).pipelined) {
    if (failed(emitPipeline(options, arena.getInt())))
      return failure();
    std::string hang = plan::findSendRecvDeadlock(plan);
    if (!hang.empty())
      return func.emitError(hang);
    device = plan.mutable_devices(0); // the devices were rebuilt
  } else if (auto schedule =
                 func->getAttrOfType<DictionaryAttr>("cdp.schedule")) {
    if (failed(emitDataParallel(schedule, arena.getInt())))
      return failure();
    device = plan.mutable_devices(0); // the devices were rebuilt
  } else {
    // One device, one stage: the forward is time step 0 of a step, the
    // backward and the updates time step 1 (cycle 2L = 2).
    plan::Schedule *single = plan.mutable_schedule();
    single->set_stages(1);
    single->set_cycle(options.inference ? 1 : 2);
    single->add_offsets(0);
    single->set_rule(options.inference ? "inference" : "single");
    int64_t paramBytes = 0;
    for (const plan::Tensor &t : plan.tensors())
      if (t.kind() == plan::PARAM && t.trainable())
        paramBytes += t.bytes();
    single->add_stage_param_bytes(paramBytes);
    for (plan::Instruction &instruction : *device->mutable_instructions()) {
      instruction.set_time_step(instruction.phase() == "forward" ? 0 : 1);
      instruction.set_stage(1);
    }
    if (options.microBatches > 1 && !options.inference)
      accumulateMicroBatches(*device, options.microBatches);
  }

  // The evaluation stream: what the first output needs, in op order.
  if (returnOp.getNumOperands() > 0) {
    Value scores = returnOp.getOperand(0);
    plan.set_scores(ids.lookup(scores));
    llvm::DenseSet<Operation *> needed;
    SmallVector<Value> work{scores};
    while (!work.empty()) {
      Operation *producer = work.pop_back_val().getDefiningOp();
      if (!producer || !needed.insert(producer).second)
        continue;
      for (Value operand : producer->getOperands())
        work.push_back(operand);
    }
    for (Operation &op : body.without_terminator())
      if (needed.contains(&op) && !isa<ParamOp, ConstantOp>(op))
        if (failed(addInstruction(&op, *device, /*forEval=*/true)))
          return failure();
  }
  return success();
}

/// single with M micro-batches: every slot runs forward and backward and
/// adds its gradients, scaled by 1/M, into an accumulator; the updates read
/// the accumulators and run for the step's last slot only.
void Emitter::accumulateMicroBatches(plan::Device &device, int64_t slots) {
  plan.set_micro_batches(slots);
  llvm::StringMap<int> accumulator;
  google::protobuf::RepeatedPtrField<plan::Instruction> rebuilt;
  plan.clear_applied_gradients();
  for (const plan::Instruction &instruction : device.instructions()) {
    *rebuilt.Add() = instruction;
    if (instruction.op() == "gradient") {
      std::string name;
      for (const plan::Attribute &a : instruction.attributes())
        if (a.name() == "name")
          name = a.s();
      plan::Tensor sum = plan.tensors(instruction.inputs(0));
      sum.set_id(plan.tensors_size());
      sum.set_kind(plan::REDUCED);
      sum.set_name(name);
      *plan.add_tensors() = sum;
      accumulator[name] = sum.id();
      plan::Instruction *add = rebuilt.Add();
      add->set_op("accumulate");
      add->set_location(name);
      add->set_phase("backward");
      add->set_stage(instruction.stage());
      add->set_time_step(instruction.time_step());
      add->add_inputs(instruction.inputs(0));
      add->add_outputs(sum.id());
      plan::Attribute *a = add->add_attributes();
      a->set_name("slots");
      a->set_i(slots);
    }
  }
  for (plan::Instruction &instruction : rebuilt)
    if (instruction.op() == "update") {
      for (const plan::Attribute &a : instruction.attributes())
        if (a.name() == "name")
          instruction.set_inputs(1, accumulator.lookup(a.s()));
      instruction.set_last_slot(true);
    }
  for (const std::string &name : plan.gradients())
    plan.add_applied_gradients(accumulator.lookup(name));
  *device.mutable_instructions() = rebuilt;
}

/// gpipe and 1f1b: device s runs stage s. Every micro-batch of a step gets
/// its own copy of the stage's tensors, in stash slots reused round-robin
/// (m for gpipe, d - s + 1 for 1f1b); values crossing a cut travel by send
/// and recv; graph inputs are loaded where a stage reads them; parameter
/// gradients and the loss are accumulated over the step's micro-batches,
/// and the updates run after the step's last backward.
/// One piece of a stage device's program for one step.
struct ProgramEntry {
  char kind;          ///< 'F', 'B' or 'U' (the update)
  int64_t k;          ///< micro-batch within its step (the device's k-th)
  int64_t stepRel;    ///< 0: this step's; -1: the previous step's
  int64_t time;       ///< time step within the program
  bool readsPrevious; ///< 2bw, cdp-mp: reads the previous weight version
};

/// cdp-mp's freshness: whether slot j's F at stage s comes after the
/// stage's update, and whether it reads the new version (never under v1;
/// under v2 after the update (timing table) or where s >= L - j (code
/// table, which cdp-compile lets through only where that is after the
/// update too)).
struct CyclicTable {
  int64_t S = 1, MB = 1;
  bool v2 = false, codeTable = false;
  int64_t slotStart(int64_t j) const {
    return pipeline::cdpSlotStart(j, S, MB);
  }
  bool afterUpdate(int64_t j, int64_t s) const {
    return pipeline::cdpFresh(false, j, s, S, slotStart(j), slotStart(MB - 1));
  }
  bool fresh(int64_t j, int64_t s) const {
    return v2 && pipeline::cdpFresh(codeTable, j, s, S, slotStart(j),
                                    slotStart(MB - 1));
  }
};

/// cdp-mp: the stage's ops of one step in CDP's time order: slot j starts
/// at floor(2L·j / N), its F at stage s comes at that + s - 1 and its B at
/// that + 2L - s; a step's program is the window [s - 1, 2L + s - 1) of the
/// stage's clock, so a B past it runs in the next step's program (stepRel
/// -1). The update of step t - 1's gradients follows the last slot's B.
std::vector<ProgramEntry> cyclicProgram(int64_t s, int64_t S, int64_t MB,
                                        const std::vector<int64_t> &mine,
                                        const CyclicTable &table) {
  std::vector<ProgramEntry> entries;
  int64_t windowEnd = 2 * S + s - 1;
  for (int64_t k = 0; k < static_cast<int64_t>(mine.size()); ++k) {
    int64_t start = table.slotStart(mine[k]);
    int64_t forward = start + s - 1, backward = start + 2 * S - s;
    // A stale slot reads the step's stale version (the latest before the
    // update, the previous after it), a fresh one the new one; its B reads
    // what its F read.
    bool fresh = table.fresh(mine[k], s);
    entries.push_back(
        {'F', k, 0, 2 * forward, table.afterUpdate(mine[k], s) && !fresh});
    bool late = backward >= windowEnd;
    entries.push_back({'B', k, late ? -1 : 0,
                       2 * (late ? backward - 2 * S : backward), !fresh});
  }
  // Half a time step after the last slot's B (times doubled above).
  int64_t update = 2 * (table.slotStart(MB - 1) - s) + 1;
  bool sameStep = update < 2 * (s - 1);
  entries.push_back(
      {'U', 0, sameStep ? 0 : -1, sameStep ? update + 4 * S : update, false});
  std::stable_sort(entries.begin(), entries.end(),
                   [](const ProgramEntry &a, const ProgramEntry &b) {
                     return a.time < b.time;
                   });
  for (ProgramEntry &entry : entries)
    entry.time /= 2; // back to whole time steps
  return entries;
}

/// 2bw: the steady state of 1F1B without a flush, one backward and one
/// forward per time step pair, so a step's program starts with the
/// previous step's last backwards.
std::vector<ProgramEntry> twoBwProgram(int64_t s, int64_t S, int64_t M) {
  std::vector<ProgramEntry> entries;
  int64_t warmup = std::min(S - s + 1, M);
  bool updated = false;
  for (int64_t i = 0; i < M; ++i) {
    if (i < warmup)
      entries.push_back({'B', i - warmup + M, -1, 2 * i, false});
    else
      entries.push_back({'B', i - warmup, 0, 2 * i, true});
    if (i == warmup - 1) {
      entries.push_back({'U', 0, -1, entries.back().time, false});
      updated = true;
    }
    entries.push_back({'F', i, 0, 2 * i + 1, updated});
  }
  // Before the update the previous version is W(t - 2) for the previous
  // step's backwards; after it, W(t - 1) for this step's.
  for (ProgramEntry &entry : entries)
    if (entry.kind == 'B' && entry.stepRel == -1)
      entry.readsPrevious = true;
  return entries;
}

/// gpipe and 1f1b: the stage order, at its timing.
std::vector<ProgramEntry>
flushProgram(const std::vector<pipeline::StageOp> &order,
             const std::vector<int64_t> &times) {
  std::vector<ProgramEntry> entries;
  for (size_t i = 0; i < order.size(); ++i)
    entries.push_back(
        {order[i].kind, order[i].microBatch - 1, 0, times[i], false});
  return entries;
}

/// Which devices run each stage, and which micro-batches each runs.
struct DevicePlacement {
  /// placement[s][r]: the step's micro-batches (numbered over all
  /// replicas) stage s's r-th device runs, in order.
  std::vector<std::vector<std::vector<int64_t>>> placement;
  /// deviceAt[s][r]: the number of stage s's r-th device; runs[s][j]: the
  /// device running micro-batch j at stage s.
  std::vector<std::vector<int64_t>> deviceAt, runs;
  int64_t mostReplicas = 0, deviceCount = 0;
};

/// gpipe, 1f1b and 2bw: one device per stage and replica, replica r
/// running r·M .. r·M+M-1; cdp-mp: as many devices per stage as CDP's slots
/// need there. Devices are numbered replica-major, so stage s's first is
/// s - 1.
DevicePlacement placeMicroBatches(bool cyclic, int64_t S, int64_t M, int64_t R,
                                  int64_t MB) {
  DevicePlacement layout;
  auto &placement = layout.placement;
  placement.resize(S + 1);
  for (int64_t s = 1; s <= S; ++s) {
    if (cyclic) {
      std::vector<int64_t> device = pipeline::cdpStageDevices(s, S, MB);
      for (int64_t j = 0; j < MB; ++j) {
        if (device[j] >= static_cast<int64_t>(placement[s].size()))
          placement[s].resize(device[j] + 1);
        placement[s][device[j]].push_back(j);
      }
      continue;
    }
    placement[s].resize(R);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t k = 0; k < M; ++k)
        placement[s][r].push_back(r * M + k);
  }
  for (int64_t s = 1; s <= S; ++s)
    layout.mostReplicas =
        std::max<int64_t>(layout.mostReplicas, placement[s].size());
  layout.deviceAt.resize(S + 1);
  layout.runs.assign(S + 1, std::vector<int64_t>(MB, -1));
  for (int64_t r = 0; r < layout.mostReplicas; ++r)
    for (int64_t s = 1; s <= S; ++s)
      if (r < static_cast<int64_t>(placement[s].size())) {
        layout.deviceAt[s].push_back(layout.deviceCount);
        for (int64_t j : placement[s][r])
          layout.runs[s][j] = layout.deviceCount;
        ++layout.deviceCount;
      }
  return layout;
}

/// Parameters live on the device of the stage that updates them (the stage
/// of their gradient: their first user's). A trained parameter used on
/// other stages too (tied weights) is replicated there: its gradient
/// contributions travel to the owner like any value across a cut, are
/// summed there, and the owner sends the updated value to every replica
/// after each step's update. Fills `paramStage` (owner stage by value) and
/// `replicas` (the other stages using a tied weight).
LogicalResult
Emitter::placeParameters(Block &body,
                         const std::function<int64_t(Operation *)> &stageOf,
                         llvm::MapVector<Value, int64_t> &paramStage,
                         llvm::MapVector<Value, std::set<int64_t>> &replicas) {
  body.walk([&](UpdateOp update) {
    paramStage[update.getParam()] = stageOf(update);
  });
  for (Operation &op : body.without_terminator()) {
    if (isa<ParamOp, ConstantOp, UpdateOp, GradientOp>(op))
      continue;
    for (Value operand : op.getOperands())
      if (auto param = operand.getDefiningOp<ParamOp>()) {
        // Frozen initializers (shapes, masks) are copied to every device.
        const plan::Tensor &t = plan.tensors(ids.lookup(operand));
        if (t.kind() == plan::PARAM && !t.trainable())
          continue;
        auto [it, inserted] = paramStage.try_emplace(operand, stageOf(&op));
        if (inserted || it->second == stageOf(&op))
          continue;
        if (t.kind() != plan::PARAM)
          return param.emitOpError("'")
                 << param.getName() << "' is used by stages " << it->second
                 << " and " << stageOf(&op)
                 << "; buffers shared across pipeline stages are not "
                    "supported (cut elsewhere with --stage-boundaries)";
        replicas[operand].insert(stageOf(&op));
      }
  }
  return success();
}

LogicalResult Emitter::emitPipeline(const EmitOptions &options,
                                    int64_t arenaBytes) {
  const Strategy strategy = options.strategy;
  const StrategyTraits &traits = traitsOf(strategy);
  int64_t M = options.microBatches, R = options.replicas;
  int64_t MB = M * R; // micro-batches of a step over all replicas
  auto stagesAttr = func->getAttrOfType<IntegerAttr>("cdp.stages");
  if (!stagesAttr)
    return func.emitError("no stages; run cdp-partition-stages first");
  int64_t S = stagesAttr.getInt();
  Block &body = func.getBody().front();
  std::function<int64_t(Operation *)> stageOf = [&](Operation *op) {
    if (auto stage = op->getAttrOfType<IntegerAttr>("cdp.stage"))
      return stage.getInt();
    // A buffer assignment runs where its new value is computed.
    if (auto assign = dyn_cast<AssignOp>(op))
      if (Operation *producer = assign.getValue().getDefiningOp())
        return stageOf(producer);
    return S;
  };
  auto isBackward = [](Operation *op) {
    auto phase = op->getAttrOfType<StringAttr>("cdp.phase");
    return phase && phase.getValue() == "backward";
  };
  std::vector<std::vector<Operation *>> forwardOps(S + 1), backwardOps(S + 1);
  llvm::DenseMap<int64_t, SmallVector<UpdateOp>> updates;
  for (Operation &op : body.without_terminator()) {
    if (isa<ParamOp, ConstantOp>(op))
      continue;
    if (auto update = dyn_cast<UpdateOp>(op)) {
      updates[stageOf(&op)].push_back(update);
      continue;
    }
    (isBackward(&op) ? backwardOps : forwardOps)[stageOf(&op)].push_back(&op);
  }
  // MapVectors: iterated in IR order, so that a compile is deterministic
  // (the ids of version copies, the order of tied-weight messages).
  llvm::MapVector<Value, int64_t> paramStage;
  llvm::MapVector<Value, std::set<int64_t>> replicas;
  if (failed(placeParameters(body, stageOf, paramStage, replicas)))
    return failure();
  for (auto &[value, stage] : paramStage)
    plan.mutable_tensors(ids.lookup(value))->set_device(stage - 1);
  bool twoVersions = traits.weightVersions == 2;
  // The owner stage of every replicated (tied) weight, by tensor id.
  llvm::DenseMap<int, int64_t> tiedOwner;
  for (auto &[value, stages] : replicas)
    tiedOwner[ids.lookup(value)] = paramStage.lookup(value);

  plan.set_strategy(traits.name);
  plan.set_micro_batches(MB);
  std::vector<std::vector<pipeline::StageOp>> orders;
  for (int64_t s = 1; s <= S; ++s)
    orders.push_back(pipeline::stageOrder(strategy, s, S, M, 1));
  std::vector<std::vector<int64_t>> at = pipeline::timing(orders);
  int64_t cycle = 0;
  for (size_t s = 0; s < at.size(); ++s)
    for (size_t i = 0; i < at[s].size(); ++i)
      cycle = std::max(cycle, at[s][i] + (orders[s][i].kind == 'U' ? 0 : 1));
  // 2bw's steady state: each step's program alternates M backwards and M
  // forwards, one time step each.
  // cdp-mp: CDP's cycle of 2L time steps, slots at CDP's offsets.
  bool cdpSlots = traits.cyclic;
  if (strategy == Strategy::TwoBW)
    cycle = 2 * M;
  if (cdpSlots)
    cycle = 2 * S;
  DevicePlacement layout = placeMicroBatches(cdpSlots, S, M, R, MB);
  const auto &placement = layout.placement;
  const std::vector<std::vector<int64_t>> &deviceAt = layout.deviceAt,
                                          &runs = layout.runs;
  int64_t mostReplicas = layout.mostReplicas, deviceCount = layout.deviceCount;
  plan::Schedule *schedule = plan.mutable_schedule();
  schedule->set_stages(S);
  schedule->set_cycle(cycle);
  std::vector<int64_t> stageBytes(S, 0);
  for (auto &[value, stage] : paramStage) {
    const plan::Tensor &t = plan.tensors(ids.lookup(value));
    if (t.kind() == plan::PARAM && t.trainable())
      stageBytes[stage - 1] += t.bytes();
  }
  for (int64_t bytes : stageBytes)
    schedule->add_stage_param_bytes(bytes);
  schedule->set_rule(traits.name);
  for (int64_t d = 0; d < deviceCount; ++d)
    schedule->add_offsets(0);
  // cdp-mp: slot j starts at floor(2L·j / N); its F at stage s comes after
  // the stage's update when 2s - 1 > s_{N-1} - s_j (CDP-v2's timing
  // table). A fresh slot reads the new version: never under v1; under v2
  // after the update (timing table) or where s >= L - j (code table, which
  // cdp-compile lets through only where that is after the update too).
  CyclicTable cdpTable{S, MB, options.cdpRule == "v2",
                       options.v2Table == "code"};
  if (cdpSlots) {
    // The version table the run follows, as for cdp: slot j reads
    // θ_{t - version_delay[j][s-1]} at stage s.
    schedule->set_rule(options.cdpRule);
    for (int64_t j = 0; j < MB; ++j) {
      plan::Ints *delays = schedule->add_version_delay();
      for (int64_t s = 1; s <= S; ++s)
        delays->add_values(cdpTable.fresh(j, s) ? 0 : 1);
    }
    for (int64_t s = 1; s <= S; ++s)
      schedule->add_live_versions(2);
    // A tied weight's replica can give a forward the owner's new version
    // only after its own stage's update (see readsPrevious below).
    for (auto &[value, stages] : replicas)
      for (int64_t q : stages)
        for (int64_t j = 0; j < MB; ++j)
          if (cdpTable.fresh(j, paramStage.lookup(value)) &&
              !cdpTable.afterUpdate(j, q))
            return func.emitError("cdp-mp: micro-batch ")
                   << j << " reads the new version of a weight tied across "
                   << "stages " << paramStage.lookup(value) << " and " << q
                   << " on the first before stage " << q
                   << " can have it; use --cdp-rule v1 or cut elsewhere";
  }

  // Persistent accumulators: one per trained parameter, one for the loss.
  llvm::StringMap<int> accumulator;
  auto addAccumulator = [&](int like, const std::string &name, int device) {
    plan::Tensor t = plan.tensors(like);
    t.set_id(plan.tensors_size());
    t.set_kind(plan::REDUCED);
    t.set_name(name);
    t.clear_data();
    t.set_trainable(false);
    t.set_device(device);
    *plan.add_tensors() = t;
    return t.id();
  };
  llvm::StringMap<int64_t> gradientStage;
  body.walk([&](GradientOp gradient) {
    gradientStage[gradient.getName()] = stageOf(gradient);
  });
  plan.clear_applied_gradients();
  for (const std::string &name : plan.gradients()) {
    int param = -1;
    for (const plan::Tensor &t : plan.tensors())
      if (t.kind() == plan::PARAM && t.name() == name)
        param = t.id();
    accumulator[name] =
        addAccumulator(param, name, gradientStage.lookup(name) - 1);
    plan.add_applied_gradients(accumulator[name]);
  }
  int lossAccumulator = -1;
  if (plan.loss() >= 0) {
    lossAccumulator = addAccumulator(plan.loss(), "loss", S - 1);
    plan.set_loss(lossAccumulator);
    plan.set_loss_device(S - 1);
  }

  // 2bw keeps two versions of every trained parameter: the plan's tensor
  // (the latest, updated in place) and its previous value, copied just
  // before each update (docs/strategies/2bw.md).
  llvm::DenseMap<int, int> previousVersion;
  if (twoVersions)
    for (auto &[value, stage] : paramStage) {
      int id = ids.lookup(value);
      if (plan.tensors(id).kind() != plan::PARAM)
        continue;
      plan::Tensor copy = plan.tensors(id);
      copy.set_id(plan.tensors_size());
      copy.set_name(copy.name() + "@previous");
      copy.set_trainable(false);
      copy.set_previous_version_of(id);
      *plan.add_tensors() = copy;
      previousVersion[id] = copy.id();
    }

  int originalTensors = plan.tensors_size();
  auto attr = [](plan::Instruction *instruction, const char *name,
                 int64_t value) {
    plan::Attribute *a = instruction->add_attributes();
    a->set_name(name);
    a->set_i(value);
  };
  // A send or recv of tensor `id` with device `peer`; the tag names the
  // value and the micro-batch relative to the running step.
  auto message = [&](plan::Instruction *instruction, bool isSend, int id,
                     int64_t peer, int value, int64_t microBatch,
                     const std::string &location) {
    instruction->set_op(isSend ? "send" : "recv");
    instruction->set_phase("comm");
    instruction->set_location(location);
    if (isSend)
      instruction->add_inputs(id);
    else
      instruction->add_outputs(id);
    attr(instruction, "peer", peer);
    attr(instruction, "value", value);
    attr(instruction, "micro_batch", microBatch);
    attr(instruction, "micro_batches", MB);
    if (isSend)
      attr(instruction, "cycle", cycle);
    return instruction;
  };
  // Adds micro-batch `k`'s `input` into a step accumulator (1/`share`
  // each: gradients average over all replicas' micro-batches, the loss
  // over the replica's own).
  auto accumulate = [&](plan::Instruction *instruction, int input, int output,
                        const std::string &phase, const std::string &location,
                        int64_t k, int64_t share) {
    instruction->set_op("accumulate");
    instruction->set_phase(phase);
    instruction->set_location(location);
    instruction->add_inputs(input);
    instruction->add_outputs(output);
    attr(instruction, "slots", share);
    attr(instruction, "reset", k == 0);
  };
  // Replicas: every stage's gradient sums arrive from the other replicas
  // (one buffer per replica) and are added in replica order, so every
  // replica applies the same update.
  llvm::StringMap<SmallVector<int>> incoming;
  llvm::StringMap<int> replicaSum;
  if (mostReplicas > 1)
    for (const std::string &name : plan.gradients()) {
      int own = accumulator.lookup(name);
      for (int64_t r = 0; r < mostReplicas; ++r) {
        plan::Tensor t = plan.tensors(own);
        t.set_id(plan.tensors_size());
        t.set_name(name + "@replica" + std::to_string(r));
        t.clear_device();
        *plan.add_tensors() = t;
        incoming[name].push_back(t.id());
      }
      plan::Tensor sum = plan.tensors(own);
      sum.set_id(plan.tensors_size());
      sum.set_name(name + "@replicas");
      *plan.add_tensors() = sum;
      replicaSum[name] = sum.id();
    }
  int lossResult = -1;
  if (auto index = func->getAttrOfType<IntegerAttr>("cdp.loss_index"))
    lossResult = ids.lookup(
        cast<func::ReturnOp>(body.getTerminator()).getOperand(index.getInt()));
  plan.clear_devices();
  for (int64_t r = 0; r < mostReplicas; ++r)
    for (int64_t s = 1; s <= S; ++s) {
      int64_t replicasHere = placement[s].size();
      if (r >= replicasHere)
        continue;
      // This device's micro-batches (k-th: mine[k]).
      const std::vector<int64_t> &mine = placement[s][r];
      int64_t count = mine.size();
      plan::Device *device = plan.add_devices();
      int64_t self = deviceAt[s][r];
      // The device of stage q that holds the replica of a tied weight this
      // one exchanges values with.
      auto tiedPeer = [&](int64_t q) {
        return deviceAt[q][r % deviceAt[q].size()];
      };
      device->set_index(self);
      // Micro-batch k of a step uses slot k mod slots. gpipe and 1f1b
      // flush every step: the formula's count. 2bw keeps w = d - s + 1 in
      // flight, a backward possibly in the next step's program: the
      // smallest divisor of M not below w, so that k mod slots names the
      // same slot in every step and k + slots starts after k's backward.
      // cdp-mp: one slot per micro-batch of the device.
      int64_t slots = stashSlots(strategy, s, S, M);
      if (cdpSlots)
        slots = count;
      // What the stage's forward brings in (loads, receives) stays in the
      // micro-batch's slot for its backward.
      std::set<int> broughtByForward;
      for (Operation *op : forwardOps[s])
        for (Value operand : op->getOperands()) {
          Operation *producer = operand.getDefiningOp();
          if (isa<BlockArgument>(operand) ||
              (producer && !isa<ParamOp, ConstantOp>(producer) &&
               stageOf(producer) != s))
            broughtByForward.insert(ids.lookup(operand));
        }
      // Stashed: what the stage's forward makes or brings in and its
      // backward reads. Those get a copy per stash slot, packed in the
      // slot's part of the arena; everything else lives within one forward
      // or backward and gets one copy per device, after the slots
      // (forwards and backwards of one device never overlap).
      llvm::DenseSet<int> readByBackward;
      for (Operation *op : backwardOps[s])
        for (Value operand : op->getOperands())
          readByBackward.insert(ids.lookup(operand));
      llvm::DenseMap<int, int64_t> stashOffset;
      int64_t stashBytes = 0;
      auto stash = [&](int id) {
        const plan::Tensor &t = plan.tensors(id);
        if (!readByBackward.contains(id) ||
            (t.kind() != plan::ACTIVATION && t.kind() != plan::INPUT) ||
            !stashOffset.try_emplace(id, stashBytes).second)
          return;
        stashBytes += alignToArena(t.bytes());
      };
      for (Operation *op : forwardOps[s])
        for (Value result : op->getResults())
          stash(ids.lookup(result));
      for (int id : broughtByForward)
        stash(id);
      // The other tensors live within one forward or one backward: packed
      // after the slots by their live ranges over the stage's ops (forward
      // then backward; values brought in live from their first reader), as
      // cdp-plan-memory packs the one-micro-batch arena.
      llvm::DenseMap<int, size_t> rangeOf;
      std::vector<int> rangeIds;
      std::vector<LiveRange> ranges;
      int64_t position = 0;
      for (auto *ops : {&forwardOps[s], &backwardOps[s]})
        for (Operation *op : *ops) {
          for (auto values :
               {ValueRange(op->getOperands()), ValueRange(op->getResults())})
            for (Value value : values) {
              int id = ids.lookup(value);
              const plan::Tensor &t = plan.tensors(id);
              if ((t.kind() != plan::ACTIVATION && t.kind() != plan::INPUT) ||
                  stashOffset.count(id))
                continue;
              auto [it, added] = rangeOf.try_emplace(id, ranges.size());
              if (added) {
                rangeIds.push_back(id);
                ranges.push_back({position, position, t.bytes()});
              }
              ranges[it->second].end = position;
            }
          ++position;
        }
      int64_t transientBytes = 0;
      std::vector<int64_t> packed = packFirstFit(ranges, transientBytes);
      llvm::DenseMap<int, int64_t> transientOffset;
      for (size_t i = 0; i < ranges.size(); ++i)
        transientOffset[rangeIds[i]] = packed[i];
      int64_t transientBase = slots * stashBytes;
      device->set_arena_bytes(transientBase + transientBytes);
      // (slot, tensor) -> the slot's copy of a stashed tensor; (-1, tensor)
      // the device's copy of any other.
      std::unordered_map<int64_t, int> copies;
      auto mapped = [&](int64_t slot, int id) {
        if (id < 0 || id >= originalTensors)
          return id;
        const plan::Tensor &t = plan.tensors(id);
        if (t.kind() != plan::ACTIVATION && t.kind() != plan::INPUT)
          return id;
        auto stashed = stashOffset.find(id);
        if (stashed == stashOffset.end())
          slot = -1;
        int64_t key = ((slot + 1) << 32) | static_cast<uint32_t>(id);
        auto it = copies.find(key);
        if (it != copies.end())
          return it->second;
        // Elements of a repeated field keep their address when it grows.
        int copyId = plan.tensors_size();
        plan::Tensor &copy = *plan.add_tensors();
        copy = t;
        copy.set_id(copyId);
        copy.set_kind(plan::ACTIVATION);
        copy.set_offset(slot < 0 ? transientBase + transientOffset.lookup(id)
                                 : slot * stashBytes + stashed->second);
        copy.set_device(self);
        copies.emplace(key, copyId);
        return copyId;
      };

      // The device's program for one step (see stepProgram).
      std::vector<ProgramEntry> entries =
          cdpSlots      ? cyclicProgram(s, S, MB, mine, cdpTable)
          : twoVersions ? twoBwProgram(s, S, M)
                        : flushProgram(orders[s - 1], at[s - 1]);

      // Tied weights replicated here: with one version, step t > 0 starts
      // with the value the owner made at the end of step t - 1 (2bw and
      // cdp-mp take it at their own update, below).
      // cdp-mp: a micro-batch reads one version of a parameter on every
      // stage that uses it, the one its slot reads on the owner stage (as
      // under cdp, where the owner stage's update precedes every use). A
      // replica here turns over at this stage's update, like the stage's
      // own parameters: at a backward the latest is θ_t and the previous
      // θ_{t-1}; at a forward the latest is θ_t only after the update.
      auto readsPrevious = [&](const ProgramEntry &entry, int64_t slot,
                               int id) {
        auto owner = tiedOwner.find(id);
        if (!cdpSlots || owner == tiedOwner.end())
          return entry.readsPrevious;
        bool stale = !cdpTable.fresh(slot, owner->second);
        return entry.kind == 'F' ? stale && cdpTable.afterUpdate(slot, s)
                                 : stale;
      };
      for (auto &[value, stages] : replicas) {
        if (!stages.count(s) || twoVersions)
          continue;
        int id = ids.lookup(value);
        plan::Instruction *recv = message(device->add_instructions(), false, id,
                                          tiedPeer(paramStage.lookup(value)),
                                          id, 0, plan.tensors(id).name());
        recv->set_stage(s);
        recv->set_min_step(1);
        attr(recv, "step_offset", -1);
      }
      for (const ProgramEntry &entry : entries) {
        int64_t k = entry.k, slot = k % slots;
        // Over the step's micro-batches of all replicas, relative to the
        // running step, as the send/recv tags and the loader count.
        int64_t tagBatch = mine[k] + entry.stepRel * MB;
        auto stamp = [&](plan::Instruction *instruction) {
          instruction->set_stage(s);
          instruction->set_micro_batch(k);
          instruction->set_time_step(entry.time);
          if (entry.stepRel < 0) {
            // The previous step's work: nothing before step 1, and once more
            // after the last step.
            instruction->set_min_step(1);
            instruction->set_drain(true);
          }
          return instruction;
        };
        auto version = [&](int id) {
          auto it = previousVersion.find(id);
          if (it == previousVersion.end())
            return id;
          return readsPrevious(entry, mine[k], id) ? it->second : id;
        };
        if (entry.kind == 'U') {
          // 2bw and cdp-mp: a replicated tied weight turns over its versions
          // where this stage would update it: the latest becomes the
          // previous, and the owner's new value the latest. Both ends tag
          // it with the step whose gradients made it: the two updates may
          // fall in different steps' programs.
          for (auto &[value, stages] : replicas) {
            if (!twoVersions || !stages.count(s))
              continue;
            int param = ids.lookup(value);
            plan::Instruction *keep = stamp(device->add_instructions());
            keep->set_op("assign");
            keep->set_phase("update");
            keep->set_location(plan.tensors(param).name());
            keep->add_inputs(previousVersion.lookup(param));
            keep->add_inputs(param);
            message(stamp(device->add_instructions()), false, param,
                    tiedPeer(paramStage.lookup(value)), param,
                    entry.stepRel * MB, plan.tensors(param).name());
          }
          for (UpdateOp update : updates.lookup(s)) {
            int param = ids.lookup(update.getParam());
            if (previousVersion.count(param)) {
              plan::Instruction *keep = stamp(device->add_instructions());
              keep->set_op("assign");
              keep->set_phase("update");
              keep->set_location(update.getName().str());
              keep->add_inputs(previousVersion.lookup(param));
              keep->add_inputs(param);
            }
            int gradient = accumulator.lookup(update.getName());
            if (replicasHere > 1) {
              // Exchange the step's gradient sums with the stage's other
              // replicas, then add all of them in replica order.
              const SmallVector<int> &parts = incoming[update.getName()];
              for (int64_t other = 0; other < replicasHere; ++other)
                if (other != r)
                  message(stamp(device->add_instructions()), true, gradient,
                          deviceAt[s][other], gradient, r,
                          update.getName().str());
              for (int64_t other = 0; other < replicasHere; ++other)
                if (other != r)
                  message(stamp(device->add_instructions()), false,
                          parts[other], deviceAt[s][other], gradient, other,
                          update.getName().str());
              int sum = replicaSum.lookup(update.getName());
              auto part = [&](int64_t q) {
                return q == r ? gradient : parts[q];
              };
              for (int64_t q = 1; q < replicasHere; ++q) {
                plan::Instruction *add = stamp(device->add_instructions());
                add->set_op("add");
                add->set_phase("update");
                add->set_location(update.getName().str());
                add->add_inputs(q == 1 ? part(0) : sum);
                add->add_inputs(part(q));
                add->add_outputs(sum);
              }
              gradient = sum;
            }
            if (failed(addInstruction(update, *device, false)))
              return failure();
            plan::Instruction *instruction = stamp(
                device->mutable_instructions(device->instructions_size() - 1));
            instruction->set_inputs(1, gradient);
            instruction->set_phase("update");
            auto tied = replicas.find(update.getParam());
            if (tied == replicas.end())
              continue;
            // To every replica of the tied stages that takes its value
            // from this device (see tiedPeer).
            for (int64_t q : tied->second)
              for (size_t other = 0; other < deviceAt[q].size(); ++other)
                if (static_cast<int64_t>(other % replicasHere) == r)
                  message(stamp(device->add_instructions()), true, param,
                          deviceAt[q][other], param, entry.stepRel * MB,
                          update.getName().str());
          }
          continue;
        }
        bool forward = entry.kind == 'F';
        std::set<int> arrived, sent;
        for (Operation *op : forward ? forwardOps[s] : backwardOps[s]) {
          // Bring in what this micro-batch's op reads from elsewhere.
          for (Value operand : op->getOperands()) {
            int id = ids.lookup(operand);
            if (arrived.count(id) || (!forward && broughtByForward.count(id)))
              continue;
            if (isa<BlockArgument>(operand)) {
              plan::Instruction *load = stamp(device->add_instructions());
              load->set_op("load");
              load->set_phase(forward ? "forward" : "backward");
              load->set_location(plan.tensors(id).name());
              load->add_outputs(mapped(slot, id));
              attr(load, "input", id);
              attr(load, "micro_batch", tagBatch);
              arrived.insert(id);
              continue;
            }
            Operation *producer = operand.getDefiningOp();
            if (!producer || isa<ParamOp, ConstantOp>(producer) ||
                stageOf(producer) == s)
              continue;
            message(stamp(device->add_instructions()), false, mapped(slot, id),
                    runs[stageOf(producer)][mine[k]], id, tagBatch,
                    locationOf(producer));
            arrived.insert(id);
          }
          if (failed(addInstruction(op, *device, false)))
            return failure();
          plan::Instruction *instruction = stamp(
              device->mutable_instructions(device->instructions_size() - 1));
          for (int &input : *instruction->mutable_inputs())
            input = version(mapped(slot, input));
          for (int &output : *instruction->mutable_outputs())
            output = mapped(slot, output);
          if (auto gradient = dyn_cast<GradientOp>(op))
            accumulate(stamp(device->add_instructions()),
                       mapped(slot, ids.lookup(gradient.getGrad())),
                       accumulator.lookup(gradient.getName()), "backward",
                       gradient.getName().str(), k, MB);
          // Send what other stages read of this micro-batch's results.
          for (Value result : op->getResults()) {
            int id = ids.lookup(result);
            if (lossAccumulator >= 0 && id == lossResult)
              accumulate(stamp(device->add_instructions()), mapped(slot, id),
                         lossAccumulator, "forward", "loss", k, count);
            std::set<int64_t> readers;
            for (Operation *user : result.getUsers())
              if (!isa<func::ReturnOp>(user) && stageOf(user) != s)
                readers.insert(stageOf(user));
            if (!readers.empty() && plan.tensors(id).dtype() == plan::BOOL)
              return op->emitOpError(
                  "sends a boolean tensor across a stage cut, "
                  "which pipelines do not support yet "
                  "(cut elsewhere with --stage-boundaries)");
            for (int64_t q : readers) {
              if (!sent.insert(q * (1 << 24) + id).second)
                continue;
              message(stamp(device->add_instructions()), true, mapped(slot, id),
                      runs[q][mine[k]], id, tagBatch, locationOf(op));
            }
          }
        }
      }
    }
  // The training programs name copies only. The one-micro-batch tensors
  // themselves serve device 0's evaluation stream (after training), in its
  // arena's first arenaBytes.
  for (int id = 0; id < originalTensors; ++id) {
    plan::Tensor &t = *plan.mutable_tensors(id);
    if ((t.kind() == plan::ACTIVATION || t.kind() == plan::INPUT) &&
        !t.has_device())
      t.set_device(0);
  }
  plan::Device &first = *plan.mutable_devices(0);
  first.set_arena_bytes(std::max(first.arena_bytes(), arenaBytes));
  return success();
}

/// One program per device for dp and cdp: every device runs all stages of
/// its own slot; each stage's gradients go to the communicator after its
/// backward, and come back reduced just before the forward that needs the
/// next version (the step given by the version delay).
LogicalResult Emitter::emitDataParallel(DictionaryAttr schedule,
                                        int64_t arenaBytes) {
  int64_t N = cast<IntegerAttr>(schedule.get("devices")).getInt();
  int64_t L = cast<IntegerAttr>(schedule.get("stages")).getInt();
  auto offsets = func->getAttrOfType<DenseI64ArrayAttr>("cdp.offsets");
  auto delays = func->getAttrOfType<ArrayAttr>("cdp.version_delay");
  auto reduceAt = func->getAttrOfType<DenseI64ArrayAttr>("cdp.reduce_at");
  auto live = func->getAttrOfType<DenseI64ArrayAttr>("cdp.live_versions");
  if (!offsets || !delays || !reduceAt || !live)
    return func.emitError("incomplete schedule; run cdp-delay-updates and "
                          "cdp-stagger-collectives");
  plan.set_strategy(cast<StringAttr>(schedule.get("strategy")).str());
  auto reduceKind = func->getAttrOfType<StringAttr>("cdp.reduce");
  bool chain = reduceKind && reduceKind.getValue() == "chain";
  plan.set_micro_batches(N);
  plan::Schedule *out = plan.mutable_schedule();
  out->set_stages(L);
  out->set_cycle(2 * L);
  for (int64_t s : offsets.asArrayRef())
    out->add_offsets(s);
  for (Attribute row : delays) {
    plan::Ints *ints = out->add_version_delay();
    for (int64_t d : cast<DenseI64ArrayAttr>(row).asArrayRef())
      ints->add_values(d);
  }
  for (int64_t t : reduceAt.asArrayRef())
    out->add_reduce_at(t);
  for (int64_t v : live.asArrayRef())
    out->add_live_versions(v);
  if (auto rule = func->getAttrOfType<StringAttr>("cdp.rule"))
    out->set_rule(rule.str());
  if (auto reduce = func->getAttrOfType<StringAttr>("cdp.reduce"))
    out->set_reduce(reduce.str());

  Block &body = func.getBody().front();
  // Per stage: the parameters, their gradients, reduced buffers, updates.
  struct Trained {
    int param, grad, reduced;
    UpdateOp update;
  };
  std::vector<std::vector<Trained>> byStage(L + 1);
  llvm::StringMap<UpdateOp> updates;
  body.walk([&](UpdateOp update) { updates[update.getName()] = update; });
  llvm::StringMap<int> paramIds;
  for (const plan::Tensor &t : plan.tensors())
    if (t.kind() == plan::PARAM)
      paramIds[t.name()] = t.id();
  plan.clear_applied_gradients();
  std::vector<int64_t> stageBytes(L, 0);
  for (int i = 0; i < plan.gradients_size(); ++i) {
    const std::string &name = plan.gradients(i);
    GradientOp gradient;
    body.walk([&](GradientOp g) {
      if (g.getName() == name)
        gradient = g;
    });
    auto stage = gradient->getAttrOfType<IntegerAttr>("cdp.stage");
    UpdateOp update = updates.lookup(name);
    if (!stage || !update)
      return gradient.emitOpError("has no stage or no update");
    int paramId = paramIds.lookup(name);
    plan::Tensor reduced = plan.tensors(paramId);
    reduced.set_id(plan.tensors_size());
    reduced.set_kind(plan::REDUCED);
    reduced.clear_data();
    reduced.set_trainable(false);
    *plan.add_tensors() = reduced;
    plan.add_applied_gradients(reduced.id());
    byStage[stage.getInt()].push_back(
        {paramId, ids.lookup(gradient.getGrad()), reduced.id(), update});
    stageBytes[stage.getInt() - 1] += reduced.bytes();
  }
  for (int64_t b : stageBytes)
    out->add_stage_param_bytes(b);
  // --cdp-reduce chain: per stage two buffers, by step parity, that hold a
  // step's mean from its arrival to the wait that applies it (a delayed
  // stage's next mean arrives before the wait: CDP's second version).
  std::vector<std::array<int, 2>> chainBuffers(L + 1, {-1, -1});
  for (int64_t l = 1; chain && l <= L; ++l) {
    if (byStage[l].empty())
      continue;
    for (int parity = 0; parity < 2; ++parity) {
      plan::Tensor buffer;
      buffer.set_id(plan.tensors_size());
      buffer.set_name("stage" + std::to_string(l) + "@chain" +
                      std::to_string(parity));
      buffer.set_dtype(plan::F32);
      buffer.set_kind(plan::REDUCED);
      buffer.add_shape(stageBytes[l - 1] / 4);
      buffer.set_bytes(stageBytes[l - 1]);
      *plan.add_tensors() = buffer;
      chainBuffers[l][parity] = buffer.id();
    }
  }

  // The last backward op of every stage: its reduction starts after it.
  llvm::DenseMap<int64_t, Operation *> lastBackward;
  for (Operation &op : body.without_terminator()) {
    auto phase = op.getAttrOfType<StringAttr>("cdp.phase");
    auto stage = op.getAttrOfType<IntegerAttr>("cdp.stage");
    if (phase && stage && phase.getValue() == "backward")
      lastBackward[stage.getInt()] = &op;
  }

  plan.clear_devices();
  for (int64_t d = 0; d < N; ++d) {
    plan::Device *device = plan.add_devices();
    device->set_index(d);
    device->set_arena_bytes(arenaBytes);
    int64_t s = offsets[d];
    ArrayRef<int64_t> delay = cast<DenseI64ArrayAttr>(delays[d]).asArrayRef();
    std::vector<bool> updated(L + 1, false);
    auto stamp = [&](plan::Instruction *instruction, int64_t stage,
                     int64_t time) {
      instruction->set_stage(stage);
      instruction->set_micro_batch(d);
      instruction->set_time_step(s + time);
    };
    for (Operation &op : body.without_terminator()) {
      if (isa<ParamOp, ConstantOp, UpdateOp>(op))
        continue;
      auto stage = op.getAttrOfType<IntegerAttr>("cdp.stage");
      auto phase = op.getAttrOfType<StringAttr>("cdp.phase");
      int64_t l = stage ? stage.getInt() : L;
      if (!phase && !updated[l]) {
        // Before the stage's first forward: bring its weights to the version
        // this slot uses.
        updated[l] = true;
        if (!byStage[l].empty()) {
          int64_t minStep = 1 + delay[l - 1];
          plan::Instruction *wait = device->add_instructions();
          wait->set_op(chain ? "chain_wait" : "reduce_wait");
          wait->set_location("stage " + std::to_string(l));
          wait->set_phase("update");
          wait->set_min_step(minStep);
          stamp(wait, l, l - 1);
          if (chain)
            for (int buffer : chainBuffers[l])
              wait->add_inputs(buffer);
          for (const Trained &t : byStage[l])
            wait->add_outputs(t.reduced);
          plan::Attribute *a = wait->add_attributes();
          a->set_name("stage");
          a->set_i(l);
          a = wait->add_attributes();
          a->set_name("delay");
          a->set_i(delay[l - 1]);
          for (const Trained &t : byStage[l]) {
            if (failed(addInstruction(t.update, *device, false)))
              return failure();
            plan::Instruction *update =
                device->mutable_instructions(device->instructions_size() - 1);
            update->set_inputs(1, t.reduced);
            update->set_phase("update");
            update->set_min_step(minStep);
            stamp(update, l, l - 1);
          }
        }
      }
      if (failed(addInstruction(&op, *device, false)))
        return failure();
      plan::Instruction *instruction =
          device->mutable_instructions(device->instructions_size() - 1);
      // Ops without a time of their own (buffer writes after a forward)
      // run in the time step of the instruction before them, so that a
      // device's times never decrease along its stream.
      auto time = op.getAttrOfType<IntegerAttr>("cdp.time");
      int64_t previous =
          device->instructions_size() > 1
              ? device->instructions(device->instructions_size() - 2)
                        .time_step() -
                    s
              : 0;
      stamp(instruction, l, time ? time.getInt() : previous);
      if (lastBackward.lookup(l) == &op && !byStage[l].empty()) {
        plan::Instruction *start = device->add_instructions();
        start->set_op(chain ? "chain_reduce" : "reduce_start");
        start->set_location("stage " + std::to_string(l));
        start->set_phase("comm");
        stamp(start, l, 2 * L - l);
        for (const Trained &t : byStage[l])
          start->add_inputs(t.grad);
        if (chain && d == N - 1)
          for (int buffer : chainBuffers[l])
            start->add_outputs(buffer);
        plan::Attribute *a = start->add_attributes();
        a->set_name("stage");
        a->set_i(l);
        a = start->add_attributes();
        a->set_name("cycle");
        a->set_i(2 * L);
      }
    }
    if (chain && d + 1 < N)
      for (int64_t l = 1; l <= L; ++l)
        if (!byStage[l].empty())
          insertChainRelay(*device, d, N, L, l, offsets.asArrayRef(),
                           chainBuffers[l]);
  }
  return success();
}

/// The mean of step t's stage-l reduction leaves the last slot at
/// tau*_l(t) = s_{N-1} + 2Lt + 2L - l and reaches slot j at tau*_l(t) +
/// N - 1 - j, one hop a time step: slot j's chain_relay runs then, in its
/// own step t + k at local time x, before the first instruction of a later
/// time step (a wait at that time step needs it).
void Emitter::insertChainRelay(plan::Device &device, int64_t j, int64_t N,
                               int64_t L, int64_t l, ArrayRef<int64_t> offsets,
                               const std::array<int, 2> &buffers) {
  int64_t s = offsets[j];
  int64_t r = offsets[N - 1] - s + 2 * L - l + (N - 1 - j);
  int64_t k = r / (2 * L), x = r % (2 * L);
  plan::Instruction relay;
  relay.set_op("chain_relay");
  relay.set_location("stage " + std::to_string(l));
  relay.set_phase("comm");
  relay.set_stage(l);
  relay.set_micro_batch(j);
  relay.set_time_step(s + x);
  relay.set_min_step(k);
  for (int buffer : buffers)
    relay.add_outputs(buffer);
  for (auto [name, value] : {std::pair<const char *, int64_t>{"stage", l},
                             {"cycle", 2 * L},
                             {"step_offset", k}}) {
    plan::Attribute *a = relay.add_attributes();
    a->set_name(name);
    a->set_i(value);
  }
  auto *instructions = device.mutable_instructions();
  int at = 0;
  while (at < instructions->size() &&
         (instructions->Get(at).time_step() - s < x ||
          (instructions->Get(at).time_step() - s == x &&
           instructions->Get(at).phase() != "update")))
    ++at;
  *instructions->Add() = relay;
  for (int i = instructions->size() - 1; i > at; --i)
    instructions->SwapElements(i, i - 1);
}

} // namespace

LogicalResult buildPlan(ModuleOp module, const EmitOptions &options,
                        plan::Plan &plan) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return module.emitError("no func.func @main to emit");
  return Emitter(func, plan).run(options);
}

} // namespace cdp
