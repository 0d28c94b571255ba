//===- ShapeRules.h - helpers of the ops' shape rules -----------*- C++ -*-===//
//
// Shared by the files that implement inferReturnTypes (GraphOps.cpp,
// IndexingOps.cpp). Each check reports through the optional location, so a
// rule run by the importer names the node that broke it.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_COMPILER_DIALECT_GRAPH_SHAPERULES_H
#define CDP_COMPILER_DIALECT_GRAPH_SHAPERULES_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "mlir/IR/ValueRange.h"
#include "llvm/ADT/APFloat.h"

#include <optional>
#include <string>

namespace cdp::shape_rules {

using Shape = llvm::SmallVector<int64_t>;
using Loc = std::optional<mlir::Location>;

mlir::LogicalResult fail(Loc loc, const llvm::Twine &message);
/// The ranked tensor type of `value`, or null when the operand is not one
/// (the ODS constraints report that case).
mlir::RankedTensorType rankedType(mlir::Value value);
mlir::RankedTensorType tensorOf(llvm::ArrayRef<int64_t> shape,
                                mlir::Type elementType);
std::string shapeString(llvm::ArrayRef<int64_t> shape);
/// Normalizes `axis` into [0, rank), accepting [-rank, rank).
mlir::FailureOr<int64_t> normalizeAxis(Loc loc, int64_t axis, int64_t rank,
                                       llvm::StringRef what = "axis");
/// Normalizes a list of distinct axes into [0, rank).
mlir::FailureOr<Shape> normalizeAxes(Loc loc, llvm::ArrayRef<int64_t> axes,
                                     int64_t rank);
/// numpy broadcasting of two shapes.
mlir::FailureOr<Shape> broadcastShapes(Loc loc, llvm::ArrayRef<int64_t> lhs,
                                       llvm::ArrayRef<int64_t> rhs);
/// The input's own type, once `axis` is checked against its rank (softmax,
/// cum_sum).
mlir::LogicalResult inferSameWithAxis(Loc loc, mlir::Value input, int64_t axis,
                                      llvm::SmallVectorImpl<mlir::Type> &types);
/// Fails with `message` unless `from` broadcasts (numpy's rules) to `to`
/// itself.
mlir::LogicalResult checkBroadcastsTo(Loc loc, llvm::ArrayRef<int64_t> from,
                                      llvm::ArrayRef<int64_t> to,
                                      const llvm::Twine &message);
/// cdp.attention's result and stats types from its operands (a null
/// `bias` when it has none), checked: `a` (..., M, K), `b` (..., K, N) and
/// `v` (..., N, D) with one batch, a bias that broadcasts to (..., M, N).
/// Under `layout` "bshd" the operands and the result keep the heads after
/// the sequence: a (B, M, H, K), b the keys (B, N, H, K), v (B, N, H, D),
/// the result (B, M, H, D); the stats (B, H, M, 2) and the bias as above.
mlir::LogicalResult inferAttention(Loc loc, mlir::Value a, mlir::Value b,
                                   mlir::Value v, mlir::Value bias,
                                   std::optional<llvm::StringRef> layout,
                                   llvm::SmallVectorImpl<mlir::Type> &types);
/// A 2-byte tensor among `operands` of a product (gemm, matmul,
/// attention) is what its `narrow_operands` names.
mlir::LogicalResult verifyNarrowOperands(mlir::Operation *op,
                                         std::optional<llvm::StringRef> format,
                                         mlir::ValueRange operands);
/// An attention's scale of its scores is finite and nonzero.
mlir::LogicalResult verifyScoresScale(mlir::Operation *op,
                                      const llvm::APFloat &scale);
/// A rounding attribute (narrow_operands, round_result) names bf16 or f16.
mlir::LogicalResult verifyRoundingFormat(mlir::Operation *op,
                                         std::optional<llvm::StringRef> format);
/// Float32 values of `value`'s shape, whatever its element type (an op
/// reading 2-byte values widens them: GELU, a loss and its gradient).
mlir::LogicalResult inferFloat32Like(mlir::Value value,
                                     llvm::SmallVectorImpl<mlir::Type> &types);
/// Whether `actual` is the float32 result inferred, or that result stored
/// in 2 bytes (bf16 or f16, the shape kept).
bool isResultOrNarrowed(mlir::TypeRange inferred, mlir::TypeRange actual);
/// A 2-byte operand needs `rounding` of its format (an op that reads it
/// widened computes under autocast's rounding).
mlir::LogicalResult verifyNarrowInputs(mlir::Operation *op,
                                       std::optional<llvm::StringRef> rounding);
/// The same for `operands` alone (others may be 2-byte for other reasons).
mlir::LogicalResult verifyNarrowInputs(mlir::Operation *op,
                                       std::optional<llvm::StringRef> rounding,
                                       mlir::ValueRange operands);
/// A 2-byte result holds the values `round_result` rounded to its format.
mlir::LogicalResult verifyNarrowResult(mlir::Operation *op,
                                       std::optional<llvm::StringRef> rounding);
mlir::LogicalResult checkLength(Loc loc, llvm::StringRef name,
                                llvm::ArrayRef<int64_t> values,
                                size_t expected);
mlir::LogicalResult checkPositive(Loc loc, llvm::StringRef name,
                                  llvm::ArrayRef<int64_t> values);

} // namespace cdp::shape_rules

#endif // CDP_COMPILER_DIALECT_GRAPH_SHAPERULES_H
