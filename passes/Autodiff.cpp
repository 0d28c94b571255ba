//===- Autodiff.cpp - reverse-mode differentiation of @main ---------------===//
//
// Walks @main backwards from its loss. Each op whose result carries a
// gradient contributes gradients to those of its operands that depend on a
// trainable parameter; contributions to one value are summed, which is what
// makes tied weights and skip connections right.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphBuilder.h"
#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"

namespace cdp {
#define GEN_PASS_DEF_AUTODIFF
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

class Differentiator {
public:
  Differentiator(func::FuncOp func, OpBuilder &builder)
      : func(func), builder(builder) {}

  LogicalResult run(Value loss, const llvm::StringSet<> &frozen,
                    SmallVectorImpl<ParamOp> &trainable);

private:
  LogicalResult differentiate(Operation *op);

  /// A family of gradient rules: NotMine when none is for `op`; Refused
  /// after reporting why; Done when the rule built the gradients (a build
  /// failure shows in `failedBuild`).
  enum class Rule { NotMine, Done, Refused };
  Rule activationRule(Operation *op, Value dy);
  Rule arithmeticRule(Operation *op, Value dy);
  Rule linearRule(Operation *op, Value dy);
  bool matMulRule(MatMulOp matmul, Value dy);
  Rule windowAndNormRule(Operation *op, Value dy);
  Rule shapeRule(Operation *op, Value dy);
  Rule lossRule(Operation *op, Value dy);
  /// dx = unary_grad(dy, saved) of the given kind, into operand 0.
  void unaryGrad(Operation *op, Value dy, Value saved, StringRef kind,
                 ArrayRef<float> params = {});

  /// Builds an op by name; on failure reports it against `origin`.
  Value make(StringRef name, ValueRange operands,
             ArrayRef<NamedAttribute> attributes = {}, unsigned result = 0,
             unsigned numResults = 1);
  Operation *makeOp(StringRef name, ValueRange operands,
                    ArrayRef<NamedAttribute> attributes, unsigned numResults);
  Value scalar(float value);
  Value scale(Value value, float factor);
  Value reduceTo(Value value, Type type);
  Value reshape(Value value, ArrayRef<int64_t> shape);
  Value unpad(Value value, PadOp pad);
  NamedAttribute attr(StringRef name, Attribute value) {
    return builder.getNamedAttr(name, value);
  }
  DenseI64ArrayAttr i64s(ArrayRef<int64_t> values) {
    return builder.getDenseI64ArrayAttr(values);
  }
  static ArrayRef<int64_t> shapeOf(Value value) {
    return cast<RankedTensorType>(value.getType()).getShape();
  }

  void accumulate(Value value, Value grad);

