//===- ReadNarrowOperands.cpp - products read 2-byte operands -------------===//
//
// Under --precision bf16 or fp16 a value the backward reads is stored in 2
// bytes (cdp-pack-narrow-stash) and unpacked into float32 before its
// readers, and a product marked narrow_operands reads float32 operands that
// a GPU converts into 2-byte copies again before it multiplies. Where the
// 2-byte tensor exists, the product reads it instead: no unpacking for it,
// no conversion. An activation's gradient reads its saved value from the
// backward's 2-byte copy likewise (its kernel widens the values exactly).
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"

namespace cdp {
#define GEN_PASS_DEF_READNARROWOPERANDS
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// The 2-byte tensor of `format` holding the values of `operand`, readable
/// by `product`, or null: the input of the unpack that computed it, or a
/// pack of it made before `product` in its stage and phase.
Value narrowCopyOf(Value operand, StringRef format, Operation *product) {
  if (auto unpack = operand.getDefiningOp<UnpackNarrowOp>())
    return unpack.getFormat() == format ? unpack.getInput() : Value();
  for (Operation *user : operand.getUsers()) {
    auto pack = dyn_cast<PackNarrowOp>(user);
    if (pack && pack.getFormat() == format &&
        pack->getBlock() == product->getBlock() &&
        pack->isBeforeInBlock(product) &&
        pack->getAttr("cdp.stage") == product->getAttr("cdp.stage") &&
        pack->getAttr("cdp.phase") == product->getAttr("cdp.phase"))
      return pack.getOutput();
  }
  return Value();
}

/// The operands a product reads in 2 bytes where it can: a gemm's and a
/// matmul's A and B, an attention's a, b and v (its gradient's too).
MutableArrayRef<OpOperand> multipliedOperands(Operation *op) {
  MutableArrayRef<OpOperand> all = op->getOpOperands();
  if (isa<MatMulOp, GemmOp>(op))
    return all.take_front(2);
  if (isa<AttentionOp>(op))
    return all.take_front(3);
  if (isa<AttentionGradOp>(op))
    return all.slice(1, 3);
  return {};
}

/// Points `operands` of `reader` at their 2-byte copies of `format`; adds
/// to `released` the unpacks it stopped reading.
void readNarrowCopies(MutableArrayRef<OpOperand> operands, StringRef format,
                      Operation *reader,
                      llvm::SetVector<Operation *> &released) {
  for (OpOperand &operand : operands) {
    Value copy = narrowCopyOf(operand.get(), format, reader);
    if (!copy)
      continue;
    if (auto unpack = operand.get().getDefiningOp<UnpackNarrowOp>())
      released.insert(unpack);
    operand.set(copy);
  }
}

/// Reads the 2-byte copies an op's kernels widen as they read them: a
/// product's multiplied operands (narrow_operands); an activation
/// gradient's saved value (GELU's: the c_fc product's result, batch x seq x
/// 4d values) where it is an unpack, of whatever format; GELU's input under
/// round_result (GPT-2's c_fc result again).
void readNarrowCopies(Operation *op, llvm::SetVector<Operation *> &released) {
  if (auto format = op->getAttrOfType<StringAttr>("narrow_operands")) {
    readNarrowCopies(multipliedOperands(op), format.getValue(), op, released);
  } else if (auto grad = dyn_cast<UnaryGradOp>(op)) {
    if (auto unpack = grad.getSaved().getDefiningOp<UnpackNarrowOp>())
      readNarrowCopies(grad->getOpOperands().slice(1, 1), unpack.getFormat(),
                       op, released);
  } else if (auto gelu = dyn_cast<GeluOp>(op)) {
    if (std::optional<StringRef> format = gelu.getRoundResult())
      readNarrowCopies(gelu->getOpOperands(), *format, op, released);
  }
}

/// A cdp.round_to that only `pack` reads any more (its products read the
/// pack now) is done by the pack, which rounds as it stores: one pass over
/// the values instead of two.
void foldRounding(PackNarrowOp pack) {
  auto round = pack.getInput().getDefiningOp<RoundToOp>();
  if (!round || round.getFormat() != pack.getFormat() || !round->hasOneUse())
    return;
  pack.getInputMutable().assign(round.getInput());
  round->erase();
}

struct ReadNarrowOperandsPass
    : public cdp::impl::ReadNarrowOperandsBase<ReadNarrowOperandsPass> {
  void runOnOperation() override {
    llvm::SetVector<Operation *> released;
    getOperation().walk([&](Operation *op) { readNarrowCopies(op, released); });
    for (Operation *unpack : released)
      if (unpack->use_empty())
        unpack->erase();
    getOperation().walk(foldRounding);
  }
};

} // namespace
