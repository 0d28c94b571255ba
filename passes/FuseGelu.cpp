//===- FuseGelu.cpp - decomposed GELU into one cdp.gelu -------------------===//
//
// torch exports nn.GELU below opset 20 as element-wise ops:
//
//   erf form:  y = x * (erf(x / sqrt(2)) + 1) * 0.5                (5 ops)
//   tanh form: y = 0.5 * (x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 *
//                                               (x * (x * x))))))  (9 ops)
//
// and Hugging Face's NewGELUActivation (GPT-2's `gelu_new`) as
// (0.5 * x) * (1 + tanh(...)), each a kernel forward and one or two
// backward. This pass matches these chains from their final multiply
// (operands of Add and Mul in either order, x^3 also as Pow(x, 3), x /
// sqrt(2) also as x * (1 / sqrt(2))) and, when every intermediate value
// feeds the chain only, replaces it with one
// cdp.gelu, whose kernels (oneDNN's GELU, forward and backward) read x once.
// The fused op takes the final multiply's location.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SplatConstant.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cmath>

namespace cdp {
#define GEN_PASS_DEF_FUSEGELU
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// The ops of a matched chain and the constants it read.
struct Chain {
  SmallVector<Operation *> ops;
  SmallVector<Operation *> constants;
};

/// Whether `value` is a splat f32 constant within 1e-6 (relative) of
/// `expected`; records it in `chain`.
bool isConstant(Value value, double expected, Chain &chain) {
  std::optional<float> actual = splatValue(value);
  if (!actual || std::fabs(*actual - expected) > 1e-6 * std::fabs(expected))
    return false;
  chain.constants.push_back(value.getDefiningOp());
  return true;
}

/// `value`'s defining op of type OpTy when `value` feeds one op only (the
/// chain's next); records it in `chain`.
template <typename OpTy> OpTy inner(Value value, Chain &chain) {
  auto op = value.getDefiningOp<OpTy>();
  if (!op || !op->hasOneUse())
    return nullptr;
  chain.ops.push_back(op);
  return op;
}

/// The operand of the commutative `op` that is not the constant `expected`.
template <typename OpTy>
Value besideConstant(OpTy op, double expected, Chain &chain) {
  if (isConstant(op.getRhs(), expected, chain))
    return op.getLhs();
  if (isConstant(op.getLhs(), expected, chain))
    return op.getRhs();
  return Value();
}

/// x * rest in either order: the operand that is not x.
Value besideX(MulOp mul, Value x) {
  if (mul.getLhs() == x)
    return mul.getRhs();
  return mul.getRhs() == x ? mul.getLhs() : Value();
}

/// The x of `erf(x / sqrt(2))` (or `x * (1 / sqrt(2))`).
Value erfArgument(Value value, Chain &chain) {
  if (auto div = value.getDefiningOp<DivOp>()) {
    if (!inner<DivOp>(value, chain) ||
        !isConstant(div.getRhs(), std::sqrt(2.0), chain))
      return Value();
    return div.getLhs();
  }
  auto mul = inner<MulOp>(value, chain);
  return mul ? besideConstant(mul, 1.0 / std::sqrt(2.0), chain) : Value();
}

/// Whether `value` is x^3 as x * (x * x), (x * x) * x or Pow(x, 3).
bool isCube(Value value, Value x, Chain &chain) {
  if (auto pow = value.getDefiningOp<PowOp>())
    return inner<PowOp>(value, chain) && pow.getLhs() == x &&
           isConstant(pow.getRhs(), 3.0, chain);
  auto cube = inner<MulOp>(value, chain);
  if (!cube)
    return false;
  Value square = besideX(cube, x);
  auto mul = square ? inner<MulOp>(square, chain) : nullptr;
  return mul && mul.getLhs() == x && mul.getRhs() == x;
}

/// Matches `1 + f(x)` where f is erf(x / sqrt 2) or tanh(sqrt(2/pi) (x +
/// 0.044715 x^3)) and x is `x`: the approximation's name, or nothing.
std::optional<StringRef> matchOnePlus(Value value, Value x, Chain &chain) {
  auto add = inner<AddOp>(value, chain);
  Value f = add ? besideConstant(add, 1.0, chain) : Value();
  if (!f)
    return std::nullopt;
  if (auto erf = inner<ErfOp>(f, chain))
    return erfArgument(erf.getInput(), chain) == x
               ? std::optional<StringRef>("none")
               : std::nullopt;
  auto tanh = inner<TanhOp>(f, chain);
  auto scaled = tanh ? inner<MulOp>(tanh.getInput(), chain) : nullptr;
  Value sum =
      scaled ? besideConstant(scaled, std::sqrt(2.0 / M_PI), chain) : Value();
  auto polynomial = sum ? inner<AddOp>(sum, chain) : nullptr;
  if (!polynomial)
    return std::nullopt;
  Value term = polynomial.getLhs() == x   ? polynomial.getRhs()
               : polynomial.getRhs() == x ? polynomial.getLhs()
                                          : Value();
  auto cubic = term ? inner<MulOp>(term, chain) : nullptr;
  Value cube = cubic ? besideConstant(cubic, 0.044715, chain) : Value();
  if (!cube || !isCube(cube, x, chain))
    return std::nullopt;
  return StringRef("tanh");
}

/// (x * (1 + f)) * 0.5, the constant on either side: x and the
/// approximation; or nothing.
std::optional<std::pair<Value, StringRef>> matchHalvedLast(MulOp mul,
                                                           Chain &chain) {
  Value rest = besideConstant(mul, 0.5, chain);
  auto product = rest ? inner<MulOp>(rest, chain) : nullptr;
  if (!product)
    return std::nullopt;
  for (auto [x, other] : {std::pair{product.getLhs(), product.getRhs()},
                          {product.getRhs(), product.getLhs()}}) {
    Chain attempt = chain;
    if (std::optional<StringRef> kind = matchOnePlus(other, x, attempt)) {
      chain = attempt;
      return std::make_pair(x, *kind);
    }
  }
  return std::nullopt;
}

/// (x * 0.5) * (1 + f), either product in either order, as Hugging Face's
/// NewGELUActivation (GPT-2's `gelu_new`) writes it: x and the
/// approximation; or nothing.
std::optional<std::pair<Value, StringRef>> matchHalvedFirst(MulOp mul,
                                                            Chain &chain) {
  for (auto [half, other] :
       {std::pair{mul.getLhs(), mul.getRhs()}, {mul.getRhs(), mul.getLhs()}}) {
    Chain attempt = chain;
    auto halving = inner<MulOp>(half, attempt);
    Value x = halving ? besideConstant(halving, 0.5, attempt) : Value();
    if (!x)
      continue;
    if (std::optional<StringRef> kind = matchOnePlus(other, x, attempt)) {
      chain = attempt;
      return std::make_pair(x, *kind);
    }
  }
  return std::nullopt;
}

/// The GELU ending in `mul`: x, the approximation and the chain; or
/// nothing.
std::optional<std::pair<Value, StringRef>> matchGelu(MulOp mul, Chain &chain) {
  chain.ops.push_back(mul);
  Chain attempt = chain;
  if (auto match = matchHalvedLast(mul, attempt)) {
    chain = attempt;
    return match;
  }
  return matchHalvedFirst(mul, chain);
}

struct FuseGeluPass : public cdp::impl::FuseGeluBase<FuseGeluPass> {
  void runOnOperation() override {
    SmallVector<MulOp> candidates;
    getOperation().walk([&](MulOp mul) { candidates.push_back(mul); });
    llvm::DenseSet<Operation *> erased;
    for (MulOp mul : candidates) {
      if (erased.contains(mul))
        continue;
      Chain chain;
      auto match = matchGelu(mul, chain);
      if (!match || match->first.getType() != mul.getType() ||
          !cast<RankedTensorType>(mul.getType()).getElementType().isF32())
        continue;
      OpBuilder builder(mul);
      auto gelu = builder.create<GeluOp>(mul.getLoc(), match->first,
                                         builder.getStringAttr(match->second),
                                         StringAttr());
      mul.getOutput().replaceAllUsesWith(gelu.getOutput());
      for (Operation *op : chain.ops) { // final op first: users before defs
        erased.insert(op);
        op->erase();
      }
      for (Operation *constant : chain.constants)
        if (!erased.contains(constant) && constant->use_empty()) {
          erased.insert(constant);
          constant->erase();
        }
    }
  }
};

} // namespace
