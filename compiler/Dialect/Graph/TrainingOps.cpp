//===- TrainingOps.cpp - shape rules of the training graph's ops ---------===//
//
// The ops autodiff and the optimizer pass add: the gradients of the
// forward ops, reductions back to a parameter's shape, and the verifiers
// of `update` and `clip_grad_norm`.
//
//===----------------------------------------------------------------------===//

#include "ShapeRules.h"
#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Support/AttentionLayout.h"

using namespace mlir;
using namespace cdp;
using namespace cdp::shape_rules;

namespace {
/// Result type `shape` x f32, checked to be a valid static shape.
LogicalResult inferStaticF32(MLIRContext *context, Loc loc,
                             ArrayRef<int64_t> shape,
                             SmallVectorImpl<Type> &types) {
  for (int64_t dim : shape)
    if (dim < 0)
      return fail(loc,
                  "shape " + shapeString(shape) + " has a negative dimension");
  types.push_back(tensorOf(shape, Float32Type::get(context)));
  return success();
}

LogicalResult inferSameAs(Value value, SmallVectorImpl<Type> &types) {
  if (!rankedType(value))
    return failure();
  types.push_back(value.getType());
  return success();
}
} // namespace

LogicalResult UnaryGradOp::inferReturnTypes(MLIRContext *, Loc loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  static const std::pair<const char *, size_t> kinds[] = {
      {"relu", 0},         {"gelu", 0},       {"gelu_tanh", 0},  {"erf", 0},
      {"sigmoid", 0},      {"tanh", 0},       {"sqrt", 0},       {"clip", 2},
      {"hard_sigmoid", 2}, {"hard_swish", 0}, {"reciprocal", 0}, {"sin", 0},
      {"cos", 0},          {"abs", 0},        {"exp", 0},        {"log", 0},
      {"silu", 0}};
  const auto *kind = llvm::find_if(
      kinds, [&](const auto &k) { return adaptor.getKind() == k.first; });
  if (kind == std::end(kinds))
    return fail(loc, "unknown activation '" + adaptor.getKind() + "'");
  if (adaptor.getParams().size() != kind->second)
    return fail(loc, "activation '" + adaptor.getKind() + "' takes " +
                         Twine(kind->second) + " params");
  // The saved value may be stored in 2 bytes (cdp-read-narrow-operands).
  auto grad = dyn_cast<RankedTensorType>(adaptor.getGrad().getType());
  auto saved = dyn_cast<RankedTensorType>(adaptor.getSaved().getType());
  if (!grad || !saved || grad.getShape() != saved.getShape())
    return fail(loc, "grad and saved value must have the same shape");
  return inferFloat32Like(adaptor.getGrad(), types);
}

LogicalResult ReduceToOp::inferReturnTypes(MLIRContext *context, Loc loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  if (failed(checkBroadcastsTo(loc, adaptor.getShape(), type.getShape(),
                               "shape " + shapeString(adaptor.getShape()) +
                                   " does not broadcast to the input shape " +
                                   shapeString(type.getShape()))))
    return failure();
  return inferStaticF32(context, loc, adaptor.getShape(), types);
}

LogicalResult ConvGradInputOp::inferReturnTypes(MLIRContext *context, Loc loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  if (adaptor.getInputShape().size() != 4)
    return fail(loc, "input_shape must have 4 dimensions");
  return inferStaticF32(context, loc, adaptor.getInputShape(), types);
}

LogicalResult ConvGradWeightOp::inferReturnTypes(MLIRContext *context, Loc loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  if (adaptor.getWeightShape().size() != 4)
    return fail(loc, "weight_shape must have 4 dimensions");
  return inferStaticF32(context, loc, adaptor.getWeightShape(), types);
}

LogicalResult MaxPoolGradOp::inferReturnTypes(MLIRContext *, Loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  return inferSameAs(adaptor.getInput(), types);
}

LogicalResult
AveragePoolGradOp::inferReturnTypes(MLIRContext *context, Loc loc,
                                    Adaptor adaptor,
                                    SmallVectorImpl<Type> &types) {
  return inferStaticF32(context, loc, adaptor.getInputShape(), types);
}