  func::FuncOp func;
  OpBuilder &builder;
  Operation *origin = nullptr;
  bool failedBuild = false;
  llvm::DenseSet<Value> needsGrad;
  llvm::DenseMap<Value, Value> grads;
};

Operation *Differentiator::makeOp(StringRef name, ValueRange operands,
                                  ArrayRef<NamedAttribute> attributes,
                                  unsigned numResults) {
  if (failedBuild)
    return nullptr;
  std::string error;
  Operation *op = createInferred(builder, origin->getLoc(), name, operands,
                                 attributes, numResults, error);
  if (!op) {
    origin->emitOpError("gradient: cannot build ") << name << ": " << error;
    failedBuild = true;
  }
  return op;
}

Value Differentiator::make(StringRef name, ValueRange operands,
                           ArrayRef<NamedAttribute> attributes, unsigned result,
                           unsigned numResults) {
  Operation *op = makeOp(name, operands, attributes, numResults);
  return op ? op->getResult(result) : Value();
}

Value Differentiator::scalar(float value) {
  auto type = RankedTensorType::get({}, builder.getF32Type());
  return builder.create<ConstantOp>(
      origin ? origin->getLoc() : func.getLoc(),
      cast<ElementsAttr>(DenseElementsAttr::get(type, value)));
}

Value Differentiator::scale(Value value, float factor) {
  if (!value || factor == 1.0f)
    return value;
  return make(MulOp::getOperationName(), {value, scalar(factor)});
}

/// Sums `value` back to the shape of `type` (the adjoint of broadcasting).
Value Differentiator::reduceTo(Value value, Type type) {
  if (!value || value.getType() == type)
    return value;
  return make(ReduceToOp::getOperationName(), {value},
              {attr("shape", i64s(cast<RankedTensorType>(type).getShape()))});
}

/// The adjoint of constant padding: the padded region's gradient is dropped.
Value Differentiator::unpad(Value value, PadOp pad) {
  ArrayRef<int64_t> in = shapeOf(pad.getInput());
  int64_t rank = in.size();
  SmallVector<int64_t> starts, ends, axes, steps;
  for (int64_t d = 0; d < rank; ++d) {
    starts.push_back(pad.getPads()[d]);
    ends.push_back(pad.getPads()[d] + in[d]);
    axes.push_back(d);
    steps.push_back(1);
  }
  return make(SliceOp::getOperationName(), {value},
              {attr("starts", i64s(starts)), attr("ends", i64s(ends)),
               attr("axes", i64s(axes)), attr("steps", i64s(steps))});
}

Value Differentiator::reshape(Value value, ArrayRef<int64_t> shape) {
  if (!value || shapeOf(value) == shape)
    return value;
  return make(ReshapeOp::getOperationName(), {value},
              {attr("shape", i64s(shape))});
}

void Differentiator::accumulate(Value value, Value grad) {
  if (!grad || !needsGrad.contains(value))
    return;
  auto it = grads.find(value);
  if (it == grads.end()) {
    grads[value] = grad;
    return;
  }
  it->second = make(AddOp::getOperationName(), {it->second, grad});
}

/// The op's own attributes, without the `cdp.*` annotations of passes.
static SmallVector<NamedAttribute> inherentAttrs(Operation *op) {
  SmallVector<NamedAttribute> attrs;
  for (NamedAttribute attr : op->getAttrs())
    if (!attr.getName().getValue().starts_with("cdp."))
      attrs.push_back(attr);
  return attrs;
}

LogicalResult Differentiator::differentiate(Operation *op) {
  origin = op;
  Value dy = op->getNumResults() ? grads.lookup(op->getResult(0)) : Value();
  if (auto result = op->getNumResults() > 1 ? op->getResult(1) : Value())
    if (grads.count(result) &&
        !isa<BatchNormOp, LayerNormOp, DropoutOp, SplitOp>(op))
      return op->emitOpError(
          "gradient: differentiating through result #1 is not supported");

  if (isa<BatchNormOp, LayerNormOp>(op) && !dy)
    return success(); // only the statistics are used, and they carry none

  for (auto rule :
       {&Differentiator::activationRule, &Differentiator::arithmeticRule,
        &Differentiator::linearRule, &Differentiator::windowAndNormRule,
        &Differentiator::shapeRule, &Differentiator::lossRule}) {
    Rule applied = (this->*rule)(op, dy);
    if (applied == Rule::Refused)
      return failure();
    if (applied == Rule::Done)
      return failure(failedBuild);
  }
  return op->emitOpError("has no gradient rule");
}

void Differentiator::unaryGrad(Operation *op, Value dy, Value saved,
                               StringRef kind, ArrayRef<float> params) {
  accumulate(op->getOperand(0),
             make(UnaryGradOp::getOperationName(), {dy, saved},
                  {attr("kind", builder.getStringAttr(kind)),
                   attr("params", builder.getDenseF32ArrayAttr(params))}));
}

/// Element-wise activations, Pad and Identity: one input, one output.
Differentiator::Rule Differentiator::activationRule(Operation *op, Value dy) {
  if (isa<ReluOp>(op))
    unaryGrad(op, dy, op->getOperand(0), "relu");
  else if (auto gelu = dyn_cast<GeluOp>(op))
    unaryGrad(op, dy, op->getOperand(0),
              gelu.getApproximate() == "tanh" ? "gelu_tanh" : "gelu");
  else if (isa<ErfOp>(op))
    unaryGrad(op, dy, op->getOperand(0), "erf");
  else if (isa<SigmoidOp>(op))
    unaryGrad(op, dy, op->getResult(0), "sigmoid");
  else if (isa<TanhOp>(op))
    unaryGrad(op, dy, op->getResult(0), "tanh");
  else if (isa<SqrtOp>(op))
    unaryGrad(op, dy, op->getResult(0), "sqrt");
  else if (auto clip = dyn_cast<ClipOp>(op))
    unaryGrad(op, dy, op->getOperand(0), "clip",
              {clip.getMin().convertToFloat(), clip.getMax().convertToFloat()});
  else if (auto hard = dyn_cast<HardSigmoidOp>(op))
    unaryGrad(
        op, dy, op->getOperand(0), "hard_sigmoid",
        {hard.getAlpha().convertToFloat(), hard.getBeta().convertToFloat()});
  else if (isa<HardSwishOp>(op))
    unaryGrad(op, dy, op->getOperand(0), "hard_swish");
  else if (auto pad = dyn_cast<PadOp>(op))
    accumulate(op->getOperand(0), unpad(dy, pad));
  else if (isa<IdentityOp>(op))
    accumulate(op->getOperand(0), dy);
  else
    return Rule::NotMine;
  return Rule::Done;
}

/// Add, Sub, Mul, Div and Pow, with broadcasting summed back.
Differentiator::Rule Differentiator::arithmeticRule(Operation *op, Value dy) {
  if (isa<AddOp>(op)) {
    accumulate(op->getOperand(0), reduceTo(dy, op->getOperand(0).getType()));
    accumulate(op->getOperand(1), reduceTo(dy, op->getOperand(1).getType()));
  } else if (isa<SubOp>(op)) {
    accumulate(op->getOperand(0), reduceTo(dy, op->getOperand(0).getType()));
    if (needsGrad.contains(op->getOperand(1)))
      accumulate(op->getOperand(1),
                 reduceTo(scale(dy, -1.0f), op->getOperand(1).getType()));
  } else if (isa<MulOp>(op)) {
    if (needsGrad.contains(op->getOperand(0)))
      accumulate(op->getOperand(0), reduceTo(make(MulOp::getOperationName(),
                                                  {dy, op->getOperand(1)}),
                                             op->getOperand(0).getType()));
    if (needsGrad.contains(op->getOperand(1)))
      accumulate(op->getOperand(1), reduceTo(make(MulOp::getOperationName(),
                                                  {dy, op->getOperand(0)}),
                                             op->getOperand(1).getType()));
  } else if (isa<DivOp>(op)) {
    if (needsGrad.contains(op->getOperand(0)))
      accumulate(op->getOperand(0), reduceTo(make(DivOp::getOperationName(),
                                                  {dy, op->getOperand(1)}),
                                             op->getOperand(0).getType()));
    if (needsGrad.contains(op->getOperand(1))) {
      // d(a/b)/db = -(a/b)/b
      Value dyY = make(MulOp::getOperationName(), {dy, op->getResult(0)});
      Value quotient =
          make(DivOp::getOperationName(), {dyY, op->getOperand(1)});
      accumulate(op->getOperand(1),
                 reduceTo(scale(quotient, -1.0f), op->getOperand(1).getType()));
    }
  } else if (isa<PowOp>(op)) {
    if (needsGrad.contains(op->getOperand(1))) {
      op->emitOpError("gradient with respect to the exponent is not supported");
      return Rule::Refused;
    }
    // d(a^b)/da = b * a^(b-1)
    Value exponent =
        make(SubOp::getOperationName(), {op->getOperand(1), scalar(1.0f)});
    Value power =
        make(PowOp::getOperationName(), {op->getOperand(0), exponent});
    Value local = make(MulOp::getOperationName(), {power, op->getOperand(1)});
    accumulate(op->getOperand(0),
               reduceTo(make(MulOp::getOperationName(), {dy, local}),
                        op->getOperand(0).getType()));
  } else {
    return Rule::NotMine;
  }
  return Rule::Done;
}

/// MatMul: Y = op_a(A) op_b(B), op reading an operand transposed where its
/// trans flag is set. The gradients are products with the flags chosen so
/// that no Transpose op runs (PyTorch's matmul backward, with the
/// transposes as GEMM flags):
///   dA = dY op_b(B)^T            (stored transposed: op_b(B) dY^T)
///   dB = op_a(A)^T dY            (stored transposed: dY^T op_a(A))
/// summed over the batch dimensions the operand broadcast. Where B is one
/// matrix for every product and A is read as stored (a Linear over a
/// sequence), dB is one GEMM over A's products stacked into rows instead of
/// a batch of products and a reduction.
bool Differentiator::matMulRule(MatMulOp matmul, Value dy) {
  // Promote 1-D operands to matrices as the forward op does, work on the
  // promoted shapes, and reshape back.
  Value a = matmul.getA(), b = matmul.getB();
  bool ta = matmul.getTransA(), tb = matmul.getTransB();
  SmallVector<int64_t> aShape(shapeOf(a)), bShape(shapeOf(b));
  if (aShape.size() == 1)
    aShape.insert(aShape.begin(), 1);
  if (bShape.size() == 1)
    bShape.push_back(1);
  Value a2 = reshape(a, aShape), b2 = reshape(b, bShape);
  auto product = [&](Value x, Value y, bool tx, bool ty) {
    SmallVector<NamedAttribute> flags;
    if (tx)
      flags.push_back(attr("trans_a", builder.getBoolAttr(true)));
    if (ty)
      flags.push_back(attr("trans_b", builder.getBoolAttr(true)));
    return make(MatMulOp::getOperationName(), {x, y}, flags);
  };
  Value full = product(a2, b2, ta, tb);
  if (!full)
    return false;
  SmallVector<int64_t> fullShape(shapeOf(full));
  Value dy2 = reshape(dy, fullShape);
  full.getDefiningOp()->erase();
  auto f32 = [&](ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, builder.getF32Type());
  };
  if (needsGrad.contains(a)) {
    Value da = ta ? product(b2, dy2, tb, true) : product(dy2, b2, false, !tb);
    accumulate(a, reshape(reduceTo(da, f32(aShape)), shapeOf(a)));
  }
  if (needsGrad.contains(b)) {
    int64_t batchRank = static_cast<int64_t>(fullShape.size()) - 2;
    bool oneB = llvm::all_of(ArrayRef<int64_t>(bShape).drop_back(2),
                             [](int64_t d) { return d == 1; });
    bool aFull = static_cast<int64_t>(aShape.size()) - 2 == batchRank &&
                 ArrayRef<int64_t>(aShape).drop_back(2) ==
                     ArrayRef<int64_t>(fullShape).drop_back(2);
    Value db;
    if (batchRank > 0 && oneB && aFull && !ta) {
      int64_t rows = 1;
      for (int64_t d = 0; d <= batchRank; ++d)
        rows *= fullShape[d];
      Value aRows = reshape(a2, {rows, aShape.back()});
      Value dyRows = reshape(dy2, {rows, fullShape.back()});
      db = tb ? product(dyRows, aRows, true, false)
              : product(aRows, dyRows, true, false);
    } else {
      db = tb ? product(dy2, a2, true, ta) : product(a2, dy2, !ta, false);
      db = reduceTo(db, f32(bShape));
    }
    accumulate(b, reshape(db, shapeOf(b)));
  }
  return true;
}

