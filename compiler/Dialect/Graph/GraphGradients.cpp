//===- GraphGradients.cpp - each op's reverse-mode rule -------------------===//
//
// One `buildGradient` per differentiable op (DifferentiableOp), beside the
// ops rather than in cdp-autodiff, so that a new op brings its own rule.
// Activations whose rule is a `unary_grad` kind get theirs generated from
// GraphOps.td. Every rule reads the gradient of its results and adds those
// of the operands that need one; broadcasting is summed back (reduceTo).
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GradientBuilder.h"
#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Support/AttentionLayout.h"

using namespace mlir;

#include "cdp/Dialect/Graph/GradientInterface.cpp.inc"

namespace cdp {

namespace {

/// The op's own attributes, without the `cdp.*` annotations of passes.
SmallVector<NamedAttribute> inherentAttrs(Operation *op) {
  SmallVector<NamedAttribute> attrs;
  for (NamedAttribute attr : op->getAttrs())
    if (!attr.getName().getValue().starts_with("cdp."))
      attrs.push_back(attr);
  return attrs;
}

RankedTensorType f32Tensor(Builder &builder, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, builder.getF32Type());
}

/// dY broadcast back over the dimensions a reduction removed.
Value spreadOverReduced(GradientBuilder &g, Value dy, Value input,
                        ArrayRef<int64_t> axes, int64_t &count) {
  ArrayRef<int64_t> shape = GradientBuilder::shapeOf(input);
  auto rank = static_cast<int64_t>(shape.size());
  SmallVector<int64_t> kept(shape);
  count = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (axes.empty() || llvm::is_contained(axes, d) ||
        llvm::is_contained(axes, d - rank)) {
      kept[d] = 1;
      count *= shape[d];
    }
  return g.make(ExpandOp::getOperationName(), {g.reshape(dy, kept)},
                {g.attr("shape", g.i64s(shape))});
}

} // namespace

//===----------------------------------------------------------------------===//
// Element-wise
//===----------------------------------------------------------------------===//

LogicalResult IdentityOp::buildGradient(GradientBuilder &g) {
  g.add(getInput(), g.gradOf(getOutput()));
  return g.status();
}

/// As `.to(torch.bfloat16)`'s backward: the gradient, narrow already (the
/// builder rounds what reaches a narrow value), passed to the float32 input.
LogicalResult RoundToOp::buildGradient(GradientBuilder &g) {
  g.add(getInput(), g.gradOf(getOutput()));
  return g.status();
}

LogicalResult ClipOp::buildGradient(GradientBuilder &g) {
  return g.unary(g.gradOf(getOutput()), getInput(), "clip",
                 {getMin().convertToFloat(), getMax().convertToFloat()});
}

LogicalResult HardSigmoidOp::buildGradient(GradientBuilder &g) {
  return g.unary(g.gradOf(getOutput()), getInput(), "hard_sigmoid",
                 {getAlpha().convertToFloat(), getBeta().convertToFloat()});
}

LogicalResult GeluOp::buildGradient(GradientBuilder &g) {
  return g.unary(g.gradOf(getOutput()), getInput(),
                 getApproximate() == "tanh" ? "gelu_tanh" : "gelu");
}

LogicalResult AddOp::buildGradient(GradientBuilder &g) {
  Value dy = g.gradOf(getOutput());
  g.add(getLhs(), g.reduceTo(dy, getLhs().getType()));
  g.add(getRhs(), g.reduceTo(dy, getRhs().getType()));
  return g.status();
}

LogicalResult SubOp::buildGradient(GradientBuilder &g) {
  Value dy = g.gradOf(getOutput());
  g.add(getLhs(), g.reduceTo(dy, getLhs().getType()));
  if (g.needs(getRhs()))
    g.add(getRhs(), g.reduceTo(g.scale(dy, -1.0f), getRhs().getType()));
  return g.status();
}

