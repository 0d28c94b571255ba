//===- FoldAttentionTransposes.cpp - the heads' transposes into attention -===//
//
// Every exporter splits a projection's (B, S, H * D) result into heads and
// moves them before the sequence for attention, then back after it (the
// dynamo exporter transposes the keys in two steps, the second on a 3-D
// view with the batch and heads merged):
//
//   %q = transpose(reshape(%x), [0, 2, 1, 3])           (B, H, S, D)
//   %k = transpose(reshape(%y), [0, 2, 3, 1])           (B, H, D, S)
//   %o = attention(%q, %k, %v); transpose(%o, [0, 2, 1, 3])
//
// Each transpose is a copy of the activation (and another of its gradient
// in the backward): 96 copies a step on GPT-2 small, 2 GB of its bf16
// step's memory traffic. cdp.attention's layout "bshd" reads each head's
// matrix where the projection wrote it (rows H * D apart) and writes its
// result so; the pass gives it that layout where all four transposes fold,
// moving the operands' transposes first through what lies between them and
// the attention and is element by element with a scalar (the exporters'
// 1 / sqrt(sqrt(d)) scalings of q and k, autocast's roundings), which
// commute with a transpose bit for bit. Runs on the forward graph after
// cdp-fold-attention-scale, before autodiff: the backward then has no
// transposes of the gradients either.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/ScalarElementwise.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace cdp {
#define GEN_PASS_DEF_FOLDATTENTIONTRANSPOSES
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// The heads' moves: (B, S, H, X) -> (B, H, S, X) for q, v and the result;
/// (B, N, H, K) -> (B, H, K, N) for the keys.
constexpr int64_t kHeadsFirst[] = {0, 2, 1, 3};
constexpr int64_t kKeysTransposed[] = {0, 2, 3, 1};

/// An attention operand written as a permutation of `root` followed by
/// ops that commute with it, each op read by the next alone.
struct TransposedOperand {
  Value root;
  SmallVector<Operation *, 3> moves;   ///< the permutation's ops, readers first
  SmallVector<Operation *, 2> between; ///< from the permutation down
};

/// `value` (4-D) as a permutation of an earlier value, one op at a time: a
/// transpose, or the dynamo exporter's transpose of the last two
/// dimensions with the batch and heads merged, reshape(transpose(reshape(
/// x, [B * H, R, C]), [0, 2, 1]), [B, H, C, R]). Returns the permutation
/// (result dimension i is the input's perm[i]) and its input; appends the
/// ops to `moves`.
std::optional<std::pair<Value, SmallVector<int64_t, 4>>>
peelPermutation(Value value, SmallVectorImpl<Operation *> &moves) {
  if (auto transpose = value.getDefiningOp<TransposeOp>()) {
    moves.push_back(transpose);
    return std::make_pair(transpose.getInput(),
                          SmallVector<int64_t, 4>(transpose.getPerm()));
  }
  auto outer = value.getDefiningOp<ReshapeOp>();
  auto swap = outer ? outer.getInput().getDefiningOp<TransposeOp>() : nullptr;
  auto inner = swap ? swap.getInput().getDefiningOp<ReshapeOp>() : nullptr;
  if (!inner || swap.getPerm() != ArrayRef<int64_t>{0, 2, 1} ||
      !outer.getInput().hasOneUse() || !swap.getInput().hasOneUse())
    return std::nullopt;
  ArrayRef<int64_t> x =
      cast<RankedTensorType>(inner.getInput().getType()).getShape();
  ArrayRef<int64_t> y = cast<RankedTensorType>(outer.getType()).getShape();
  if (x.size() != 4 || y.size() != 4 || y[0] != x[0] || y[1] != x[1] ||
      y[2] != x[3] || y[3] != x[2])
    return std::nullopt;
  moves.append({outer, swap, inner});
  return std::make_pair(inner.getInput(), SmallVector<int64_t, 4>{0, 1, 3, 2});
}

/// The operand as `perm` of a root: permutations composed up the chain
/// (each read by the next alone) until they make `perm`.
std::optional<TransposedOperand> transposedOperand(Value operand,
                                                   ArrayRef<int64_t> perm) {
  TransposedOperand found;
  Value at = operand;
  while (at.hasOneUse() && at.getDefiningOp() &&
         isScalarElementwise(at.getDefiningOp())) {
    found.between.push_back(at.getDefiningOp());
    at = carriedOperand(at.getDefiningOp()).get();
  }
  std::reverse(found.between.begin(), found.between.end());
  SmallVector<int64_t, 4> composed{0, 1, 2, 3};
  while (at.hasOneUse() && ArrayRef<int64_t>(composed) != perm) {
    auto peeled = peelPermutation(at, found.moves);
    if (!peeled)
      return std::nullopt;
    // at = permute(input, p) read through `composed`: input dimension
    // p[composed[i]] lands at i.
    SmallVector<int64_t, 4> next;
    for (int64_t i : composed)
      next.push_back(peeled->second[i]);
    composed = next;
    at = peeled->first;
  }
  if (ArrayRef<int64_t>(composed) != perm)
    return std::nullopt;
  found.root = at;
  return found;
}

