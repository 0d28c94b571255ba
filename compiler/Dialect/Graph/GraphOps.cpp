//===- GraphOps.cpp - cdp graph ops: shape rules, verifiers, folders ------===//
//
// The shape rules of every op live here, in inferReturnTypes: the verifier
// checks printed types against them and the ONNX importer relies on them
// instead of ONNX's own shape inference (which stops at opset 17).
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "ShapeRules.h"
#include "cdp/Dialect/Graph/SliceBounds.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

#include <numeric>

using namespace mlir;
using namespace cdp;
using namespace cdp::shape_rules;

namespace {

/// Output size of one spatial dimension of a sliding window (conv, pooling).
/// In ceil mode a last window that would start inside the end padding is
/// dropped, as in PyTorch and ONNX since opset 19's clarification.
FailureOr<int64_t> windowOutputSize(Loc loc, int64_t input, int64_t kernel,
                                    int64_t padBegin, int64_t padEnd,
                                    int64_t stride, int64_t dilation,
                                    bool ceilMode) {
  // Attributes come from the model file: any int64 reaches here.
  int64_t span, padded;
  if (__builtin_mul_overflow(kernel - 1, dilation, &span) ||
      __builtin_add_overflow(span, 1, &span) ||
      __builtin_add_overflow(input, padBegin, &padded) ||
      __builtin_add_overflow(padded, padEnd, &padded)) {
    (void)fail(loc, "window size or padding overflows 64 bits");
    return failure();
  }
  if (padded < span) {
    (void)fail(loc, "window of " + Twine(span) +
                        " elements is larger than the padded input of " +
                        Twine(padded));
    return failure();
  }
  int64_t size = (padded - span) / stride + 1;
  if (ceilMode && (padded - span) % stride != 0) {
    ++size;
    int64_t lastStart;
    if (__builtin_mul_overflow(size - 1, stride, &lastStart) ||
        lastStart >= input + padBegin)
      --size;
  }
  return size;
}

/// A window over `spatial` dimensions: begin pads then end pads, a stride
/// and a dilation per dimension.
LogicalResult checkWindowAttrs(Loc loc, ArrayRef<int64_t> pads,
                               ArrayRef<int64_t> strides,
                               ArrayRef<int64_t> dilations, int64_t spatial) {
  if (failed(checkLength(loc, "pads", pads, 2 * spatial)) ||
      failed(checkLength(loc, "strides", strides, spatial)) ||
      failed(checkLength(loc, "dilations", dilations, spatial)) ||
      failed(checkPositive(loc, "strides", strides)) ||
      failed(checkPositive(loc, "dilations", dilations)))
    return failure();
  for (int64_t pad : pads)
    if (pad < 0)
      return fail(loc, "pads must not be negative, got " + Twine(pad));
  return success();
}

/// Shape rule shared by max_pool and average_pool.
LogicalResult inferPool(Loc loc, Value input, ArrayRef<int64_t> kernel,
                        ArrayRef<int64_t> pads, ArrayRef<int64_t> strides,
                        ArrayRef<int64_t> dilations, bool ceilMode,
                        SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(input);
  if (!type)
    return failure();
  if (type.getRank() < 3 || type.getRank() > 5)
    return fail(loc, "expects an (N, C, spatial...) input with 1 to 3 "
                     "spatial dimensions, got rank " +
                         Twine(type.getRank()));
  int64_t spatial = type.getRank() - 2;
  if (failed(checkLength(loc, "kernel_shape", kernel, spatial)) ||
      failed(checkPositive(loc, "kernel_shape", kernel)) ||
      failed(checkWindowAttrs(loc, pads, strides, dilations, spatial)))
    return failure();
  Shape shape(type.getShape());
  for (int64_t d = 0; d < spatial; ++d) {
    if (pads[d] >= kernel[d] || pads[d + spatial] >= kernel[d])
      return fail(loc, "pads must be smaller than the kernel");
    FailureOr<int64_t> size =
        windowOutputSize(loc, shape[2 + d], kernel[d], pads[d],
                         pads[d + spatial], strides[d], dilations[d], ceilMode);
    if (failed(size))
      return failure();
    shape[2 + d] = *size;
  }
  types.push_back(tensorOf(shape, type.getElementType()));
  return success();
}

LogicalResult inferReduce(Loc loc, Value input, ArrayRef<int64_t> axes,
                          bool keepdims, SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(input);
  if (!type)
    return failure();
  FailureOr<Shape> normalized = normalizeAxes(loc, axes, type.getRank());
  if (failed(normalized))
    return failure();
  Shape shape;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    bool reduced = normalized->empty() || llvm::is_contained(*normalized, d);
    if (!reduced)
      shape.push_back(type.getDimSize(d));
    else if (keepdims)
      shape.push_back(1);
  }
  types.push_back(tensorOf(shape, type.getElementType()));
  return success();
}

