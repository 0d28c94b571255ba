//===- FoldTranspose.cpp - Transpose into the products that read it -------===//
//
// torch exports a Linear over a sequence as Transpose(W) then MatMul, and the
// MatMul gradient of autodiff reads an operand transposed; each Transpose is
// a kernel that copies a tensor. GEMMs read an operand transposed for free
// (a flag), so this pass, on the training graph after autodiff:
//
//   - composes a Transpose of a Transpose into one, or removes both when
//     the composition is the identity;
//   - folds a Transpose of the last two dimensions into the MatMul or Gemm
//     operand it feeds (toggling trans_a / trans_b);
//   - turns the Transpose of a MatMul's result into the product of the
//     swapped operands (B^T A^T), when nothing else reads the result (also
//     through a round_to between them, which then rounds the new product);
//
// then erases the Transposes nothing reads any more. A fold only joins ops
// of the same stage, so what a pipeline sends between stages is unchanged.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cdp {
#define GEN_PASS_DEF_FOLDTRANSPOSE
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

bool sameStage(Operation *a, Operation *b) {
  return a->getAttr("cdp.stage") == b->getAttr("cdp.stage");
}

/// Whether `perm` swaps the last two dimensions and keeps the others.
bool swapsLastTwo(ArrayRef<int64_t> perm) {
  int64_t rank = perm.size();
  if (rank < 2 || perm[rank - 2] != rank - 1 || perm[rank - 1] != rank - 2)
    return false;
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (perm[d] != d)
      return false;
  return true;
}

bool isIdentity(ArrayRef<int64_t> perm) {
  for (auto [d, p] : llvm::enumerate(perm))
    if (p != static_cast<int64_t>(d))
      return false;
  return true;
}

/// transpose(transpose(x, p), q) = transpose(x, p[q[i]]), or x.
void composeTransposes(TransposeOp outer) {
  auto inner = outer.getInput().getDefiningOp<TransposeOp>();
  if (!inner || !sameStage(inner, outer))
    return;
  SmallVector<int64_t> perm;
  for (int64_t q : outer.getPerm())
    perm.push_back(inner.getPerm()[q]);
  if (isIdentity(perm)) {
    outer.getOutput().replaceAllUsesWith(inner.getInput());
    outer->erase();
  } else {
    outer.getInputMutable().assign(inner.getInput());
    outer.setPerm(perm);
  }
  if (inner->use_empty())
    inner->erase();
}

/// The input of `value`'s Transpose of the last two dimensions in `user`'s
/// stage, or null.
Value transposedFrom(Value value, Operation *user) {
  auto transpose = value.getDefiningOp<TransposeOp>();
  if (!transpose || !swapsLastTwo(transpose.getPerm()) ||
      !sameStage(transpose, user))
    return Value();
  return transpose.getInput();
}

void eraseIfUnused(Value value) {
  if (Operation *op = value.getDefiningOp<TransposeOp>())
    if (op->use_empty())
      op->erase();
}

/// Folds the Transposes feeding a MatMul's or Gemm's operands into its
/// trans_a / trans_b flags.
template <typename ProductOp> void foldIntoOperands(ProductOp product) {
  if (Value a = transposedFrom(product.getA(), product)) {
    Value old = product.getA();
    product.getAMutable().assign(a);
    product.setTransA(!product.getTransA());
    eraseIfUnused(old);
  }
  if (Value b = transposedFrom(product.getB(), product)) {
    Value old = product.getB();
    product.getBMutable().assign(b);
    product.setTransB(!product.getTransB());
    eraseIfUnused(old);
  }
}

/// transpose(A B) = B^T A^T: the product writes the transposed result;
/// likewise through a rounding between them (autodiff rounds a gradient
/// that reaches a bf16 tensor: the tied LM head's weight gradient), which
/// then rounds the swapped product, element for element the same values.
void swapProductOperands(TransposeOp transpose) {
  auto round = transpose.getInput().getDefiningOp<RoundToOp>();
  if (round && (!round->hasOneUse() || !sameStage(round, transpose)))
    return;
  Value product = round ? round.getInput() : transpose.getInput();
  auto matmul = product.getDefiningOp<MatMulOp>();
  if (!matmul || !matmul->hasOneUse() || !sameStage(matmul, transpose) ||
      !swapsLastTwo(transpose.getPerm()))
    return;
  auto rank = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getRank();
  };
  // 1-D operands lose a dimension in the product: their result's last two
  // dimensions are not the product's rows and columns.
  if (rank(matmul.getA()) < 2 || rank(matmul.getB()) < 2)
    return;
  OpBuilder builder(transpose);
  auto swapped = builder.create<MatMulOp>(
      matmul.getLoc(), matmul.getB(), matmul.getA(),
      builder.getBoolAttr(!matmul.getTransB()),
      builder.getBoolAttr(!matmul.getTransA()), matmul.getNarrowOperandsAttr(),
      matmul.getRoundResultAttr());
  for (NamedAttribute attr : matmul->getDiscardableAttrs())
    swapped->setAttr(attr.getName(), attr.getValue());
  Value result = swapped.getOutput();
  if (round) {
    auto rounded = builder.create<RoundToOp>(round.getLoc(), result,
                                             round.getFormatAttr());
    for (NamedAttribute attr : round->getDiscardableAttrs())
      rounded->setAttr(attr.getName(), attr.getValue());
    result = rounded.getOutput();
  }
  transpose.getOutput().replaceAllUsesWith(result);
  transpose->erase();
  if (round)
    round->erase();
  matmul->erase();
}

struct FoldTransposePass
    : public cdp::impl::FoldTransposeBase<FoldTransposePass> {
  void runOnOperation() override {
    // Collected first: each rewrite erases ops a walk would visit next.
    SmallVector<TransposeOp> transposes;
    getOperation().walk([&](TransposeOp t) { transposes.push_back(t); });
    // In program order: an inner Transpose is composed before its outer
    // one, which may erase it, and is never visited again.
    for (TransposeOp t : transposes)
      composeTransposes(t);
    transposes.clear();
    getOperation().walk([&](TransposeOp t) { transposes.push_back(t); });
    for (TransposeOp t : transposes)
      swapProductOperands(t);
    getOperation().walk([&](Operation *op) {
      if (auto matmul = dyn_cast<MatMulOp>(op))
        foldIntoOperands(matmul);
      else if (auto gemm = dyn_cast<GemmOp>(op))
        foldIntoOperands(gemm);
    });
  }
};

} // namespace