/// MatMul, Gemm and Conv.
Differentiator::Rule Differentiator::linearRule(Operation *op, Value dy) {
  if (auto matmul = dyn_cast<MatMulOp>(op)) {
    if (!matMulRule(matmul, dy))
      return Rule::Refused;
  } else if (auto gemm = dyn_cast<GemmOp>(op)) {
    bool transA = gemm.getTransA(), transB = gemm.getTransB();
    NamedAttribute alpha = attr("alpha", gemm.getAlphaAttr());
    auto flags = [&](bool ta, bool tb) {
      return SmallVector<NamedAttribute>{
          alpha, attr("trans_a", builder.getBoolAttr(ta)),
          attr("trans_b", builder.getBoolAttr(tb))};
    };
    Value a = gemm.getA(), b = gemm.getB();
    if (needsGrad.contains(a))
      accumulate(a, transA ? make(GemmOp::getOperationName(), {b, dy},
                                  flags(transB, true))
                           : make(GemmOp::getOperationName(), {dy, b},
                                  flags(false, !transB)));
    if (needsGrad.contains(b))
      accumulate(b, transB ? make(GemmOp::getOperationName(), {dy, a},
                                  flags(true, transA))
                           : make(GemmOp::getOperationName(), {a, dy},
                                  flags(!transA, false)));
    if (Value c = gemm.getC())
      accumulate(
          c, reduceTo(scale(dy, gemm.getBeta().convertToFloat()), c.getType()));
  } else if (auto conv = dyn_cast<ConvOp>(op)) {
    SmallVector<NamedAttribute> common{
        attr("pads", conv.getPadsAttr()),
        attr("strides", conv.getStridesAttr()),
        attr("dilations", conv.getDilationsAttr()),
        attr("group", conv.getGroupAttr())};
    if (needsGrad.contains(conv.getInput())) {
      SmallVector<NamedAttribute> attrs(common);
      attrs.push_back(attr("input_shape", i64s(shapeOf(conv.getInput()))));
      accumulate(conv.getInput(), make(ConvGradInputOp::getOperationName(),
                                       {dy, conv.getWeight()}, attrs));
    }
    if (needsGrad.contains(conv.getWeight())) {
      SmallVector<NamedAttribute> attrs(common);
      attrs.push_back(attr("weight_shape", i64s(shapeOf(conv.getWeight()))));
      accumulate(conv.getWeight(), make(ConvGradWeightOp::getOperationName(),
                                        {dy, conv.getInput()}, attrs));
    }
    if (Value bias = conv.getBias())
      accumulate(bias, make(ReduceSumOp::getOperationName(), {dy},
                            {attr("axes", i64s({0, 2, 3})),
                             attr("keepdims", builder.getBoolAttr(false))}));
  } else {
    return Rule::NotMine;
  }
  return Rule::Done;
}