/// Shape rule shared by the two classification losses: scores (N, C, d...)
/// (with `classesLast` (N, d..., C)), labels (N, d...), optional weights (C).
LogicalResult inferClassLoss(Loc loc, Value scores, Value labels, Value weights,
                             StringRef reduction, bool classesLast,
                             SmallVectorImpl<Type> &types) {
  RankedTensorType scoresType = rankedType(scores);
  RankedTensorType labelsType = rankedType(labels);
  if (!scoresType || !labelsType)
    return failure();
  int64_t rank = scoresType.getRank();
  if (rank < 2)
    return fail(loc, "expects scores of rank >= 2 (N, C, ...), got rank " +
                         Twine(rank));
  int64_t classAxis = classesLast ? rank - 1 : 1;
  Shape expected{scoresType.getDimSize(0)};
  for (int64_t d = 1; d < rank; ++d)
    if (d != classAxis)
      expected.push_back(scoresType.getDimSize(d));
  if (labelsType.getShape() != ArrayRef<int64_t>(expected))
    return fail(loc, "labels shape " + shapeString(labelsType.getShape()) +
                         " does not match scores shape " +
                         shapeString(scoresType.getShape()) + " (expected " +
                         shapeString(expected) + ")");
  if (RankedTensorType weightsType = rankedType(weights))
    if (weightsType.getShape() !=
        ArrayRef<int64_t>{scoresType.getDimSize(classAxis)})
      return fail(loc, "weights must have shape [" +
                           Twine(scoresType.getDimSize(classAxis)) + "]");
  // Float32 losses, whether the scores are float32 or 2-byte.
  Type f32 = Float32Type::get(scoresType.getContext());
  if (reduction == "none")
    types.push_back(tensorOf(expected, f32));
  else if (reduction == "mean" || reduction == "sum")
    types.push_back(tensorOf({}, f32));
  else
    return fail(loc, "reduction must be 'mean', 'sum' or 'none', got '" +
                         reduction + "'");
  return success();
}

/// Elements of `shape[begin, end)`, or -1 when the count overflows 64 bits
/// (a shape attribute can hold any int64, and -1 matches no tensor).
int64_t product(ArrayRef<int64_t> shape, size_t begin = 0,
                size_t end = ~size_t(0)) {
  int64_t result = 1;
  for (size_t i = begin; i < std::min(end, shape.size()); ++i)
    if (__builtin_mul_overflow(result, shape[i], &result))
      return -1;
  return result;
}

} // namespace

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  if (getName().empty())
    return emitOpError("needs a non-empty name");
  if (std::optional<ElementsAttr> value = getValue())
    if (value->getType() != getType())
      return emitOpError("value type ")
             << value->getType() << " does not match result type " << getType();
  return success();
}

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *, Loc loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  auto type = dyn_cast<RankedTensorType>(adaptor.getValue().getType());
  if (!type)
    return fail(loc, "value must be a ranked tensor");
  types.push_back(type);
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult
ConstantOfShapeOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                    SmallVectorImpl<Type> &types) {
  ElementsAttr value = adaptor.getValue();
  if (value.getNumElements() != 1)
    return fail(loc, "value must hold exactly one element");
  for (int64_t dim : adaptor.getShape())
    if (dim < 0)
      return fail(loc, "shape must not have negative dimensions");
  types.push_back(tensorOf(adaptor.getShape(), value.getElementType()));
  return success();
}

OpFoldResult ConstantOfShapeOp::fold(FoldAdaptor) {
  auto value = dyn_cast<DenseElementsAttr>(getValue());
  if (!value)
    return {};
  return DenseElementsAttr::get(getType(), value.getValues<Attribute>()[0]);
}

LogicalResult ShapeOp::inferReturnTypes(MLIRContext *context, Loc loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  int64_t rank = type.getRank();
  auto clamp = [&](int64_t v) {
    if (v < 0)
      v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  int64_t start = clamp(static_cast<int64_t>(adaptor.getStart()));
  int64_t end =
      adaptor.getEndAttr() ? clamp(adaptor.getEndAttr().getInt()) : rank;
  types.push_back(tensorOf({std::max<int64_t>(0, end - start)},
                           IntegerType::get(context, 64)));
  return success();
}

OpFoldResult ShapeOp::fold(FoldAdaptor) {
  auto inputType = cast<RankedTensorType>(getInput().getType());
  int64_t count = getType().getDimSize(0);
  int64_t rank = inputType.getRank();
  int64_t start = static_cast<int64_t>(getStart());
  if (start < 0)
    start = std::max<int64_t>(0, start + rank);
  start = std::min(start, rank);
  ArrayRef<int64_t> dims = inputType.getShape().slice(start, count);
  return DenseElementsAttr::get(getType(), dims);
}

//===----------------------------------------------------------------------===//
// Linear algebra and convolution
//===----------------------------------------------------------------------===//

LogicalResult GemmOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  RankedTensorType a = rankedType(adaptor.getA());
  RankedTensorType b = rankedType(adaptor.getB());
  if (!a || !b)
    return failure();
  if (a.getRank() != 2 || b.getRank() != 2)
    return fail(loc, "expects 2-D operands, got ranks " + Twine(a.getRank()) +
                         " and " + Twine(b.getRank()));
  bool transA = adaptor.getTransA(), transB = adaptor.getTransB();
  int64_t m = a.getDimSize(transA ? 1 : 0), k = a.getDimSize(transA ? 0 : 1);
  int64_t kB = b.getDimSize(transB ? 1 : 0), n = b.getDimSize(transB ? 0 : 1);
  if (k != kB)
    return fail(loc,
                "inner dimensions differ: " + Twine(k) + " and " + Twine(kB));
  if (RankedTensorType c = rankedType(adaptor.getC())) {
    FailureOr<Shape> shape = broadcastShapes(loc, c.getShape(), {m, n});
    if (failed(shape))
      return failure();
    if (*shape != Shape{m, n})
      return fail(loc, "C of shape " + shapeString(c.getShape()) +
                           " does not broadcast to [" + Twine(m) + "," +
                           Twine(n) + "]");
  }
  types.push_back(tensorOf({m, n}, Float32Type::get(a.getContext())));
  return success();
}

