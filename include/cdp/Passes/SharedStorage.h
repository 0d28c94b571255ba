//===- SharedStorage.h - values that lie over one arena block --*- C++ -*-===//
//
// A reshape moves no bytes: its result may lie over its input's storage.
// cdp-plan-memory places such values in one block of the arena, so the
// kernels find input and output at one address and copy nothing, and
// cdp-reuse-layer-memory writes a result over an operand only where
// nothing reads that block later under another name. Both ask this class,
// so they agree on which values share a block.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PASSES_SHAREDSTORAGE_H
#define CDP_PASSES_SHAREDSTORAGE_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

namespace cdp {

/// The values of a function grouped by the arena block they lie over. A
/// view op's result (trait ViewOfInput: reshape, flatten, squeeze,
/// unsqueeze, identity) joins its input's group when the input is made by
/// an op of the function that is not a parameter or a constant (the
/// graph's inputs are filled per step, persistent values are not in the
/// arena) and no op writes into either in place (`unscale_grads`,
/// `clip_grad_norm`: a write to one name would change the other).
/// The input whose storage `op`'s result may lie over by the rule above,
/// or null: the result then has bytes of its own (a kernel copies).
mlir::Value storageSharedWith(mlir::Operation &op);

class SharedStorage {
public:
  explicit SharedStorage(mlir::func::FuncOp func);

  /// The first value of `value`'s group: the one an op computed.
  mlir::Value ownerOf(mlir::Value value) const;

  /// Every value over the same block as `value`, its owner first.
  llvm::SmallVector<mlir::Value, 2> groupOf(mlir::Value value) const;

private:
  llvm::DenseMap<mlir::Value, mlir::Value> owner;
  llvm::DenseMap<mlir::Value, llvm::SmallVector<mlir::Value, 2>> members;
};

} // namespace cdp

#endif // CDP_PASSES_SHAREDSTORAGE_H