LogicalResult MulOp::buildGradient(GradientBuilder &g) {
  Value dy = g.gradOf(getOutput());
  if (g.needs(getLhs()))
    g.add(getLhs(),
          g.reduceTo(g.make(MulOp::getOperationName(), {dy, getRhs()}),
                     getLhs().getType()));
  if (g.needs(getRhs()))
    g.add(getRhs(),
          g.reduceTo(g.make(MulOp::getOperationName(), {dy, getLhs()}),
                     getRhs().getType()));
  return g.status();
}

LogicalResult DivOp::buildGradient(GradientBuilder &g) {
  Value dy = g.gradOf(getOutput());
  if (g.needs(getLhs()))
    g.add(getLhs(),
          g.reduceTo(g.make(DivOp::getOperationName(), {dy, getRhs()}),
                     getLhs().getType()));
  if (g.needs(getRhs())) {
    // d(a/b)/db = -(a/b)/b
    Value dyY = g.make(MulOp::getOperationName(), {dy, getOutput()});
    Value quotient = g.make(DivOp::getOperationName(), {dyY, getRhs()});
    g.add(getRhs(), g.reduceTo(g.scale(quotient, -1.0f), getRhs().getType()));
  }
  return g.status();
}

LogicalResult PowOp::buildGradient(GradientBuilder &g) {
  if (g.needs(getRhs()))
    return g.refuse("gradient with respect to the exponent is not supported");
  // d(a^b)/da = b * a^(b-1)
  Value exponent =
      g.make(SubOp::getOperationName(), {getRhs(), g.scalar(1.0f)});
  Value power = g.make(PowOp::getOperationName(), {getLhs(), exponent});
  Value local = g.make(MulOp::getOperationName(), {power, getRhs()});
  Value dy = g.gradOf(getOutput());
  g.add(getLhs(), g.reduceTo(g.make(MulOp::getOperationName(), {dy, local}),
                             getLhs().getType()));
  return g.status();
}

namespace {

/// torch.minimum/maximum's rule: the gradient goes to the chosen operand,
/// halved between them where they are equal.
LogicalResult extremumGradient(GradientBuilder &g, Operation *op, bool isMin) {
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  Value dy = g.gradOf(op->getResult(0));
  Value zero = g.scalar(0.0f);
  Value tie = g.make(EqualOp::getOperationName(), {lhs, rhs});
  Value half =
      g.make(WhereOp::getOperationName(), {tie, g.scale(dy, 0.5f), zero});
  auto chosen = [&](Value self, Value other) {
    Value wins = g.make(isMin ? LessOp::getOperationName()
                              : GreaterOp::getOperationName(),
                        {self, other});
    return g.make(WhereOp::getOperationName(), {wins, dy, half});
  };
  if (g.needs(lhs))
    g.add(lhs, g.reduceTo(chosen(lhs, rhs), lhs.getType()));
  if (g.needs(rhs))
    g.add(rhs, g.reduceTo(chosen(rhs, lhs), rhs.getType()));
  return g.status();
}

} // namespace

LogicalResult MinOp::buildGradient(GradientBuilder &g) {
  return extremumGradient(g, *this, /*isMin=*/true);
}

LogicalResult MaxOp::buildGradient(GradientBuilder &g) {
  return extremumGradient(g, *this, /*isMin=*/false);
}

/// Each branch receives the gradient where it was chosen.
LogicalResult WhereOp::buildGradient(GradientBuilder &g) {
  Value dy = g.gradOf(getOutput());
  Value zero = g.scalar(0.0f);
  StringRef where = WhereOp::getOperationName();
  if (g.needs(getX()))
    g.add(getX(), g.reduceTo(g.make(where, {getCondition(), dy, zero}),
                             getX().getType()));
  if (g.needs(getY()))
    g.add(getY(), g.reduceTo(g.make(where, {getCondition(), zero, dy}),
                             getY().getType()));
  return g.status();
}

//===----------------------------------------------------------------------===//
// Linear algebra and convolution
//===----------------------------------------------------------------------===//