/// A product's 2-byte operands and result: the operands under
/// narrow_operands of their format, the result under round_result of its
/// format and narrow_operands too (the backends write it from their 2-byte
/// products alone).
static LogicalResult verifyNarrowProduct(Operation *op,
                                         std::optional<StringRef> operands,
                                         std::optional<StringRef> rounding) {
  if (failed(verifyNarrowOperands(op, operands,
                                  op->getOperands().take_front(2))) ||
      failed(verifyNarrowResult(op, rounding)))
    return failure();
  Type element =
      cast<RankedTensorType>(op->getResult(0).getType()).getElementType();
  if (!element.isF32() && operands != rounding)
    return op->emitOpError("stores its result in 2 bytes, which needs "
                           "narrow_operands of that format");
  return success();
}

/// cdp-fuse-relu's `activation`, absent or "relu".
static LogicalResult verifyReluActivation(Operation *op,
                                          std::optional<StringRef> activation) {
  if (activation && *activation != "relu")
    return op->emitOpError("activation must be \"relu\", not \"")
           << *activation << "\"";
  return success();
}

LogicalResult BatchNormOp::verify() {
  if (failed(verifyRoundingFormat(*this, getRoundResult())))
    return failure();
  return verifyReluActivation(*this, getActivation());
}

LogicalResult GemmOp::verify() {
  if (failed(verifyReluActivation(*this, getActivation())))
    return failure();
  if (getActivation()) {
    if (getRoundResult() || getNarrowOperands())
      return emitOpError("activation is for float32 products (no "
                         "round_result or narrow_operands)");
  }
  return verifyNarrowProduct(*this, getNarrowOperands(), getRoundResult());
}

bool GemmOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return isResultOrNarrowed(inferred, actual);
}

LogicalResult MatMulOp::verify() {
  return verifyNarrowProduct(*this, getNarrowOperands(), getRoundResult());
}

bool MatMulOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return isResultOrNarrowed(inferred, actual);
}

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *, Loc loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  RankedTensorType a = rankedType(adaptor.getA());
  RankedTensorType b = rankedType(adaptor.getB());
  if (!a || !b)
    return failure();
  if (a.getRank() == 0 || b.getRank() == 0)
    return fail(loc, "operands must have rank >= 1");
  Shape lhs(a.getShape()), rhs(b.getShape());
  bool lhsVector = lhs.size() == 1, rhsVector = rhs.size() == 1;
  bool transA = adaptor.getTransA(), transB = adaptor.getTransB();
  if ((transA && lhsVector) || (transB && rhsVector))
    return fail(loc, "trans_a / trans_b need an operand of rank 2 or more");
  if (transA)
    std::swap(lhs[lhs.size() - 2], lhs.back());
  if (transB)
    std::swap(rhs[rhs.size() - 2], rhs.back());
  if (lhsVector)
    lhs.insert(lhs.begin(), 1);
  if (rhsVector)
    rhs.push_back(1);
  int64_t k = lhs.back(), kB = rhs[rhs.size() - 2];
  if (k != kB)
    return fail(loc,
                "inner dimensions differ: " + Twine(k) + " and " + Twine(kB));
  FailureOr<Shape> batch =
      broadcastShapes(loc, ArrayRef<int64_t>(lhs).drop_back(2),
                      ArrayRef<int64_t>(rhs).drop_back(2));
  if (failed(batch))
    return failure();
  Shape shape = *batch;
  if (!lhsVector)
    shape.push_back(lhs[lhs.size() - 2]);
  if (!rhsVector)
    shape.push_back(rhs.back());
  types.push_back(tensorOf(shape, Float32Type::get(a.getContext())));
  return success();
}

