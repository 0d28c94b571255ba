//===- ShapeRules.cpp - helpers of the ops' shape rules -------------------===//

#include "ShapeRules.h"

#include "cdp/Support/AttentionLayout.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

#include <cmath>

using namespace mlir;

namespace cdp::shape_rules {

LogicalResult fail(Loc loc, const Twine &message) {
  return emitOptionalError(loc, message);
}

/// The ranked tensor type of `value`, or null when the operand is not one
/// (the ODS constraints report that case).
RankedTensorType rankedType(Value value) {
  return value ? dyn_cast<RankedTensorType>(value.getType()) : nullptr;
}

RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elementType) {
  return RankedTensorType::get(shape, elementType);
}

std::string shapeString(ArrayRef<int64_t> shape) {
  std::string text = "[";
  llvm::raw_string_ostream os(text);
  llvm::interleave(shape, os, ",");
  os << "]";
  return text;
}

/// Normalizes `axis` into [0, rank), accepting [-rank, rank).
FailureOr<int64_t> normalizeAxis(Loc loc, int64_t axis, int64_t rank,
                                 StringRef what) {
  if (axis < -rank || axis >= rank) {
    (void)fail(loc, what + " " + Twine(axis) + " is out of range for rank " +
                        Twine(rank));
    return failure();
  }
  return axis < 0 ? axis + rank : axis;
}

/// Normalizes a list of distinct axes into [0, rank).
FailureOr<Shape> normalizeAxes(Loc loc, ArrayRef<int64_t> axes, int64_t rank) {
  Shape result;
  llvm::SmallSet<int64_t, 8> seen;
  for (int64_t axis : axes) {
    FailureOr<int64_t> normalized = normalizeAxis(loc, axis, rank);
    if (failed(normalized))
      return failure();
    if (!seen.insert(*normalized).second) {
      (void)fail(loc, "axis " + Twine(axis) + " is repeated");
      return failure();
    }
    result.push_back(*normalized);
  }
  return result;
}

/// numpy broadcasting of two shapes.
FailureOr<Shape> broadcastShapes(Loc loc, ArrayRef<int64_t> lhs,
                                 ArrayRef<int64_t> rhs) {
  size_t rank = std::max(lhs.size(), rhs.size());
  Shape result(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t l = i < rank - lhs.size() ? 1 : lhs[i - (rank - lhs.size())];
    int64_t r = i < rank - rhs.size() ? 1 : rhs[i - (rank - rhs.size())];
    if (l != r && l != 1 && r != 1) {
      (void)fail(loc, "shapes " + shapeString(lhs) + " and " +
                          shapeString(rhs) + " do not broadcast");
      return failure();
    }
    result[i] = l == 1 ? r : l;
  }
  return result;
}

LogicalResult checkLength(Loc loc, StringRef name, ArrayRef<int64_t> values,
                          size_t expected) {
  if (values.size() != expected)
    return fail(loc, name + " must have " + Twine(expected) + " values, got " +
                         Twine(values.size()));
  return success();
}

LogicalResult checkPositive(Loc loc, StringRef name, ArrayRef<int64_t> values) {
  for (int64_t v : values)
    if (v < 1)
      return fail(loc, name + " must be positive, got " + Twine(v));
  return success();
}

LogicalResult inferSameWithAxis(Loc loc, Value input, int64_t axis,
                                SmallVectorImpl<Type> &types) {
  RankedTensorType type = rankedType(input);
  if (!type || failed(normalizeAxis(loc, axis, type.getRank())))
    return failure();
  types.push_back(type);
  return success();
}

LogicalResult checkBroadcastsTo(Loc loc, ArrayRef<int64_t> from,
                                ArrayRef<int64_t> to, const Twine &message) {
  FailureOr<Shape> shape = broadcastShapes(loc, from, to);
  if (failed(shape))
    return failure();
  return ArrayRef<int64_t>(*shape) == to ? success() : fail(loc, message);
}