/// The attention's result read by transpose(result, [0, 2, 1, 3]) alone,
/// through roundings and reshapes that change nothing.
struct TransposedResult {
  SmallVector<Operation *, 2> between; ///< roundings, identity reshapes
  TransposeOp transpose;
};

std::optional<TransposedResult> transposedResult(Value result) {
  TransposedResult found;
  Value at = result;
  while (at.hasOneUse()) {
    Operation *reader = *at.getUsers().begin();
    if (auto transpose = dyn_cast<TransposeOp>(reader)) {
      if (transpose.getPerm() != ArrayRef<int64_t>(kHeadsFirst))
        return std::nullopt;
      found.transpose = transpose;
      return found;
    }
    bool identity = isa<ReshapeOp>(reader) &&
                    reader->getResult(0).getType() == at.getType();
    if (!identity && !isa<RoundToOp>(reader))
      return std::nullopt;
    found.between.push_back(reader);
    at = reader->getResult(0);
  }
  return std::nullopt;
}

RankedTensorType withShape(Type type, ArrayRef<int64_t> shape) {
  auto tensor = cast<RankedTensorType>(type);
  return RankedTensorType::get(shape, tensor.getElementType());
}

/// The operand's ops read the root instead, each result now shaped as the
/// root; the permutation's ops go.
void moveBelow(TransposedOperand &operand) {
  Value root = operand.root;
  ArrayRef<int64_t> shape = cast<RankedTensorType>(root.getType()).getShape();
  operand.moves.front()->getResult(0).replaceAllUsesWith(root);
  for (Operation *op : operand.moves) // readers first
    op->erase();
  for (Operation *op : operand.between)
    op->getResult(0).setType(withShape(op->getResult(0).getType(), shape));
}

/// The result and its roundings in the stored (B, M, H, D) order; the
/// identity reshapes and the transpose go.
void foldResult(AttentionOp attention, TransposedResult &result) {
  ArrayRef<int64_t> shape =
      cast<RankedTensorType>(result.transpose.getType()).getShape();
  Value output = attention.getOutput();
  output.setType(withShape(output.getType(), shape));
  for (Operation *op : result.between) {
    if (isa<ReshapeOp>(op)) {
      op->getResult(0).replaceAllUsesWith(op->getOperand(0));
      op->erase();
      continue;
    }
    op->getResult(0).setType(withShape(op->getResult(0).getType(), shape));
  }
  Value stored = result.transpose.getInput();
  result.transpose.getOutput().replaceAllUsesWith(stored);
  result.transpose.erase();
}

/// Gives `attention` layout "bshd" where its q, keys and v are the heads'
/// transposes and its result is transposed back.
void foldTransposes(AttentionOp attention) {
  if (attention.getLayout() ||
      cast<RankedTensorType>(attention.getA().getType()).getRank() != 4)
    return;
  std::optional<TransposedOperand> q =
      transposedOperand(attention.getA(), kHeadsFirst);
  std::optional<TransposedOperand> keys =
      transposedOperand(attention.getB(), kKeysTransposed);
  std::optional<TransposedOperand> v =
      transposedOperand(attention.getV(), kHeadsFirst);
  std::optional<TransposedResult> result =
      transposedResult(attention.getOutput());
  if (!q || !keys || !v || !result)
    return;
  for (TransposedOperand *operand : {&*q, &*keys, &*v})
    moveBelow(*operand);
  foldResult(attention, *result);
  attention.setLayoutAttr(
      Builder(attention.getContext()).getStringAttr("bshd"));
}