LogicalResult ConvOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  RankedTensorType input = rankedType(adaptor.getInput());
  RankedTensorType weight = rankedType(adaptor.getWeight());
  if (!input || !weight)
    return failure();
  if (input.getRank() != 4 || weight.getRank() != 4)
    return fail(loc, "expects 4-D input and weight (2-D convolution), got "
                     "ranks " +
                         Twine(input.getRank()) + " and " +
                         Twine(weight.getRank()));
  ArrayRef<int64_t> pads = adaptor.getPads(), strides = adaptor.getStrides(),
                    dilations = adaptor.getDilations();
  if (failed(checkWindowAttrs(loc, pads, strides, dilations, 2)))
    return failure();
  int64_t group = static_cast<int64_t>(adaptor.getGroup());
  int64_t channels = input.getDimSize(1), filters = weight.getDimSize(0);
  if (group < 1 || channels % group != 0 || filters % group != 0)
    return fail(loc, "group " + Twine(group) + " must divide the " +
                         Twine(channels) + " input channels and the " +
                         Twine(filters) + " filters");
  if (weight.getDimSize(1) != channels / group)
    return fail(loc, "weight has " + Twine(weight.getDimSize(1)) +
                         " channels per group, input has " + Twine(channels) +
                         " channels in " + Twine(group) + " groups");
  if (RankedTensorType bias = rankedType(adaptor.getBias()))
    if (bias.getShape() != ArrayRef<int64_t>{filters})
      return fail(loc, "bias must have shape [" + Twine(filters) + "]");
  Shape shape{input.getDimSize(0), filters, 0, 0};
  for (int d = 0; d < 2; ++d) {
    FailureOr<int64_t> size = windowOutputSize(
        loc, input.getDimSize(2 + d), weight.getDimSize(2 + d), pads[d],
        pads[d + 2], strides[d], dilations[d], /*ceilMode=*/false);
    if (failed(size))
      return failure();
    shape[2 + d] = *size;
  }
  types.push_back(tensorOf(shape, input.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Pooling and normalization
//===----------------------------------------------------------------------===//

LogicalResult MaxPoolOp::inferReturnTypes(MLIRContext *, Loc loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferPool(loc, adaptor.getInput(), adaptor.getKernelShape(),
                   adaptor.getPads(), adaptor.getStrides(),
                   adaptor.getDilations(), adaptor.getCeilMode(), types);
}

LogicalResult MaxPoolIndicesOp::inferReturnTypes(MLIRContext *context, Loc loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  if (adaptor.getStorageOrder() != 0 && adaptor.getStorageOrder() != 1)
    return fail(loc, "storage_order must be 0 or 1, got " +
                         Twine(adaptor.getStorageOrder()));
  SmallVector<Type> pooled;
  if (failed(inferPool(loc, adaptor.getInput(), adaptor.getKernelShape(),
                       adaptor.getPads(), adaptor.getStrides(),
                       adaptor.getDilations(), adaptor.getCeilMode(), pooled)))
    return failure();
  types.push_back(tensorOf(cast<RankedTensorType>(pooled[0]).getShape(),
                           IntegerType::get(context, 64)));
  return success();
}

LogicalResult AveragePoolOp::inferReturnTypes(MLIRContext *, Loc loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  return inferPool(loc, adaptor.getInput(), adaptor.getKernelShape(),
                   adaptor.getPads(), adaptor.getStrides(),
                   adaptor.getDilations(), adaptor.getCeilMode(), types);
}

LogicalResult
GlobalAveragePoolOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  if (type.getRank() < 3)
    return fail(loc, "expects an input of rank >= 3 (N, C, spatial...)");
  Shape shape(type.getShape());
  std::fill(shape.begin() + 2, shape.end(), 1);
  types.push_back(tensorOf(shape, type.getElementType()));
  return success();
}

LogicalResult BatchNormOp::inferReturnTypes(MLIRContext *, Loc loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  RankedTensorType input = rankedType(adaptor.getInput());
  if (!input)
    return failure();
  if (input.getRank() < 2)
    return fail(loc, "expects an input of rank >= 2 (N, C, ...)");
  int64_t channels = input.getDimSize(1);
  for (auto [name, value] :
       {std::pair<StringRef, Value>{"scale", adaptor.getScale()},
        {"bias", adaptor.getBias()},
        {"mean", adaptor.getMean()},
        {"var", adaptor.getVar()}}) {
    RankedTensorType type = rankedType(value);
    if (!type)
      return failure();
    if (type.getShape() != ArrayRef<int64_t>{channels})
      return fail(loc, name + " must have shape [" + Twine(channels) +
                           "], got " + shapeString(type.getShape()));
  }
  Type stats = tensorOf({channels}, input.getElementType());
  types.append({input, stats, stats});
  return success();
}

bool LayerNormOp::isCompatibleReturnTypes(TypeRange inferred,
                                          TypeRange actual) {
  return isResultOrNarrowed(inferred, actual);
}

LogicalResult LayerNormOp::verify() {
  if (failed(verifyRoundingFormat(*this, getRoundResult())))
    return failure();
  return verifyNarrowResult(*this, getRoundResult());
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *, Loc loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  RankedTensorType input = rankedType(adaptor.getInput());
  RankedTensorType scale = rankedType(adaptor.getScale());
  if (!input || !scale)
    return failure();
  FailureOr<int64_t> axis =
      normalizeAxis(loc, adaptor.getAxisAttr().getInt(), input.getRank());
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> normalized = input.getShape().drop_front(*axis);
  for (RankedTensorType param : {scale, rankedType(adaptor.getBias())}) {
    if (!param)
      continue;
    // Checked quietly: the error below says what is wrong.
    FailureOr<Shape> shape =
        broadcastShapes(std::nullopt, param.getShape(), normalized);
    if (failed(shape) || ArrayRef<int64_t>(*shape) != normalized)
      return fail(loc,
                  "scale and bias must broadcast to the normalized shape " +
                      shapeString(normalized));
  }
  Shape statsShape(input.getShape());
  std::fill(statsShape.begin() + *axis, statsShape.end(), 1);
  Type stats = tensorOf(statsShape, input.getElementType());
  types.append({input, stats, stats});
  return success();
}

LogicalResult SoftmaxOp::inferReturnTypes(MLIRContext *, Loc loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  if (Value bias = adaptor.getBias()) {
    RankedTensorType input = rankedType(adaptor.getInput()),
                     addend = rankedType(bias);
    if (!input || !addend ||
        failed(checkBroadcastsTo(loc, addend.getShape(), input.getShape(),
                                 "the bias " + shapeString(addend.getShape()) +
                                     " must broadcast to the input " +
                                     shapeString(input.getShape()))))
      return failure();
  }
  return inferSameWithAxis(loc, adaptor.getInput(),
                           adaptor.getAxisAttr().getInt(), types);
}

LogicalResult RotaryOp::inferReturnTypes(MLIRContext *, Loc loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  RankedTensorType input = rankedType(adaptor.getInput());
  if (!input)
    return failure();
  if (input.getRank() == 0 || input.getShape().back() % 2 != 0)
    return fail(loc, "the last axis of the input " +
                         shapeString(input.getShape()) +
                         " must have an even size (its two halves rotate)");
  for (Value table : {adaptor.getCos(), adaptor.getSin()}) {
    RankedTensorType type = rankedType(table);
    if (!type ||
        failed(checkBroadcastsTo(loc, type.getShape(), input.getShape(),
                                 "cos and sin " + shapeString(type.getShape()) +
                                     " must broadcast to the input " +
                                     shapeString(input.getShape()))))
      return failure();
  }
  types.push_back(input);
  return success();
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *, Loc loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  return inferAttention(loc, adaptor.getA(), adaptor.getB(), adaptor.getV(),
                        adaptor.getBias(), adaptor.getLayout(), types);
}

bool AttentionOp::isCompatibleReturnTypes(TypeRange inferred,
                                          TypeRange actual) {
  return isResultOrNarrowed(inferred, actual);
}

LogicalResult RotaryOp::verify() {
  return verifyRoundingFormat(*this, getNarrowOperands());
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyScoresScale(*this, getScale())))
    return failure();
  for (std::optional<StringRef> format :
       {getNarrowOperands(), getRoundResult()})
    if (failed(verifyRoundingFormat(*this, format)))
      return failure();
  if (failed(verifyNarrowResult(*this, getRoundResult())))
    return failure();
  // The second product writes a 2-byte result: its operands' format.
  if (!getOutput().getType().getElementType().isF32() &&
      getNarrowOperands() != getRoundResult())
    return emitOpError("stores its result in 2 bytes, which needs "
                       "narrow_operands of round_result's format");
  return verifyNarrowOperands(*this, getNarrowOperands(),
                              getOperands().take_front(3));
}