namespace {

/// A product with the given operand flags.
Value product(GradientBuilder &g, Value x, Value y, bool tx, bool ty) {
  SmallVector<NamedAttribute> flags;
  Builder &b = g.getBuilder();
  if (tx)
    flags.push_back(g.attr("trans_a", b.getBoolAttr(true)));
  if (ty)
    flags.push_back(g.attr("trans_b", b.getBoolAttr(true)));
  return g.make(MatMulOp::getOperationName(), {x, y}, flags);
}

/// dB where B is one matrix for every product and A is read as stored (a
/// Linear over a sequence): one GEMM over A's products stacked into rows
/// instead of a batch of products and a reduction.
Value stackedWeightGradient(GradientBuilder &g, Value a2, Value dy2,
                            ArrayRef<int64_t> aShape,
                            ArrayRef<int64_t> fullShape, bool tb) {
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < fullShape.size(); ++d)
    rows *= fullShape[d];
  Value aRows = g.reshape(a2, {rows, aShape.back()});
  Value dyRows = g.reshape(dy2, {rows, fullShape.back()});
  return tb ? product(g, dyRows, aRows, true, false)
            : product(g, aRows, dyRows, true, false);
}

} // namespace

/// Y = op_a(A) op_b(B), op reading an operand transposed where its trans
/// flag is set. The gradients are products with the flags chosen so that no
/// Transpose op runs (PyTorch's matmul backward, with the transposes as
/// GEMM flags):
///   dA = dY op_b(B)^T            (stored transposed: op_b(B) dY^T)
///   dB = op_a(A)^T dY            (stored transposed: dY^T op_a(A))
/// summed over the batch dimensions the operand broadcast.
LogicalResult MatMulOp::buildGradient(GradientBuilder &g) {
  // Promote 1-D operands to matrices as the forward op does, work on the
  // promoted shapes, and reshape back.
  Value a = getA(), b = getB();
  bool ta = getTransA(), tb = getTransB();
  SmallVector<int64_t> aShape(GradientBuilder::shapeOf(a)),
      bShape(GradientBuilder::shapeOf(b));
  if (aShape.size() == 1)
    aShape.insert(aShape.begin(), 1);
  if (bShape.size() == 1)
    bShape.push_back(1);
  Value a2 = g.reshape(a, aShape), b2 = g.reshape(b, bShape);
  Value full = product(g, a2, b2, ta, tb);
  if (!full)
    return failure();
  SmallVector<int64_t> fullShape(GradientBuilder::shapeOf(full));
  Value dy2 = g.reshape(g.gradOf(getOutput()), fullShape);
  full.getDefiningOp()->erase();
  Builder &builder = g.getBuilder();
  if (g.needs(a)) {
    Value da =
        ta ? product(g, b2, dy2, tb, true) : product(g, dy2, b2, false, !tb);
    g.add(a, g.reshape(g.reduceTo(da, f32Tensor(builder, aShape)),
                       GradientBuilder::shapeOf(a)));
  }
  if (g.needs(b)) {
    int64_t batchRank = static_cast<int64_t>(fullShape.size()) - 2;
    bool oneB = llvm::all_of(ArrayRef<int64_t>(bShape).drop_back(2),
                             [](int64_t d) { return d == 1; });
    bool aFull = static_cast<int64_t>(aShape.size()) - 2 == batchRank &&
                 ArrayRef<int64_t>(aShape).drop_back(2) ==
                     ArrayRef<int64_t>(fullShape).drop_back(2);
    Value db;
    if (batchRank > 0 && oneB && aFull && !ta) {
      db = stackedWeightGradient(g, a2, dy2, aShape, fullShape, tb);
    } else {
      db = tb ? product(g, dy2, a2, true, ta) : product(g, a2, dy2, !ta, false);
      db = g.reduceTo(db, f32Tensor(builder, bShape));
    }
    g.add(b, g.reshape(db, GradientBuilder::shapeOf(b)));
  }
  return g.status();
}

