//===- FuseLayerNorm.cpp - decomposed LayerNorm into one cdp.layer_norm ---===//
//
// torch exports nn.LayerNorm below opset 17 as nine ops:
//
//   m = reduce_mean(x, axes = [k..r-1]); d = x - m; v = reduce_mean(d^2)
//   y = d / sqrt(v + eps) * gamma + beta
//
// which run as nine kernels forward and a dozen backward. This pass matches
// the chain from its final add and, when every intermediate value feeds the
// chain only, replaces it with one cdp.layer_norm (axis k, epsilon eps,
// gamma and beta as scale and bias), whose kernels normalise a row in one
// pass forward and one backward, in double. The fused op takes the final
// add's location, so cuts and profiles naming that node still apply.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/NormalizedAxes.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SplatConstant.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"

namespace cdp {
#define GEN_PASS_DEF_FUSELAYERNORM
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// `value`'s only user, or null.
Operation *onlyUser(Value value) {
  return value.hasOneUse() ? *value.getUsers().begin() : nullptr;
}

/// The decomposed LayerNorm ending in `add` (y = n * gamma + beta), as the
/// ops to erase (in use order) and the fused op's operands; or nothing.
struct Match {
  Value x, gamma, beta;
  int64_t axis = -1;
  float epsilon = 0;
  SmallVector<Operation *> chain;
  /// The 2 and the epsilon, erased too when nothing else reads them.
  SmallVector<Operation *> constants;
};

std::optional<Match> matchLayerNorm(AddOp add) {
  Match match;
  auto mul = add.getLhs().getDefiningOp<MulOp>();
  if (!mul || !mul->hasOneUse())
    return std::nullopt;
  match.beta = add.getRhs();
  auto div = mul.getLhs().getDefiningOp<DivOp>();
  match.gamma = mul.getRhs();
  if (!div || !div->hasOneUse())
    return std::nullopt;
  auto sqrt = div.getRhs().getDefiningOp<SqrtOp>();
  auto sub = div.getLhs().getDefiningOp<SubOp>();
  if (!sqrt || !sub || !sqrt->hasOneUse())
    return std::nullopt;
  auto epsAdd = sqrt.getInput().getDefiningOp<AddOp>();
  if (!epsAdd || !epsAdd->hasOneUse())
    return std::nullopt;
  std::optional<float> epsilon = splatValue(epsAdd.getRhs());
  auto variance = epsAdd.getLhs().getDefiningOp<ReduceMeanOp>();
  if (!epsilon || !variance || !variance->hasOneUse())
    return std::nullopt;
  auto pow = variance.getInput().getDefiningOp<PowOp>();
  if (!pow || !pow->hasOneUse() || splatValue(pow.getRhs()) != 2.0f ||
      pow.getLhs() != sub.getOutput())
    return std::nullopt;
  // d feeds the square and the division, nothing else.
  for (Operation *user : sub.getOutput().getUsers())
    if (user != pow && user != div)
      return std::nullopt;
  auto mean = sub.getRhs().getDefiningOp<ReduceMeanOp>();
  if (!mean || onlyUser(mean.getOutput()) != sub ||
      mean.getInput() != sub.getLhs())
    return std::nullopt;
  std::optional<int64_t> axis = trailingAxis(mean);
  if (!axis || trailingAxis(variance) != axis)
    return std::nullopt;
  match.x = sub.getLhs();
  auto x = cast<RankedTensorType>(match.x.getType());
  if (!x.getElementType().isF32() || x != add.getType() ||
      !shapedAsNormalised(match.gamma, x, *axis) ||
      !shapedAsNormalised(match.beta, x, *axis))
    return std::nullopt;
  match.axis = *axis;
  match.epsilon = *epsilon;
  match.chain = {add, mul, div, sqrt, epsAdd, variance, pow, sub, mean};
  match.constants = {epsAdd.getRhs().getDefiningOp(),
                     pow.getRhs().getDefiningOp()};
  return match;
}

struct FuseLayerNormPass
    : public cdp::impl::FuseLayerNormBase<FuseLayerNormPass> {
  void runOnOperation() override {
    SmallVector<AddOp> candidates;
    getOperation().walk([&](AddOp add) { candidates.push_back(add); });
    for (AddOp add : candidates) {
      std::optional<Match> match = matchLayerNorm(add);
      if (!match)
        continue;
      OpBuilder builder(add);
      Type type = add.getType();
      auto x = cast<RankedTensorType>(match->x.getType());
      SmallVector<int64_t> statsShape(x.getShape());
      for (int64_t d = match->axis; d < x.getRank(); ++d)
        statsShape[d] = 1;
      auto stats = RankedTensorType::get(statsShape, x.getElementType());
      auto fused = builder.create<LayerNormOp>(
          add.getLoc(), TypeRange{type, stats, stats}, match->x, match->gamma,
          match->beta, builder.getI64IntegerAttr(match->axis),
          builder.getF32FloatAttr(match->epsilon), /*round_result=*/nullptr,
          /*rms=*/builder.getBoolAttr(false));
      add.getOutput().replaceAllUsesWith(fused.getOutput());
      for (Operation *op : match->chain)
        op->erase();
      for (Operation *constant : match->constants)
        if (constant->use_empty())
          constant->erase();
    }
  }
};

} // namespace