/// Pooling, normalization and softmax.
Differentiator::Rule Differentiator::windowAndNormRule(Operation *op,
                                                       Value dy) {
  if (isa<MaxPoolOp>(op)) {
    SmallVector<NamedAttribute> attrs = inherentAttrs(op);
    accumulate(op->getOperand(0), make(MaxPoolGradOp::getOperationName(),
                                       {dy, op->getOperand(0)}, attrs));
  } else if (isa<AveragePoolOp>(op)) {
    SmallVector<NamedAttribute> attrs = inherentAttrs(op);
    attrs.push_back(attr("input_shape", i64s(shapeOf(op->getOperand(0)))));
    accumulate(op->getOperand(0),
               make(AveragePoolGradOp::getOperationName(), {dy}, attrs));
  } else if (isa<GlobalAveragePoolOp>(op)) {
    ArrayRef<int64_t> shape = shapeOf(op->getOperand(0));
    int64_t count = 1;
    for (int64_t d : shape.drop_front(2))
      count *= d;
    Value spread =
        make(ExpandOp::getOperationName(), {dy}, {attr("shape", i64s(shape))});
    accumulate(op->getOperand(0), scale(spread, 1.0f / count));
  } else if (auto bn = dyn_cast<BatchNormOp>(op)) {
    Operation *g =
        makeOp(BatchNormGradOp::getOperationName(),
               {dy, bn.getInput(), bn.getScale(), bn.getMean(), bn.getVar()},
               {attr("epsilon", bn.getEpsilonAttr()),
                attr("training_mode", bn.getTrainingModeAttr())},
               3);
    if (!g)
      return Rule::Refused;
    accumulate(bn.getInput(), g->getResult(0));
    accumulate(bn.getScale(), g->getResult(1));
    accumulate(bn.getBias(), g->getResult(2));
  } else if (auto ln = dyn_cast<LayerNormOp>(op)) {
    Operation *g = makeOp(
        LayerNormGradOp::getOperationName(),
        {dy, ln.getInput(), ln.getScale(), ln.getMean(), ln.getInvStdDev()},
        {attr("axis", ln.getAxisAttr())}, 3);
    if (!g)
      return Rule::Refused;
    accumulate(ln.getInput(), g->getResult(0));
    accumulate(ln.getScale(), g->getResult(1));
    if (Value bias = ln.getBias())
      accumulate(bias, g->getResult(2));
  } else if (isa<SoftmaxOp, LogSoftmaxOp>(op)) {
    accumulate(op->getOperand(0),
               make(SoftmaxGradOp::getOperationName(), {dy, op->getResult(0)},
                    {attr("axis", op->getAttr("axis")),
                     attr("log", builder.getBoolAttr(isa<LogSoftmaxOp>(op)))}));
  } else {
    return Rule::NotMine;
  }
  return Rule::Done;
}

