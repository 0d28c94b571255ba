//===- FoldRepeatedHeads.cpp - grouped-query attention's kv heads ---------===//
//
// Grouped-query attention (Llama 3, Mistral, TinyLlama) projects fewer key
// and value heads than query heads and repeats each for its group before
// attention (transformers' repeat_kv):
//
//   %r = reshape(expand(unsqueeze(%kv, [2]), [B, H_kv, g, S, D]),
//                [B, H_kv * g, S, D])
//
// Each repetition is a copy g times the size of the heads it repeats,
// stored for the backward, and its gradient a reduction over the copies.
// cdp.attention reads keys and v with fewer heads directly (query head h
// reads head h / g), so this pass gives it the unrepeated heads: it
// follows the attention's keys and v up through what only rearranges or
// scales them per value (roundings, products by a scalar, transposes
// that keep the batch and heads, the dynamo exporter's reshapes around a
// transpose), rebuilds those ops on the unrepeated heads, and drops the
// repetition. The forward reads the values the repetition copied, and the
// gradient rule sums each group's per-query-head gradients with the ops
// the repetition's gradient used: the same bits where only roundings,
// transposes and reshapes lie between (float32 plans, whose scalings
// cdp-fold-attention-scale took). A scaling left between (autocast's
// plans, a scale not a power of two) now multiplies the group's sum
// instead of each head's gradient: a difference of rounding (tiny Llama
// in bf16, 3 steps: 9.8e-5 at most; its distance from torch's autocast
// 0.648 -> 0.624 of autocast's own effect). Runs after
// cdp-fold-attention-scale, before cdp-fold-attention-transposes.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphBuilder.h"
#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/ScalarElementwise.h"

#include "mlir/IR/Builders.h"