LogicalResult GemmOp::buildGradient(GradientBuilder &g) {
  Builder &b = g.getBuilder();
  bool transA = getTransA(), transB = getTransB();
  NamedAttribute alpha = g.attr("alpha", getAlphaAttr());
  auto flags = [&](bool ta, bool tb) {
    return SmallVector<NamedAttribute>{alpha,
                                       g.attr("trans_a", b.getBoolAttr(ta)),
                                       g.attr("trans_b", b.getBoolAttr(tb))};
  };
  Value dy = g.gradOf(getOutput());
  StringRef gemm = GemmOp::getOperationName();
  if (g.needs(getA()))
    g.add(getA(), transA ? g.make(gemm, {getB(), dy}, flags(transB, true))
                         : g.make(gemm, {dy, getB()}, flags(false, !transB)));
  if (g.needs(getB()))
    g.add(getB(), transB ? g.make(gemm, {dy, getA()}, flags(true, transA))
                         : g.make(gemm, {getA(), dy}, flags(!transA, false)));
  if (Value c = getC())
    g.add(c, g.reduceTo(g.scale(dy, getBeta().convertToFloat()), c.getType()));
  return g.status();
}

LogicalResult ConvOp::buildGradient(GradientBuilder &g) {
  SmallVector<NamedAttribute> common{
      g.attr("pads", getPadsAttr()), g.attr("strides", getStridesAttr()),
      g.attr("dilations", getDilationsAttr()), g.attr("group", getGroupAttr())};
  Value dy = g.gradOf(getOutput());
  if (g.needs(getInput())) {
    SmallVector<NamedAttribute> attrs(common);
    attrs.push_back(
        g.attr("input_shape", g.i64s(GradientBuilder::shapeOf(getInput()))));
    g.add(getInput(), g.make(ConvGradInputOp::getOperationName(),
                             {dy, getWeight()}, attrs));
  }
  if (g.needs(getWeight())) {
    SmallVector<NamedAttribute> attrs(common);
    attrs.push_back(
        g.attr("weight_shape", g.i64s(GradientBuilder::shapeOf(getWeight()))));
    g.add(getWeight(), g.make(ConvGradWeightOp::getOperationName(),
                              {dy, getInput()}, attrs));
  }
  if (Value bias = getBias())
    g.add(bias,
          g.make(ReduceSumOp::getOperationName(), {dy},
                 {g.attr("axes", g.i64s({0, 2, 3})),
                  g.attr("keepdims", g.getBuilder().getBoolAttr(false))}));
  return g.status();
}

//===----------------------------------------------------------------------===//
// Pooling, normalization and softmax
//===----------------------------------------------------------------------===//

LogicalResult MaxPoolOp::buildGradient(GradientBuilder &g) {
  g.add(getInput(),
        g.make(MaxPoolGradOp::getOperationName(),
               {g.gradOf(getOutput()), getInput()}, inherentAttrs(*this)));
  return g.status();
}

LogicalResult AveragePoolOp::buildGradient(GradientBuilder &g) {
  SmallVector<NamedAttribute> attrs = inherentAttrs(*this);
  attrs.push_back(
      g.attr("input_shape", g.i64s(GradientBuilder::shapeOf(getInput()))));
  g.add(getInput(), g.make(AveragePoolGradOp::getOperationName(),
                           {g.gradOf(getOutput())}, attrs));
  return g.status();
}

LogicalResult GlobalAveragePoolOp::buildGradient(GradientBuilder &g) {
  ArrayRef<int64_t> shape = GradientBuilder::shapeOf(getInput());
  int64_t count = 1;
  for (int64_t d : shape.drop_front(2))
    count *= d;
  Value spread = g.make(ExpandOp::getOperationName(), {g.gradOf(getOutput())},
                        {g.attr("shape", g.i64s(shape))});
  g.add(getInput(), g.scale(spread, 1.0f / count));
  return g.status();
}