/// Dropout, Cast and the ops that move elements without arithmetic, and the
/// reductions.
Differentiator::Rule Differentiator::shapeRule(Operation *op, Value dy) {
  if (auto dropout = dyn_cast<DropoutOp>(op)) {
    if (!dy)
      return Rule::Done;
    accumulate(op->getOperand(0),
               dropout.getTrainingMode()
                   ? make(DropoutGradOp::getOperationName(),
                          {dy, dropout.getMask()},
                          {attr("ratio", dropout.getRatioAttr())})
                   : dy);
  } else if (isa<CastOp>(op)) {
    if (cast<RankedTensorType>(op->getOperand(0).getType())
            .getElementType()
            .isF32())
      accumulate(op->getOperand(0), dy);
  } else if (isa<ReshapeOp, FlattenOp, SqueezeOp, UnsqueezeOp>(op)) {
    accumulate(op->getOperand(0), reshape(dy, shapeOf(op->getOperand(0))));
  } else if (auto transpose = dyn_cast<TransposeOp>(op)) {
    ArrayRef<int64_t> perm = transpose.getPerm();
    SmallVector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
      inverse[perm[i]] = i;
    accumulate(op->getOperand(0), make(TransposeOp::getOperationName(), {dy},
                                       {attr("perm", i64s(inverse))}));
  } else if (auto concat = dyn_cast<ConcatOp>(op)) {
    int64_t rank = shapeOf(dy).size();
    int64_t axis = concat.getAxisAttr().getInt();
    if (axis < 0)
      axis += rank;
    int64_t offset = 0;
    for (Value input : concat.getInputs()) {
      int64_t size = shapeOf(input)[axis];
      if (needsGrad.contains(input))
        accumulate(input, make(SliceOp::getOperationName(), {dy},
                               {attr("starts", i64s({offset})),
                                attr("ends", i64s({offset + size})),
                                attr("axes", i64s({axis})),
                                attr("steps", i64s({1}))}));
      offset += size;
    }
  } else if (auto split = dyn_cast<SplitOp>(op)) {
    SmallVector<Value> pieces;
    for (Value result : split.getOutputs()) {
      Value g = grads.lookup(result);
      if (!g) {
        auto type = cast<RankedTensorType>(result.getType());
        g = builder.create<ConstantOp>(
            op->getLoc(),
            cast<ElementsAttr>(DenseElementsAttr::get(type, 0.0f)));
      }
      pieces.push_back(g);
    }
    accumulate(op->getOperand(0), make(ConcatOp::getOperationName(), pieces,
                                       {attr("axis", split.getAxisAttr())}));
  } else if (auto slice = dyn_cast<SliceOp>(op)) {
    accumulate(op->getOperand(0),
               make(SliceGradOp::getOperationName(), {dy},
                    {attr("input_shape", i64s(shapeOf(op->getOperand(0)))),
                     attr("starts", slice.getStartsAttr()),
                     attr("ends", slice.getEndsAttr()),
                     attr("axes", slice.getAxesAttr()),
                     attr("steps", slice.getStepsAttr())}));
  } else if (isa<ExpandOp>(op)) {
    accumulate(op->getOperand(0), reduceTo(dy, op->getOperand(0).getType()));
  } else if (auto gather = dyn_cast<GatherOp>(op)) {
    accumulate(gather.getData(),
               make(GatherGradOp::getOperationName(), {dy, gather.getIndices()},
                    {attr("data_shape", i64s(shapeOf(gather.getData()))),
                     attr("axis", gather.getAxisAttr())}));
  } else if (isa<ReduceMeanOp, ReduceSumOp>(op)) {
    ArrayRef<int64_t> shape = shapeOf(op->getOperand(0));
    auto axesAttr = op->getAttrOfType<DenseI64ArrayAttr>("axes");
    SmallVector<int64_t> kept(shape);
    int64_t count = 1;
    for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
      if (axesAttr.empty() || llvm::is_contained(axesAttr.asArrayRef(), d) ||
          llvm::is_contained(axesAttr.asArrayRef(),
                             d - (int64_t)shape.size())) {
        kept[d] = 1;
        count *= shape[d];
      }
    Value spread = make(ExpandOp::getOperationName(), {reshape(dy, kept)},
                        {attr("shape", i64s(shape))});
    accumulate(op->getOperand(0),
               isa<ReduceMeanOp>(op) ? scale(spread, 1.0f / count) : spread);
  } else {
    return Rule::NotMine;
  }
  return Rule::Done;
}

