//===- FuseRotary.cpp - rotate-half rotary embedding into one cdp.rotary --===//
//
// transformers' apply_rotary_pos_emb (Llama, Mistral, Qwen, GPT-NeoX):
//
//   q * cos + rotate_half(q) * sin,   rotate_half(q) = cat(-q2, q1)
//
// which both exporters write as two Slices of the last axis, a Neg (imported
// as a product with -1), a Concat, two Muls and an Add: seven kernels
// forward, and about ten backward (the products' gradients, the concat's
// split, the slices' zero-padded gradients and their sum), for q and for k
// in every layer, each a pass over the heads' values. This pass matches the
// chain from its Add and, where every intermediate value feeds the chain
// only and the cos and sin tables read no trained parameter, replaces it
// with one cdp.rotary with the Add's location: each product rounded to
// float32, then the sum, as the exported ops compute, so the same bits
// forward and backward. It runs after autocast: a rounding autocast put
// into the chain keeps it as exported, but for the rounding of the
// negated half, which is exact where the half is (bf16 q and k: their
// products with the float32 tables are float32, as torch promotes them).
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/NarrowValues.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SplatConstant.h"

#include "llvm/ADT/SmallPtrSet.h"

namespace cdp {
#define GEN_PASS_DEF_FUSEROTARY
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// The chain ending in an add, as the ops to erase (in use order) and the
/// fused op's operands.
struct Match {
  Value x, cos, sin;
  SmallVector<Operation *> chain;
  /// The -1 of the negation, erased too when nothing else reads it.
  Operation *minusOne = nullptr;
  /// The format x is exact in under autocast (its gradients kept in it),
  /// or null.
  StringAttr narrow;
};

/// The op of type OpTy defining `value`, read once and without rounding.
template <typename OpTy> OpTy onlyReadBy(Value value) {
  auto op = value.getDefiningOp<OpTy>();
  if (!op || !op->hasOneUse() || op->hasAttr("round_result"))
    return nullptr;
  return op;
}

/// The products' operand pairs in both orders.
SmallVector<std::pair<Value, Value>, 2> bothOrders(Value a, Value b) {
  return {{a, b}, {b, a}};
}

/// Whether `slice` takes [start, end) of its input's last axis with step 1
/// (an end of at least the axis' size: to the end).
bool slicesLastAxis(SliceOp slice, int64_t start, int64_t end) {
  auto type = cast<RankedTensorType>(slice.getInput().getType());
  int64_t rank = type.getRank(), size = type.getShape().back();
  ArrayRef<int64_t> axes = slice.getAxes(), steps = slice.getSteps();
  if (axes.size() != 1 || (axes[0] != rank - 1 && axes[0] != -1) ||
      (!steps.empty() && steps[0] != 1) || slice.getStarts()[0] != start)
    return false;
  int64_t sliceEnd = slice.getEnds()[0];
  return end == size ? sliceEnd >= size : sliceEnd == end;
}

/// Whether `table` is computed without a trained parameter: its rotary
/// embedding then takes no gradient (cdp.rotary gives none), as the
/// exporters' constant tables and tables from position ids.
bool readsNoTrainedParameter(Value table) {
  SmallVector<Value> pending{table};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!pending.empty()) {
    Operation *op = pending.pop_back_val().getDefiningOp();
    if (!op || !seen.insert(op).second)
      continue;
    if (auto param = dyn_cast<ParamOp>(op))
      if (!param.getBuffer() && !param.getFrozen())
        return false;
    llvm::append_range(pending, op->getOperands());
  }
  return true;
}

/// Whether `table` broadcasts to `x` (numpy's rules).
bool broadcastsTo(Value table, RankedTensorType x) {
  auto type = dyn_cast<RankedTensorType>(table.getType());
  if (!type || !type.getElementType().isF32() || type.getRank() > x.getRank())
    return false;
  ArrayRef<int64_t> from = type.getShape(),
                    to = x.getShape().take_back(type.getRank());
  return llvm::all_of(llvm::zip(from, to), [](auto dims) {
    return std::get<0>(dims) == 1 || std::get<0>(dims) == std::get<1>(dims);
  });
}

