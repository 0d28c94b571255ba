//===- EmitPlan.cpp - cdp IR to the plan artefact -------------------------===//
//
// One plan tensor per SSA value of @main, one instruction per op, in op
// order (the single-device schedule). The forward slice that computes the
// model's first output is emitted again as the evaluation stream, with
// BatchNorm on running statistics and dropout off.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/EmitPlan.h"
#include "cdp/Plan/ShardLayout.h"

#include "SparseExchange.h"

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Dialect/Sched/SchedOps.h"
#include "cdp/Passes/FirstFit.h"
#include "cdp/Plan/DropUnnamedTensors.h"
#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/PlanInstantiate.h"
#include "cdp/Sched/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <array>
#include <functional>
#include <map>
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

struct PipelineTables;
struct StashLayout;

/// dp and cdp: what every slot's program shares.
struct DataParallelTables {
  int64_t N = 1, L = 1;
  bool chain = false;
  /// Per stage: the parameters, their gradients, reduced buffers, updates.
  struct Trained {
    int param, grad, reduced;
    UpdateOp update;
  };
  std::vector<std::vector<Trained>> byStage;
  std::vector<std::array<int, 2>> chainBuffers;
  /// ZeRO stage of the updates (sched.wait_reduction's `zero`), and with 2
  /// per stage the tensor holding the device's shard of the mean gradients.
  int64_t zero = 0;
  std::vector<int> gradShards;
  /// ZeRO stage 3, per stage: the SHARD tensor of its parameters, and what
  /// its gather writes (the parameters, then the padding if any).
  std::vector<int> paramShards;
  std::vector<std::vector<int>> gathered;
  /// CDP-ZeRO (cdp --zero 3): paramShards hold each stage's master copy on
  /// its owner; per stage the owner, the arena tensor the stage travels in
  /// and the owner's buffer for the mean gradients.
  bool cdpZero = false;
  std::vector<int64_t> owners;
  std::vector<int> regions, means;
  /// ZeRO stages 2 and 3 with clipping: the device's share of the squared
  /// norm, summed over the devices in place.
  int normShare = -1;
  /// The step's gradient clipping, if any (sched.clip_means or clip_own
  /// say where it runs).
  ClipGradNormOp clip;
  /// laysa: the stages' top-k exchanges (no reduced buffers then).
  bool sparse = false;
  sparse::Exchange exchange;
};
struct DeviceLowering;

class Emitter {
public:
  Emitter(func::FuncOp func, plan::Plan &plan) : func(func), plan(plan) {}