LogicalResult LogSoftmaxOp::inferReturnTypes(MLIRContext *, Loc loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  return inferSameWithAxis(loc, adaptor.getInput(),
                           adaptor.getAxisAttr().getInt(), types);
}

/// The element type an operand computes in: a 2-byte float's is float32
/// (read widened by the ops whose ODS admits them: mul, add, dropout).
static Type computedElement(RankedTensorType type) {
  Type element = type.getElementType();
  return element.isBF16() || element.isF16()
             ? Float32Type::get(type.getContext())
             : element;
}

LogicalResult DropoutOp::inferReturnTypes(MLIRContext *context, Loc loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  float ratio = adaptor.getRatio().convertToFloat();
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return fail(loc, "ratio must be in [0, 1), got " + std::to_string(ratio));
  // A 2-byte input is read widened: the output is float32 (or narrowed).
  types.append({tensorOf(type.getShape(), computedElement(type)),
                tensorOf(type.getShape(), IntegerType::get(context, 1))});
  return success();
}

/// An op that reads 2-byte operands and stores a 2-byte result only under
/// a round_result of their format (GELU, mul, dropout).
static LogicalResult
verifyNarrowedUnderRounding(Operation *op, std::optional<StringRef> rounding) {
  if (failed(verifyNarrowInputs(op, rounding)))
    return failure();
  return verifyNarrowResult(op, rounding);
}

LogicalResult DropoutOp::verify() {
  return verifyNarrowedUnderRounding(*this, getRoundResult());
}

bool DropoutOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return isResultOrNarrowed(inferred, actual);
}

//===----------------------------------------------------------------------===//
// Element-wise
//===----------------------------------------------------------------------===//

