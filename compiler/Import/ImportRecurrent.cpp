//===- ImportRecurrent.cpp - ONNX LSTM and GRU, unrolled
//-------------------===//
//
// A recurrent layer over a static sequence length becomes its time steps:
// per step one GEMM of the input and one of the hidden state (the weights
// shared by every step, so each is one parameter whose gradient sums over
// the steps), the gates, and the state update, with torch's formulas
// (aten/src/ATen/native/RNN.cpp: LSTM's `c' = f c + i g, h' = o tanh(c')`,
// GRU's `h' = n + z (h - n)`). Every op used has its kernels and gradient
// already, so training through a recurrent layer needs nothing new. ONNX's
// gate orders are LSTM's i, o, f, c and GRU's z, r, h.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "cdp/Dialect/Graph/GraphOps.h"

using namespace mlir;

namespace cdp::import {

namespace {

/// The layer's sizes, read from X, W and the attributes.
struct RecurrentShape {
  int64_t steps = 0, batch = 0, input = 0, hidden = 0, directions = 1;
  bool batchFirst = false; ///< layout 1: X (batch, steps, input)
};

class Unroller {
public:
  Unroller(Importer &im, int64_t gates) : im(im), gates(gates) {}

  RecurrentShape readShape();
  /// The three attributes both ops share; `reverse` for the direction.
  std::vector<bool> directions();
  /// Weights of direction `d`: W (gates·H, I), R (gates·H, H) and the two
  /// bias halves (gates·H) or null.
  void weightsOf(int64_t d, Value &w, Value &r, Value &wb, Value &rb);
  /// The initial state `index` (initial_h 5, initial_c 6) of direction d.
  Value initial(int index, int64_t d);
  /// Input step t as (batch, input).
  Value inputAt(int64_t t);
  /// `x w^T + b`, (batch, gates·H).
  Value linear(Value x, Value w, Value b);
  std::vector<Value> splitGates(Value g);
  Value op(StringRef name, ArrayRef<Value> operands,
           ArrayRef<NamedAttribute> attrs = {});
  Value reshape(Value x, ArrayRef<int64_t> shape);
  Value slice(Value x, int64_t axis, int64_t start, int64_t end);
  /// Y (steps, D, batch, H) or (batch, steps, D, H), Y_h and Y_c.
  void bindOutputs(const std::vector<std::vector<Value>> &states,
                   const std::vector<Value> &lastH,
                   const std::vector<Value> &lastC);

