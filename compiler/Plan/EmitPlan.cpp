//===- EmitPlan.cpp - cdp IR to the plan artefact -------------------------===//
//
// One plan tensor per SSA value of @main, one instruction per op, in op
// order (the single-device schedule). The forward slice that computes the
// model's first output is emitted again as the evaluation stream, with
// BatchNorm on running statistics and dropout off.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

using namespace mlir;

namespace cdp {
namespace emit {

plan::DType dtypeOf(Type element) {
  if (element.isF32())
    return plan::F32;
  if (element.isBF16())
    return plan::BF16;
  if (element.isF16())
    return plan::F16;
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

/// The plan's fields every strategy sets alike.
void Emitter::setPlanHeader(const EmitOptions &options) {
  plan.set_producer("cdp-compile");
  plan.set_strategy(strategyName(options.strategy));
  plan.set_inference(options.inference);
  plan.set_source_name(options.sourceName);
  plan.set_optimizer(options.optimizer);
  if (auto reuse = func->getAttrOfType<StringAttr>("cdp.memory_reuse"))
    plan.set_memory_reuse(reuse.str());
  plan.set_micro_batches(1);
  plan.set_loss(-1);
  plan.set_labels(-1);
  plan.set_scores(-1);
}

/// One INPUT tensor per argument of @main, in feed order.
void Emitter::addInputs() {
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
}

/// A parameter's value into its plan tensor (moved in: on the plan's arena
/// a string is taken over, not copied); with moveValues a resource blob is
/// released then, so the value is in memory once, in the plan.
LogicalResult Emitter::setParamData(plan::Tensor &tensor, ElementsAttr value) {
  FailureOr<std::string> bytes = elementsBytes(value);
  if (failed(bytes))
    return failure();
  tensor.set_data(std::move(*bytes));
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(value);
      resource && moveValues)
    resource.getRawHandle().getResource()->setBlob(AsmResourceBlob());
  return success();
}

/// Parameters, buffers and constants as persistent tensors, every other op
/// as an instruction of the single-device training stream.
LogicalResult Emitter::addTrainingStream(plan::Device &device) {
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
      if (std::optional<ElementsAttr> value = param.getValue())
        if (failed(setParamData(*tensor, *value)))
          return param.emitOpError("has data the plan cannot hold");
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
    if (failed(addInstruction(&op, device, /*forEval=*/false)))
      return failure();
  }
  return success();
}

/// @main's results as the plan's outputs; the loss among them.
void Emitter::addOutputs() {
  Block &body = func.getBody().front();
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
    output->set_widened(func.getResultAttr(i, "cdp.widened") != nullptr);
  }
  if (auto loss = func->getAttrOfType<IntegerAttr>("cdp.loss_index"))
    plan.set_loss(ids.lookup(returnOp.getOperand(loss.getInt())));
}

/// One device, one stage: the forward is time step 0 of a step, the
/// backward and the updates time step 1 (cycle 2L = 2).
void Emitter::scheduleSingleDevice(const EmitOptions &options,
                                   plan::Device &device) {
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
  for (plan::Instruction &instruction : *device.mutable_instructions()) {
    instruction.set_time_step(instruction.phase() == "forward" ? 0 : 1);
    instruction.set_stage(1);
  }
  if (options.microBatches > 1 && !options.inference)
    accumulateMicroBatches(device, options.microBatches);
}

/// The evaluation stream: what the first output needs, and the loss (on
/// the labels fed with the held-out data), in op order.
LogicalResult Emitter::addEvalStream(plan::Device &device) {
  Block &body = func.getBody().front();
  auto returnOp = cast<func::ReturnOp>(body.getTerminator());
  if (returnOp.getNumOperands() == 0)
    return success();
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
      if (failed(addInstruction(&op, device, /*forEval=*/true)))
        return failure();
  return success();
}

LogicalResult Emitter::run(const EmitOptions &options) {
  auto arena = func->getAttrOfType<IntegerAttr>("cdp.arena_bytes");
  if (!arena)
    return func.emitError("no memory plan; run cdp-plan-memory first");
  setPlanHeader(options);
  moveValues = options.moveValues;
  plan::Device *device = plan.add_devices();
  device->set_index(0);
  device->set_arena_bytes(arena.getInt());
  addInputs();
  if (failed(addTrainingStream(*device)))
    return failure();
  addOutputs();
  if (planForm(options.strategy) == PlanForm::Pipeline) {
    if (failed(emitPipeline(options)))
      return failure();
    // The schedule passes promise plans that run: a hang here is the
    // compiler's bug, not the user's.
    std::string hang = plan::findSendRecvDeadlock(plan);
    if (!hang.empty())
      return func.emitError("internal error (please report it with the "
                            "model and the command line): ")
             << plan::deadlockLine(hang);
    device = plan.mutable_devices(0); // the devices were rebuilt
  } else if (func->hasAttr("cdp.schedule")) {
    if (failed(emitDataParallel(arena.getInt())))
      return failure();
    device = plan.mutable_devices(0); // the devices were rebuilt
  } else {
    scheduleSingleDevice(options, *device);
  }
  if (failed(addEvalStream(*device)))
    return failure();
  // A pipeline's devices name their own copies of the activations: the
  // originals the evaluation stream does not read are named by nothing.
  if (planForm(options.strategy) == PlanForm::Pipeline) {
    dropUnnamedActivations(plan);
    // The evaluation runs on device 0, whose tensors a replica's devices
    // lay out alike: each device of device 0's arena grows with it.
    int64_t evaluation = packEvaluationArena(plan);
    for (plan::Device &device : *plan.mutable_devices()) {
      int64_t index = device.index();
      bool homeIsZero = plan.replica_devices() > 0
                            ? index % plan.replica_devices() == 0
                            : index == 0;
      if (homeIsZero)
        device.set_arena_bytes(std::max(device.arena_bytes(), evaluation));
    }
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
    // The clip and the loss scale's unscaling act on the step's mean
    // gradients, the accumulators (the unscaling's first input is the
    // loss-scale buffer).
    bool unscale = instruction.op() == "unscale_grads";
    if (instruction.op() == "clip_grad_norm" || unscale) {
      for (int k = unscale ? 1 : 0; k < instruction.inputs_size(); ++k)
        instruction.set_inputs(
            k, accumulatorOfGradient.lookup(instruction.inputs(k)));
      instruction.set_last_slot(true);
    }
  }
  for (const std::string &name : plan.gradients())
    plan.add_applied_gradients(accumulator.lookup(name));
  *device.mutable_instructions() = rebuilt;
}

} // namespace emit

LogicalResult buildPlan(ModuleOp module, const EmitOptions &options,
                        plan::Plan &plan) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return module.emitError("no func.func @main to emit");
  if (failed(emit::Emitter(func, plan).run(options)))
    return failure();
  for (plan::Device &device : *plan.mutable_devices())
    device.set_backend(options.backend);
  return success();
}

} // namespace cdp