// Unary ops infer through SameOperandsAndResultType.

LogicalResult ReduceToOp::verify() {
  return verifyRoundingFormat(*this, getRoundResult());
}

LogicalResult GeluOp::verify() {
  StringRef approximate = getApproximate();
  if (approximate != "none" && approximate != "tanh")
    return emitOpError("approximate must be 'none' or 'tanh', got '")
           << approximate << "'";
  return verifyNarrowedUnderRounding(*this, getRoundResult());
}

bool GeluOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return isResultOrNarrowed(inferred, actual);
}

/// Float32 values of the input's shape (the input may be 2-byte).
LogicalResult GeluOp::inferReturnTypes(MLIRContext *, Loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  return inferFloat32Like(adaptor.getInput(), types);
}

/// `%y = cdp.gelu %x {...} : type` where input and result share the type,
/// else `: (input type) -> result type`.
ParseResult GeluOp::parse(OpAsmParser &parser, OperationState &result) {
  OpAsmParser::UnresolvedOperand input;
  Type inputType, outputType;
  if (parser.parseOperand(input) ||
      parser.parseOptionalAttrDict(result.attributes) || parser.parseColon())
    return failure();
  if (succeeded(parser.parseOptionalLParen())) {
    if (parser.parseType(inputType) || parser.parseRParen() ||
        parser.parseArrow() || parser.parseType(outputType))
      return failure();
  } else if (parser.parseType(inputType)) {
    return failure();
  } else {
    outputType = inputType;
  }
  result.addTypes(outputType);
  return parser.resolveOperand(input, inputType, result.operands);
}

void GeluOp::print(OpAsmPrinter &printer) {
  printer << ' ' << getInput();
  SmallVector<StringRef, 1> elided;
  if (getApproximate() == "none") // the default, as ODS formats elide it
    elided.push_back(getApproximateAttrName());
  printer.printOptionalAttrDict((*this)->getAttrs(), elided);
  printer << " : ";
  if (getInput().getType() == getOutput().getType())
    printer << getOutput().getType();
  else
    printer << '(' << getInput().getType() << ") -> " << getOutput().getType();
}

LogicalResult RoundToOp::verify() {
  StringRef format = getFormat();
  if (format != "bf16" && format != "f16")
    return emitOpError("format must be 'bf16' or 'f16', got '")
           << format << "'";
  return success();
}

/// `packed` holds `values` in `format`: that element type, the same shape.
static LogicalResult verifyPacking(Operation *op, StringRef format,
                                   RankedTensorType values,
                                   RankedTensorType packed) {
  if (format != "bf16" && format != "f16")
    return op->emitOpError("format must be 'bf16' or 'f16', got '")
           << format << "'";
  Type element = packed.getElementType();
  if ((format == "bf16") != element.isBF16() ||
      values.getShape() != packed.getShape())
    return op->emitOpError("stores ")
           << values << " in a tensor of " << format
           << " values of the same shape, not " << packed;
  return success();
}

LogicalResult PackNarrowOp::verify() {
  return verifyPacking(*this, getFormat(), getInput().getType(),
                       getOutput().getType());
}

LogicalResult UnpackNarrowOp::verify() {
  return verifyPacking(*this, getFormat(), getOutput().getType(),
                       getInput().getType());
}

static LogicalResult inferBroadcast(Loc loc, Value lhs, Value rhs,
                                    SmallVectorImpl<Type> &types) {
  RankedTensorType l = rankedType(lhs), r = rankedType(rhs);
  if (!l || !r)
    return failure();
  if (computedElement(l) != computedElement(r))
    return fail(loc, "operand element types differ");
  FailureOr<Shape> shape = broadcastShapes(loc, l.getShape(), r.getShape());
  if (failed(shape))
    return failure();
  types.push_back(tensorOf(*shape, computedElement(l)));
  return success();
}

LogicalResult MulOp::verify() {
  return verifyNarrowedUnderRounding(*this, getRoundResult());
}

bool MulOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return isResultOrNarrowed(inferred, actual);
}

/// Add reads 2-byte operands widened whatever it rounds to (autocast adds a
/// bf16 value to the float32 residual stream without rounding the sum).
LogicalResult AddOp::verify() {
  return verifyNarrowResult(*this, getRoundResult());
}

bool AddOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return isResultOrNarrowed(inferred, actual);
}

#define CDP_BROADCAST_INFER(OP)                                                \
  LogicalResult OP::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,  \
                                     SmallVectorImpl<Type> &types) {           \
    return inferBroadcast(loc, adaptor.getLhs(), adaptor.getRhs(), types);     \
  }
CDP_BROADCAST_INFER(AddOp)
CDP_BROADCAST_INFER(SubOp)
CDP_BROADCAST_INFER(MulOp)
CDP_BROADCAST_INFER(DivOp)
CDP_BROADCAST_INFER(PowOp)
CDP_BROADCAST_INFER(MinOp)
CDP_BROADCAST_INFER(MaxOp)
#undef CDP_BROADCAST_INFER