LogicalResult BatchNormOp::buildGradient(GradientBuilder &g) {
  if (failed(g.onlyThroughFirstResult()))
    return failure();
  Value dy = g.gradOf(getOutput());
  if (!dy)
    return success(); // only the statistics are used; they carry none
  Operation *grad = g.makeOp(BatchNormGradOp::getOperationName(),
                             {dy, getInput(), getScale(), getMean(), getVar()},
                             {g.attr("epsilon", getEpsilonAttr()),
                              g.attr("training_mode", getTrainingModeAttr())},
                             3);
  if (!grad)
    return failure();
  g.add(getInput(), grad->getResult(0));
  g.add(getScale(), grad->getResult(1));
  g.add(getBias(), grad->getResult(2));
  return g.status();
}

LogicalResult LayerNormOp::buildGradient(GradientBuilder &g) {
  if (failed(g.onlyThroughFirstResult()))
    return failure();
  Value dy = g.gradOf(getOutput());
  if (!dy)
    return success(); // only the statistics are used; they carry none
  Operation *grad =
      g.makeOp(LayerNormGradOp::getOperationName(),
               {dy, getInput(), getScale(), getMean(), getInvStdDev()},
               {g.attr("axis", getAxisAttr()), g.attr("rms", getRmsAttr())}, 3);
  if (!grad)
    return failure();
  g.add(getInput(), grad->getResult(0));
  g.add(getScale(), grad->getResult(1));
  if (Value bias = getBias())
    g.add(bias, grad->getResult(2));
  return g.status();
}

namespace {

/// The input's gradient, added to it and returned.
Value softmaxGradient(GradientBuilder &g, Operation *op, bool log) {
  Value dx = g.make(SoftmaxGradOp::getOperationName(),
                    {g.gradOf(op->getResult(0)), op->getResult(0)},
                    {g.attr("axis", op->getAttr("axis")),
                     g.attr("log", g.getBuilder().getBoolAttr(log))});
  g.add(op->getOperand(0), dx);
  return dx;
}

} // namespace

LogicalResult SoftmaxOp::buildGradient(GradientBuilder &g) {
  Value dx = softmaxGradient(g, *this, /*log=*/false);
  // The bias's: the input's (as the add's was) summed to its shape.
  if (Value bias = getBias())
    g.add(bias, g.reduceTo(dx, bias.getType()));
  return g.status();
}

/// The adjoint map, one cdp.rotary {adjoint}; the tables take none (the
/// fusion keeps a chain whose tables read a trained parameter).
LogicalResult RotaryOp::buildGradient(GradientBuilder &g) {
  if (g.needs(getCos()) || g.needs(getSin()))
    return g.refuse("cos and sin computed from a trained parameter take no "
                    "gradient through cdp.rotary; compile with --no-fusion");
  Value dy = g.gradOf(getOutput());
  if (!dy)
    return success();
  SmallVector<NamedAttribute, 2> attrs{
      g.attr("adjoint", g.getBuilder().getBoolAttr(true))};
  if (StringAttr format = getNarrowOperandsAttr())
    attrs.push_back(g.attr("narrow_operands", format));
  g.add(getInput(),
        g.make(RotaryOp::getOperationName(), {dy, getCos(), getSin()}, attrs));
  return g.status();
}

/// A grouped operand's gradient from attention_grad's, which has one per
/// query head: each key/value head's group of query heads summed with the
/// ops the gradient of the heads' repetition (unsqueeze, expand, reshape)
/// uses.
static Value sumHeadGroups(GradientBuilder &g, Value perQueryHead,
                           Value operand, std::optional<StringRef> layout) {
  ArrayRef<int64_t> wide = GradientBuilder::shapeOf(perQueryHead),
                    narrow = GradientBuilder::shapeOf(operand);
  if (wide == narrow)
    return perQueryHead;
  size_t axis = headsAxis(wide.size(), layout == "bshd");
  int64_t group = wide[axis] / narrow[axis];
  // (.., H, ..) -> (.., H_kv, group, ..), summed to (.., H_kv, 1, ..).
  SmallVector<int64_t> split(narrow), kept(narrow);
  split.insert(split.begin() + axis + 1, group);
  kept.insert(kept.begin() + axis + 1, 1);
  Value summed = g.reduceTo(g.reshape(perQueryHead, split),
                            f32Tensor(g.getBuilder(), kept));
  return g.reshape(summed, narrow);
}