LogicalResult BatchNormGradOp::inferReturnTypes(MLIRContext *, Loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  if (!rankedType(adaptor.getInput()) || !rankedType(adaptor.getScale()))
    return failure();
  types.append({adaptor.getInput().getType(), adaptor.getScale().getType(),
                adaptor.getScale().getType()});
  return success();
}

LogicalResult BatchNormGradOp::verify() {
  return verifyRoundingFormat(*this, getRoundResult());
}

LogicalResult LayerNormGradOp::inferReturnTypes(MLIRContext *, Loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  if (!rankedType(adaptor.getInput()) || !rankedType(adaptor.getScale()))
    return failure();
  types.append({adaptor.getInput().getType(), adaptor.getScale().getType(),
                adaptor.getScale().getType()});
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  if (getAddend() && getAddend().getType() != getInput().getType())
    return emitOpError("adds an addend shaped unlike its input");
  return success();
}

LogicalResult SoftmaxGradOp::inferReturnTypes(MLIRContext *, Loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  return inferSameAs(adaptor.getGrad(), types);
}

LogicalResult AttentionGradOp::inferReturnTypes(MLIRContext *, Loc loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  SmallVector<Type, 2> forward;
  if (failed(inferAttention(loc, adaptor.getA(), adaptor.getB(), adaptor.getV(),
                            adaptor.getBias(), adaptor.getLayout(), forward)))
    return failure();
  // grad may hold the result's values in 2 bytes (cdp-narrow-results).
  if (rankedType(adaptor.getGrad()).getShape() !=
          cast<RankedTensorType>(forward[0]).getShape() ||
      adaptor.getStats().getType() != forward[1])
    return fail(loc, "attention_grad's grad and stats must be shaped as the "
                     "attention's result and stats");
  // Float32 gradients, whatever width the operands are stored in; under
  // grouped-query attention the keys' and v's per query head (the gradient
  // rule sums each group's).
  ArrayRef<int64_t> a = rankedType(adaptor.getA()).getShape();
  bool interleaved = adaptor.getLayout() == "bshd";
  for (Value operand : {adaptor.getA(), adaptor.getB(), adaptor.getV()})
    types.push_back(
        tensorOf(perQueryHead<SmallVector<int64_t>>(
                     rankedType(operand).getShape(), a, interleaved),
                 Float32Type::get(operand.getContext())));
  if (adaptor.getWithBiasGrad()) {
    if (!adaptor.getBias())
      return fail(loc, "with_bias_grad needs a bias");
    types.push_back(adaptor.getBias().getType());
  }
  return success();
}

bool AttentionGradOp::isCompatibleReturnTypes(TypeRange inferred,
                                              TypeRange actual) {
  return isResultOrNarrowed(inferred, actual);
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyScoresScale(*this, getScale())))
    return failure();
  std::optional<StringRef> format = getNarrowOperands();
  if (failed(verifyRoundingFormat(*this, format)))
    return failure();
  // The operands' gradients are rounded to narrow_operands' format: only
  // that format may store them.
  for (Value result : {getAGrad(), getBGrad(), getVGrad()}) {
    Type element = cast<RankedTensorType>(result.getType()).getElementType();
    if (element.isF32())
      continue;
    StringRef stored = element.isBF16() ? "bf16" : "f16";
    if (format != stored)
      return emitOpError("stores an operand's gradient in ")
             << stored << ", which needs narrow_operands = \"" << stored
             << "\"";
  }
  return verifyNarrowOperands(*this, format,
                              {getGrad(), getA(), getB(), getV()});
}

bool SoftmaxGradOp::isCompatibleReturnTypes(TypeRange inferred,
                                            TypeRange actual) {
  return isResultOrNarrowed(inferred, actual);
}

LogicalResult SoftmaxGradOp::verify() {
  return verifyNarrowResult(*this, getRoundResult());
}

bool SoftmaxCrossEntropyLossGradOp::isCompatibleReturnTypes(TypeRange inferred,
                                                            TypeRange actual) {
  return isResultOrNarrowed(inferred, actual);
}

LogicalResult SoftmaxCrossEntropyLossGradOp::verify() {
  // Log-probabilities are float32; scores may be 2-byte (the loss's).
  if (!getLogProb().getType().getElementType().isF32() && !getFromScores())
    return emitOpError("reads 2-byte values, which must be the scores "
                       "(from_scores)");
  return verifyNarrowResult(*this, getRoundResult());
}

