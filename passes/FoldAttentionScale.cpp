//===- FoldAttentionScale.cpp - q's and k's scalings into attention -------===//
//
// Exporters write scaled dot-product attention's 1 / sqrt(d) as a product
// of each of q and k by its square root:
//
//   %qs = mul(%q, c); %ks = mul(%kt, c); attention(%qs, %ks, %v)
//
// (under autocast each product rounded to bf16 after it), so every layer
// reads and writes q and k once more in the forward and their gradients
// once more in the backward. PyTorch's fused kernels scale the scores
// instead; so does cdp.attention's `scale`: attention(%q, %kt, %v) with
// scale c * c, the float32 sums of the first product scaled before any
// rounding. In float32 plans (the scores differ from the decomposition's
// in float32's last bits); under mixed precision only for a power of two,
// where the two agree bit for bit (autocast's rounding of q * c is the
// reference there).
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/NarrowValues.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SplatConstant.h"

#include "mlir/IR/Builders.h"

#include <cmath>

namespace cdp {
#define GEN_PASS_DEF_FOLDATTENTIONSCALE
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// An operand written as `factor * constant` for the attention alone.
struct ScaledOperand {
  Value factor;
  float constant;
  /// What goes once the attention reads the factor: the rounding, the
  /// product, the constant (each where nothing else reads it).
  SmallVector<Operation *, 3> ops;
};

/// A product by a scalar: the other factor, the constant and its value.
struct ScalarProduct {
  Value factor, constant;
  float value;
};

/// `mul` as a product by a scalar, when one factor is a one-element
/// constant and the other has the product's shape.
std::optional<ScalarProduct> scalarProduct(MulOp mul) {
  for (int side = 0; side < 2; ++side) {
    Value factor = mul->getOperand(side), other = mul->getOperand(1 - side);
    std::optional<float> value = splatValue(other);
    auto type = cast<RankedTensorType>(other.getType());
    if (value && type.getNumElements() == 1 &&
        factor.getType() == mul.getType())
      return ScalarProduct{factor, other, *value};
  }
  return std::nullopt;
}

/// Whether `value` is a power of two: scaling by it rounds nothing.
bool isPowerOfTwo(float value) {
  int exponent;
  return std::isfinite(value) && std::frexp(value, &exponent) == 0.5f;
}

/// `operand` of `attention` as a scaled factor it can take instead: a mul
/// by a scalar read by the attention alone. Under narrow_operands only
/// through a round_to of that format, the factor exact in it and the
/// scalar a power of two, so that the fold changes no bit: autocast rounds
/// the scaled operand, which a scale of the sums cannot reproduce
/// otherwise (the e2e transformer's bf16 run moved by more than autocast's
/// own effect from PyTorch's).
std::optional<ScaledOperand> scaledOperand(AttentionOp attention, Value operand,
                                           ExactValues &exact) {
  ScaledOperand scaled;
  std::optional<StringRef> format = attention.getNarrowOperands();
  Value unrounded = operand;
  if (auto round = operand.getDefiningOp<RoundToOp>()) {
    if (!format || round.getFormat() != *format || !operand.hasOneUse())
      return std::nullopt;
    scaled.ops.push_back(round);
    unrounded = round.getInput();
  } else if (format) {
    return std::nullopt; // a narrow operand's scaling is rounded after it
  }
  auto mul = unrounded.getDefiningOp<MulOp>();
  if (!mul || !unrounded.hasOneUse() || mul->hasAttr("round_result"))
    return std::nullopt;
  std::optional<ScalarProduct> product = scalarProduct(mul);
  if (!product || (format && (exact.formatOf(product->factor) != *format ||
                              !isPowerOfTwo(product->value))))
    return std::nullopt;
  scaled.ops.append({mul, product->constant.getDefiningOp()});
  scaled.factor = product->factor;
  scaled.constant = product->value;
  return scaled;
}

/// Folds `attention`'s scaled a and b into its scale.
void foldScalings(AttentionOp attention, ExactValues &exact) {
  for (OpOperand *use :
       {&attention->getOpOperand(0), &attention->getOpOperand(1)}) {
    std::optional<ScaledOperand> scaled =
        scaledOperand(attention, use->get(), exact);
    if (!scaled)
      continue;
    float scale = attention.getScale().convertToFloat() * scaled->constant;
    if (!std::isfinite(scale) || scale == 0.0f)
      continue;
    use->set(scaled->factor);
    attention.setScaleAttr(
        Builder(attention.getContext()).getF32FloatAttr(scale));
    for (Operation *op : scaled->ops) // readers first
      if (op->use_empty())
        op->erase();
  }
}

struct FoldAttentionScalePass
    : public cdp::impl::FoldAttentionScaleBase<FoldAttentionScalePass> {
  void runOnOperation() override {
    ExactValues exact;
    SmallVector<AttentionOp> attentions;
    getOperation().walk(
        [&](AttentionOp attention) { attentions.push_back(attention); });
    for (AttentionOp attention : attentions)
      foldScalings(attention, exact);
  }
};

} // namespace