/// The two classification losses.
Differentiator::Rule Differentiator::lossRule(Operation *op, Value dy) {
  if (auto sce = dyn_cast<SoftmaxCrossEntropyLossOp>(op)) {
    SmallVector<Value> operands{dy, sce.getLogProb(), sce.getLabels()};
    if (Value weights = sce.getWeights())
      operands.push_back(weights);
    SmallVector<NamedAttribute> attrs{
        attr("reduction", sce.getReductionAttr())};
    if (auto ignore = sce.getIgnoreIndexAttr())
      attrs.push_back(attr("ignore_index", ignore));
    accumulate(sce.getScores(),
               make(SoftmaxCrossEntropyLossGradOp::getOperationName(), operands,
                    attrs));
  } else if (auto nll = dyn_cast<NllLossOp>(op)) {
    SmallVector<Value> operands{dy, nll.getTarget()};
    if (Value weight = nll.getWeight())
      operands.push_back(weight);
    SmallVector<NamedAttribute> attrs{
        attr("reduction", nll.getReductionAttr()),
        attr("input_shape", i64s(shapeOf(nll.getInput())))};
    if (auto ignore = nll.getIgnoreIndexAttr())
      attrs.push_back(attr("ignore_index", ignore));
    accumulate(nll.getInput(),
               make(NllLossGradOp::getOperationName(), operands, attrs));
  } else {
    return Rule::NotMine;
  }
  return Rule::Done;
}