/// `rotated` = concat(-x2, x1) along the last axis, x1 and x2 the halves of
/// one x: that x, the ops added to `match`; else null.
Value rotatedHalf(Value rotated, Match &match) {
  auto concat = onlyReadBy<ConcatOp>(rotated);
  if (!concat || concat.getInputs().size() != 2)
    return nullptr;
  auto type = cast<RankedTensorType>(concat.getType());
  int64_t rank = type.getRank(), size = type.getShape().back();
  auto axis = static_cast<int64_t>(concat.getAxis());
  if ((axis != rank - 1 && axis != -1) || size % 2)
    return nullptr;
  // Autocast rounds the negation of a bf16 half (torch's neg keeps the
  // tensor's format), which changes nothing where the half is exact in it.
  Value negation = concat.getInputs()[0];
  auto rounding = onlyReadBy<RoundToOp>(negation);
  if (rounding)
    negation = rounding.getInput();
  auto negated = onlyReadBy<MulOp>(negation);
  auto first = onlyReadBy<SliceOp>(concat.getInputs()[1]);
  if (!negated || !first || !slicesLastAxis(first, 0, size / 2))
    return nullptr;
  for (auto [half, factor] : bothOrders(negated.getLhs(), negated.getRhs())) {
    auto second = onlyReadBy<SliceOp>(half);
    if (splatValue(factor) != -1.0f || !second ||
        second.getInput() != first.getInput() ||
        !slicesLastAxis(second, size / 2, size))
      continue;
    if (rounding && ExactValues().formatOf(half) != rounding.getFormat())
      continue;
    match.chain.push_back(concat);
    if (rounding) {
      match.chain.push_back(rounding);
      match.narrow = rounding.getFormatAttr();
    }
    match.chain.append({negated, first, second});
    match.minusOne = factor.getDefiningOp();
    return first.getInput();
  }
  return nullptr;
}

std::optional<Match> matchRotary(AddOp add) {
  auto type = cast<RankedTensorType>(add.getType());
  if (add->hasAttr("round_result") || !type.getElementType().isF32())
    return std::nullopt;
  for (auto [direct, carried] : bothOrders(add.getLhs(), add.getRhs())) {
    auto scaled = onlyReadBy<MulOp>(direct);
    auto rotatedScaled = onlyReadBy<MulOp>(carried);
    if (!scaled || !rotatedScaled)
      continue;
    for (auto [rotated, sin] :
         bothOrders(rotatedScaled.getLhs(), rotatedScaled.getRhs())) {
      Match match;
      match.chain = {add, scaled, rotatedScaled};
      Value x = rotatedHalf(rotated, match);
      if (!x || x.getType() != type)
        continue;
      for (auto [input, cos] : bothOrders(scaled.getLhs(), scaled.getRhs()))
        if (input == x && broadcastsTo(cos, type) && broadcastsTo(sin, type) &&
            readsNoTrainedParameter(cos) && readsNoTrainedParameter(sin)) {
          match.x = x;
          match.cos = cos;
          match.sin = sin;
          return match;
        }
    }
  }
  return std::nullopt;
}

struct FuseRotaryPass : public cdp::impl::FuseRotaryBase<FuseRotaryPass> {
  void runOnOperation() override {
    SmallVector<AddOp> candidates;
    getOperation().walk([&](AddOp add) { candidates.push_back(add); });
    for (AddOp add : candidates) {
      std::optional<Match> match = matchRotary(add);
      if (!match)
        continue;
      OpBuilder builder(add);
      auto rotary = builder.create<RotaryOp>(
          add.getLoc(), add.getType(), match->x, match->cos, match->sin,
          /*adjoint=*/builder.getBoolAttr(false), match->narrow);
      add.getOutput().replaceAllUsesWith(rotary.getOutput());
      for (Operation *op : match->chain)
        op->erase();
      if (match->minusOne->use_empty())
        match->minusOne->erase();
    }
  }
};

} // namespace