  LogicalResult run(const EmitOptions &options);

private:
  int addTensor(Value value, plan::TensorKind kind, StringRef name);
  LogicalResult addInstruction(Operation *op, plan::Device &device,
                               bool forEval);
  LogicalResult emitDataParallel(int64_t arenaBytes);
  LogicalResult addReducedTensors(DataParallelTables &tables);
  LogicalResult prepareExchange(DataParallelTables &tables);
  int64_t addShardGroups(sched::StepProgramOp program,
                         DataParallelTables &tables, int64_t arenaBytes);
  LogicalResult lowerSlotDevice(sched::SlotDeviceOp op, plan::Device &out,
                                const DataParallelTables &tables);
  std::vector<int64_t> slotProgramKey(sched::SlotDeviceOp op,
                                      const DataParallelTables &tables);
  plan::Instruction *lowerClip(plan::Device &device, ClipGradNormOp clip,
                               ArrayRef<int> grads,
                               ArrayRef<int> partials = {});
  LogicalResult lowerSlotCompute(plan::Device &device,
                                 sched::SlotComputeOp compute, int64_t offset,
                                 int64_t d, int64_t L);
  void accumulateMicroBatches(plan::Device &device, int64_t slots);
  LogicalResult emitPipeline(const EmitOptions &options);
  std::vector<std::pair<size_t, size_t>>
  sharedTransients(int64_t s, ArrayRef<std::pair<Operation *, int64_t>> inPlace,
                   const llvm::DenseMap<int, size_t> &rangeOf,
                   const std::vector<LiveRange> &ranges, int64_t lastStage);
  void preparePipeline(sched::StepProgramOp program, PipelineTables &tables);
  void addAccumulators(int64_t S, PipelineTables &tables);
  void splitBackwards(PipelineTables &tables);
  StashLayout layoutStash(int64_t s, int64_t slots, bool split,
                          const PipelineTables &tables);
  int mapped(DeviceLowering &lowering, int64_t slot, int id,
             const PipelineTables &tables);
  plan::Instruction *message(plan::Instruction *instruction, bool isSend,
                             int id, int64_t peer, int value,
                             int64_t microBatch, const std::string &location,
                             const PipelineTables &tables);
  LogicalResult lowerStageDevice(sched::StageDeviceOp op,
                                 const PipelineTables &tables);
  int addTemplate(plan::Device &scratch, int64_t timeStep, int64_t microBatch,
                  int64_t messageBatch, int64_t stepMicroBatch);
  LogicalResult lowerInto(DeviceLowering &lowering, plan::Device &scratch,
                          llvm::function_ref<LogicalResult()> lower);
  LogicalResult addBlockRun(DeviceLowering &lowering,
                            llvm::function_ref<LogicalResult()> lower);
  LogicalResult addComputeRun(DeviceLowering &lowering,
                              sched::ComputeOp compute,
                              const PipelineTables &tables);
  void markStashSlots(DeviceLowering &lowering);
  LogicalResult lowerUpdateStep(DeviceLowering &lowering, Operation *op,
                                const PipelineTables &tables);
  LogicalResult lowerReplicaShardUpdate(DeviceLowering &lowering,
                                        sched::ApplyShardUpdateOp shard,
                                        const PipelineTables &tables);
  void lowerExchange(DeviceLowering &lowering,
                     sched::ExchangeGradientsOp exchange,
                     const PipelineTables &tables);
  LogicalResult lowerClipStages(DeviceLowering &lowering,
                                sched::ClipStagesOp clip,
                                const PipelineTables &tables);
  LogicalResult lowerCompute(DeviceLowering &lowering, sched::ComputeOp compute,
                             const PipelineTables &tables);
  LogicalResult sendResults(DeviceLowering &lowering, sched::ComputeOp compute,
                            Operation *op, int64_t tagBatch,
                            std::set<int> &sent, const PipelineTables &tables);
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
  if (auto reuse = func->getAttrOfType<StringAttr>("cdp.memory_reuse"))
    plan.set_memory_reuse(reuse.str());
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
    if (failed(emitPipeline(options)))
      return failure();
    std::string hang = plan::findSendRecvDeadlock(plan);
    if (!hang.empty())
      return func.emitError(hang);
    device = plan.mutable_devices(0); // the devices were rebuilt
  } else if (func->hasAttr("cdp.schedule")) {
    if (failed(emitDataParallel(arena.getInt())))
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

  // The evaluation stream: what the first output needs, and the loss (on
  // the labels fed with the held-out data), in op order.
  if (returnOp.getNumOperands() > 0) {
    Value scores = returnOp.getOperand(0);
    plan.set_scores(ids.lookup(scores));
    llvm::DenseSet<Operation *> needed;
    SmallVector<Value> work{scores};
    if (auto loss = func->getAttrOfType<IntegerAttr>("cdp.loss_index")) {
      Value lossValue = returnOp.getOperand(loss.getInt());
      work.push_back(lossValue);
      plan.set_eval_loss(ids.lookup(lossValue));
    }
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
  // A pipeline's devices name their own copies of the activations: the
  // originals the evaluation stream does not read are named by nothing.
  if (traitsOf(options.strategy).pipelined) {
    dropUnnamedActivations(plan);
    plan::Device &first = *plan.mutable_devices(0);
    first.set_arena_bytes(
        std::max(first.arena_bytes(), packEvaluationArena(plan)));
  }
  return success();
}

/// single with M micro-batches: every slot runs forward and backward and
/// adds its gradients, scaled by 1/M, into an accumulator; the updates read
/// the accumulators and run for the step's last slot only.
void Emitter::accumulateMicroBatches(plan::Device &device, int64_t slots) {
  plan.set_micro_batches(slots);
  llvm::StringMap<int> accumulator;
  llvm::DenseMap<int, int> accumulatorOfGradient;
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
      accumulatorOfGradient[instruction.inputs(0)] = sum.id();
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
  for (plan::Instruction &instruction : rebuilt) {
    if (instruction.op() == "update") {
      for (const plan::Attribute &a : instruction.attributes())
        if (a.name() == "name")
          instruction.set_inputs(1, accumulator.lookup(a.s()));
      instruction.set_last_slot(true);
    }
    // The clip scales the step's mean gradients, the accumulators.
    if (instruction.op() == "clip_grad_norm") {
      for (int k = 0; k < instruction.inputs_size(); ++k)
        instruction.set_inputs(
            k, accumulatorOfGradient.lookup(instruction.inputs(k)));
      instruction.set_last_slot(true);
    }
  }
  for (const std::string &name : plan.gradients())
    plan.add_applied_gradients(accumulator.lookup(name));
  *device.mutable_instructions() = rebuilt;
}

/// The pipelines (gpipe, 1f1b, 2bw, cdp-mp) lower cdp-schedule-pipeline's
/// sched.step_program: every decision (placement, programs, versions, stash
/// slots, tied-weight and replica messages) is read from it. A
/// sched.compute becomes the stage's ops for one micro-batch, in its stash
/// slot's copies of the stage's tensors; values crossing a cut travel by
/// send and recv, graph inputs are loaded where a stage reads them, and
/// parameter gradients and the loss are accumulated over the step's
/// micro-batches.
struct PipelineTables {
  int64_t S = 1, MB = 1, cycle = 1;
  std::vector<std::vector<Operation *>> forwardOps, backwardOps;
  /// zb-h1's halves of each stage's backward: the ops the gradients sent
  /// to earlier stages need (I), and the rest: parameter gradients (W).
  std::vector<std::vector<Operation *>> inputGradOps, weightGradOps;
  llvm::StringMap<UpdateOp> updateOf;
  /// runs[s][j]: the device running micro-batch j at stage s.
  std::vector<std::vector<int64_t>> runs;
  /// stageDevice[s]: the device running stage s of the first replica,
  /// where the stage's parameters, accumulators and loss live.
  std::vector<int64_t> stageDevice;
  llvm::StringMap<int> paramId;
  /// Tied weights (those with replicas), by tensor id.
  llvm::DenseSet<int> tied;
  llvm::StringMap<int> accumulator, replicaSum;
  llvm::StringMap<SmallVector<int>> incoming;
  llvm::DenseMap<int, int> previousVersion;
  int lossAccumulator = -1, lossResult = -1, originalTensors = 0;
  /// Gradient clipping: the graph's clip and, per stage, the scalar that
  /// holds the stage's share of the squared norm on every device.
  ClipGradNormOp clip;
  std::vector<int> normShare;
};

/// Where a stage device keeps a micro-batch's tensors: what the stage's
/// forward makes or brings in and its backward reads is stashed, one copy
/// per slot; everything else lives within one forward or backward, one
/// copy per device after the slots.
struct StashLayout {
  std::set<int> broughtByForward;
  /// Split backwards: what the I half receives or loads and the W half
  /// reads too (stashed, and not brought in again).
  std::set<int> broughtByInputGrad;
  llvm::DenseMap<int, int64_t> stashOffset, transientOffset;
  int64_t stashBytes = 0, transientBase = 0, transientBytes = 0;
};

/// One stage device being lowered.
struct DeviceLowering {
  sched::StageDeviceOp op;
  plan::Device *device = nullptr;
  int64_t self = 0, s = 1;
  ArrayRef<int64_t> mine;
  StashLayout layout;
  /// Where this stage's part of the device arena starts (a device running
  /// several stages gives each its own part).
  int64_t base = 0;
  /// (slot, tensor) -> the slot's copy of a stashed tensor; (-1, tensor)
  /// the device's copy of any other.
  std::unordered_map<int64_t, int> copies;
  /// Parameters whose gradient this step was summed over replicas.
  llvm::StringSet<> exchanged;
  /// The stash slot the instructions being built name (0: templates name
  /// slot 0's copies, and each run its own slot).
  int64_t slot = 0;
  /// Compute templates built for this device, by what sets them apart
  /// (see addComputeRun).
  std::map<std::vector<int64_t>, int> computeTemplates;
};

LogicalResult Emitter::emitPipeline(const EmitOptions &options) {
  sched::StepProgramOp program;
  for (Operation &op : func->getParentOfType<ModuleOp>().getOps())
    if (auto found = dyn_cast<sched::StepProgramOp>(op))
      program = found;
  if (!program)
    return func.emitError("no step program; run cdp-schedule-pipeline first");
  PipelineTables tables;
  preparePipeline(program, tables);
  plan.clear_devices();
  std::set<int> merged;
  for (Operation &op : program.getBody().front())
    if (auto device = dyn_cast<sched::StageDeviceOp>(op)) {
      if (plan.devices_size() > device.getIndex())
        merged.insert(device.getIndex());
      if (failed(lowerStageDevice(device, tables)))
        return failure();
    }
  // A device running several stages runs their programs merged by time
  // step (stable: within a time step, in stage order).
  for (int index : merged) {
    auto *runs = plan.mutable_devices(index)->mutable_runs();
    std::stable_sort(runs->begin(), runs->end(),
                     [](const plan::Run &a, const plan::Run &b) {
                       return a.time_step() < b.time_step();
                     });
  }
  // The training programs name copies only. The one-micro-batch tensors
  // themselves serve device 0's evaluation stream (after training), packed
  // again by that stream's lifetimes into its arena (emit, once the
  // originals nothing names are gone).
  for (int id = 0; id < tables.originalTensors; ++id) {
    plan::Tensor &t = *plan.mutable_tensors(id);
    if ((t.kind() == plan::ACTIVATION || t.kind() == plan::INPUT) &&
        !t.has_device())
      t.set_device(0);
  }
  return success();
}

/// The graph side (each stage's forward and backward ops), the placement
/// tables and the tensors every device shares: accumulators, previous
/// versions, replicas' gradient sums.
void Emitter::preparePipeline(sched::StepProgramOp program,
                              PipelineTables &tables) {
  int64_t S = tables.S = program.getStages();
  tables.MB = program.getMicroBatches();
  tables.cycle = program.getCycle();
  Block &body = func.getBody().front();
  tables.forwardOps.resize(S + 1);
  tables.backwardOps.resize(S + 1);
  for (Operation &op : body.without_terminator()) {
    if (isa<ParamOp, ConstantOp>(op))
      continue;
    if (auto update = dyn_cast<UpdateOp>(op)) {
      tables.updateOf[update.getName()] = update;
      continue;
    }
    if (auto clip = dyn_cast<ClipGradNormOp>(op)) {
      tables.clip = clip;
      continue;
    }
    auto phase = op.getAttrOfType<StringAttr>("cdp.phase");
    bool backward = phase && phase.getValue() == "backward";
    (backward ? tables.backwardOps : tables.forwardOps)[stageOf(&op, S)]
        .push_back(&op);
  }
  splitBackwards(tables);
  llvm::StringMap<int> &paramId = tables.paramId;
  body.walk(
      [&](ParamOp param) { paramId[param.getName()] = ids.lookup(param); });
  tables.runs.assign(S + 1, std::vector<int64_t>(tables.MB, -1));
  tables.stageDevice.assign(S + 1, 0);
  int64_t deviceCount = 0, mostReplicas = 0;
  for (Operation &op : program.getBody().front())
    if (auto device = dyn_cast<sched::StageDeviceOp>(op)) {
      for (int64_t j : device.getMicroBatches())
        tables.runs[device.getStage()][j] = device.getIndex();
      if (device.getReplica() == 0)
        tables.stageDevice[device.getStage()] = device.getIndex();
      deviceCount = std::max<int64_t>(deviceCount, device.getIndex() + 1);
      mostReplicas = std::max<int64_t>(mostReplicas, device.getReplica() + 1);
    }

  plan.set_strategy(program.getStrategy().str());
  plan.set_micro_batches(tables.MB);
  plan::Schedule *schedule = plan.mutable_schedule();
  schedule->set_stages(S);
  schedule->set_cycle(tables.cycle);
  schedule->set_rule(program.getRule().str());
  std::vector<int64_t> stageBytes(S, 0);
  for (auto place : program.getBody().getOps<sched::PlaceParamOp>()) {
    int id = paramId.lookup(place.getParam());
    plan::Tensor &t = *plan.mutable_tensors(id);
    t.set_device(tables.stageDevice[place.getStage()]);
    if (t.kind() == plan::PARAM && t.trainable())
      stageBytes[place.getStage() - 1] += t.bytes();
    if (!place.getReplicas().empty())
      tables.tied.insert(id);
  }
  for (int64_t bytes : stageBytes)
    schedule->add_stage_param_bytes(bytes);
  for (int64_t d = 0; d < deviceCount; ++d)
    schedule->add_offsets(0);
  if (std::optional<ArrayAttr> delays = program.getVersionDelay())
    for (Attribute row : *delays) {
      plan::Ints *out = schedule->add_version_delay();
      for (int64_t delay : cast<DenseI64ArrayAttr>(row).asArrayRef())
        out->add_values(delay);
    }
  if (std::optional<ArrayRef<int64_t>> live = program.getLiveVersions())
    for (int64_t versions : *live)
      schedule->add_live_versions(versions);
  addAccumulators(S, tables);
  if (tables.clip)
    for (int64_t s = 0; s <= S; ++s) {
      plan::Tensor share;
      share.set_id(plan.tensors_size());
      share.set_name("stage" + std::to_string(s) + "@norm2");
      share.set_dtype(plan::F32);
      share.set_kind(plan::REDUCED);
      share.set_bytes(4);
      *plan.add_tensors() = share;
      tables.normShare.push_back(share.id());
    }
  // 2bw and cdp-mp keep two versions of every trained parameter: the plan's
  // tensor (the latest, updated in place) and its previous value, copied
  // just before each update.
  if (program.getWeightVersions() == 2)
    for (auto place : program.getBody().getOps<sched::PlaceParamOp>()) {
      int id = paramId.lookup(place.getParam());
      if (plan.tensors(id).kind() != plan::PARAM)
        continue;
      plan::Tensor copy = plan.tensors(id);
      copy.set_id(plan.tensors_size());
      copy.set_name(copy.name() + "@previous");
      copy.set_trainable(false);
      copy.set_previous_version_of(id);
      *plan.add_tensors() = copy;
      tables.previousVersion[id] = copy.id();
    }
  tables.originalTensors = plan.tensors_size();
  // Replicas: every stage's gradient sums arrive from the other replicas
  // (one buffer per replica) and are added in replica order, so every
  // replica applies the same update.
  if (mostReplicas > 1)
    for (const std::string &name : plan.gradients()) {
      int own = tables.accumulator.lookup(name);
      for (int64_t r = 0; r < mostReplicas; ++r) {
        plan::Tensor t = plan.tensors(own);
        t.set_id(plan.tensors_size());
        t.set_name(name + "@replica" + std::to_string(r));
        t.clear_device();
        *plan.add_tensors() = t;
        tables.incoming[name].push_back(t.id());
      }
      plan::Tensor sum = plan.tensors(own);
      sum.set_id(plan.tensors_size());
      sum.set_name(name + "@replicas");
      *plan.add_tensors() = sum;
      tables.replicaSum[name] = sum.id();
    }
  if (auto index = func->getAttrOfType<IntegerAttr>("cdp.loss_index"))
    tables.lossResult = ids.lookup(
        cast<func::ReturnOp>(body.getTerminator()).getOperand(index.getInt()));
}

namespace {

/// The weights, and the values computed from weights and constants alone
/// (the transpose torch exports for a Linear weight), in one walk over
/// @main's block (operands come before their users).
llvm::DenseSet<Value> weightDerivedValues(Block &body) {
  llvm::DenseSet<Value> derived;
  for (Operation &op : body.without_terminator()) {
    if (auto param = dyn_cast<ParamOp>(op)) {
      if (!param.getBuffer())
        derived.insert(param);
      continue;
    }
    if (isa<ConstantOp>(op) || op.getNumOperands() == 0)
      continue;
    if (llvm::all_of(op.getOperands(), [&](Value operand) {
          return isa_and_nonnull<ConstantOp>(operand.getDefiningOp()) ||
                 derived.contains(operand);
        }))
      derived.insert(op.result_begin(), op.result_end());
  }
  return derived;
}

} // namespace

/// Splits each stage's backward in two (zb-h1's I and W, after Qi et al.:
/// B the gradients of the layers' inputs, W those of their weights).
/// Walking it backwards, an op is in I when another stage reads a result,
/// when it reads a weight (an input gradient: dY·Wᵀ, a convolution's
/// backward data, a norm's input gradient), or when an I op needs a
/// result; the rest, which only the parameter gradients need, is W. Both
/// keep @main's order.
void Emitter::splitBackwards(PipelineTables &tables) {
  int64_t S = tables.S;
  tables.inputGradOps.assign(S + 1, {});
  tables.weightGradOps.assign(S + 1, {});
  llvm::DenseSet<Value> weights = weightDerivedValues(func.getBody().front());
  for (int64_t s = 1; s <= S; ++s) {
    const std::vector<Operation *> &ops = tables.backwardOps[s];
    llvm::DenseSet<Value> needed;
    std::vector<bool> input(ops.size(), false);
    for (size_t i = ops.size(); i-- > 0;) {
      if (isa<GradientOp>(ops[i]))
        continue;
      for (Value operand : ops[i]->getOperands())
        input[i] = input[i] || weights.contains(operand);
      for (Value result : ops[i]->getResults())
        for (Operation *user : result.getUsers())
          if (needed.contains(result) ||
              (!isa<func::ReturnOp>(user) && stageOf(user, S) != s))
            input[i] = true;
      if (input[i])
        for (Value operand : ops[i]->getOperands())
          needed.insert(operand);
    }
    for (size_t i = 0; i < ops.size(); ++i)
      (input[i] ? tables.inputGradOps : tables.weightGradOps)[s].push_back(
          ops[i]);
  }
}

/// Persistent accumulators: one per trained parameter (on its stage's
/// device), one for the loss (on the last stage's).
void Emitter::addAccumulators(int64_t S, PipelineTables &tables) {
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
  func.getBody().walk([&](GradientOp gradient) {
    gradientStage[gradient.getName()] = stageOf(gradient, S);
  });
  plan.clear_applied_gradients();
  for (const std::string &name : plan.gradients()) {
    // By name through preparePipeline's map (a scan of every tensor per
    // gradient was quadratic).
    auto found = tables.paramId.find(name);
    int param = found == tables.paramId.end() ? -1 : found->second;
    tables.accumulator[name] = addAccumulator(
        param, name, tables.stageDevice[gradientStage.lookup(name)]);
    plan.add_applied_gradients(tables.accumulator[name]);
  }
  if (plan.loss() >= 0) {
    tables.lossAccumulator =
        addAccumulator(plan.loss(), "loss", tables.stageDevice[S]);
    plan.set_loss(tables.lossAccumulator);
    plan.set_loss_device(tables.stageDevice[S]);
  }
}

/// Which transient of stage `s` takes which one's block (packFirstFitShared's
/// `shares`): a result with `cdp.in_place` over an operand made in this
/// stage, read by no other stage (so never sent), not stashed, whose last
/// read in the stage's order is that op.
std::vector<std::pair<size_t, size_t>> Emitter::sharedTransients(
    int64_t s, ArrayRef<std::pair<Operation *, int64_t>> inPlace,
    const llvm::DenseMap<int, size_t> &rangeOf,
    const std::vector<LiveRange> &ranges, int64_t lastStage) {
  std::vector<std::pair<size_t, size_t>> shares;
  for (auto [op, position] : inPlace) {
    Value operand =
        op->getOperand(op->getAttrOfType<IntegerAttr>("cdp.in_place").getInt());
    Operation *producer = operand.getDefiningOp();
    auto from = rangeOf.find(ids.lookup(operand));
    auto to = rangeOf.find(ids.lookup(op->getResult(0)));
    bool local = producer && stageOf(producer, lastStage) == s &&
                 llvm::all_of(operand.getUsers(), [&](Operation *user) {
                   return stageOf(user, lastStage) == s;
                 });
    if (local && from != rangeOf.end() && to != rangeOf.end() &&
        ranges[from->second].end == position && from->second < to->second)
      shares.push_back({to->second, from->second});
  }
  return shares;
}

/// Stage s's stash layout with `slots` slots (see StashLayout): the
/// transient tensors are packed after the slots by their live ranges over
/// the stage's ops (forward then backward; values brought in live from
/// their first reader), as cdp-plan-memory packs the one-micro-batch arena.
/// A split backward (`split`: I, then W later) also stashes what I makes or
/// brings in and W reads.
StashLayout Emitter::layoutStash(int64_t s, int64_t slots, bool split,
                                 const PipelineTables &tables) {
  StashLayout layout;
  const std::vector<Operation *> &forward = tables.forwardOps[s],
                                 &backward = tables.backwardOps[s];
  auto broughtIn = [&](Value operand) {
    Operation *producer = operand.getDefiningOp();
    return isa<BlockArgument>(operand) ||
           (producer && !isa<ParamOp, ConstantOp>(producer) &&
            stageOf(producer, tables.S) != s);
  };
  for (Operation *op : forward)
    for (Value operand : op->getOperands())
      if (broughtIn(operand))
        layout.broughtByForward.insert(ids.lookup(operand));
  std::set<int> madeByInputGrad;
  if (split) {
    llvm::DenseSet<int> readByWeightGrad;
    for (Operation *op : tables.weightGradOps[s])
      for (Value operand : op->getOperands())
        readByWeightGrad.insert(ids.lookup(operand));
    for (Operation *op : tables.inputGradOps[s]) {
      for (Value operand : op->getOperands()) {
        int id = ids.lookup(operand);
        if (broughtIn(operand) && !layout.broughtByForward.count(id) &&
            readByWeightGrad.contains(id))
          layout.broughtByInputGrad.insert(id);
      }
      for (Value result : op->getResults())
        if (readByWeightGrad.contains(ids.lookup(result)))
          madeByInputGrad.insert(ids.lookup(result));
    }
  }
  llvm::DenseSet<int> readByBackward;
  for (Operation *op : backward)
    for (Value operand : op->getOperands())
      readByBackward.insert(ids.lookup(operand));
  auto isActivation = [&](int id) {
    plan::TensorKind kind = plan.tensors(id).kind();
    return kind == plan::ACTIVATION || kind == plan::INPUT;
  };
  auto stash = [&](int id) {
    if (!readByBackward.contains(id) || !isActivation(id) ||
        !layout.stashOffset.try_emplace(id, layout.stashBytes).second)
      return;
    layout.stashBytes += alignToArena(plan.tensors(id).bytes());
  };
  for (Operation *op : forward)
    for (Value result : op->getResults())
      stash(ids.lookup(result));
  for (int id : layout.broughtByForward)
    stash(id);
  for (const std::set<int> *ids :
       {&madeByInputGrad, &layout.broughtByInputGrad})
    for (int id : *ids)
      stash(id);
  llvm::DenseMap<int, size_t> rangeOf;
  std::vector<int> rangeIds;
  std::vector<LiveRange> ranges;
  int64_t position = 0;
  std::vector<const std::vector<Operation *> *> order = {&forward, &backward};
  if (split)
    order = {&forward, &tables.inputGradOps[s], &tables.weightGradOps[s]};
  std::vector<std::pair<Operation *, int64_t>> inPlace; // op, its position
  for (const std::vector<Operation *> *ops : order)
    for (Operation *op : *ops) {
      if (op->hasAttr("cdp.in_place"))
        inPlace.push_back({op, position});
      for (auto values :
           {ValueRange(op->getOperands()), ValueRange(op->getResults())})
        for (Value value : values) {
          int id = ids.lookup(value);
          if (!isActivation(id) || layout.stashOffset.count(id))
            continue;
          auto [it, added] = rangeOf.try_emplace(id, ranges.size());
          if (added) {
            rangeIds.push_back(id);
            ranges.push_back({position, position, plan.tensors(id).bytes()});
          }
          ranges[it->second].end = position;
        }
      ++position;
    }
  std::vector<int64_t> packed = packFirstFitShared(
      ranges, sharedTransients(s, inPlace, rangeOf, ranges, tables.S),
      layout.transientBytes);
  for (size_t i = 0; i < ranges.size(); ++i)
    layout.transientOffset[rangeIds[i]] = packed[i];
  layout.transientBase = slots * layout.stashBytes;
  return layout;
}

/// The copy of tensor `id` micro-batch slot `slot` uses on the device.
int Emitter::mapped(DeviceLowering &lowering, int64_t slot, int id,
                    const PipelineTables &tables) {
  if (id < 0 || id >= tables.originalTensors)
    return id;
  const plan::Tensor &t = plan.tensors(id);
  if (t.kind() != plan::ACTIVATION && t.kind() != plan::INPUT)
    return id;
  const StashLayout &layout = lowering.layout;
  auto stashed = layout.stashOffset.find(id);
  if (stashed == layout.stashOffset.end())
    slot = -1;
  int64_t key = ((slot + 1) << 32) | static_cast<uint32_t>(id);
  auto it = lowering.copies.find(key);
  if (it != lowering.copies.end())
    return it->second;
  // Elements of a repeated field keep their address when it grows.
  int copyId = plan.tensors_size();
  plan::Tensor &copy = *plan.add_tensors();
  copy = t;
  copy.set_id(copyId);
  copy.set_kind(plan::ACTIVATION);
  copy.set_offset(
      lowering.base +
      (slot < 0 ? layout.transientBase + layout.transientOffset.lookup(id)
                : slot * layout.stashBytes + stashed->second));
  copy.set_device(lowering.self);
  lowering.copies.emplace(key, copyId);
  return copyId;
}

namespace {

/// Adds micro-batch `k`'s `input` into a step accumulator (1/`share`
/// each: gradients average over all replicas' micro-batches, the loss over
/// the replica's own).
void accumulate(plan::Instruction *instruction, int input, int output,
                const std::string &phase, const std::string &location,
                int64_t k, int64_t share) {
  instruction->set_op("accumulate");
  instruction->set_phase(phase);
  instruction->set_location(location);
  instruction->add_inputs(input);
  instruction->add_outputs(output);
  plan::setIntAttribute(instruction, "slots", share);
  plan::setIntAttribute(instruction, "reset", k == 0);
}

/// The step the work of a program op belongs to: the previous step's runs
/// from step 1 on, and once more after the last step.
template <typename StepOp>
plan::Instruction *stamp(plan::Instruction *instruction, int64_t stage,
                         StepOp op) {
  instruction->set_stage(stage);
  instruction->set_micro_batch(op.getMicroBatch());
  instruction->set_time_step(op.getTimeStep());
  if (op.getStep() < 0) {
    instruction->set_min_step(1);
    instruction->set_drain(true);
  }
  return instruction;
}

} // namespace

/// A send or recv of tensor `id` with device `peer`; the tag names the
/// value and the micro-batch relative to the running step.
plan::Instruction *Emitter::message(plan::Instruction *instruction, bool isSend,
                                    int id, int64_t peer, int value,
                                    int64_t microBatch,
                                    const std::string &location,
                                    const PipelineTables &tables) {
  instruction->set_op(isSend ? "send" : "recv");
  instruction->set_phase("comm");
  instruction->set_location(location);
  if (isSend)
    instruction->add_inputs(id);
  else
    instruction->add_outputs(id);
  plan::setIntAttribute(instruction, "peer", peer);
  plan::setIntAttribute(instruction, "value", value);
  plan::setIntAttribute(instruction, "micro_batch", microBatch);
  plan::setIntAttribute(instruction, "micro_batches", tables.MB);
  if (isSend)
    plan::setIntAttribute(instruction, "cycle", tables.cycle);
  return instruction;
}

LogicalResult Emitter::lowerStageDevice(sched::StageDeviceOp op,
                                        const PipelineTables &tables) {
  DeviceLowering lowering;
  lowering.op = op;
  lowering.self = op.getIndex();
  lowering.s = op.getStage();
  lowering.mine = op.getMicroBatches();
  // zb-h1: the stage's backward runs as an I and a later W.
  bool split = false;
  op.getBody().walk([&](sched::ComputeOp compute) {
    split |= compute.getKind() == sched::WorkKind::InputGrad;
  });
  lowering.layout = layoutStash(lowering.s, op.getSlots(), split, tables);
  bool another = plan.devices_size() > lowering.self;
  plan::Device *device = lowering.device =
      another ? plan.mutable_devices(lowering.self) : plan.add_devices();
  device->set_index(lowering.self);
  lowering.base = another ? device->arena_bytes() : 0;
  // Forwards and backwards of one stage never overlap: the transient
  // tensors share one region after the slots.
  device->set_arena_bytes(lowering.base + lowering.layout.transientBase +
                          lowering.layout.transientBytes);
  for (Operation &step : op.getBody().front()) {
    LogicalResult lowered =
        llvm::TypeSwitch<Operation *, LogicalResult>(&step)
            .Case([&](sched::ComputeOp compute) {
              return addComputeRun(lowering, compute, tables);
            })
            .Case([&](sched::ParamRefreshOp refresh) {
              return addBlockRun(lowering, [&] {
                int id = tables.paramId.lookup(refresh.getParam());
                plan::Instruction *recv = message(
                    lowering.device->add_instructions(), false, id,
                    refresh.getFrom(), id, 0, plan.tensors(id).name(), tables);
                recv->set_stage(lowering.s);
                recv->set_min_step(1);
                plan::setIntAttribute(recv, "step_offset", -1);
                return success();
              });
            })
            .Default([&](Operation *update) {
              return addBlockRun(lowering, [&] {
                return lowerUpdateStep(lowering, update, tables);
              });
            });
    if (failed(lowered))
      return failure();
  }
  lowering.device = device;
  markStashSlots(lowering);
  return success();
}

/// Moves the instructions built in `scratch` into a new template, relative
/// to the run that built them (its time step, micro-batch, message and
/// dropout batch), and returns its index.
int Emitter::addTemplate(plan::Device &scratch, int64_t timeStep,
                         int64_t microBatch, int64_t messageBatch,
                         int64_t stepMicroBatch) {
  plan::Run built;
  built.set_time_step(timeStep);
  built.set_micro_batch(microBatch);
  built.set_message_batch(messageBatch);
  built.set_step_micro_batch(stepMicroBatch);
  for (plan::Instruction &instruction : *scratch.mutable_instructions())
    plan::shiftByRun(instruction, built, -1);
  plan::Template *added = plan.add_templates();
  added->mutable_instructions()->Swap(scratch.mutable_instructions());
  return plan.templates_size() - 1;
}

/// Runs `lower` with the device's instructions going to `scratch`.
LogicalResult Emitter::lowerInto(DeviceLowering &lowering,
                                 plan::Device &scratch,
                                 llvm::function_ref<LogicalResult()> lower) {
  plan::Device *device = lowering.device;
  lowering.device = &scratch;
  LogicalResult lowered = lower();
  lowering.device = device;
  return lowered;
}

/// An update-time op of a stage device's program (or a weight refresh) as
/// a template run once: its instructions share one time step.
LogicalResult Emitter::addBlockRun(DeviceLowering &lowering,
                                   llvm::function_ref<LogicalResult()> lower) {
  plan::Device scratch;
  if (failed(lowerInto(lowering, scratch, lower)))
    return failure();
  if (scratch.instructions().empty())
    return success();
  int64_t timeStep = scratch.instructions(0).time_step();
  plan::Run *run = lowering.device->add_runs();
  run->set_template_(addTemplate(scratch, timeStep, 0, 0, 0));
  run->set_time_step(timeStep);
  return success();
}

/// A sched.compute as a run of the device's template for its kind of work:
/// runs differ in time step, micro-batch, stash slot and the batch their
/// messages and dropout masks name; a template is built (in slot 0) for
/// each combination of what else changes the instructions: the kind, the
/// weight version read, the previous step's work (min_step, drain), the
/// step's first micro-batch (its accumulations reset), the tied weights
/// read at their previous version and the devices the micro-batch's other
/// stages run on.
LogicalResult Emitter::addComputeRun(DeviceLowering &lowering,
                                     sched::ComputeOp compute,
                                     const PipelineTables &tables) {
  int64_t k = compute.getMicroBatch(), j = lowering.mine[k];
  int64_t tagBatch = j + compute.getStep() * tables.MB;
  std::vector<int64_t> key = {
      static_cast<int64_t>(compute.getKind()),
      static_cast<int64_t>(compute.getVersion()), compute.getStep() < 0, k == 0,
      reinterpret_cast<intptr_t>(
          compute.getTiedPreviousAttr().getAsOpaquePointer())};
  for (int64_t s = 1; s <= tables.S; ++s)
    key.push_back(tables.runs[s][j]);
  auto [it, added] = lowering.computeTemplates.try_emplace(key, -1);
  if (added) {
    plan::Device scratch;
    lowering.slot = 0;
    if (failed(lowerInto(lowering, scratch, [&] {
          return lowerCompute(lowering, compute, tables);
        })))
      return failure();
    it->second = addTemplate(scratch, compute.getTimeStep(), k, tagBatch, j);
  }
  plan::Run *run = lowering.device->add_runs();
  run->set_template_(it->second);
  run->set_time_step(compute.getTimeStep());
  run->set_micro_batch(k);
  run->set_slot(compute.getSlot());
  run->set_message_batch(tagBatch);
  run->set_step_micro_batch(j);
  return success();
}

/// The stash copies the templates name are slot 0's: each gets the stage's
/// slot count and stride (one stash's bytes), for cdp-run to instantiate.
void Emitter::markStashSlots(DeviceLowering &lowering) {
  int64_t slots = lowering.op.getSlots();
  if (slots <= 1)
    return;
  for (const auto &[key, copyId] : lowering.copies) {
    if ((key >> 32) == 0)
      continue; // not a slot's copy
    plan::Tensor &copy = *plan.mutable_tensors(copyId);
    copy.set_slots(slots);
    copy.set_slot_stride(lowering.layout.stashBytes);
  }
}

/// The update-time ops of a device's program: versions kept, tied weights
/// received and sent, replicas' gradients exchanged, updates applied.
LogicalResult Emitter::lowerUpdateStep(DeviceLowering &lowering, Operation *op,
                                       const PipelineTables &tables) {
  plan::Device *device = lowering.device;
  int64_t s = lowering.s;
  auto add = [&](auto stepOp) {
    return stamp(device->add_instructions(), s, stepOp);
  };
  auto relative = [&](auto stepOp) { return stepOp.getStep() * tables.MB; };
  if (auto keep = dyn_cast<sched::KeepPreviousOp>(op)) {
    int param = tables.paramId.lookup(keep.getParam());
    plan::Instruction *assign = add(keep);
    assign->set_op("assign");
    assign->set_phase("update");
    assign->set_location(keep.getParam().str());
    assign->add_inputs(tables.previousVersion.lookup(param));
    assign->add_inputs(param);
    return success();
  }
  if (auto recv = dyn_cast<sched::ParamRecvOp>(op)) {
    int param = tables.paramId.lookup(recv.getParam());
    message(add(recv), false, param, recv.getFrom(), param, relative(recv),
            recv.getParam().str(), tables);
    return success();
  }
  if (auto send = dyn_cast<sched::ParamSendOp>(op)) {
    int param = tables.paramId.lookup(send.getParam());
    message(add(send), true, param, send.getTo(), param, relative(send),
            send.getParam().str(), tables);
    return success();
  }
  if (auto exchange = dyn_cast<sched::ExchangeGradientsOp>(op)) {
    lowerExchange(lowering, exchange, tables);
    return success();
  }
  if (auto clip = dyn_cast<sched::ClipStagesOp>(op))
    return lowerClipStages(lowering, clip, tables);
  if (auto shard = dyn_cast<sched::ApplyShardUpdateOp>(op))
    return lowerReplicaShardUpdate(lowering, shard, tables);
  auto apply = dyn_cast<sched::ApplyUpdateOp>(op);
  if (!apply)
    return op->emitOpError("has no lowering to a pipeline plan");
  UpdateOp update = tables.updateOf.lookup(apply.getParam());
  if (!update)
    return apply.emitOpError("names a parameter no cdp.update updates");
  if (failed(addInstruction(update, *device, false)))
    return failure();
  plan::Instruction *instruction = stamp(
      device->mutable_instructions(device->instructions_size() - 1), s, apply);
  instruction->set_inputs(1, lowering.exchanged.contains(apply.getParam())
                                 ? tables.replicaSum.lookup(apply.getParam())
                                 : tables.accumulator.lookup(apply.getParam()));
  instruction->set_phase("update");
  return success();
}

/// The rule of a stage's `update` instructions onto the instruction that
/// replaces them: their attributes, with each one's weight decay in
/// `weight_decays` (parameter groups without decay).
static void copyUpdateRule(const std::vector<plan::Instruction> &updates,
                           plan::Instruction &out) {
  for (const plan::Attribute &a : updates.front().attributes())
    if (a.name() != "weight_decay" && a.name() != "name")
      *out.add_attributes() = a;
  plan::Attribute *decays = out.add_attributes();
  decays->set_name("weight_decays");
  for (const plan::Instruction &update : updates) {
    double decay = 0;
    for (const plan::Attribute &a : update.attributes())
      if (a.name() == "weight_decay")
        decay = a.f();
    decays->mutable_floats()->add_values(decay);
  }
}

/// ZeRO stage 1 over the stage's replicas: one replica_shard_update of the
/// stage's parameters, then their replica sums; the updates' rule with
/// each parameter's weight decay in `weight_decays`, the replicas' devices
/// in `peers`.
LogicalResult Emitter::lowerReplicaShardUpdate(DeviceLowering &lowering,
                                               sched::ApplyShardUpdateOp shard,
                                               const PipelineTables &tables) {
  plan::Device *device = lowering.device;
  std::vector<plan::Instruction> updates;
  for (Attribute name : shard.getParams()) {
    UpdateOp update = tables.updateOf.lookup(cast<StringAttr>(name).getValue());
    if (!update)
      return shard.emitOpError("names a parameter no cdp.update updates");
    if (failed(addInstruction(update, *device, false)))
      return failure();
    updates.push_back(device->instructions(device->instructions_size() - 1));
    device->mutable_instructions()->RemoveLast();
  }
  plan::Instruction *instruction =
      stamp(device->add_instructions(), lowering.s, shard);
  instruction->set_op("replica_shard_update");
  instruction->set_phase("update");
  instruction->set_location("stage " + std::to_string(lowering.s));
  for (const plan::Instruction &update : updates)
    instruction->add_inputs(update.inputs(0));
  for (Attribute name : shard.getParams())
    instruction->add_inputs(
        tables.replicaSum.lookup(cast<StringAttr>(name).getValue()));
  plan::setIntAttribute(instruction, "stage", lowering.s);
  copyUpdateRule(updates, *instruction);
  plan::Attribute *peers = instruction->add_attributes();
  peers->set_name("peers");
  for (int64_t peer : shard.getPeers())
    peers->mutable_ints()->add_values(peer);
  plan::setIntAttribute(instruction, "replica", shard.getReplica());
  plan::setIntAttribute(instruction, "cycle", tables.cycle);
  return success();
}

/// Sends the step's gradient sum to the stage's other replicas, receives
/// theirs, and adds all of them in replica order.
void Emitter::lowerExchange(DeviceLowering &lowering,
                            sched::ExchangeGradientsOp exchange,
                            const PipelineTables &tables) {
  plan::Device *device = lowering.device;
  std::string name = exchange.getParam().str();
  auto add = [&]() {
    return stamp(device->add_instructions(), lowering.s, exchange);
  };
  int gradient = tables.accumulator.lookup(name);
  ArrayRef<int64_t> peers = exchange.getPeers();
  int64_t r = exchange.getReplica(), replicas = peers.size();
  const SmallVector<int> &parts = tables.incoming.find(name)->second;
  for (int64_t other = 0; other < replicas; ++other)
    if (other != r)
      message(add(), true, gradient, peers[other], gradient, r, name, tables);
  for (int64_t other = 0; other < replicas; ++other)
    if (other != r)
      message(add(), false, parts[other], peers[other], gradient, other, name,
              tables);
  int sum = tables.replicaSum.lookup(name);
  auto part = [&](int64_t q) { return q == r ? gradient : parts[q]; };
  for (int64_t q = 1; q < replicas; ++q) {
    plan::Instruction *instruction = add();
    instruction->set_op("add");
    instruction->set_phase("update");
    instruction->set_location(name);
    instruction->add_inputs(q == 1 ? part(0) : sum);
    instruction->add_inputs(part(q));
    instruction->add_outputs(sum);
  }
  lowering.exchanged.insert(name);
}

/// The stage's share of the step gradients' squared norm to every other
/// stage of the replica, theirs back, and the stage's gradients clipped by
/// the sum of all shares in stage order: every stage scales by the same
/// factor. Messages name the gradients' step (step_offset), so a stage
/// updating in the next step's program meets one updating in its own.
LogicalResult Emitter::lowerClipStages(DeviceLowering &lowering,
                                       sched::ClipStagesOp clip,
                                       const PipelineTables &tables) {
  plan::Device *device = lowering.device;
  int64_t s = lowering.s;
  auto add = [&]() { return stamp(device->add_instructions(), s, clip); };
  std::vector<int> grads;
  for (const std::string &name : plan.gradients()) {
    UpdateOp update = tables.updateOf.lookup(name);
    if (update && stageOf(update, tables.S) == s)
      grads.push_back(lowering.exchanged.contains(name)
                          ? tables.replicaSum.lookup(name)
                          : tables.accumulator.lookup(name));
  }
  int own = tables.normShare[s];
  plan::Instruction *norm = add();
  norm->set_op("squared_norm");
  norm->set_phase("update");
  norm->set_location("stage " + std::to_string(s));
  for (int id : grads)
    norm->add_inputs(id);
  norm->add_outputs(own);
  ArrayRef<int64_t> stages = clip.getStages(), devices = clip.getDevices();
  for (bool isSend : {true, false})
    for (auto [q, peer] : llvm::zip(stages, devices)) {
      if (q == s)
        continue;
      int share = tables.normShare[isSend ? s : q];
      plan::Instruction *message =
          this->message(add(), isSend, share, peer, share, 0,
                        "stage " + std::to_string(s) + " norm", tables);
      plan::setIntAttribute(message, "step_offset", clip.getStep());
    }
  std::vector<int> shares;
  for (int64_t q : stages)
    shares.push_back(tables.normShare[q]);
  plan::Instruction *scale = lowerClip(*device, tables.clip, grads, shares);
  if (!scale)
    return failure();
  stamp(scale, s, clip);
  return success();
}

/// A stage's forward or backward for one micro-batch: every op of the
/// stage, each preceded by the loads and receives of what it reads from
/// elsewhere and followed by the sends other stages read and the
/// accumulation of gradients and loss.
LogicalResult Emitter::lowerCompute(DeviceLowering &lowering,
                                    sched::ComputeOp compute,
                                    const PipelineTables &tables) {
  plan::Device *device = lowering.device;
  int64_t s = lowering.s, k = compute.getMicroBatch(), slot = lowering.slot,
          j = lowering.mine[k];
  // Over the step's micro-batches of all replicas, relative to the running
  // step, as the send/recv tags and the loader count.
  int64_t tagBatch = j + compute.getStep() * tables.MB;
  auto add = [&]() { return stamp(device->add_instructions(), s, compute); };
  auto copyOf = [&](int id) { return mapped(lowering, slot, id, tables); };
  // A tied weight reads what tied_previous says, when it is given; every
  // other parameter the run's version.
  std::optional<ArrayAttr> tiedPrevious = compute.getTiedPrevious();
  bool previous = compute.getVersion() == sched::Version::Previous;
  auto version = [&](int id) {
    auto it = tables.previousVersion.find(id);
    if (it == tables.previousVersion.end())
      return id;
    bool readsPrevious = previous;
    if (tiedPrevious && tables.tied.contains(id))
      readsPrevious = llvm::is_contained(
          tiedPrevious->getAsValueRange<StringAttr>(), plan.tensors(id).name());
    return readsPrevious ? it->second : id;
  };
  sched::WorkKind kind = compute.getKind();
  bool forward = kind == sched::WorkKind::Forward;
  const std::vector<Operation *> &ops =
      forward                               ? tables.forwardOps[s]
      : kind == sched::WorkKind::InputGrad  ? tables.inputGradOps[s]
      : kind == sched::WorkKind::WeightGrad ? tables.weightGradOps[s]
                                            : tables.backwardOps[s];
  // What an earlier half of this micro-batch's work brought in stays.
  const StashLayout &layout = lowering.layout;
  auto broughtEarlier = [&](int id) {
    return (!forward && layout.broughtByForward.count(id)) ||
           (kind == sched::WorkKind::WeightGrad &&
            layout.broughtByInputGrad.count(id));
  };
  std::set<int> arrived, sent;
  for (Operation *op : ops) {
    // Bring in what this micro-batch's op reads from elsewhere.
    for (Value operand : op->getOperands()) {
      int id = ids.lookup(operand);
      if (arrived.count(id) || broughtEarlier(id))
        continue;
      if (isa<BlockArgument>(operand)) {
        plan::Instruction *load = add();
        load->set_op("load");
        load->set_phase(forward ? "forward" : "backward");
        load->set_location(plan.tensors(id).name());
        load->add_outputs(copyOf(id));
        plan::setIntAttribute(load, "input", id);
        plan::setIntAttribute(load, "micro_batch", tagBatch);
        arrived.insert(id);
        continue;
      }
      Operation *producer = operand.getDefiningOp();
      if (!producer || isa<ParamOp, ConstantOp>(producer) ||
          stageOf(producer, tables.S) == s)
        continue;
      message(add(), false, copyOf(id),
              tables.runs[stageOf(producer, tables.S)][j], id, tagBatch,
              locationOf(producer), tables);
      arrived.insert(id);
    }
    if (failed(addInstruction(op, *device, false)))
      return failure();
    plan::Instruction *instruction =
        stamp(device->mutable_instructions(device->instructions_size() - 1), s,
              compute);
    for (int &input : *instruction->mutable_inputs())
      input = version(copyOf(input));
    for (int &output : *instruction->mutable_outputs())
      output = copyOf(output);
    // Dropout draws its mask from the micro-batch's index in the step, as
    // under single and dp, not from the device's own count.
    if (isa<DropoutOp>(op))
      plan::setIntAttribute(instruction, "step_micro_batch", j);
    if (auto gradient = dyn_cast<GradientOp>(op))
      accumulate(add(), copyOf(ids.lookup(gradient.getGrad())),
                 tables.accumulator.lookup(gradient.getName()), "backward",
                 gradient.getName().str(), k, tables.MB);
    if (failed(sendResults(lowering, compute, op, tagBatch, sent, tables)))
      return failure();
  }
  return success();
}

/// After `op` ran for a micro-batch: the loss into its accumulator, and a
/// send of every result another stage reads, once per reading stage.
LogicalResult Emitter::sendResults(DeviceLowering &lowering,
                                   sched::ComputeOp compute, Operation *op,
                                   int64_t tagBatch, std::set<int> &sent,
                                   const PipelineTables &tables) {
  int64_t s = lowering.s, k = compute.getMicroBatch();
  auto add = [&]() {
    return stamp(lowering.device->add_instructions(), s, compute);
  };
  auto copyOf = [&](int id) {
    return mapped(lowering, lowering.slot, id, tables);
  };
  for (Value result : op->getResults()) {
    int id = ids.lookup(result);
    if (tables.lossAccumulator >= 0 && id == tables.lossResult)
      accumulate(add(), copyOf(id), tables.lossAccumulator, "forward", "loss",
                 k, lowering.mine.size());
    std::set<int64_t> readers;
    for (Operation *user : result.getUsers())
      if (!isa<func::ReturnOp>(user) && stageOf(user, tables.S) != s)
        readers.insert(stageOf(user, tables.S));
    if (!readers.empty() && plan.tensors(id).dtype() == plan::BOOL)
      return op->emitOpError("sends a boolean tensor across a stage cut, "
                             "which pipelines do not support yet "
                             "(cut elsewhere with --stage-boundaries)");
    for (int64_t q : readers) {
      if (!sent.insert(q * (1 << 24) + id).second)
        continue;
      message(add(), true, copyOf(id), tables.runs[q][lowering.mine[k]], id,
              tagBatch, locationOf(op), tables);
    }
  }
  return success();
}

/// dp and cdp lower cdp-schedule-slots' sched.step_program: one program
/// per device (slot), every stage of its own micro-batch; each stage's
/// gradients go to the communicator after its backward and come back
/// reduced just before the forward that needs the next version.
LogicalResult Emitter::emitDataParallel(int64_t arenaBytes) {
  sched::StepProgramOp program;
  for (Operation &op : func->getParentOfType<ModuleOp>().getOps())
    if (auto found = dyn_cast<sched::StepProgramOp>(op))
      program = found;
  if (!program || !program.getReduceAt() || !program.getVersionDelay() ||
      !program.getLiveVersions() || !program.getReduction())
    return func.emitError("no data-parallel step program; run "
                          "cdp-schedule-slots first");
  DataParallelTables tables;
  tables.N = program.getMicroBatches();
  tables.L = program.getStages();
  tables.chain = *program.getReduction() == sched::Reduction::Chain;
  plan.set_strategy(program.getStrategy().str());
  plan.set_micro_batches(tables.N);
  plan::Schedule *out = plan.mutable_schedule();
  out->set_stages(tables.L);
  out->set_cycle(program.getCycle());
  for (auto device : program.getBody().getOps<sched::SlotDeviceOp>())
    out->add_offsets(device.getOffset());
  for (Attribute row : program.getVersionDelayAttr()) {
    plan::Ints *ints = out->add_version_delay();
    for (int64_t d : cast<DenseI64ArrayAttr>(row).asArrayRef())
      ints->add_values(d);
  }
  for (int64_t t : program.getReduceAtAttr().asArrayRef())
    out->add_reduce_at(t);
  for (int64_t v : program.getLiveVersionsAttr().asArrayRef())
    out->add_live_versions(v);
  if (!program.getRule().empty())
    out->set_rule(program.getRule().str());
  out->set_reduce(tables.chain ? "chain" : "allreduce");
  program.walk([&](sched::WaitReductionOp wait) {
    tables.zero = std::max(tables.zero, wait.getZero());
  });
  program.walk([&](sched::ClipMeansOp clip) {
    tables.zero = std::max(tables.zero, clip.getZero());
  });
  // CDP-ZeRO: every use of a stage arrives point to point (`from`).
  program.walk([&](sched::GatherParamsOp gather) {
    tables.cdpZero |= gather.getFrom() >= 0;
  });
  if (tables.cdpZero)
    tables.zero = 3;
  out->set_zero(tables.zero);
  program.walk([&](sched::SparseSendOp send) {
    tables.sparse = true;
    tables.exchange.residual = send.getResidual();
  });
  if (failed(addReducedTensors(tables)))
    return failure();
  if (tables.sparse) {
    if (failed(prepareExchange(tables)))
      return failure();
    arenaBytes = sparse::addTensors(plan, tables.exchange, arenaBytes);
  }
  if (tables.zero == 3)
    arenaBytes = addShardGroups(program, tables, arenaBytes);
  func.walk([&](ClipGradNormOp clip) { tables.clip = clip; });
  if (tables.clip && tables.zero >= 2) { // each device's share of the norm
    plan::Tensor *share = plan.add_tensors();
    share->set_id(plan.tensors_size() - 1);
    share->set_name("zero@norm_share");
    share->set_dtype(plan::F32);
    share->set_kind(plan::REDUCED);
    share->add_shape(1);
    share->set_bytes(4);
    tables.normShare = share->id();
  }
  plan.clear_devices();
  // Devices whose programs differ only in their offset and micro-batch run
  // one template (at 1024 devices, a handful of distinct programs).
  std::map<std::vector<int64_t>, int> templates;
  for (auto device : program.getBody().getOps<sched::SlotDeviceOp>()) {
    int64_t d = device.getIndex(), offset = device.getOffset();
    auto [it, added] =
        templates.try_emplace(slotProgramKey(device, tables), -1);
    plan::Device *out = plan.add_devices();
    out->set_index(d);
    out->set_arena_bytes(arenaBytes);
    if (added) {
      plan::Device scratch;
      if (failed(lowerSlotDevice(device, scratch, tables)))
        return failure();
      it->second = addTemplate(scratch, offset, d, 0, 0);
    }
    plan::Run *run = out->add_runs();
    run->set_template_(it->second);
    run->set_time_step(offset);
    run->set_micro_batch(d);
  }
  return success();
}

/// What sets a data-parallel device's program apart from another's besides
/// its offset and micro-batch: its schedule ops (times relative to the
/// offset, waits' delays and first steps) and, for the chain, whether it
/// is the last device (its reduce_start writes the means).
std::vector<int64_t> Emitter::slotProgramKey(sched::SlotDeviceOp op,
                                             const DataParallelTables &tables) {
  std::vector<int64_t> key = {tables.chain && op.getIndex() == tables.N - 1};
  // CDP-ZeRO's messages and updates name their devices: no two slots share.
  if (tables.cdpZero)
    key.push_back(op.getIndex());
  for (Operation &step : op.getBody().front()) {
    if (auto compute = dyn_cast<sched::SlotComputeOp>(step))
      key.insert(key.end(), {0, compute.getStage(),
                             static_cast<int64_t>(compute.getKind()),
                             compute.getTimeStep()});
    else if (auto wait = dyn_cast<sched::WaitReductionOp>(step))
      key.insert(key.end(), {1, wait.getStage(), wait.getTimeStep(),
                             wait.getMinStep(), wait.getDelay()});
    else if (auto start = dyn_cast<sched::StartReductionOp>(step))
      key.insert(key.end(), {2, start.getStage(), start.getTimeStep()});
    else if (auto relay = dyn_cast<sched::ChainRelayOp>(step))
      key.insert(key.end(), {3, relay.getStage(), relay.getTimeStep(),
                             relay.getStepOffset()});
    else if (auto clip = dyn_cast<sched::ClipMeansOp>(step))
      key.insert(key.end(),
                 {5, clip.getTimeStep(), clip.getMinStep(), clip.getZero()});
    else if (auto clip = dyn_cast<sched::ClipOwnOp>(step))
      key.insert(key.end(), {6, clip.getTimeStep()});
    else if (auto gather = dyn_cast<sched::GatherParamsOp>(step))
      key.insert(key.end(), {7, gather.getStage(), gather.getTimeStep(),
                             gather.getFrom()});
    else if (auto send = dyn_cast<sched::SendParamsOp>(step))
      key.insert(key.end(),
                 {9, send.getStage(), send.getTimeStep(), send.getUse(),
                  send.getTo(), send.getStepOffset(), send.getMaster()});
    else if (auto update = dyn_cast<sched::OwnerUpdateOp>(step))
      key.insert(key.end(), {10, update.getStage(), update.getTimeStep(),
                             update.getFrom()});
    else if (auto release = dyn_cast<sched::ReleaseParamsOp>(step))
      key.insert(key.end(), {8, release.getStage(), release.getTimeStep()});
    else if (auto absorb = dyn_cast<sched::AbsorbGradientsOp>(step))
      key.insert(key.end(), {11, absorb.getStage(), absorb.getTimeStep()});
    else if (auto send = dyn_cast<sched::SparseSendOp>(step))
      key.insert(key.end(), {12, send.getStage(), send.getTimeStep()});
    else if (auto apply = dyn_cast<sched::SparseApplyOp>(step))
      key.insert(key.end(), {13, apply.getStage(), apply.getTimeStep()});
    else
      key.insert(key.end(), {4, reinterpret_cast<intptr_t>(&step)});
  }
  return key;
}

/// Per stage: the parameters, their gradients, the reduced buffers their
/// updates read, and (--cdp-reduce chain) the chain buffers.
LogicalResult Emitter::addReducedTensors(DataParallelTables &tables) {
  int64_t L = tables.L;
  Block &body = func.getBody().front();
  auto &byStage = tables.byStage;
  byStage.assign(L + 1, {});
  llvm::StringMap<UpdateOp> updates;
  body.walk([&](UpdateOp update) { updates[update.getName()] = update; });
  llvm::StringMap<int> paramIds;
  for (const plan::Tensor &t : plan.tensors())
    if (t.kind() == plan::PARAM)
      paramIds[t.name()] = t.id();
  // Gradients by name, once (a walk of the body per gradient was
  // quadratic: 52 s for 10k MatMuls).
  llvm::StringMap<GradientOp> gradients;
  body.walk([&](GradientOp g) { gradients[g.getName()] = g; });
  plan.clear_applied_gradients();
  std::vector<int64_t> stageBytes(L, 0);
  for (int i = 0; i < plan.gradients_size(); ++i) {
    const std::string &name = plan.gradients(i);
    GradientOp gradient = gradients.lookup(name);
    if (!gradient)
      return func.emitOpError("has no gradient op for '" + name + "'");
    auto stage = gradient->getAttrOfType<IntegerAttr>("cdp.stage");
    UpdateOp update = updates.lookup(name);
    if (!stage || !update)
      return gradient.emitOpError("has no stage or no update");
    int paramId = paramIds.lookup(name);
    plan::Tensor reduced = plan.tensors(paramId);
    stageBytes[stage.getInt() - 1] += reduced.bytes();
    // ZeRO stages 2 and 3 reduce into shards (or, CDP-ZeRO, the owner's
    // buffer): a whole mean per parameter would be memory nothing reads.
    if (tables.zero >= 2 || tables.sparse) { // laysa: no mean either
      byStage[stage.getInt()].push_back(
          {paramId, ids.lookup(gradient.getGrad()), -1, update});
      continue;
    }
    reduced.set_id(plan.tensors_size());
    reduced.set_kind(plan::REDUCED);
    reduced.clear_data();
    reduced.set_trainable(false);
    *plan.add_tensors() = reduced;
    plan.add_applied_gradients(reduced.id());
    byStage[stage.getInt()].push_back(
        {paramId, ids.lookup(gradient.getGrad()), reduced.id(), update});
  }
  for (int64_t b : stageBytes)
    plan.mutable_schedule()->add_stage_param_bytes(b);
  // ZeRO stages 2 and 3: per stage one shard of the mean gradients per
  // device; no device holds a whole mean gradient to report as applied.
  tables.gradShards.assign(L + 1, -1);
  for (int64_t l = 1; tables.zero >= 2 && !tables.cdpZero && l <= L; ++l) {
    if (byStage[l].empty())
      continue;
    int64_t shard = ShardLayout({stageBytes[l - 1] / 4}, tables.N).shardSize();
    plan::Tensor buffer;
    buffer.set_id(plan.tensors_size());
    buffer.set_name("stage" + std::to_string(l) + "@gradient_shard");
    buffer.set_dtype(plan::F32);
    buffer.set_kind(plan::REDUCED);
    buffer.add_shape(shard);
    buffer.set_bytes(4 * shard);
    *plan.add_tensors() = buffer;
    tables.gradShards[l] = buffer.id();
  }
  if (tables.zero >= 2 || tables.sparse)
    plan.clear_applied_gradients();
  // --cdp-reduce chain: per stage two buffers, by step parity, that hold a
  // step's mean from its arrival to the wait that applies it (a delayed
  // stage's next mean arrives before the wait: CDP's second version).
  tables.chainBuffers.assign(L + 1, {-1, -1});
  for (int64_t l = 1; tables.chain && !tables.cdpZero && l <= L; ++l) {
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
      tables.chainBuffers[l][parity] = buffer.id();
    }
  }
  return success();
}