LogicalResult Differentiator::run(Value loss, const llvm::StringSet<> &frozen,
                                  SmallVectorImpl<ParamOp> &trainable) {
  Block &body = func.getBody().front();
  SmallVector<ParamOp> candidates;
  for (Operation &op : body.without_terminator()) {
    if (auto param = dyn_cast<ParamOp>(op)) {
      if (!param.getBuffer() && !frozen.contains(param.getName()) &&
          param.getType().getElementType().isF32()) {
        candidates.push_back(param);
        needsGrad.insert(param.getResult());
      }
      continue;
    }
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return needsGrad.contains(v); }))
      for (Value result : op.getResults())
        if (cast<RankedTensorType>(result.getType()).getElementType().isF32())
          needsGrad.insert(result);
  }
  if (!needsGrad.contains(loss))
    return func.emitError("the loss depends on no trainable parameter");

  builder.setInsertionPoint(body.getTerminator());
  grads[loss] = builder.create<ConstantOp>(
      func.getLoc(), cast<ElementsAttr>(DenseElementsAttr::get(
                         cast<ShapedType>(loss.getType()), 1.0f)));
  SmallVector<Operation *> forward;
  for (Operation &op : body.without_terminator())
    forward.push_back(&op);
  Operation *terminator = body.getTerminator();
  auto stageAttr = [](Operation *op) {
    return op ? op->getAttrOfType<IntegerAttr>("cdp.stage") : nullptr;
  };
  // Every op a rule creates belongs to the stage of the op it differentiates
  // and to the backward phase (when the forward is partitioned).
  auto tag = [&](Operation *after, IntegerAttr stage) {
    if (!stage)
      return;
    for (Operation *op = after->getNextNode(); op != terminator;
         op = op->getNextNode()) {
      if (isa<ConstantOp>(op) || op->hasAttr("cdp.stage"))
        continue;
      op->setAttr("cdp.stage", stage);
      op->setAttr("cdp.phase", builder.getStringAttr("backward"));
    }
  };
  for (Operation *op : llvm::reverse(forward)) {
    if (isa<ParamOp, ConstantOp>(op))
      continue;
    if (llvm::none_of(op->getResults(),
                      [&](Value v) { return grads.count(v); }))
      continue;
    Operation *marker = terminator->getPrevNode();
    if (failed(differentiate(op)))
      return failure();
    tag(marker, stageAttr(op));
  }
  for (ParamOp param : candidates)
    if (Value grad = grads.lookup(param.getResult())) {
      auto gradient =
          builder.create<GradientOp>(param.getLoc(), param.getName(), grad);
      // A parameter belongs to the stage of its first user.
      for (Operation *user : forward)
        if (llvm::is_contained(user->getOperands(), param.getResult()))
          if (IntegerAttr stage = stageAttr(user)) {
            gradient->setAttr("cdp.stage", stage);
            gradient->setAttr("cdp.phase", builder.getStringAttr("backward"));
            break;
          }
      trainable.push_back(param);
    }
  return success();
}

