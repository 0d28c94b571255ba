//===- FuseAttention.cpp - attention's products and softmax in one op -----===//
//
// Scaled dot-product attention reaches the compiler as two products and a
// softmax between them (every exporter writes it so):
//
//   %s = matmul(%a, %b); %p = softmax(%s, %bias); %o = matmul(%p, %v)
//
// Autodiff op by op keeps %p (float32, batch x heads x seq^2) from the
// forward to the backward for the softmax's gradient and the second
// product's, and mixed precision adds its 2-byte copy: GPT-2 small at batch
// 8 x 512 keeps 150 MB a layer, a quarter of its activations. One
// cdp.attention keeps per-row statistics instead (a row's maximum and the
// log of its sum), from which attention_grad recomputes the probabilities,
// the same bits: FlashAttention's trade of one more product in the
// backward for the memory.
//
// Under mixed precision cdp-autocast has rounded the scores and the
// probabilities (`cdp.round_to` after each) and the three operands; the op
// keeps those roundings (`narrow_operands`), and the result's round_to
// stays for cdp-fuse-roundings.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/NarrowValues.h"
#include "cdp/Passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace cdp {
#define GEN_PASS_DEF_FUSEATTENTION
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// The ops of one attention, first to last; `scoresRound` and
/// `probabilitiesRound` under mixed precision only.
struct AttentionChain {
  MatMulOp scores;
  RoundToOp scoresRound;
  SoftmaxOp softmax;
  RoundToOp probabilitiesRound;
  MatMulOp output;
  StringAttr format; ///< the roundings' format, null without them
};

/// `value`'s single reader, or null.
Operation *onlyReader(Value value) {
  return value.hasOneUse() ? *value.getUsers().begin() : nullptr;
}

/// A product the attention can take over: no transposed operand, no
/// marks of later passes.
bool isPlainProduct(MatMulOp product) {
  return product && !product.getTransA() && !product.getTransB() &&
         !product.getNarrowOperands() && !product.getRoundResult();
}

/// The chain around `softmax`, when it is an attention's: its input the
/// scores product (maybe rounded), its output (maybe rounded) the left
/// operand of the second product alone.
std::optional<AttentionChain> chainAround(SoftmaxOp softmax) {
  AttentionChain chain;
  chain.softmax = softmax;
  auto rank = cast<RankedTensorType>(softmax.getType()).getRank();
  int64_t axis = softmax.getAxis();
  if (axis != -1 && axis != rank - 1)
    return std::nullopt;
  Value scores = softmax.getInput();
  if ((chain.scoresRound = scores.getDefiningOp<RoundToOp>())) {
    chain.format = chain.scoresRound.getFormatAttr();
    if (!scores.hasOneUse())
      return std::nullopt;
    scores = chain.scoresRound.getInput();
  }
  chain.scores = scores.getDefiningOp<MatMulOp>();
  if (!isPlainProduct(chain.scores) || !scores.hasOneUse())
    return std::nullopt;
  Value probabilities = softmax.getOutput();
  Operation *reader = onlyReader(probabilities);
  if (chain.format) {
    chain.probabilitiesRound = dyn_cast_or_null<RoundToOp>(reader);
    if (!chain.probabilitiesRound ||
        chain.probabilitiesRound.getFormatAttr() != chain.format)
      return std::nullopt;
    probabilities = chain.probabilitiesRound.getResult();
    reader = onlyReader(probabilities);
  }
  chain.output = dyn_cast_or_null<MatMulOp>(reader);
  if (!isPlainProduct(chain.output) || chain.output.getA() != probabilities)
    return std::nullopt;
  return chain;
}

/// Whether `value` may be computed from a parameter autodiff trains (its
/// gradient then wanted).
bool mayBeTrained(Value value) {
  SmallVector<Value> pending{value};
  DenseSet<Operation *> seen;
  while (!pending.empty()) {
    Operation *op = pending.pop_back_val().getDefiningOp();
    if (!op || !seen.insert(op).second)
      continue;
    if (auto param = dyn_cast<ParamOp>(op)) {
      if (!param.getFrozen() && !param.getBuffer())
        return true;
      continue;
    }
    pending.append(op->operand_begin(), op->operand_end());
  }
  return false;
}

/// Whether a bias's gradient, where one is wanted, can be summed per
/// scores element (the GPU's kernel sums slices, not rows or columns): a
/// bias spanning the scores' last two dimensions, or one nothing trains.
bool biasGradientSummable(Value bias, ArrayRef<int64_t> scores) {
  if (!bias)
    return true;
  ArrayRef<int64_t> shape = cast<RankedTensorType>(bias.getType()).getShape();
  bool spans = shape.size() >= 2 && shape.take_back(2) == scores.take_back(2);
  return spans || !mayBeTrained(bias);
}

/// Whether the one op may stand for the chain: shapes it accepts (one
/// batch, no broadcasting), a bias whose gradient it can sum, and under
/// mixed precision operands exact in the roundings' format, as its narrow
/// products need.
bool fusable(AttentionChain chain, ExactValues &exact) {
  auto shapeOf = [](Value value) {
    return cast<RankedTensorType>(value.getType()).getShape();
  };
  ArrayRef<int64_t> a = shapeOf(chain.scores.getA()),
                    b = shapeOf(chain.scores.getB()),
                    v = shapeOf(chain.output.getB());
  if (a.size() < 2 || b.size() != a.size() || v.size() != a.size() ||
      a.drop_back(2) != b.drop_back(2) || a.drop_back(2) != v.drop_back(2))
    return false;
  if (!biasGradientSummable(
          chain.softmax.getBias(),
          cast<RankedTensorType>(chain.softmax.getType()).getShape()))
    return false;
  if (!chain.format)
    return true;
  for (Value operand :
       {chain.scores.getA(), chain.scores.getB(), chain.output.getB()})
    if (exact.formatOf(operand) != chain.format.getValue())
      return false;
  return true;
}

void fuse(AttentionChain chain) {
  OpBuilder builder(chain.output);
  auto attention = builder.create<AttentionOp>(
      chain.output.getLoc(), chain.scores.getA(), chain.scores.getB(),
      chain.output.getB(), chain.softmax.getBias(),
      chain.softmax.getZeroNanRows(), chain.format, StringAttr(),
      /*scale=*/llvm::APFloat(1.0f), /*layout=*/StringAttr());
  chain.output.getOutput().replaceAllUsesWith(attention.getOutput());
  chain.output->erase();
  if (chain.probabilitiesRound)
    chain.probabilitiesRound->erase();
  chain.softmax->erase();
  if (chain.scoresRound)
    chain.scoresRound->erase();
  chain.scores->erase();
}

struct FuseAttentionPass
    : public cdp::impl::FuseAttentionBase<FuseAttentionPass> {
  void runOnOperation() override {
    // Found first: ExactValues remembers values by their ops.
    ExactValues exact;
    SmallVector<AttentionChain> chains;
    getOperation().walk([&](SoftmaxOp softmax) {
      std::optional<AttentionChain> chain = chainAround(softmax);
      if (chain && fusable(*chain, exact))
        chains.push_back(*chain);
    });
    for (AttentionChain chain : chains)
      fuse(chain);
  }
};

} // namespace