/// laysa: each stage's trained parameters with their gradients, the
/// entries cdp-sparsify-gradients chose to send and their update's rule.
LogicalResult Emitter::prepareExchange(DataParallelTables &tables) {
  sparse::Exchange &exchange = tables.exchange;
  exchange.devices = tables.N;
  exchange.cycle = 2 * tables.L + 2;
  exchange.stages.assign(tables.L + 1, {});
  plan::Device scratch;
  for (int64_t l = 1; l <= tables.L; ++l)
    for (auto t : tables.byStage[l]) {
      auto count = t.update->getAttrOfType<IntegerAttr>("cdp.sparse_count");
      if (!count)
        return t.update.emitOpError("has no cdp.sparse_count; run "
                                    "cdp-sparsify-gradients first");
      if (failed(addInstruction(t.update, scratch, false)))
        return failure();
      sparse::Param param;
      param.param = t.param;
      param.grad = t.grad;
      param.count = count.getInt();
      param.update = scratch.instructions(scratch.instructions_size() - 1);
      exchange.stages[l].params.push_back(std::move(param));
    }
  return success();
}

/// ZeRO stage 3: per stage, the device's SHARD of its parameters, and the
/// parameters themselves moved into the gather region after the arena (at
/// the offset cdp-place-gathered-params chose), one after another with the
/// padding behind them, so that the all-gather writes them in place.
/// CDP-ZeRO: a stage's shard is its whole master copy, on its owner only,
/// beside the owner's buffer for the mean gradients; the stage travels
/// point to point in one arena tensor over its parameters (the region).
/// Returns the device's arena with the region.
int64_t Emitter::addShardGroups(sched::StepProgramOp program,
                                DataParallelTables &tables,
                                int64_t arenaBytes) {
  std::map<int64_t, int64_t> offsets;
  program.walk([&](sched::GatherParamsOp gather) {
    offsets[gather.getStage()] = gather.getOffset();
  });
  tables.owners.assign(tables.L + 1, -1);
  tables.regions.assign(tables.L + 1, -1);
  tables.means.assign(tables.L + 1, -1);
  for (auto device : program.getBody().getOps<sched::SlotDeviceOp>())
    device.walk([&](sched::OwnerUpdateOp update) {
      tables.owners[update.getStage()] = device.getIndex();
    });
  int64_t base = (arenaBytes + 63) / 64 * 64, end = arenaBytes;
  tables.paramShards.assign(tables.L + 1, -1);
  tables.gathered.assign(tables.L + 1, {});
  auto addTensor = [&](const std::string &name, plan::TensorKind kind,
                       int64_t elements, int64_t offset) {
    plan::Tensor *t = plan.add_tensors();
    t->set_id(plan.tensors_size() - 1);
    t->set_name(name);
    t->set_dtype(plan::F32);
    t->set_kind(kind);
    t->add_shape(elements);
    t->set_bytes(4 * elements);
    t->set_offset(offset);
    return t->id();
  };
  for (auto [l, offset] : offsets) {
    std::vector<int64_t> sizes;
    plan::ShardGroup *group = plan.mutable_schedule()->add_shard_groups();
    group->set_stage(l);
    int64_t at = base + offset;
    for (const auto &t : tables.byStage[l]) {
      plan::Tensor *param = plan.mutable_tensors(t.param);
      param->set_offset(at);
      at += param->bytes();
      sizes.push_back(param->bytes() / 4);
      group->add_params(t.param);
      tables.gathered[l].push_back(t.param);
    }
    ShardLayout layout(sizes, tables.cdpZero ? 1 : tables.N);
    std::string stage = "stage" + std::to_string(l);
    group->set_padding(-1);
    if (tables.cdpZero) {
      int64_t owner = tables.owners[l];
      group->set_owner(static_cast<int32_t>(owner));
      group->set_region(addTensor(stage + "@params", plan::ACTIVATION,
                                  layout.totalSize(), base + offset));
      tables.regions[l] = group->region();
      group->set_shard(
          addTensor(stage + "@master", plan::SHARD, layout.totalSize(), 0));
      tables.means[l] = addTensor(stage + "@mean_gradient", plan::REDUCED,
                                  layout.totalSize(), 0);
      group->set_mean(tables.means[l]);
      for (int id : {group->shard(), tables.means[l]})
        plan.mutable_tensors(id)->set_device(static_cast<int32_t>(owner));
      tables.paramShards[l] = group->shard();
      end = std::max(end, base + offset + 4 * layout.totalSize());
      continue;
    }
    if (layout.padding() > 0) {
      group->set_padding(addTensor(stage + "@gather_padding", plan::ACTIVATION,
                                   layout.padding(), at));
      tables.gathered[l].push_back(group->padding());
    }
    group->set_shard(
        addTensor(stage + "@param_shard", plan::SHARD, layout.shardSize(), 0));
    tables.paramShards[l] = group->shard();
    end = std::max(end, base + offset + 4 * layout.paddedSize());
  }
  return end;
}