/// The rotary tables laid out for the transposes' inputs, each made once
/// (q and k of a layer, and the layers, share the exporters' tables).
class RotaryTables {
public:
  /// `table`, which broadcasts to the result of a transpose by `perm`,
  /// laid out for the transpose's input: a reshape where the dimensions
  /// above 1 stay in order (Llama's (1, 1, S, D) cos and sin for
  /// (B, S, H, D) are (1, S, 1, D); a constant table reshaped here, not
  /// every step), else a transpose of it.
  Value before(OpBuilder &builder, Location loc, Value table,
               ArrayRef<int64_t> perm) {
    auto key = std::make_pair(table, builder.getDenseI64ArrayAttr(perm));
    Value &laidOut = made[key];
    if (!laidOut)
      laidOut = build(builder, loc, table, perm);
    return laidOut;
  }

private:
  static Value build(OpBuilder &builder, Location loc, Value table,
                     ArrayRef<int64_t> perm) {
    auto type = cast<RankedTensorType>(table.getType());
    int64_t rank = perm.size();
    SmallVector<int64_t, 4> full(rank - type.getRank(), 1), moved(rank, 1);
    full.append(type.getShape().begin(), type.getShape().end());
    for (int64_t j = 0; j < rank; ++j)
      moved[perm[j]] = full[j];
    auto withoutUnits = [](ArrayRef<int64_t> shape) {
      return llvm::to_vector(
          llvm::make_filter_range(shape, [](int64_t d) { return d != 1; }));
    };
    if (withoutUnits(full) == withoutUnits(moved)) {
      if (auto constant = table.getDefiningOp<ConstantOp>())
        if (auto dense = dyn_cast<DenseElementsAttr>(constant.getValue()))
          return builder.create<ConstantOp>(
              loc, dense.reshape(
                       RankedTensorType::get(moved, type.getElementType())));
      return builder.create<ReshapeOp>(loc, table,
                                       builder.getDenseI64ArrayAttr(moved));
    }
    SmallVector<int64_t, 4> inverse(rank);
    for (int64_t j = 0; j < rank; ++j)
      inverse[perm[j]] = j;
    Value ranked = type.getRank() == rank
                       ? table
                       : builder.create<ReshapeOp>(
                             loc, table, builder.getDenseI64ArrayAttr(full));
    return builder.create<TransposeOp>(loc, ranked,
                                       builder.getDenseI64ArrayAttr(inverse));
  }

  llvm::DenseMap<std::pair<Value, Attribute>, Value> made;
};

/// rotary(transpose(x, p), cos, sin) = transpose(rotary(x, cos', sin'), p)
/// for a `p` that keeps the rotated last axis last, the tables laid out for
/// x: the same products and sums of the same values. Moves the heads'
/// transposes of q and k below Llama's rotary embedding, where they can
/// fold into the attention.
void sinkBelowRotary(RotaryOp rotary, RotaryTables &tables) {
  auto transpose = rotary.getInput().getDefiningOp<TransposeOp>();
  if (!transpose || rotary.getAdjoint() || !transpose->hasOneUse())
    return;
  ArrayRef<int64_t> perm = transpose.getPerm();
  int64_t rank = perm.size();
  if (rank == 0 || perm.back() != rank - 1)
    return;
  OpBuilder builder(rotary);
  Location loc = rotary.getLoc();
  Value cos = tables.before(builder, loc, rotary.getCos(), perm),
        sin = tables.before(builder, loc, rotary.getSin(), perm);
  Value input = transpose.getInput();
  Value rotated = builder.create<RotaryOp>(loc, input.getType(), input, cos,
                                           sin, rotary.getAdjointAttr(),
                                           rotary.getNarrowOperandsAttr());
  Value moved = builder.create<TransposeOp>(transpose.getLoc(), rotated,
                                            transpose.getPermAttr());
  rotary.getOutput().replaceAllUsesWith(moved);
  rotary.erase();
  transpose.erase();
}

struct FoldAttentionTransposesPass
    : public cdp::impl::FoldAttentionTransposesBase<
          FoldAttentionTransposesPass> {
  void runOnOperation() override {
    SmallVector<RotaryOp> rotaries;
    getOperation().walk([&](RotaryOp rotary) { rotaries.push_back(rotary); });
    RotaryTables tables;
    llvm::SetVector<Operation *> oldTables;
    for (RotaryOp rotary : rotaries) {
      for (Value table : {rotary.getCos(), rotary.getSin()})
        if (Operation *constant = table.getDefiningOp<ConstantOp>())
          oldTables.insert(constant);
      sinkBelowRotary(rotary, tables);
    }
    // After every lookup: the tables' cache is keyed by these values.
    for (Operation *constant : oldTables)
      if (constant->use_empty())
        constant->erase();
    SmallVector<AttentionOp> attentions;
    getOperation().walk(
        [&](AttentionOp attention) { attentions.push_back(attention); });
    for (AttentionOp attention : attentions)
      foldTransposes(attention);
  }
};

} // namespace
