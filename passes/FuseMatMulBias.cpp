//===- FuseMatMulBias.cpp - a Linear's bias added by its product ----------===//
//
// torch exports nn.Linear on an input of rank 3 or more (a transformer's
// projections and MLP: BERT, ViT, nn.TransformerEncoderLayer) as MatMul by
// the weight's Transpose, then an Add of the bias: the product writes its
// result, the add reads it and writes the sum. A cdp.gemm with the bias as
// C adds it as it writes (on GPUs cuBLASLt's bias epilogue), and a ReLU
// after it can then be the Gemm's too (cdp-fuse-relu). Where the weight is
// a matrix, the bias a vector of the product's last dimension and the
// product feeds the add only, this pass makes the pair one cdp.gemm over
// the input's rows, between reshapes (views: they move nothing), the
// weight's Transpose taken as trans_b (the gradient is then the weight's
// own, not a transposed copy). Float32 products only: autocast rounds a
// bf16 or fp16 product before the add, as the exported graph does, so none
// of those matches. Runs on the forward graph after autocast and the
// attention passes (which read the projections' products) and before
// autodiff: the gradients are the Gemm's, the bias's a sum over the rows
// as the add's was.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

namespace cdp {
#define GEN_PASS_DEF_FUSEMATMULBIAS
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

struct Match {
  MatMulOp product;
  Value bias;
};

/// Whether `product` is a float32 matrix product of rows by a weight
/// matrix (a of rank 2 or more, b of rank 2, no rounding) read only once.
bool isLinearProduct(MatMulOp product) {
  if (!product || !product->hasOneUse() || product.getTransA() ||
      product.getNarrowOperands() || product.getRoundResult())
    return false;
  auto a = cast<RankedTensorType>(product.getA().getType());
  auto b = cast<RankedTensorType>(product.getB().getType());
  auto y = cast<RankedTensorType>(product.getType());
  return a.getRank() >= 2 && b.getRank() == 2 && y.getElementType().isF32() &&
         a.hasStaticShape();
}

/// Whether `bias` is a float32 vector of `n` values, [n] or [1, n].
bool isRowBias(Value bias, int64_t n) {
  auto type = dyn_cast<RankedTensorType>(bias.getType());
  if (!type || !type.getElementType().isF32())
    return false;
  ArrayRef<int64_t> shape = type.getShape();
  return (shape.size() == 1 && shape[0] == n) ||
         (shape.size() == 2 && shape[0] == 1 && shape[1] == n);
}

std::optional<Match> matchBiasAdd(AddOp add) {
  if (add->hasAttr("round_result"))
    return std::nullopt;
  for (auto [sum, bias] :
       {std::pair{add.getLhs(), add.getRhs()}, {add.getRhs(), add.getLhs()}}) {
    auto product = sum.getDefiningOp<MatMulOp>();
    if (isLinearProduct(product) && product.getType() == add.getType() &&
        isRowBias(bias,
                  cast<RankedTensorType>(add.getType()).getShape().back()))
      return Match{product, bias};
  }
  return std::nullopt;
}

struct FuseMatMulBiasPass
    : public cdp::impl::FuseMatMulBiasBase<FuseMatMulBiasPass> {
  void runOnOperation() override {
    SmallVector<std::pair<AddOp, Match>> fusions;
    getOperation().walk([&](AddOp add) {
      if (std::optional<Match> match = matchBiasAdd(add))
        fusions.push_back({add, *match});
    });
    for (auto &[add, match] : fusions)
      fuse(add, match);
  }

  /// The weight the Gemm reads and whether transposed: a matrix's
  /// Transpose (nn.Linear's weight as exported) becomes `trans_b`.
  static std::pair<Value, bool> weightOf(MatMulOp product) {
    auto transpose = product.getB().getDefiningOp<TransposeOp>();
    if (transpose && transpose.getPerm() == ArrayRef<int64_t>{1, 0})
      return {transpose.getInput(), !product.getTransB()};
    return {product.getB(), product.getTransB()};
  }

  /// reshape(gemm(reshape(a) as rows, b, bias)) in place of the add.
  void fuse(AddOp add, const Match &match) {
    OpBuilder builder(add);
    Location loc = add.getLoc();
    MatMulOp product = match.product;
    auto a = cast<RankedTensorType>(product.getA().getType());
    auto y = cast<RankedTensorType>(add.getType());
    int64_t k = a.getShape().back(), n = y.getShape().back();
    int64_t m = a.getNumElements() / std::max<int64_t>(k, 1);
    Value rows = product.getA();
    if (a.getRank() != 2)
      rows = builder.create<ReshapeOp>(
          loc, RankedTensorType::get({m, k}, a.getElementType()), rows,
          builder.getDenseI64ArrayAttr({m, k}));
    auto [weight, transB] = weightOf(product);
    auto gemm = builder.create<GemmOp>(
        loc, RankedTensorType::get({m, n}, y.getElementType()), rows, weight,
        match.bias, builder.getF32FloatAttr(1.0f),
        builder.getF32FloatAttr(1.0f), builder.getBoolAttr(false),
        builder.getBoolAttr(transB), /*narrow_operands=*/nullptr,
        /*round_result=*/nullptr, /*activation=*/nullptr);
    Value result = gemm.getOutput();
    if (y.getRank() != 2)
      result = builder.create<ReshapeOp>(
          loc, y, result, builder.getDenseI64ArrayAttr(y.getShape()));
    add.getOutput().replaceAllUsesWith(result);
    // The weight's Transpose, where the Gemm took it as trans_b.
    Operation *transposed =
        weight != product.getB() ? product.getB().getDefiningOp() : nullptr;
    add->erase();
    product->erase();
    if (transposed && transposed->use_empty())
      transposed->erase();
  }
};

} // namespace