struct AutodiffPass : public cdp::impl::AutodiffBase<AutodiffPass> {
  using AutodiffBase::AutodiffBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation().lookupSymbol<func::FuncOp>("main");
    auto lossIndex =
        func ? func->getAttrOfType<IntegerAttr>("cdp.loss_index") : nullptr;
    if (!lossIndex) {
      getOperation().emitError("@main has no loss; run cdp-attach-loss first");
      return signalPassFailure();
    }
    if (bnRunningVar != "unbiased" && bnRunningVar != "biased") {
      func.emitError("bn-running-var must be unbiased or biased, got '")
          << bnRunningVar << "'";
      return signalPassFailure();
    }
    llvm::StringSet<> frozen;
    llvm::StringSet<> params;
    func.walk([&](ParamOp param) { params.insert(param.getName()); });
    for (const std::string &name : freeze) {
      if (!params.contains(name)) {
        func.emitError("--freeze names '")
            << name << "', which is not a parameter";
        return signalPassFailure();
      }
      frozen.insert(name);
    }
    auto returnOp =
        cast<func::ReturnOp>(func.getBody().front().getTerminator());
    Value loss = returnOp.getOperand(lossIndex.getInt());
    OpBuilder builder(func.getContext());
    Differentiator differentiator(func, builder);
    SmallVector<ParamOp> trainable;
    if (failed(differentiator.run(loss, frozen, trainable)))
      return signalPassFailure();

    // Training-mode BatchNorm writes its running statistics back.
    builder.setInsertionPoint(returnOp);
    func.walk([&](BatchNormOp bn) {
      if (!bn.getTrainingMode())
        return;
      bn.setUnbiasedRunningVar(bnRunningVar == "unbiased");
      for (auto [stat, updated] : {std::pair{bn.getMean(), bn.getRunningMean()},
                                   std::pair{bn.getVar(), bn.getRunningVar()}})
        if (auto buffer = stat.getDefiningOp<ParamOp>())
          builder.create<AssignOp>(bn.getLoc(), buffer.getName(), stat,
                                   updated);
    });
  }
};

} // namespace
