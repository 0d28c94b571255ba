//===- NarrowValues.h - which values are exact in bf16 or fp16 --*- C++ -*-===//
//
// Mixed precision keeps narrow values in float32 storage. The pass that
// decides where values are narrow (cdp-autocast) and the one that tells the
// backends which products may multiply in the narrow format
// (cdp-mark-narrow-products) agree here on which ops only move or select
// values, so that their results are exact wherever their operands are.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PASSES_NARROWVALUES_H
#define CDP_PASSES_NARROWVALUES_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseMap.h"

namespace cdp {

/// Whether `op` only moves or selects the values of its float operands
/// (reshapes, transposes, slices, gathers, ReLU, max pooling, where, min,
/// max): each result value is one of its operands' values.
bool movesValuesOnly(mlir::Operation *op);

/// The narrow formats values are exact in, found from their ops: a
/// `cdp.round_to` or `cdp.unpack_narrow` of a format, an op cdp-autocast
/// marked `cdp.narrow`, an op that rounds its result (`round_result`,
/// cdp-fuse-roundings), an `attention_grad`'s operand gradients under
/// `narrow_operands`, or an op that only moves or selects values
/// computing from values exact in one format alone.
class ExactValues {
public:
  /// The format ("bf16" or "f16") every value of `value` is exact in, or
  /// "".
  llvm::StringRef formatOf(mlir::Value value);

private:
  llvm::StringRef compute(mlir::Value value);
  llvm::DenseMap<mlir::Value, llvm::StringRef> known;
};

} // namespace cdp

#endif // CDP_PASSES_NARROWVALUES_H