LogicalResult CastOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  Type to = adaptor.getTo();
  if (!to.isF32() && !to.isInteger(64) && !to.isInteger(1))
    return fail(loc, "can only cast to f32, i64 or i1");
  types.push_back(tensorOf(type.getShape(), to));
  return success();
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::inferReturnTypes(MLIRContext *, Loc loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  ArrayRef<int64_t> shape = adaptor.getShape();
  for (int64_t dim : shape)
    if (dim < 0)
      return fail(loc,
                  "shape must be fully resolved, got " + shapeString(shape));
  if (product(shape) != type.getNumElements())
    return fail(loc, "cannot reshape " + shapeString(type.getShape()) +
                         " into " + shapeString(shape));
  types.push_back(tensorOf(shape, type.getElementType()));
  return success();
}

LogicalResult FlattenOp::inferReturnTypes(MLIRContext *, Loc loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  int64_t rank = type.getRank(), axis = adaptor.getAxisAttr().getInt();
  if (axis < -rank || axis > rank)
    return fail(loc, "axis " + Twine(axis) + " is out of range for rank " +
                         Twine(rank));
  if (axis < 0)
    axis += rank;
  ArrayRef<int64_t> shape = type.getShape();
  types.push_back(tensorOf({product(shape, 0, axis), product(shape, axis)},
                           type.getElementType()));
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *, Loc loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if (static_cast<int64_t>(perm.size()) != type.getRank())
    return fail(loc, "perm must have " + Twine(type.getRank()) + " values");
  Shape shape;
  llvm::SmallSet<int64_t, 8> seen;
  for (int64_t p : perm) {
    if (p < 0 || p >= type.getRank() || !seen.insert(p).second)
      return fail(loc, "perm " + shapeString(perm) + " is not a permutation");
    shape.push_back(type.getDimSize(p));
  }
  types.push_back(tensorOf(shape, type.getElementType()));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, Loc loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return fail(loc, "needs at least one input");
  RankedTensorType first = rankedType(inputs.front());
  if (!first)
    return failure();
  FailureOr<int64_t> axis =
      normalizeAxis(loc, adaptor.getAxisAttr().getInt(), first.getRank());
  if (failed(axis))
    return failure();
  Shape shape(first.getShape());
  shape[*axis] = 0;
  for (Value input : inputs) {
    RankedTensorType type = rankedType(input);
    if (!type)
      return failure();
    if (type.getElementType() != first.getElementType() ||
        type.getRank() != first.getRank())
      return fail(loc, "inputs must have the same rank and element type");
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (d != *axis && type.getDimSize(d) != first.getDimSize(d))
        return fail(loc, "input shapes " + shapeString(first.getShape()) +
                             " and " + shapeString(type.getShape()) +
                             " differ outside axis " + Twine(*axis));
    if (__builtin_add_overflow(shape[*axis], type.getDimSize(*axis),
                               &shape[*axis]))
      return fail(loc, "concatenated dimension overflows 64 bits");
  }
  types.push_back(tensorOf(shape, first.getElementType()));
  return success();
}

LogicalResult SplitOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  FailureOr<int64_t> axis =
      normalizeAxis(loc, adaptor.getAxisAttr().getInt(), type.getRank());
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> split = adaptor.getSplit();
  if (split.empty())
    return fail(loc, "split must list at least one piece");
  for (int64_t piece : split)
    if (piece < 0)
      return fail(loc, "split sizes must not be negative");
  if (std::accumulate(split.begin(), split.end(), int64_t(0)) !=
      type.getDimSize(*axis))
    return fail(loc, "split sizes " + shapeString(split) + " do not sum to " +
                         Twine(type.getDimSize(*axis)));
  for (int64_t piece : split) {
    Shape shape(type.getShape());
    shape[*axis] = piece;
    types.push_back(tensorOf(shape, type.getElementType()));
  }
  return success();
}

LogicalResult PadOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  ArrayRef<int64_t> pads = adaptor.getPads();
  int64_t rank = type.getRank();
  if (static_cast<int64_t>(pads.size()) != 2 * rank)
    return fail(loc, "pads must list 2 x rank = " + Twine(2 * rank) +
                         " values, got " + Twine(pads.size()));
  Shape shape(type.getShape());
  for (int64_t d = 0; d < rank; ++d) {
    if (pads[d] < 0 || pads[d + rank] < 0)
      return fail(loc, "pads must not be negative");
    if (__builtin_add_overflow(shape[d], pads[d], &shape[d]) ||
        __builtin_add_overflow(shape[d], pads[d + rank], &shape[d]))
      return fail(loc, "padded dimension overflows 64 bits");
  }
  types.push_back(tensorOf(shape, type.getElementType()));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  ArrayRef<int64_t> starts = adaptor.getStarts(), ends = adaptor.getEnds(),
                    steps = adaptor.getSteps();
  size_t count = starts.size();
  if (ends.size() != count || adaptor.getAxes().size() != count ||
      steps.size() != count)
    return fail(loc, "starts, ends, axes and steps must have equal lengths");
  FailureOr<Shape> axes = normalizeAxes(loc, adaptor.getAxes(), type.getRank());
  if (failed(axes))
    return failure();
  Shape shape(type.getShape());
  for (size_t i = 0; i < count; ++i) {
    int64_t dim = shape[(*axes)[i]], step = steps[i];
    if (step == 0)
      return fail(loc, "steps must not be zero");
    if (ShapedType::isDynamic(dim))
      continue;
    shape[(*axes)[i]] = resolveSliceAxis(starts[i], ends[i], step, dim).count;
  }
  types.push_back(tensorOf(shape, type.getElementType()));
  return success();
}