  Importer &im;
  int64_t gates;
  RecurrentShape shape;
};

RecurrentShape Unroller::readShape() {
  im.checkAttributes({"hidden_size", "direction", "layout", "activations",
                      "activation_alpha", "activation_beta", "clip",
                      "input_forget", "linear_before_reset"});
  if (im.attr("clip") || im.intAttr("input_forget", 0) != 0 ||
      im.attr("activation_alpha") || im.attr("activation_beta"))
    raise(im.where() + ": clip, input_forget and activation parameters are "
                       "not supported (torch exports none)");
  if (im.hasInput(4))
    raise(im.where() + ": sequence_lens is not supported (every sequence has "
                       "the static length)");
  if (im.node->op_type() == "LSTM" && im.hasInput(7))
    raise(im.where() + ": peephole weights (P) are not supported");
  RecurrentShape s;
  RankedTensorType x = im.typeOf(im.input(0)), w = im.typeOf(im.input(1));
  if (x.getRank() != 3 || w.getRank() != 3)
    raise(im.where() + ": X and W must have rank 3");
  s.batchFirst = im.intAttr("layout", 0) == 1;
  s.steps = x.getDimSize(s.batchFirst ? 1 : 0);
  s.batch = x.getDimSize(s.batchFirst ? 0 : 1);
  s.input = x.getDimSize(2);
  s.directions = w.getDimSize(0);
  s.hidden = im.intAttr("hidden_size", w.getDimSize(1) / gates);
  if (w.getDimSize(1) != gates * s.hidden || w.getDimSize(2) != s.input)
    raise(im.where() + ": W has shape " + shapeText(w.getShape()) +
          " for hidden_size " + Twine(s.hidden) + " and input size " +
          Twine(s.input));
  if (s.steps < 1)
    raise(im.where() + ": the sequence is empty");
  return s;
}

std::vector<bool> Unroller::directions() {
  std::string direction = im.stringAttr("direction", "forward");
  std::vector<bool> reverse;
  if (direction == "forward" || direction == "bidirectional")
    reverse.push_back(false);
  if (direction == "reverse" || direction == "bidirectional")
    reverse.push_back(true);
  if (reverse.empty())
    raise(im.where() + ": direction '" + direction + "' is not supported");
  if (static_cast<int64_t>(reverse.size()) != shape.directions)
    raise(im.where() + ": W has " + Twine(shape.directions) +
          " directions for direction '" + direction + "'");
  // The default activations (sigmoid, then tanh) are all cdp runs.
  std::vector<std::string> expected;
  for (size_t d = 0; d < reverse.size(); ++d) {
    expected.push_back("Sigmoid");
    expected.push_back("Tanh");
    if (gates == 4)
      expected.push_back("Tanh");
  }
  if (const onnx::AttributeProto *a = im.attr("activations")) {
    std::vector<std::string> given(a->strings().begin(), a->strings().end());
    if (given != expected)
      raise(im.where() + ": activations other than the defaults (sigmoid, "
                         "tanh) are not supported");
  }
  return reverse;
}

Value Unroller::op(StringRef name, ArrayRef<Value> operands,
                   ArrayRef<NamedAttribute> attrs) {
  return im.create(name, operands, attrs, 1)->getResult(0);
}

Value Unroller::reshape(Value x, ArrayRef<int64_t> to) {
  return op(ReshapeOp::getOperationName(), {x},
            {im.named("shape", im.i64s(to))});
}

Value Unroller::slice(Value x, int64_t axis, int64_t start, int64_t end) {
  return op(
      SliceOp::getOperationName(), {x},
      {im.named("starts", im.i64s({start})), im.named("ends", im.i64s({end})),
       im.named("axes", im.i64s({axis})), im.named("steps", im.i64s({1}))});
}

void Unroller::weightsOf(int64_t d, Value &w, Value &r, Value &wb, Value &rb) {
  int64_t rows = gates * shape.hidden;
  w = reshape(slice(im.input(1), 0, d, d + 1), {rows, shape.input});
  r = reshape(slice(im.input(2), 0, d, d + 1), {rows, shape.hidden});
  wb = rb = nullptr;
  if (!im.hasInput(3))
    return;
  Value b = reshape(slice(im.input(3), 0, d, d + 1), {2 * rows});
  wb = slice(b, 0, 0, rows);
  rb = slice(b, 0, rows, 2 * rows);
}

Value Unroller::initial(int index, int64_t d) {
  if (im.hasInput(index))
    return reshape(slice(im.input(index), 0, d, d + 1),
                   {shape.batch, shape.hidden});
  auto zeros = RankedTensorType::get({shape.batch, shape.hidden},
                                     im.builder.getF32Type());
  return im.builder.create<ConstantOp>(
      NameLoc::get(im.builder.getStringAttr(im.where())),
      cast<ElementsAttr>(DenseElementsAttr::get(zeros, 0.0f)));
}

Value Unroller::inputAt(int64_t t) {
  return reshape(slice(im.input(0), shape.batchFirst ? 1 : 0, t, t + 1),
                 {shape.batch, shape.input});
}

Value Unroller::linear(Value x, Value w, Value b) {
  SmallVector<Value> operands{x, w};
  if (b)
    operands.push_back(b);
  return op(GemmOp::getOperationName(), operands,
            {im.named("trans_b", im.builder.getBoolAttr(true))});
}

std::vector<Value> Unroller::splitGates(Value g) {
  Operation *split = im.create(
      SplitOp::getOperationName(), {g},
      {im.named("axis", im.builder.getI64IntegerAttr(1)),
       im.named("split", im.i64s(SmallVector<int64_t>(gates, shape.hidden)))},
      gates);
  return std::vector<Value>(split->getResults().begin(),
                            split->getResults().end());
}

void Unroller::bindOutputs(const std::vector<std::vector<Value>> &states,
                           const std::vector<Value> &lastH,
                           const std::vector<Value> &lastC) {
  SmallVector<Value> perStep;
  for (int64_t t = 0; t < shape.steps; ++t) {
    SmallVector<Value> perDirection;
    for (const std::vector<Value> &direction : states)
      perDirection.push_back(
          reshape(direction[t], {1, 1, shape.batch, shape.hidden}));
    perStep.push_back(
        perDirection.size() == 1
            ? perDirection[0]
            : op(ConcatOp::getOperationName(), perDirection,
                 {im.named("axis", im.builder.getI64IntegerAttr(1))}));
  }
  if (im.node->output_size() > 0 && !im.node->output(0).empty()) {
    Value y = perStep.size() == 1
                  ? perStep[0]
                  : op(ConcatOp::getOperationName(), perStep,
                       {im.named("axis", im.builder.getI64IntegerAttr(0))});
    if (shape.batchFirst) // (steps, D, batch, H) -> (batch, steps, D, H)
      y = op(TransposeOp::getOperationName(), {y},
             {im.named("perm", im.i64s({2, 0, 1, 3}))});
    im.bindValue(0, y);
  }
  auto stack = [&](const std::vector<Value> &last) {
    SmallVector<Value> parts;
    for (Value h : last)
      parts.push_back(reshape(h, {1, shape.batch, shape.hidden}));
    Value all = parts.size() == 1
                    ? parts[0]
                    : op(ConcatOp::getOperationName(), parts,
                         {im.named("axis", im.builder.getI64IntegerAttr(0))});
    if (shape.batchFirst)
      all = op(TransposeOp::getOperationName(), {all},
               {im.named("perm", im.i64s({1, 0, 2}))});
    return all;
  };
  im.bindValue(1, stack(lastH));
  if (!lastC.empty())
    im.bindValue(2, stack(lastC));
}

} // namespace

/// ONNX LSTM: per step, gates = x W^T + Wb + h R^T + Rb split into i, o, f,
/// c; c' = sigmoid(f) c + sigmoid(i) tanh(c); h' = sigmoid(o) tanh(c').
void importLSTM(Importer &im) {
  Unroller u(im, 4);
  u.shape = u.readShape();
  std::vector<bool> reverse = u.directions();
  std::vector<std::vector<Value>> states(reverse.size());
  std::vector<Value> lastH, lastC;
  for (size_t d = 0; d < reverse.size(); ++d) {
    Value w, r, wb, rb;
    u.weightsOf(d, w, r, wb, rb);
    Value h = u.initial(5, d), c = u.initial(6, d);
    states[d].resize(u.shape.steps);
    for (int64_t k = 0; k < u.shape.steps; ++k) {
      int64_t t = reverse[d] ? u.shape.steps - 1 - k : k;
      Value g = u.op(AddOp::getOperationName(),
                     {u.linear(u.inputAt(t), w, wb), u.linear(h, r, rb)});
      std::vector<Value> gate = u.splitGates(g);
      Value in = u.op(SigmoidOp::getOperationName(), {gate[0]});
      Value out = u.op(SigmoidOp::getOperationName(), {gate[1]});
      Value forget = u.op(SigmoidOp::getOperationName(), {gate[2]});
      Value cell = u.op(TanhOp::getOperationName(), {gate[3]});
      c = u.op(AddOp::getOperationName(),
               {u.op(MulOp::getOperationName(), {forget, c}),
                u.op(MulOp::getOperationName(), {in, cell})});
      h = u.op(MulOp::getOperationName(),
               {out, u.op(TanhOp::getOperationName(), {c})});
      states[d][t] = h;
    }
    lastH.push_back(h);
    lastC.push_back(c);
  }
  u.bindOutputs(states, lastH, lastC);
}

/// ONNX GRU: per step, x W^T + Wb split into z, r, n parts and h R^T + Rb
/// likewise; z = sigmoid(xz + hz), r = sigmoid(xr + hr), n = tanh(xn + r
/// (hn)) with linear_before_reset (torch's), else tanh(xn + (r h) Rn^T +
/// Rbn); h' = n + z (h - n).
void importGRU(Importer &im) {
  Unroller u(im, 3);
  u.shape = u.readShape();
  std::vector<bool> reverse = u.directions();
  bool beforeReset = im.intAttr("linear_before_reset", 0) != 0;
  std::vector<std::vector<Value>> states(reverse.size());
  std::vector<Value> lastH;
  for (size_t d = 0; d < reverse.size(); ++d) {
    Value w, r, wb, rb;
    u.weightsOf(d, w, r, wb, rb);
    int64_t H = u.shape.hidden;
    Value h = u.initial(5, d);
    states[d].resize(u.shape.steps);
    for (int64_t k = 0; k < u.shape.steps; ++k) {
      int64_t t = reverse[d] ? u.shape.steps - 1 - k : k;
      std::vector<Value> x = u.splitGates(u.linear(u.inputAt(t), w, wb));
      Value rzr = u.slice(r, 0, 0, 2 * H);
      Value bzr = rb ? u.slice(rb, 0, 0, 2 * H) : Value();
      Value hzr = u.linear(h, rzr, bzr);
      Value z = u.op(
          SigmoidOp::getOperationName(),
          {u.op(AddOp::getOperationName(), {x[0], u.slice(hzr, 1, 0, H)})});
      Value reset = u.op(
          SigmoidOp::getOperationName(),
          {u.op(AddOp::getOperationName(), {x[1], u.slice(hzr, 1, H, 2 * H)})});
      Value rn = u.slice(r, 0, 2 * H, 3 * H);
      Value bn = rb ? u.slice(rb, 0, 2 * H, 3 * H) : Value();
      Value hn =
          beforeReset
              ? u.op(MulOp::getOperationName(), {reset, u.linear(h, rn, bn)})
              : u.linear(u.op(MulOp::getOperationName(), {reset, h}), rn, bn);
      Value n = u.op(TanhOp::getOperationName(),
                     {u.op(AddOp::getOperationName(), {x[2], hn})});
      h = u.op(AddOp::getOperationName(),
               {n, u.op(MulOp::getOperationName(),
                        {z, u.op(SubOp::getOperationName(), {h, n})})});
      states[d][t] = h;
    }
    lastH.push_back(h);
  }
  u.bindOutputs(states, lastH, {});
}

} // namespace cdp::import