/// Slot d's program, op by op: a stage's forward or backward ops in the
/// order of @main; the wait for a stage's reduced gradients with its
/// updates; the start of a stage's reduction; the chain's relays.
LogicalResult Emitter::lowerSlotDevice(sched::SlotDeviceOp op,
                                       plan::Device &out,
                                       const DataParallelTables &tables) {
  int64_t d = op.getIndex(), s = op.getOffset();
  plan::Device *device = &out;
  auto stamp = [&](plan::Instruction *instruction, int64_t stage,
                   int64_t time) {
    instruction->set_stage(stage);
    instruction->set_micro_batch(d);
    instruction->set_time_step(s + time);
    return instruction;
  };
  // A reduction instruction of stage l: waits, starts and relays.
  auto stageInstruction = [&](const char *opName, int64_t l, int64_t time,
                              const char *phase) {
    plan::Instruction *instruction = stamp(device->add_instructions(), l, time);
    instruction->set_op(opName);
    instruction->set_location("stage " + std::to_string(l));
    instruction->set_phase(phase);
    plan::setIntAttribute(instruction, "stage", l);
    return instruction;
  };
  int64_t L = tables.L;
  // A stage's mean gradients of step t - 1 - delay, into its reduced
  // buffers (from the chain's buffers with --cdp-reduce chain).
  auto waitForMeans = [&](int64_t l, int64_t time, int64_t minStep,
                          int64_t delay) {
    plan::Instruction *instruction = stageInstruction(
        tables.chain ? "chain_wait" : "reduce_wait", l, time, "update");
    instruction->set_min_step(minStep);
    if (tables.chain)
      for (int buffer : tables.chainBuffers[l])
        instruction->add_inputs(buffer);
    for (const auto &t : tables.byStage[l])
      instruction->add_outputs(t.reduced);
    plan::setIntAttribute(instruction, "delay", delay);
  };
  // A stage's updates from its reduced buffers.
  auto applyUpdates = [&](int64_t l, int64_t time,
                          int64_t minStep) -> LogicalResult {
    for (const auto &t : tables.byStage[l]) {
      if (failed(addInstruction(t.update, *device, false)))
        return failure();
      plan::Instruction *update =
          device->mutable_instructions(device->instructions_size() - 1);
      update->set_inputs(1, t.reduced);
      update->set_phase("update");
      update->set_min_step(minStep);
      stamp(update, l, time);
    }
    return success();
  };
  // ZeRO: one shard_update of the stage instead of its updates: the
  // parameters (stage 3: their shard, with each one's `sizes`), then their
  // mean gradients (stages 2 and 3: the device's shard of them); the
  // updates' rule, with each parameter's weight decay in `weight_decays`.
  auto shardUpdate = [&](int64_t l, int64_t time, int64_t minStep,
                         int64_t zero) -> LogicalResult {
    const auto &tensors = tables.byStage[l];
    if (tensors.empty())
      return success();
    std::vector<plan::Instruction> updates;
    for (const auto &t : tensors) {
      if (failed(addInstruction(t.update, *device, false)))
        return failure();
      updates.push_back(device->instructions(device->instructions_size() - 1));
      device->mutable_instructions()->RemoveLast();
    }
    plan::Instruction *shard =
        stageInstruction("shard_update", l, time, "update");
    shard->set_min_step(minStep);
    if (zero == 3) { // the parameters' shard; the sizes give each its rule
      shard->add_inputs(tables.paramShards[l]);
      plan::Attribute *sizes = shard->add_attributes();
      sizes->set_name("sizes");
      for (const plan::Instruction &update : updates)
        sizes->mutable_ints()->add_values(
            plan.tensors(update.inputs(0)).bytes() / 4);
    } else {
      for (const plan::Instruction &update : updates)
        shard->add_inputs(update.inputs(0));
    }
    if (tables.cdpZero) // the owner's whole stage from the chain's mean
      shard->add_inputs(tables.means[l]);
    else if (zero >= 2)
      shard->add_inputs(tables.gradShards[l]);
    else
      for (const auto &t : tensors)
        shard->add_inputs(t.reduced);
    copyUpdateRule(updates, *shard);
    plan::setIntAttribute(shard, "cycle", 2 * L);
    plan::setIntAttribute(shard, "zero", zero);
    if (tables.cdpZero)
      plan::setIntAttribute(shard, "owner", d);
    return success();
  };
  // CDP-ZeRO's messages of a stage's parameters: the value names the
  // stage and the receiver's cycle time, the step the tag carries.
  auto paramMessage = [&](const char *opName, int64_t l, int64_t time,
                          int64_t peer, int64_t use, int64_t stepOffset) {
    plan::Instruction *instruction = stageInstruction(opName, l, time, "comm");
    plan::setIntAttribute(instruction, "peer", peer);
    plan::setIntAttribute(instruction, "value", use * 4096 + l);
    plan::setIntAttribute(instruction, "micro_batch", 0);
    plan::setIntAttribute(instruction, "micro_batches", 1);
    plan::setIntAttribute(instruction, "cycle", 2 * L);
    if (stepOffset != 0)
      plan::setIntAttribute(instruction, "step_offset", stepOffset);
    return instruction;
  };
  // laysa: the exchange's instructions of stage l at `time`.
  auto exchangeStep = [&](int64_t l, int64_t time) -> sparse::MakeInstruction {
    return [&, l, time](const char *opName, const char *phase) {
      return stageInstruction(opName, l, time, phase);
    };
  };
  // dp with clipping: every stage's mean, then one clip of them all, then
  // the updates. With ZeRO stage 2 or 3 each device holds its shard of the
  // means only: the squared norm is its shards' share, summed over the
  // devices (norm_all_reduce), and each device clips its own shards.
  auto clipMeans = [&](sched::ClipMeansOp clip) -> LogicalResult {
    int64_t time = clip.getTimeStep(), minStep = clip.getMinStep();
    std::vector<int> means, partials;
    if (tables.zero >= 2) {
      for (int64_t l = 1; l <= L; ++l)
        if (!tables.byStage[l].empty())
          means.push_back(tables.gradShards[l]);
      plan::Instruction *share =
          stageInstruction("squared_norm", 1, time, "update");
      share->set_min_step(minStep);
      for (int id : means)
        share->add_inputs(id);
      share->add_outputs(tables.normShare);
      plan::Instruction *sum =
          stageInstruction("norm_all_reduce", 1, time, "update");
      sum->set_min_step(minStep);
      sum->add_inputs(tables.normShare);
      plan::setIntAttribute(sum, "cycle", 2 * L);
      partials.push_back(tables.normShare);
    } else {
      for (int64_t l = 1; l <= L; ++l) {
        if (tables.byStage[l].empty())
          continue;
        waitForMeans(l, time, minStep, 0);
        for (const auto &t : tables.byStage[l])
          means.push_back(t.reduced);
      }
    }
    plan::Instruction *instruction =
        lowerClip(*device, tables.clip, means, partials);
    if (!instruction)
      return failure();
    stamp(instruction, 1, time)->set_min_step(minStep);
    for (int64_t l = 1; l <= L; ++l)
      if (failed(tables.zero > 0 ? shardUpdate(l, time, minStep, tables.zero)
                                 : applyUpdates(l, time, minStep)))
        return failure();
    return success();
  };
  for (Operation &step : op.getBody().front()) {
    if (auto compute = dyn_cast<sched::SlotComputeOp>(step)) {
      if (failed(lowerSlotCompute(*device, compute, s, d, L)))
        return failure();
    } else if (auto wait = dyn_cast<sched::WaitReductionOp>(step)) {
      int64_t l = wait.getStage(), zero = wait.getZero();
      if (zero < 2) // stage 2's and 3's shard came with the reduce-scatter
        waitForMeans(l, wait.getTimeStep(), wait.getMinStep(), wait.getDelay());
      if (failed(
              zero > 0
                  ? shardUpdate(l, wait.getTimeStep(), wait.getMinStep(), zero)
                  : applyUpdates(l, wait.getTimeStep(), wait.getMinStep())))
        return failure();
    } else if (auto clip = dyn_cast<sched::ClipMeansOp>(step)) {
      if (failed(clipMeans(clip)))
        return failure();
    } else if (auto clip = dyn_cast<sched::ClipOwnOp>(step)) {
      std::vector<int> own;
      for (int64_t l = 1; l <= L; ++l)
        for (const auto &t : tables.byStage[l])
          own.push_back(t.grad);
      plan::Instruction *instruction = lowerClip(*device, tables.clip, own);
      if (!instruction)
        return failure();
      // Not an update block's: it runs in the step, before the reductions.
      stamp(instruction, 1, clip.getTimeStep())->set_phase("backward");
    } else if (auto start = dyn_cast<sched::StartReductionOp>(step)) {
      int64_t l = start.getStage();
      const char *opName = start.getOwner() >= 0  ? "chain_reduce"
                           : start.getZero() >= 2 ? "shard_reduce"
                           : tables.chain         ? "chain_reduce"
                                                  : "reduce_start";
      plan::Instruction *instruction =
          stageInstruction(opName, l, start.getTimeStep(), "comm");
      for (const auto &t : tables.byStage[l])
        instruction->add_inputs(t.grad);
      if (start.getZero() >= 2 && !tables.cdpZero)
        instruction->add_outputs(tables.gradShards[l]);
      if (tables.chain && d == tables.N - 1 && !tables.cdpZero)
        for (int buffer : tables.chainBuffers[l])
          instruction->add_outputs(buffer);
      plan::setIntAttribute(instruction, "cycle", 2 * L);
      if (start.getOwner() >= 0) // CDP-ZeRO: the last slot's mean goes there
        plan::setIntAttribute(instruction, "owner", start.getOwner());
    } else if (auto gather = dyn_cast<sched::GatherParamsOp>(step);
               gather && gather.getFrom() >= 0) {
      int64_t l = gather.getStage(), time = gather.getTimeStep();
      if (gather.getFrom() == d) { // the owner's own master copy
        plan::Instruction *copy =
            stageInstruction("master_copy", l, time, "comm");
        copy->add_inputs(tables.paramShards[l]);
        copy->add_outputs(tables.regions[l]);
      } else {
        paramMessage("recv", l, time, gather.getFrom(), time, 0)
            ->add_outputs(tables.regions[l]);
      }
    } else if (auto send = dyn_cast<sched::SendParamsOp>(step)) {
      int64_t l = send.getStage();
      plan::Instruction *instruction =
          paramMessage("send", l, send.getTimeStep(), send.getTo(),
                       send.getUse(), send.getStepOffset());
      instruction->add_inputs(send.getMaster() ? tables.paramShards[l]
                                               : tables.regions[l]);
      instruction->set_ahead(send.getStepOffset() == 1);
    } else if (auto update = dyn_cast<sched::OwnerUpdateOp>(step)) {
      // The mean of step t - 1 from the chain's last slot, then the update
      // of the master copy.
      int64_t l = update.getStage(), time = update.getTimeStep();
      plan::Instruction *wait =
          stageInstruction("chain_wait", l, time, "update");
      wait->set_min_step(1);
      wait->add_outputs(tables.means[l]);
      plan::setIntAttribute(wait, "delay", 0);
      plan::setIntAttribute(wait, "from", update.getFrom());
      if (failed(shardUpdate(l, time, 1, 3)))
        return failure();
    } else if (auto gather = dyn_cast<sched::GatherParamsOp>(step)) {
      int64_t l = gather.getStage();
      plan::Instruction *instruction =
          stageInstruction("shard_gather", l, gather.getTimeStep(), "comm");
      instruction->add_inputs(tables.paramShards[l]);
      for (int id : tables.gathered[l])
        instruction->add_outputs(id);
      plan::setIntAttribute(instruction, "cycle", 2 * L);
    } else if (auto release = dyn_cast<sched::ReleaseParamsOp>(step)) {
      int64_t l = release.getStage();
      plan::Instruction *instruction =
          stageInstruction("shard_release", l, release.getTimeStep(), "comm");
      if (tables.cdpZero)
        instruction->add_inputs(tables.regions[l]);
      else
        for (int id : tables.gathered[l])
          instruction->add_inputs(id);
    } else if (auto absorb = dyn_cast<sched::AbsorbGradientsOp>(step)) {
      sparse::lowerAbsorb(
          tables.exchange, absorb.getStage(),
          exchangeStep(absorb.getStage(), absorb.getTimeStep()));
    } else if (auto send = dyn_cast<sched::SparseSendOp>(step)) {
      sparse::lowerSend(tables.exchange, send.getStage(),
                        exchangeStep(send.getStage(), send.getTimeStep()));
    } else if (auto apply = dyn_cast<sched::SparseApplyOp>(step)) {
      sparse::lowerApply(tables.exchange, apply.getStage(),
                         exchangeStep(apply.getStage(), apply.getTimeStep()));
    } else if (auto relay = dyn_cast<sched::ChainRelayOp>(step)) {
      int64_t l = relay.getStage();
      plan::Instruction *instruction =
          stageInstruction("chain_relay", l, relay.getTimeStep(), "comm");
      instruction->set_min_step(relay.getStepOffset());
      for (int buffer : tables.chainBuffers[l])
        instruction->add_outputs(buffer);
      plan::setIntAttribute(instruction, "cycle", 2 * L);
      plan::setIntAttribute(instruction, "step_offset", relay.getStepOffset());
    } else {
      return step.emitOpError("has no lowering to a data-parallel plan");
    }
  }
  return success();
}