LogicalResult SqueezeOp::inferReturnTypes(MLIRContext *, Loc loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  FailureOr<Shape> axes = normalizeAxes(loc, adaptor.getAxes(), type.getRank());
  if (failed(axes))
    return failure();
  Shape shape;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    bool listed = llvm::is_contained(*axes, d);
    if (listed && type.getDimSize(d) != 1)
      return fail(loc, "cannot squeeze dimension " + Twine(d) + " of size " +
                           Twine(type.getDimSize(d)));
    if (listed || (axes->empty() && type.getDimSize(d) == 1))
      continue;
    shape.push_back(type.getDimSize(d));
  }
  types.push_back(tensorOf(shape, type.getElementType()));
  return success();
}

LogicalResult UnsqueezeOp::inferReturnTypes(MLIRContext *, Loc loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  int64_t rank = type.getRank() + adaptor.getAxes().size();
  FailureOr<Shape> axes = normalizeAxes(loc, adaptor.getAxes(), rank);
  if (failed(axes))
    return failure();
  Shape shape;
  ArrayRef<int64_t> dims = type.getShape();
  for (int64_t d = 0; d < rank; ++d) {
    if (llvm::is_contained(*axes, d)) {
      shape.push_back(1);
    } else {
      shape.push_back(dims.front());
      dims = dims.drop_front();
    }
  }
  types.push_back(tensorOf(shape, type.getElementType()));
  return success();
}

LogicalResult ExpandOp::inferReturnTypes(MLIRContext *, Loc loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  FailureOr<Shape> shape =
      broadcastShapes(loc, type.getShape(), adaptor.getShape());
  if (failed(shape))
    return failure();
  types.push_back(tensorOf(*shape, type.getElementType()));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *, Loc loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  RankedTensorType data = rankedType(adaptor.getData());
  RankedTensorType indices = rankedType(adaptor.getIndices());
  if (!data || !indices)
    return failure();
  if (data.getRank() == 0)
    return fail(loc, "data must have rank >= 1");
  FailureOr<int64_t> axis =
      normalizeAxis(loc, adaptor.getAxisAttr().getInt(), data.getRank());
  if (failed(axis))
    return failure();
  Shape shape(data.getShape().take_front(*axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, data.getShape().drop_front(*axis + 1));
  types.push_back(tensorOf(shape, data.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions and losses
//===----------------------------------------------------------------------===//

LogicalResult ReduceMeanOp::inferReturnTypes(MLIRContext *, Loc loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  return inferReduce(loc, adaptor.getInput(), adaptor.getAxes(),
                     adaptor.getKeepdims(), types);
}

LogicalResult ReduceSumOp::inferReturnTypes(MLIRContext *, Loc loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  return inferReduce(loc, adaptor.getInput(), adaptor.getAxes(),
                     adaptor.getKeepdims(), types);
}

LogicalResult SoftmaxCrossEntropyLossOp::inferReturnTypes(
    MLIRContext *, Loc loc, Adaptor adaptor, SmallVectorImpl<Type> &types) {
  if (failed(inferClassLoss(loc, adaptor.getScores(), adaptor.getLabels(),
                            adaptor.getWeights(), adaptor.getReduction(),
                            adaptor.getClassesLast(), types)))
    return failure();
  return inferFloat32Like(adaptor.getScores(), types); // the log-probabilities
}

/// The log-probabilities are optional (cdp-recompute-log-probabilities
/// drops them); the types inferred include them.
bool SoftmaxCrossEntropyLossOp::isCompatibleReturnTypes(TypeRange inferred,
                                                        TypeRange actual) {
  return actual == inferred || actual == inferred.take_front();
}

LogicalResult NllLossOp::inferReturnTypes(MLIRContext *, Loc loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferClassLoss(loc, adaptor.getInput(), adaptor.getTarget(),
                        adaptor.getWeight(), adaptor.getReduction(),
                        /*classesLast=*/false, types);
}

#define GET_OP_CLASSES
#include "cdp/Dialect/Graph/GraphOps.cpp.inc"

int64_t cdp::stageOf(Operation *op, int64_t lastStage) {
  if (auto stage = op->getAttrOfType<IntegerAttr>("cdp.stage"))
    return stage.getInt();
  if (auto assign = dyn_cast<AssignOp>(op))
    if (Operation *producer = assign.getValue().getDefiningOp())
      return stageOf(producer, lastStage);
  return lastStage;
}