/// One attention_grad: it recomputes the probabilities from the stats, so
/// the backward keeps a, b, v and (..., M, 2) stats instead of the
/// (..., M, N) probabilities. The bias's gradient only where it is trained
/// (T5's position bias; a mask's is not wanted).
LogicalResult AttentionOp::buildGradient(GradientBuilder &g) {
  if (failed(g.onlyThroughFirstResult()))
    return failure();
  Value bias = getBias();
  bool biasGrad = bias && g.needs(bias);
  SmallVector<Value> operands{g.gradOf(getOutput()), getA(), getB(), getV(),
                              getStats()};
  if (bias)
    operands.push_back(bias);
  SmallVector<NamedAttribute> attrs{
      g.attr("zero_nan_rows", getZeroNanRowsAttr())};
  if (getScale().convertToFloat() != 1.0f)
    attrs.push_back(g.attr("scale", getScaleAttr()));
  if (StringAttr format = getNarrowOperandsAttr())
    attrs.push_back(g.attr("narrow_operands", format));
  if (StringAttr layout = getLayoutAttr())
    attrs.push_back(g.attr("layout", layout));
  if (biasGrad)
    attrs.push_back(g.attr("with_bias_grad", g.getBuilder().getBoolAttr(true)));
  Operation *grad = g.makeOp(AttentionGradOp::getOperationName(), operands,
                             attrs, biasGrad ? 4 : 3);
  if (!grad)
    return failure();
  g.add(getA(), grad->getResult(0));
  g.add(getB(), sumHeadGroups(g, grad->getResult(1), getB(), getLayout()));
  g.add(getV(), sumHeadGroups(g, grad->getResult(2), getV(), getLayout()));
  if (biasGrad)
    g.add(bias, grad->getResult(3));
  return g.status();
}

LogicalResult LogSoftmaxOp::buildGradient(GradientBuilder &g) {
  softmaxGradient(g, *this, /*log=*/true);
  return g.status();
}

//===----------------------------------------------------------------------===//
// Dropout, Cast and the ops that move elements without arithmetic
//===----------------------------------------------------------------------===//

LogicalResult DropoutOp::buildGradient(GradientBuilder &g) {
  Value dy = g.gradOf(getOutput());
  if (!dy)
    return success(); // only the mask is used
  g.add(getInput(),
        getTrainingMode()
            ? g.make(DropoutGradOp::getOperationName(), {dy, getMask()},
                     {g.attr("ratio", getRatioAttr())})
            : dy);
  return g.status();
}

LogicalResult CastOp::buildGradient(GradientBuilder &g) {
  if (cast<RankedTensorType>(getInput().getType()).getElementType().isF32())
    g.add(getInput(), g.gradOf(getOutput()));
  return g.status();
}

namespace {

LogicalResult reshapeGradient(GradientBuilder &g, Operation *op) {
  g.add(op->getOperand(0),
        g.reshape(g.gradOf(op->getResult(0)),
                  GradientBuilder::shapeOf(op->getOperand(0))));
  return g.status();
}

} // namespace

LogicalResult ReshapeOp::buildGradient(GradientBuilder &g) {
  return reshapeGradient(g, *this);
}
LogicalResult FlattenOp::buildGradient(GradientBuilder &g) {
  return reshapeGradient(g, *this);
}
LogicalResult SqueezeOp::buildGradient(GradientBuilder &g) {
  return reshapeGradient(g, *this);
}
LogicalResult UnsqueezeOp::buildGradient(GradientBuilder &g) {
  return reshapeGradient(g, *this);
}

