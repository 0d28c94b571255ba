//===- IndexingOps.cpp - shape rules of selection and indexing ops --------===//
//
// Where, the comparisons and logic, the NaN/Inf tests, GatherElements,
// GatherND, CumSum and Trilu, and the scatter-adds their gradients use.
//
//===----------------------------------------------------------------------===//

#include "ShapeRules.h"
#include "cdp/Dialect/Graph/GraphOps.h"

using namespace mlir;
using namespace cdp;
using namespace cdp::shape_rules;

namespace {

Type boolType(MLIRContext *context) { return IntegerType::get(context, 1); }

/// Broadcast of two operands of one element type into `resultElement`
/// (their own when null).
LogicalResult inferPair(Loc loc, Value lhs, Value rhs, Type resultElement,
                        SmallVectorImpl<Type> &types) {
  RankedTensorType l = rankedType(lhs), r = rankedType(rhs);
  if (!l || !r)
    return failure();
  if (l.getElementType() != r.getElementType())
    return fail(loc, "operand element types differ");
  FailureOr<Shape> shape = broadcastShapes(loc, l.getShape(), r.getShape());
  if (failed(shape))
    return failure();
  types.push_back(
      tensorOf(*shape, resultElement ? resultElement : l.getElementType()));
  return success();
}

/// GatherND's result shape: indices.shape[:-1] + data.shape[batch + r:].
FailureOr<Shape> gatherNDShape(Loc loc, ArrayRef<int64_t> data,
                               ArrayRef<int64_t> indices, int64_t batchDims) {
  int64_t dataRank = data.size(), indexRank = indices.size();
  if (indexRank < 1 || dataRank < 1) {
    (void)fail(loc, "data and indices must have rank >= 1");
    return failure();
  }
  int64_t tuple = indices.back();
  if (batchDims < 0 || batchDims >= std::min(dataRank, indexRank) ||
      tuple < 1 || batchDims + tuple > dataRank) {
    (void)fail(loc, "indices of shape " + shapeString(indices) +
                        " with batch_dims " + Twine(batchDims) +
                        " do not index data of shape " + shapeString(data));
    return failure();
  }
  if (data.take_front(batchDims) != indices.take_front(batchDims)) {
    (void)fail(loc, "the batch dimensions of data and indices differ");
    return failure();
  }
  Shape shape(indices.drop_back());
  llvm::append_range(shape, data.drop_front(batchDims + tuple));
  return shape;
}

} // namespace

LogicalResult WhereOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  RankedTensorType cond = rankedType(adaptor.getCondition());
  SmallVector<Type> branches;
  if (!cond ||
      failed(inferPair(loc, adaptor.getX(), adaptor.getY(), nullptr, branches)))
    return failure();
  auto branch = cast<RankedTensorType>(branches[0]);
  FailureOr<Shape> shape =
      broadcastShapes(loc, cond.getShape(), branch.getShape());
  if (failed(shape))
    return failure();
  types.push_back(tensorOf(*shape, branch.getElementType()));
  return success();
}

#define CDP_PAIR_INFER(OP, RESULT)                                             \
  LogicalResult OP::inferReturnTypes(MLIRContext *context, Loc loc,            \
                                     Adaptor adaptor,                          \
                                     SmallVectorImpl<Type> &types) {           \
    return inferPair(loc, adaptor.getLhs(), adaptor.getRhs(), RESULT, types);  \
  }
CDP_PAIR_INFER(EqualOp, boolType(context))
CDP_PAIR_INFER(LessOp, boolType(context))
CDP_PAIR_INFER(LessOrEqualOp, boolType(context))
CDP_PAIR_INFER(GreaterOp, boolType(context))
CDP_PAIR_INFER(GreaterOrEqualOp, boolType(context))
CDP_PAIR_INFER(AndOp, boolType(context))
CDP_PAIR_INFER(OrOp, boolType(context))
CDP_PAIR_INFER(XorOp, boolType(context))
#undef CDP_PAIR_INFER

LogicalResult IsNaNOp::inferReturnTypes(MLIRContext *context, Loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  types.push_back(tensorOf(type.getShape(), boolType(context)));
  return success();
}

LogicalResult IsInfOp::inferReturnTypes(MLIRContext *context, Loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  types.push_back(tensorOf(type.getShape(), boolType(context)));
  return success();
}

LogicalResult GatherElementsOp::inferReturnTypes(MLIRContext *, Loc loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  RankedTensorType data = rankedType(adaptor.getData());
  RankedTensorType indices = rankedType(adaptor.getIndices());
  if (!data || !indices)
    return failure();
  if (data.getRank() < 1 || indices.getRank() != data.getRank())
    return fail(loc, "indices must have the data's rank, at least 1");
  FailureOr<int64_t> axis =
      normalizeAxis(loc, adaptor.getAxisAttr().getInt(), data.getRank());
  if (failed(axis))
    return failure();
  for (int64_t d = 0; d < data.getRank(); ++d)
    if (d != *axis && indices.getDimSize(d) > data.getDimSize(d))
      return fail(loc, "indices of shape " + shapeString(indices.getShape()) +
                           " exceed data of shape " +
                           shapeString(data.getShape()));
  types.push_back(tensorOf(indices.getShape(), data.getElementType()));
  return success();
}

LogicalResult GatherNDOp::inferReturnTypes(MLIRContext *, Loc loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  RankedTensorType data = rankedType(adaptor.getData());
  RankedTensorType indices = rankedType(adaptor.getIndices());
  if (!data || !indices)
    return failure();
  FailureOr<Shape> shape =
      gatherNDShape(loc, data.getShape(), indices.getShape(),
                    adaptor.getBatchDimsAttr().getInt());
  if (failed(shape))
    return failure();
  types.push_back(tensorOf(*shape, data.getElementType()));
  return success();
}

LogicalResult CumSumOp::inferReturnTypes(MLIRContext *, Loc loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  return inferSameWithAxis(loc, adaptor.getInput(),
                           adaptor.getAxisAttr().getInt(), types);
}

LogicalResult TriluOp::inferReturnTypes(MLIRContext *, Loc loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(adaptor.getInput());
  if (!type)
    return failure();
  if (type.getRank() < 2)
    return fail(loc, "Trilu needs rank 2 or more");
  types.push_back(type);
  return success();
}

LogicalResult
GatherElementsGradOp::inferReturnTypes(MLIRContext *context, Loc loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  RankedTensorType grad = rankedType(adaptor.getGrad());
  if (!grad)
    return failure();
  if (adaptor.getDataShape().size() != static_cast<size_t>(grad.getRank()))
    return fail(loc, "data_shape must have the gradient's rank");
  types.push_back(tensorOf(adaptor.getDataShape(), Float32Type::get(context)));
  return success();
}

LogicalResult GatherNDGradOp::inferReturnTypes(MLIRContext *context, Loc loc,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &types) {
  RankedTensorType grad = rankedType(adaptor.getGrad());
  RankedTensorType indices = rankedType(adaptor.getIndices());
  if (!grad || !indices)
    return failure();
  FailureOr<Shape> shape =
      gatherNDShape(loc, adaptor.getDataShape(), indices.getShape(),
                    adaptor.getBatchDimsAttr().getInt());
  if (failed(shape))
    return failure();
  if (ArrayRef<int64_t>(*shape) != grad.getShape())
    return fail(loc, "the gradient's shape does not match the gather's");
  types.push_back(tensorOf(adaptor.getDataShape(), Float32Type::get(context)));
  return success();
}