bool UnaryGradOp::isCompatibleReturnTypes(TypeRange inferred,
                                          TypeRange actual) {
  return isResultOrNarrowed(inferred, actual);
}

LogicalResult UnaryGradOp::verify() {
  // The saved value may be the backward's 2-byte copy whatever it rounds to.
  if (failed(verifyNarrowInputs(*this, getRoundResult(), {getGrad()})))
    return failure();
  return verifyNarrowResult(*this, getRoundResult());
}

bool DropoutGradOp::isCompatibleReturnTypes(TypeRange inferred,
                                            TypeRange actual) {
  return isResultOrNarrowed(inferred, actual);
}

LogicalResult DropoutGradOp::verify() {
  return verifyNarrowResult(*this, getRoundResult());
}

LogicalResult DropoutGradOp::inferReturnTypes(MLIRContext *, Loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  return inferSameAs(adaptor.getGrad(), types);
}

LogicalResult SliceGradOp::inferReturnTypes(MLIRContext *context, Loc loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  return inferStaticF32(context, loc, adaptor.getInputShape(), types);
}

LogicalResult GatherGradOp::inferReturnTypes(MLIRContext *context, Loc loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  return inferStaticF32(context, loc, adaptor.getDataShape(), types);
}

/// Float32 values of the scores' shape (they may be 2-byte).
LogicalResult SoftmaxCrossEntropyLossGradOp::inferReturnTypes(
    MLIRContext *, Loc, Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return inferFloat32Like(adaptor.getLogProb(), types);
}

LogicalResult NllLossGradOp::inferReturnTypes(MLIRContext *context, Loc loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  return inferStaticF32(context, loc, adaptor.getInputShape(), types);
}

/// The loss-scale buffer: [scale, clean steps, overflow] (see
/// cdp.unscale_grads).
static LogicalResult verifyLossScaleState(Operation *op, Value state) {
  auto type = cast<RankedTensorType>(state.getType());
  if (type.getRank() != 1 || type.getDimSize(0) != 3)
    return op->emitOpError(
               "loss-scale state must be tensor<3xf32> (scale, clean steps, "
               "overflow), got ")
           << type;
  return success();
}

LogicalResult UpdateOp::verify() {
  StringRef schedule = getLrSchedule().value_or("constant");
  if (schedule != "constant" && schedule != "step" && schedule != "cosine" &&
      schedule != "linear")
    return emitOpError("lr_schedule must be 'constant', 'step', 'cosine' or "
                       "'linear', got '")
           << schedule << "'";
  if (static_cast<int64_t>(getLrPeriod().value_or(1)) < 1)
    return emitOpError("lr_period must be at least 1");
  if (getOptimizer() != "sgd" && getOptimizer() != "adam" &&
      getOptimizer() != "adamw")
    return emitOpError("optimizer must be 'sgd', 'adam' or 'adamw', got '")
           << getOptimizer() << "'";
  if (getLossScale() && failed(verifyLossScaleState(*this, getLossScale())))
    return failure();
  return success();
}

LogicalResult LossScaleOp::verify() {
  if (failed(verifyLossScaleState(*this, getState())))
    return failure();
  if (getSeed().getType().getNumElements() != 1)
    return emitOpError("seeds a scalar loss: its result has one element");
  return success();
}

LogicalResult UnscaleGradsOp::verify() {
  if (failed(verifyLossScaleState(*this, getState())))
    return failure();
  if (getGrads().empty())
    return emitOpError("needs at least one gradient");
  float growth = getGrowthFactor().convertToFloat(),
        backoff = getBackoffFactor().convertToFloat();
  if (!(growth > 1.0f) || !(backoff > 0.0f && backoff < 1.0f))
    return emitOpError("needs growth_factor > 1 and 0 < backoff_factor < 1");
  // The buffer counts clean steps in float: exact up to 2^24.
  if (getGrowthInterval() < 1 || getGrowthInterval() > (int64_t{1} << 24))
    return emitOpError("growth_interval must be from 1 to 2^24");
  return success();
}

LogicalResult ClipGradNormOp::verify() {
  if (getGrads().empty())
    return emitOpError("needs at least one gradient");
  if (!(getMaxNorm().convertToFloat() > 0))
    return emitOpError("max_norm must be positive");
  return success();
}