LogicalResult TransposeOp::buildGradient(GradientBuilder &g) {
  ArrayRef<int64_t> perm = getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[perm[i]] = i;
  g.add(getInput(),
        g.make(TransposeOp::getOperationName(), {g.gradOf(getOutput())},
               {g.attr("perm", g.i64s(inverse))}));
  return g.status();
}

LogicalResult ConcatOp::buildGradient(GradientBuilder &g) {
  Value dy = g.gradOf(getOutput());
  int64_t rank = GradientBuilder::shapeOf(dy).size();
  int64_t axis = getAxisAttr().getInt();
  if (axis < 0)
    axis += rank;
  int64_t offset = 0;
  for (Value input : getInputs()) {
    int64_t size = GradientBuilder::shapeOf(input)[axis];
    if (g.needs(input))
      g.add(input, g.make(SliceOp::getOperationName(), {dy},
                          {g.attr("starts", g.i64s({offset})),
                           g.attr("ends", g.i64s({offset + size})),
                           g.attr("axes", g.i64s({axis})),
                           g.attr("steps", g.i64s({1}))}));
    offset += size;
  }
  return g.status();
}

LogicalResult SplitOp::buildGradient(GradientBuilder &g) {
  SmallVector<Value> pieces;
  for (Value result : getOutputs()) {
    Value grad = g.gradOf(result);
    pieces.push_back(grad ? grad : g.zerosLike(result));
  }
  g.add(getInput(), g.make(ConcatOp::getOperationName(), pieces,
                           {g.attr("axis", getAxisAttr())}));
  return g.status();
}

LogicalResult SliceOp::buildGradient(GradientBuilder &g) {
  g.add(
      getInput(),
      g.make(
          SliceGradOp::getOperationName(), {g.gradOf(getOutput())},
          {g.attr("input_shape", g.i64s(GradientBuilder::shapeOf(getInput()))),
           g.attr("starts", getStartsAttr()), g.attr("ends", getEndsAttr()),
           g.attr("axes", getAxesAttr()), g.attr("steps", getStepsAttr())}));
  return g.status();
}

/// The adjoint of constant padding: the padded region's gradient is dropped.
LogicalResult PadOp::buildGradient(GradientBuilder &g) {
  ArrayRef<int64_t> in = GradientBuilder::shapeOf(getInput());
  int64_t rank = in.size();
  SmallVector<int64_t> starts, ends, axes, steps;
  for (int64_t d = 0; d < rank; ++d) {
    starts.push_back(getPads()[d]);
    ends.push_back(getPads()[d] + in[d]);
    axes.push_back(d);
    steps.push_back(1);
  }
  g.add(getInput(),
        g.make(SliceOp::getOperationName(), {g.gradOf(getOutput())},
               {g.attr("starts", g.i64s(starts)), g.attr("ends", g.i64s(ends)),
                g.attr("axes", g.i64s(axes)), g.attr("steps", g.i64s(steps))}));
  return g.status();
}

LogicalResult ExpandOp::buildGradient(GradientBuilder &g) {
  g.add(getInput(), g.reduceTo(g.gradOf(getOutput()), getInput().getType()));
  return g.status();
}

LogicalResult GatherOp::buildGradient(GradientBuilder &g) {
  SmallVector<NamedAttribute> attrs{
      g.attr("data_shape", g.i64s(GradientBuilder::shapeOf(getData()))),
      g.attr("axis", getAxisAttr())};
  if (auto padding = getPaddingIdxAttr())
    attrs.push_back(g.attr("padding_idx", padding));
  g.add(getData(), g.make(GatherGradOp::getOperationName(),
                          {g.gradOf(getOutput()), getIndices()}, attrs));
  return g.status();
}

