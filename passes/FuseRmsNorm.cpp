//===- FuseRmsNorm.cpp - decomposed RMSNorm into one cdp.layer_norm -------===//
//
// Llama's and T5's RMSNorm (a module of their own, not nn.LayerNorm) are
// exported as
//
//   r = 1 / sqrt(reduce_mean(x^2, axes = [k..r-1]) + eps)
//   y = gamma * (x * r)
//
// (the inverse as Div(1, .) from the TorchScript exporter, Reciprocal from
// dynamo's; a float32-to-float32 Cast between the two products where the
// model casts back to its input's type): seven kernels forward and about a
// dozen backward, each reading or writing the whole activation. This pass
// matches the chain from its final product and, when every intermediate
// value feeds the chain only, replaces it with one cdp.layer_norm with
// `rms` (no mean subtracted), whose kernels normalise a row in one pass
// forward and one backward, in double. The fused op takes the final
// product's location.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/NormalizedAxes.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SplatConstant.h"

namespace cdp {
#define GEN_PASS_DEF_FUSERMSNORM
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// The decomposed RMSNorm ending in a product with gamma, as the ops to
/// erase (in use order) and the fused op's operands.
struct Match {
  Value x, gamma;
  int64_t axis = -1;
  float epsilon = 0;
  SmallVector<Operation *> chain;
  /// The 1, the 2 and the epsilon, erased too when nothing else reads them.
  SmallVector<Operation *> constants;
};

/// The op defining `value` when `value` is its one result read once.
template <typename OpTy> OpTy onlyReadBy(Value value) {
  auto op = value.getDefiningOp<OpTy>();
  return op && op->hasOneUse() ? op : nullptr;
}

/// `value` seen through a cast to its own float32 type that only the chain
/// reads (the model's `.to(input_dtype)` in a float32 model), the cast
/// added to `chain`.
Value throughIdentityCast(Value value, Match &match) {
  auto cast = onlyReadBy<CastOp>(value);
  if (!cast || cast.getInput().getType() != value.getType())
    return value;
  match.chain.push_back(cast);
  return cast.getInput();
}

/// The sqrt whose inverse `value` is, `Div(1, sqrt)` or `Reciprocal(sqrt)`,
/// the inverse (and its constant 1) added to `match`; else null.
SqrtOp inverseSqrt(Value value, Match &match) {
  if (auto reciprocal = onlyReadBy<ReciprocalOp>(value)) {
    match.chain.push_back(reciprocal);
    return onlyReadBy<SqrtOp>(reciprocal.getInput());
  }
  auto div = onlyReadBy<DivOp>(value);
  if (!div || splatValue(div.getLhs()) != 1.0f)
    return nullptr;
  match.chain.push_back(div);
  match.constants.push_back(div.getLhs().getDefiningOp());
  return onlyReadBy<SqrtOp>(div.getRhs());
}

/// mean(x^2) + eps under the sqrt, its ops and constants added to `match`;
/// the reduction, or null.
ReduceMeanOp meanOfSquares(SqrtOp sqrt, Match &match) {
  auto epsAdd = onlyReadBy<AddOp>(sqrt.getInput());
  if (!epsAdd)
    return nullptr;
  for (auto [sum, eps] : {std::pair{epsAdd.getLhs(), epsAdd.getRhs()},
                          {epsAdd.getRhs(), epsAdd.getLhs()}}) {
    std::optional<float> epsilon = splatValue(eps);
    auto mean = onlyReadBy<ReduceMeanOp>(sum);
    if (!epsilon || !mean)
      continue;
    auto pow = onlyReadBy<PowOp>(mean.getInput());
    if (!pow || splatValue(pow.getRhs()) != 2.0f)
      return nullptr;
    match.epsilon = *epsilon;
    match.chain.append({sqrt, epsAdd, mean, pow});
    match.constants.append({eps.getDefiningOp(), pow.getRhs().getDefiningOp()});
    return mean;
  }
  return nullptr;
}

/// `normalised` = x * r (either order) with r = 1 / sqrt(mean(x^2) + eps)
/// over x's trailing dimensions, added to `match`.
bool matchNormalised(Value normalised, Match &match) {
  auto mul = onlyReadBy<MulOp>(normalised);
  if (!mul)
    return false;
  match.chain.push_back(mul);
  for (auto [x, inverse] :
       {std::pair{mul.getLhs(), mul.getRhs()}, {mul.getRhs(), mul.getLhs()}}) {
    size_t chainSize = match.chain.size(), constants = match.constants.size();
    SqrtOp sqrt = inverseSqrt(inverse, match);
    ReduceMeanOp mean = sqrt ? meanOfSquares(sqrt, match) : nullptr;
    auto pow = mean ? mean.getInput().getDefiningOp<PowOp>() : nullptr;
    std::optional<int64_t> axis = mean ? trailingAxis(mean) : std::nullopt;
    if (pow && pow.getLhs() == x && axis && x.getType() == mul.getType()) {
      match.x = x;
      match.axis = *axis;
      return true;
    }
    match.chain.truncate(chainSize);
    match.constants.truncate(constants);
  }
  return false;
}

std::optional<Match> matchRmsNorm(MulOp scaled) {
  auto type = cast<RankedTensorType>(scaled.getType());
  if (scaled->hasAttr("round_result") || !type.getElementType().isF32())
    return std::nullopt;
  for (auto [gamma, normalised] : {std::pair{scaled.getLhs(), scaled.getRhs()},
                                   {scaled.getRhs(), scaled.getLhs()}}) {
    Match match;
    match.chain.push_back(scaled);
    Value beforeCast = throughIdentityCast(normalised, match);
    if (matchNormalised(beforeCast, match) && match.x.getType() == type &&
        shapedAsNormalised(gamma, type, match.axis)) {
      match.gamma = gamma;
      return match;
    }
  }
  return std::nullopt;
}

struct FuseRmsNormPass : public cdp::impl::FuseRmsNormBase<FuseRmsNormPass> {
  void runOnOperation() override {
    SmallVector<MulOp> candidates;
    getOperation().walk([&](MulOp mul) { candidates.push_back(mul); });
    for (MulOp mul : candidates) {
      std::optional<Match> match = matchRmsNorm(mul);
      if (match)
        fuse(mul, *match);
    }
  }

  void fuse(MulOp scaled, const Match &match) {
    OpBuilder builder(scaled);
    auto x = cast<RankedTensorType>(match.x.getType());
    SmallVector<int64_t> statsShape(x.getShape());
    for (int64_t d = match.axis; d < x.getRank(); ++d)
      statsShape[d] = 1;
    auto stats = RankedTensorType::get(statsShape, x.getElementType());
    auto fused = builder.create<LayerNormOp>(
        scaled.getLoc(), TypeRange{x, stats, stats}, match.x, match.gamma,
        /*bias=*/Value(), builder.getI64IntegerAttr(match.axis),
        builder.getF32FloatAttr(match.epsilon), /*round_result=*/nullptr,
        /*rms=*/builder.getBoolAttr(true));
    scaled.getOutput().replaceAllUsesWith(fused.getOutput());
    for (Operation *op : match.chain)
      op->erase();
    // A constant may be read twice by the chain (an epsilon of 1 or 2).
    llvm::SmallPtrSet<Operation *, 4> erased;
    for (Operation *constant : match.constants)
      if (constant->use_empty() && erased.insert(constant).second)
        constant->erase();
  }
};

} // namespace