LogicalResult inferAttention(Loc loc, Value a, Value b, Value v, Value bias,
                             std::optional<StringRef> layout,
                             SmallVectorImpl<Type> &types) {
  RankedTensorType at = rankedType(a), bt = rankedType(b), vt = rankedType(v);
  if (!at || !bt || !vt)
    return failure();
  int64_t rank = at.getRank();
  if (rank < 2 || bt.getRank() != rank || vt.getRank() != rank)
    return fail(loc, "attention's operands must have one rank, 2 or more");
  if (layout && *layout != "bhsd" && *layout != "bshd")
    return fail(loc, Twine("attention's layout '") + *layout +
                         "' is neither bhsd nor bshd");
  bool interleaved = layout && *layout == "bshd";
  if (interleaved && rank != 4)
    return fail(loc, "attention's layout bshd needs 4-D operands");
  Shape aLogical(at.getShape()), bLogical(bt.getShape()),
      vLogical(vt.getShape());
  if (interleaved) {
    aLogical = headsFirst<Shape>(at.getShape(), false);
    bLogical = headsFirst<Shape>(bt.getShape(), true);
    vLogical = headsFirst<Shape>(vt.getShape(), false);
  }
  ArrayRef<int64_t> as = aLogical, bs = bLogical, vs = vLogical;
  if (bs.drop_back(2) != vs.drop_back(2) || queryHeadsPerKeyHead(as, bs) == 0)
    return fail(loc, "attention's operands " + shapeString(as) + ", " +
                         shapeString(bs) + " and " + shapeString(vs) +
                         " must have the same batch dimensions (the keys "
                         "and v may have fewer heads, a divisor of the "
                         "queries')");
  int64_t m = as[rank - 2], k = as[rank - 1], n = bs[rank - 1];
  if (bs[rank - 2] != k || vs[rank - 2] != n)
    return fail(loc, "attention's products " + shapeString(as) + " x " +
                         shapeString(bs) + " x " + shapeString(vs) +
                         " do not chain");
  Shape scores(as.drop_back(2));
  scores.append({m, n});
  if (RankedTensorType biasType = rankedType(bias))
    if (failed(checkBroadcastsTo(
            loc, biasType.getShape(), scores,
            "the bias " + shapeString(biasType.getShape()) +
                " must broadcast to the scores " + shapeString(scores))))
      return failure();
  Shape output(as.drop_back(1)), stats(as.drop_back(1));
  output.push_back(vs[rank - 1]);
  stats.push_back(2);
  if (interleaved) // (B, M, H, D) as stored
    output = {output[0], output[2], output[1], output[3]};
  Type f32 = Float32Type::get(at.getContext());
  types.append({tensorOf(output, f32), tensorOf(stats, f32)});
  return success();
}

LogicalResult verifyScoresScale(Operation *op, const llvm::APFloat &scale) {
  float value = scale.convertToFloat();
  if (!std::isfinite(value) || value == 0.0f)
    return op->emitOpError("scales its scores by ")
           << value << "; the scale must be finite and nonzero";
  return success();
}

LogicalResult verifyRoundingFormat(Operation *op,
                                   std::optional<StringRef> format) {
  if (format && *format != "bf16" && *format != "f16")
    return op->emitOpError("rounds to '") << *format << "': bf16 or f16";
  return success();
}

LogicalResult verifyNarrowOperands(Operation *op,
                                   std::optional<StringRef> format,
                                   ValueRange operands) {
  for (Value operand : operands) {
    Type element = cast<RankedTensorType>(operand.getType()).getElementType();
    if (element.isF32())
      continue;
    StringRef stored = element.isBF16() ? "bf16" : "f16";
    if (format != stored)
      return op->emitOpError("reads a ")
             << stored << " operand, which needs narrow_operands = \"" << stored
             << "\"";
  }
  return success();
}

LogicalResult inferFloat32Like(Value value, SmallVectorImpl<Type> &types) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type)
    return failure();
  types.push_back(RankedTensorType::get(type.getShape(),
                                        Float32Type::get(value.getContext())));
  return success();
}

/// Whether `actual` is the float32 result inferred, or that result stored
/// in 2 bytes (bf16 or f16, the shape kept).
bool isResultOrNarrowed(TypeRange inferred, TypeRange actual) {
  if (inferred.size() != actual.size())
    return false;
  for (auto [want, got] : llvm::zip(inferred, actual)) {
    auto wantTensor = dyn_cast<RankedTensorType>(want);
    auto gotTensor = dyn_cast<RankedTensorType>(got);
    if (want == got)
      continue;
    if (!wantTensor || !gotTensor ||
        wantTensor.getShape() != gotTensor.getShape() ||
        !wantTensor.getElementType().isF32() ||
        !(gotTensor.getElementType().isBF16() ||
          gotTensor.getElementType().isF16()))
      return false;
  }
  return true;
}

/// A 2-byte operand is read widened only by an op that rounds to its format.
LogicalResult verifyNarrowInputs(Operation *op,
                                 std::optional<StringRef> rounding) {
  return verifyNarrowInputs(op, rounding, op->getOperands());
}

LogicalResult verifyNarrowInputs(Operation *op,
                                 std::optional<StringRef> rounding,
                                 ValueRange operands) {
  for (Value operand : operands) {
    Type element = cast<RankedTensorType>(operand.getType()).getElementType();
    if (!element.isBF16() && !element.isF16())
      continue;
    if (rounding != (element.isBF16() ? "bf16" : "f16"))
      return op->emitOpError("reads a 2-byte input, which needs round_result "
                             "of its format");
  }
  return success();
}

/// A 2-byte result holds the values `round_result` rounded to its format.
LogicalResult verifyNarrowResult(Operation *op,
                                 std::optional<StringRef> rounding) {
  Type element =
      cast<RankedTensorType>(op->getResult(0).getType()).getElementType();
  if (element.isF32())
    return success();
  StringRef stored = element.isBF16() ? "bf16" : "f16";
  if (rounding != stored)
    return op->emitOpError("stores its result in ")
           << stored << ", which needs round_result = \"" << stored << "\"";
  return success();
}

} // namespace cdp::shape_rules