namespace cdp {
#define GEN_PASS_DEF_FOLDREPEATEDHEADS
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

ArrayRef<int64_t> shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// `value`'s producer past identities, each read once.
Value pastIdentities(Value value) {
  while (auto identity = value.getDefiningOp<IdentityOp>()) {
    if (!value.hasOneUse())
      break;
    value = identity.getInput();
  }
  return value;
}

/// A repetition of heads: `heads` repeated `group` times each along its
/// axis rank - 3 (the last batch dimension).
struct Repetition {
  Value heads;
  int64_t group = 1;
};

/// `value` as reshape(expand(unsqueeze(x, [r - 2]), [.., H_kv, g, ..]),
/// [.., H_kv * g, ..]) of a rank-r `x` (identities between allowed), each
/// op read by the next alone.
std::optional<Repetition> repetitionOf(Value value) {
  auto reshape = value.getDefiningOp<ReshapeOp>();
  if (!reshape)
    return std::nullopt;
  Value expanded = pastIdentities(reshape.getInput());
  auto expand = expanded.getDefiningOp<ExpandOp>();
  if (!expand || !expanded.hasOneUse())
    return std::nullopt;
  Value unsqueezed = pastIdentities(expand.getInput());
  auto unsqueeze = unsqueezed.getDefiningOp<UnsqueezeOp>();
  if (!unsqueeze || !unsqueezed.hasOneUse())
    return std::nullopt;
  Value heads = unsqueeze.getInput();
  ArrayRef<int64_t> x = shapeOf(heads), wide = shapeOf(expand.getOutput()),
                    out = shapeOf(reshape.getOutput());
  int64_t rank = x.size();
  ArrayRef<int64_t> axes = unsqueeze.getAxes();
  if (rank < 3 || axes.size() != 1 ||
      (axes[0] < 0 ? axes[0] + rank + 1 : axes[0]) != rank - 2 ||
      static_cast<int64_t>(wide.size()) != rank + 1 ||
      static_cast<int64_t>(out.size()) != rank)
    return std::nullopt;
  int64_t group = wide[rank - 2];
  SmallVector<int64_t> expected(x), repeated(x);
  expected.insert(expected.begin() + rank - 2, group);
  repeated[rank - 3] *= group;
  if (wide != ArrayRef<int64_t>(expected) || out != ArrayRef<int64_t>(repeated))
    return std::nullopt;
  return Repetition{heads, group};
}

/// Whether `op` moves a (.., H, X, Y) tensor's values without mixing its
/// batch and heads, so that it acts on each head alike: per-value ops with
/// a scalar, identities, transposes that keep the leading axes, reshapes
/// that keep the last two dimensions (the dynamo exporter's merged batch
/// and heads).
bool keepsHeads(Operation *op) {
  if (isScalarElementwise(op) || isa<IdentityOp>(op))
    return true;
  if (auto transpose = dyn_cast<TransposeOp>(op)) {
    ArrayRef<int64_t> perm = transpose.getPerm();
    int64_t rank = perm.size();
    for (int64_t i = 0; i + 2 < rank; ++i)
      if (perm[i] != i)
        return false;
    return rank >= 3;
  }
  if (auto reshape = dyn_cast<ReshapeOp>(op)) {
    ArrayRef<int64_t> in = shapeOf(reshape.getInput()),
                      out = shapeOf(reshape.getOutput());
    return in.size() >= 3 && out.size() >= 3 &&
           in.take_back(2) == out.take_back(2);
  }
  return false;
}

/// An attention operand as ops that keep heads over a repetition: `chain`
/// from the repetition's reader down to the attention's operand.
struct RepeatedOperand {
  Repetition repetition;
  SmallVector<Operation *, 4> chain;
};

std::optional<RepeatedOperand> repeatedOperand(Value operand) {
  RepeatedOperand found;
  Value at = operand;
  while (true) {
    if (auto repetition = repetitionOf(at)) {
      if (!at.hasOneUse())
        return std::nullopt;
      found.repetition = *repetition;
      std::reverse(found.chain.begin(), found.chain.end());
      return found;
    }
    Operation *op = at.getDefiningOp();
    if (!op || !at.hasOneUse() || !keepsHeads(op))
      return std::nullopt;
    found.chain.push_back(op);
    at = carriedOperand(op).get();
  }
}

/// `op` rebuilt on `input` with `group` times fewer heads (its last batch
/// dimension): a reshape's target shape divided there, the rest as it was.
Operation *rebuiltOnHeads(OpBuilder &builder, Operation *op, Value input,
                          int64_t group) {
  SmallVector<Value, 2> operands(op->getOperands());
  operands[carriedOperand(op).getOperandNumber()] = input;
  SmallVector<NamedAttribute> attributes(op->getAttrs());
  if (auto reshape = dyn_cast<ReshapeOp>(op)) {
    SmallVector<int64_t> shape(reshape.getShape());
    shape[shape.size() - 3] /= group;
    for (NamedAttribute &attribute : attributes)
      if (attribute.getName() == reshape.getShapeAttrName())
        attribute.setValue(builder.getDenseI64ArrayAttr(shape));
  }
  std::string error;
  return createInferred(builder, op->getLoc(), op->getName().getStringRef(),
                        operands, attributes, 1, error);
}

/// Whether every reshape of the chain can take `group` times fewer heads.
bool divisible(const RepeatedOperand &operand) {
  for (Operation *op : operand.chain)
    if (auto reshape = dyn_cast<ReshapeOp>(op)) {
      ArrayRef<int64_t> shape = reshape.getShape();
      if (shape[shape.size() - 3] % operand.repetition.group != 0)
        return false;
    }
  return true;
}

/// The operand's ops rebuilt before `user` on the unrepeated heads: the
/// last one's result, or null (the ops built so far erased).
Value rebuilt(Operation *user, const RepeatedOperand &operand) {
  OpBuilder builder(user);
  Value value = operand.repetition.heads;
  SmallVector<Operation *, 4> built;
  for (Operation *op : operand.chain) {
    Operation *copy =
        rebuiltOnHeads(builder, op, value, operand.repetition.group);
    if (!copy) {
      for (Operation *done : llvm::reverse(built))
        done->erase();
      return Value();
    }
    built.push_back(copy);
    value = copy->getResult(0);
  }
  return value;
}

/// Erases `value`'s producers up to the unrepeated `heads`, each once
/// nothing reads it (readers first: each is read by the next alone).
void eraseUnread(Value value, Value heads) {
  while (Operation *op = value.getDefiningOp()) {
    if (!op->use_empty() || value == heads)
      return;
    value = isa<MulOp>(op) ? carriedOperand(op).get() : op->getOperand(0);
    op->erase();
  }
}

/// Gives `attention` its keys and v unrepeated where both are repetitions
/// of one group size.
void foldRepeatedHeads(AttentionOp attention) {
  if (attention.getLayout())
    return;
  std::optional<RepeatedOperand> keys = repeatedOperand(attention.getB());
  std::optional<RepeatedOperand> v = repeatedOperand(attention.getV());
  if (!keys || !v || keys->repetition.group != v->repetition.group ||
      !divisible(*keys) || !divisible(*v))
    return;
  Value newKeys = rebuilt(attention, *keys);
  Value newV = newKeys ? rebuilt(attention, *v) : Value();
  if (!newV) {
    eraseUnread(newKeys, keys->repetition.heads);
    attention.emitWarning("could not rebuild the keys' or v's ops on the "
                          "unrepeated heads; left repeated");
    return;
  }
  Value oldKeys = attention.getB(), oldV = attention.getV();
  attention.getBMutable().assign(newKeys);
  attention.getVMutable().assign(newV);
  eraseUnread(oldKeys, keys->repetition.heads);
  eraseUnread(oldV, v->repetition.heads);
}

struct FoldRepeatedHeadsPass
    : public cdp::impl::FoldRepeatedHeadsBase<FoldRepeatedHeadsPass> {
  void runOnOperation() override {
    SmallVector<AttentionOp> attentions;
    getOperation().walk(
        [&](AttentionOp attention) { attentions.push_back(attention); });
    for (AttentionOp attention : attentions)
      foldRepeatedHeads(attention);
  }
};

} // namespace
