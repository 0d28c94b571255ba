//===- GradientBuilder.cpp - helpers of the gradient rules ----------------===//

#include "cdp/Dialect/Graph/GradientBuilder.h"

#include "cdp/Dialect/Graph/GraphBuilder.h"
#include "cdp/Dialect/Graph/GraphOps.h"

using namespace mlir;

namespace cdp {

ArrayRef<int64_t> GradientBuilder::shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// The narrow format `value` holds under mixed precision (a cdp.round_to's
/// result, or one cdp-autocast marked `cdp.narrow` because its op only
/// moves narrow values), or null.
static StringAttr narrowFormatOf(Value value) {
  Operation *op = value.getDefiningOp();
  if (!op || !cast<RankedTensorType>(value.getType()).getElementType().isF32())
    return nullptr;
  if (auto round = dyn_cast<RoundToOp>(op))
    return round.getFormatAttr();
  return op->getAttrOfType<StringAttr>("cdp.narrow");
}

Value GradientBuilder::roundTo(Value value, StringAttr format) {
  if (auto round = value.getDefiningOp<RoundToOp>())
    if (round.getFormatAttr() == format)
      return value;
  return make(RoundToOp::getOperationName(), {value}, {attr("format", format)});
}

void GradientBuilder::add(Value value, Value grad) {
  if (!grad || !needsGrad.contains(value))
    return;
  // A narrow tensor's gradient is narrow, as autograd's: each contribution
  // and each partial sum rounded.
  StringAttr narrow = narrowFormatOf(value);
  if (narrow)
    grad = roundTo(grad, narrow);
  auto it = grads.find(value);
  if (it == grads.end()) {
    grads[value] = grad;
    return;
  }
  Value previous = it->second;
  Value sum = make(AddOp::getOperationName(), {previous, grad});
  placeAfterBoth(sum, previous);
  if (narrow && sum) {
    sum = roundTo(sum, narrow);
    placeAfterBoth(sum, previous);
  }
  it->second = sum;
}

/// A sum of contributions from two stages runs in the one whose backward
/// comes later: the earlier stage (backward runs from the last stage to the
/// first). A tied weight read first in the last stage (GPT-2's transposed
/// LM head) and then in the first (its embedding) sums in the first.
void GradientBuilder::placeAfterBoth(Value sum, Value previous) {
  auto stageOf = [](Operation *op) {
    return op ? op->getAttrOfType<IntegerAttr>("cdp.stage") : nullptr;
  };
  IntegerAttr before = stageOf(previous.getDefiningOp()), now = stageOf(origin);
  Operation *op = sum ? sum.getDefiningOp() : nullptr;
  if (!op || !before || !now || before.getInt() >= now.getInt())
    return;
  op->setAttr("cdp.stage", before);
  op->setAttr("cdp.phase", builder.getStringAttr("backward"));
}

Operation *GradientBuilder::makeOp(StringRef name, ValueRange operands,
                                   ArrayRef<NamedAttribute> attributes,
                                   unsigned numResults) {
  if (failedBuild)
    return nullptr;
  std::string error;
  Operation *op = createInferred(builder, origin->getLoc(), name, operands,
                                 attributes, numResults, error);
  if (!op) {
    origin->emitOpError("gradient: cannot build ") << name << ": " << error;
    failedBuild = true;
  }
  return op;
}

Value GradientBuilder::make(StringRef name, ValueRange operands,
                            ArrayRef<NamedAttribute> attributes,
                            unsigned result, unsigned numResults) {
  Operation *op = makeOp(name, operands, attributes, numResults);
  return op ? op->getResult(result) : Value();
}

LogicalResult GradientBuilder::refuse(const Twine &why) {
  origin->emitOpError(why);
  return failure();
}

LogicalResult GradientBuilder::onlyThroughFirstResult() {
  for (Value result : origin->getResults().drop_front())
    if (grads.count(result))
      return refuse("gradient: differentiating through result #" +
                    llvm::Twine(cast<OpResult>(result).getResultNumber()) +
                    " is not supported");
  return success();
}

Value GradientBuilder::scalar(float value) {
  auto type = RankedTensorType::get({}, builder.getF32Type());
  return builder.create<ConstantOp>(
      origin->getLoc(),
      cast<ElementsAttr>(DenseElementsAttr::get(type, value)));
}

Value GradientBuilder::zerosLike(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  return builder.create<ConstantOp>(
      origin->getLoc(), cast<ElementsAttr>(DenseElementsAttr::get(
                            type, builder.getZeroAttr(type.getElementType()))));
}

Value GradientBuilder::scale(Value value, float factor) {
  if (!value || factor == 1.0f)
    return value;
  return make(MulOp::getOperationName(), {value, scalar(factor)});
}

Value GradientBuilder::reduceTo(Value value, Type type) {
  if (!value || value.getType() == type)
    return value;
  return make(ReduceToOp::getOperationName(), {value},
              {attr("shape", i64s(cast<RankedTensorType>(type).getShape()))});
}

Value GradientBuilder::reshape(Value value, ArrayRef<int64_t> shape) {
  if (!value || shapeOf(value) == shape)
    return value;
  return make(ReshapeOp::getOperationName(), {value},
              {attr("shape", i64s(shape))});
}

LogicalResult GradientBuilder::unary(Value dy, Value saved, StringRef kind,
                                     ArrayRef<float> params) {
  add(origin->getOperand(0),
      make(UnaryGradOp::getOperationName(), {dy, saved},
           {attr("kind", builder.getStringAttr(kind)),
            attr("params", builder.getDenseF32ArrayAttr(params))}));
  return status();
}

} // namespace cdp
