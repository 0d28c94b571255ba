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
#include "cdp/Plan/PlanIO.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/DenseSet.h"

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
  LogicalResult convertAttribute(Operation *op, NamedAttribute attribute,
                                 plan::Attribute &out);

  func::FuncOp func;
  plan::Plan &plan;
  llvm::DenseMap<Value, int> ids;
};

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
  instruction->set_op(op->getName().stripDialect().str());
  instruction->set_location(locationName(op->getLoc()));
  instruction->set_time_step(device.instructions_size() - 1);
  for (Value operand : op->getOperands())
    instruction->add_inputs(ids.lookup(operand));
  for (Value result : op->getResults())
    instruction->add_outputs(ids.lookup(result));
  for (NamedAttribute attribute : op->getAttrs()) {
    if (attribute.getName() == "cdp.offsets")
      continue;
    plan::Attribute *out = instruction->add_attributes();
    if (failed(convertAttribute(op, attribute, *out)))
      return failure();
    // Evaluation uses running statistics and no dropout.
    if (forEval && attribute.getName() == "training_mode")
      out->set_i(0);
  }
  return success();
}

LogicalResult Emitter::run(const EmitOptions &options) {
  auto arena = func->getAttrOfType<IntegerAttr>("cdp.arena_bytes");
  if (!arena)
    return func.emitError("no memory plan; run cdp-plan-memory first");
  plan.set_producer("cdp-compile");
  plan.set_strategy(options.strategy);
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

} // namespace

LogicalResult buildPlan(ModuleOp module, const EmitOptions &options,
                        plan::Plan &plan) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return module.emitError("no func.func @main to emit");
  return Emitter(func, plan).run(options);
}

} // namespace cdp