/// The graph's clip_grad_norm, scaling `grads` (the plan's tensors the
/// step's updates read) in place; with `partials`, the squared norm is
/// their sum (every stage's share) instead of the gradients' own. Null
/// after reporting an error.
plan::Instruction *Emitter::lowerClip(plan::Device &device, ClipGradNormOp clip,
                                      ArrayRef<int> grads,
                                      ArrayRef<int> partials) {
  if (!clip) {
    func.emitError("a clip step without a cdp.clip_grad_norm");
    return nullptr;
  }
  if (failed(addInstruction(clip, device, false)))
    return nullptr;
  plan::Instruction *instruction =
      device.mutable_instructions(device.instructions_size() - 1);
  instruction->clear_inputs();
  for (int id : partials)
    instruction->add_inputs(id);
  for (int id : grads)
    instruction->add_inputs(id);
  if (!partials.empty())
    plan::setIntAttribute(instruction, "partials", partials.size());
  return instruction;
}

/// A stage's forward (ops without a phase, buffer writes included) or
/// backward ops, in the order of @main. Ops without a time of their own
/// (buffer writes after a forward) run in the time step of the instruction
/// before them, so that a device's times never decrease along its stream.
LogicalResult Emitter::lowerSlotCompute(plan::Device &device,
                                        sched::SlotComputeOp compute,
                                        int64_t offset, int64_t d, int64_t L) {
  bool backward = compute.getKind() == sched::WorkKind::Backward;
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (isa<ParamOp, ConstantOp, UpdateOp, ClipGradNormOp>(op))
      continue;
    auto phase = op.getAttrOfType<StringAttr>("cdp.phase");
    auto stage = op.getAttrOfType<IntegerAttr>("cdp.stage");
    if ((stage ? stage.getInt() : L) != compute.getStage() ||
        (phase && phase.getValue() == "backward") != backward)
      continue;
    if (failed(addInstruction(&op, device, false)))
      return failure();
    plan::Instruction *instruction =
        device.mutable_instructions(device.instructions_size() - 1);
    auto time = op.getAttrOfType<IntegerAttr>("cdp.time");
    int64_t previous =
        device.instructions_size() > 1
            ? device.instructions(device.instructions_size() - 2).time_step() -
                  offset
            : 0;
    instruction->set_stage(compute.getStage());
    instruction->set_micro_batch(d);
    instruction->set_time_step(offset + (time ? time.getInt() : previous));
  }
  return success();
}

} // namespace

LogicalResult buildPlan(ModuleOp module, const EmitOptions &options,
                        plan::Plan &plan) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return module.emitError("no func.func @main to emit");
  if (failed(Emitter(func, plan).run(options)))
    return failure();
  for (plan::Device &device : *plan.mutable_devices())
    device.set_backend(options.backend);
  return success();
}

} // namespace cdp