LogicalResult GatherElementsOp::buildGradient(GradientBuilder &g) {
  g.add(getData(), g.make(GatherElementsGradOp::getOperationName(),
                          {g.gradOf(getOutput()), getIndices()},
                          {g.attr("data_shape",
                                  g.i64s(GradientBuilder::shapeOf(getData()))),
                           g.attr("axis", getAxisAttr())}));
  return g.status();
}

LogicalResult GatherNDOp::buildGradient(GradientBuilder &g) {
  g.add(getData(), g.make(GatherNDGradOp::getOperationName(),
                          {g.gradOf(getOutput()), getIndices()},
                          {g.attr("data_shape",
                                  g.i64s(GradientBuilder::shapeOf(getData()))),
                           g.attr("batch_dims", getBatchDimsAttr())}));
  return g.status();
}

/// The adjoint of a running sum is the running sum taken the other way.
LogicalResult CumSumOp::buildGradient(GradientBuilder &g) {
  Builder &b = g.getBuilder();
  g.add(getInput(),
        g.make(CumSumOp::getOperationName(), {g.gradOf(getOutput())},
               {g.attr("axis", getAxisAttr()),
                g.attr("exclusive", getExclusiveAttr()),
                g.attr("reverse", b.getBoolAttr(!getReverse()))}));
  return g.status();
}

LogicalResult TriluOp::buildGradient(GradientBuilder &g) {
  g.add(getInput(),
        g.make(TriluOp::getOperationName(), {g.gradOf(getOutput())},
               {g.attr("k", getKAttr()), g.attr("upper", getUpperAttr())}));
  return g.status();
}

//===----------------------------------------------------------------------===//
// Reductions and losses
//===----------------------------------------------------------------------===//

LogicalResult ReduceMeanOp::buildGradient(GradientBuilder &g) {
  int64_t count = 1;
  Value spread =
      spreadOverReduced(g, g.gradOf(getOutput()), getInput(), getAxes(), count);
  g.add(getInput(), g.scale(spread, 1.0f / count));
  return g.status();
}

LogicalResult ReduceSumOp::buildGradient(GradientBuilder &g) {
  int64_t count = 1;
  g.add(getInput(), spreadOverReduced(g, g.gradOf(getOutput()), getInput(),
                                      getAxes(), count));
  return g.status();
}

LogicalResult SoftmaxCrossEntropyLossOp::buildGradient(GradientBuilder &g) {
  if (failed(g.onlyThroughFirstResult()))
    return failure();
  // A loss without log-probabilities: its gradient recomputes them.
  Value logProb = getLogProb();
  SmallVector<Value> operands{g.gradOf(getLoss()),
                              logProb ? logProb : getScores(), getLabels()};
  if (Value weights = getWeights())
    operands.push_back(weights);
  SmallVector<NamedAttribute> attrs{g.attr("reduction", getReductionAttr())};
  if (auto ignore = getIgnoreIndexAttr())
    attrs.push_back(g.attr("ignore_index", ignore));
  if (getClassesLast())
    attrs.push_back(g.attr("classes_last", getClassesLastAttr()));
  if (!logProb)
    attrs.push_back(g.attr("from_scores", BoolAttr::get(getContext(), true)));
  g.add(getScores(), g.make(SoftmaxCrossEntropyLossGradOp::getOperationName(),
                            operands, attrs));
  return g.status();
}

LogicalResult NllLossOp::buildGradient(GradientBuilder &g) {
  SmallVector<Value> operands{g.gradOf(getLoss()), getTarget()};
  if (Value weight = getWeight())
    operands.push_back(weight);
  SmallVector<NamedAttribute> attrs{
      g.attr("reduction", getReductionAttr()),
      g.attr("input_shape", g.i64s(GradientBuilder::shapeOf(getInput())))};
  if (auto ignore = getIgnoreIndexAttr())
    attrs.push_back(g.attr("ignore_index", ignore));
  g.add(getInput(), g.make(NllLossGradOp::getOperationName(), operands, attrs));
  return g.status();
}

} // namespace cdp
