//===- Signatures.cpp - what each op's kernels may read and write ---------===//
//
// One rule per op, written from what the kernels index: a rule checks the
// instruction's arity first (kernels read inputs[k] without looking), then
// types and the shape relations the loops assume, with overflow-safe
// arithmetic where it multiplies dimensions. See Signatures.h.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Signatures.h"

#include "AttentionGeometry.h"
#include "NarrowOperands.h"
#include "SignatureCheck.h"

#include "cdp/Plan/Checked.h"
#include "cdp/Runtime/Communicator.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

namespace cdp::runtime {

namespace {

using namespace signatures;

void unary(const Check &c) {
  c.declared();
  c.allF32();
  c.same(c.in(0), c.out(0));
}

void binary(const Check &c) {
  c.declared();
  const TensorView &y = c.out(0);
  c.require(y.dtype == plan::F32 || y.dtype == plan::I64,
            "the result is neither f32 nor i64");
  for (int k : {0, 1}) {
    c.sameType(c.in(k), y);
    c.broadcasts(c.in(k), y);
  }
}

/// Input k (k = 0, 1) of a gemm, as (rows, columns) after transposition.
/// A product's types: float32, except operands A and B, which may hold
/// the 2-byte values its narrow_operands mark names.
/// The 2-byte type narrow_operands names, or F32 without it.
plan::DType narrowDTypeOf(const Check &c) {
  std::string format = c.text("narrow_operands", "");
  return format == "bf16"  ? plan::BF16
         : format == "f16" ? plan::F16
                           : plan::F32;
}

/// A product's operands in float32 or narrow_operands' format; its result
/// in float32, or in 2 bytes under round_result and narrow_operands of
/// that format (cdp-narrow-results).
void productTypes(const Check &c) {
  plan::DType narrow = narrowDTypeOf(c);
  for (const TensorView *v : {&c.in(0), &c.in(1)})
    if (v->dtype != narrow)
      c.type(*v, plan::F32);
  if (const TensorView *bias = c.optional(2))
    c.type(*bias, plan::F32);
  const TensorView &y = c.out(0);
  if (!storedInTwoBytes(y)) {
    c.type(y, plan::F32);
    return;
  }
  std::string rounding = c.text("round_result", "");
  c.require(y.dtype == narrow &&
                rounding == (y.dtype == plan::BF16 ? "bf16" : "f16"),
            "its 2-byte result needs round_result and narrow_operands in "
            "that format");
}

void gemm(const Check &c) {
  c.declared();
  productTypes(c);
  const TensorView &a = c.in(0), &b = c.in(1), &y = c.out(0);
  for (const TensorView *v : {&a, &b, &y})
    c.rank(*v, 2, 2);
  bool transA = c.attribute("trans_a", 0, 0, 1),
       transB = c.attribute("trans_b", 0, 0, 1);
  int64_t m = transA ? a.shape[1] : a.shape[0],
          k = transA ? a.shape[0] : a.shape[1],
          kb = transB ? b.shape[1] : b.shape[0],
          n = transB ? b.shape[0] : b.shape[1];
  c.require(k == kb && m == y.shape[0] && n == y.shape[1],
            "operands " + shapeText(a.shape) + " and " + shapeText(b.shape) +
                " do not multiply into " + shapeText(y.shape));
  if (const TensorView *bias = c.optional(2))
    c.broadcasts(*bias, y);
  std::string activation = c.text("activation", "");
  c.require(activation.empty() || activation == "relu",
            "activation \"" + activation + "\" is not \"relu\"");
  c.require(activation.empty() || (c.text("round_result", "").empty() &&
                                   c.text("narrow_operands", "").empty()),
            "activation is for float32 products (no round_result or "
            "narrow_operands)");
}

void matmul(const Check &c) {
  c.declared();
  productTypes(c);
  std::vector<int64_t> as = c.in(0).shape, bs = c.in(1).shape;
  c.require(!as.empty() && !bs.empty(), "matmul of a scalar");
  bool transA = c.attribute("trans_a", 0, 0, 1),
       transB = c.attribute("trans_b", 0, 0, 1);
  c.require((!transA || as.size() >= 2) && (!transB || bs.size() >= 2),
            "trans_a / trans_b on an operand of rank 1");
  if (transA)
    std::swap(as[as.size() - 2], as.back());
  if (transB)
    std::swap(bs[bs.size() - 2], bs.back());
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  c.require(bs[bs.size() - 2] == k, "operands " + shapeText(c.in(0).shape) +
                                        " and " + shapeText(c.in(1).shape) +
                                        " do not agree on the inner size");
  size_t batchA = as.size() - 2, batchB = bs.size() - 2;
  size_t rank = std::max(batchA, batchB);
  int64_t batch = 1;
  for (size_t d = 0; d < rank; ++d) {
    int64_t da = d < rank - batchA ? 1 : as[d - (rank - batchA)];
    int64_t db = d < rank - batchB ? 1 : bs[d - (rank - batchB)];
    c.require(da == db || da == 1 || db == 1,
              "batch dimensions do not broadcast");
    batch = saturatingMul(batch, std::max(da, db));
  }
  c.count(c.out(0), saturatingMul(saturatingMul(batch, m), n));
}

/// A 2-D convolution's (input, weight, output), whichever are in and out.
void convolution(const Check &c, const TensorView &x, const TensorView &w,
                 const TensorView &y) {
  c.allF32();
  for (const TensorView *v : {&x, &w, &y})
    c.rank(*v, 4, 4);
  std::string format = c.text("narrow_operands", "");
  c.require(format.empty() || format == "bf16" || format == "f16",
            "narrow_operands must be bf16 or f16, got '" + format + "'");
  int64_t group = c.attribute("group", 1, 1, std::max<int64_t>(x.shape[1], 1));
  std::vector<int64_t> pads = c.ints("pads", 4, 0, kMostTagField),
                       strides = c.ints("strides", 2, 1, kMostTagField),
                       dilations = c.ints("dilations", 2, 1, kMostTagField);
  c.require(x.shape[1] % group == 0 && w.shape[0] % group == 0 &&
                w.shape[1] * group == x.shape[1] && y.shape[0] == x.shape[0] &&
                y.shape[1] == w.shape[0],
            "input " + shapeText(x.shape) + ", weight " + shapeText(w.shape) +
                " and output " + shapeText(y.shape) + " do not fit group " +
                std::to_string(group));
  for (int d = 0; d < 2; ++d) {
    int64_t span = (w.shape[2 + d] - 1) * dilations[d] + 1;
    int64_t room = x.shape[2 + d] + pads[d] + pads[d + 2] - span;
    c.require(room >= 0 && room / strides[d] + 1 == y.shape[2 + d],
              "output " + shapeText(y.shape) + " is not what input " +
                  shapeText(x.shape) + " and weight " + shapeText(w.shape) +
                  " give with these pads and strides");
  }
}

/// A pooling window's (input, output) of 1 to 3 spatial dimensions.
void pooling(const Check &c, const TensorView &x, const TensorView &y) {
  c.rank(x, 3, 5);
  size_t spatial = static_cast<size_t>(x.rank() - 2);
  c.require(y.rank() == x.rank() && y.shape[0] == x.shape[0] &&
                y.shape[1] == x.shape[1],
            "input " + shapeText(x.shape) + " and output " +
                shapeText(y.shape) + " differ in batch or channels");
  c.ints("kernel_shape", spatial, 1, kMostTagField);
  c.ints("pads", 2 * spatial, 0, kMostTagField);
  c.ints("strides", spatial, 1, kMostTagField);
  if (c.has("dilations"))
    c.ints("dilations", spatial, 1, kMostTagField);
}

void batchNorm(const Check &c) {
  c.declared();
  c.allF32();
  const TensorView &x = c.in(0);
  c.rank(x, 2, 8);
  c.same(x, c.out(0));
  for (size_t k = 1; k < 5; ++k)
    c.count(c.in(k), x.shape[1]);
  for (size_t k = 1; k < 3; ++k)
    c.count(c.out(k), x.shape[1]);
  std::string activation = c.text("activation", "");
  c.require(activation.empty() || activation == "relu",
            "activation \"" + activation + "\" is not \"relu\"");
}

void batchNormGrad(const Check &c) {
  c.declared();
  c.allF32();
  const TensorView &x = c.in(1);
  c.rank(x, 2, 8);
  c.same(x, c.in(0));
  c.same(x, c.out(0));
  for (size_t k = 2; k < 5; ++k)
    c.count(c.in(k), x.shape[1]);
  for (size_t k = 1; k < 3; ++k)
    c.count(c.out(k), x.shape[1]);
}

/// Layer normalization over the axes from `axis` on: the statistics have
/// one entry per row, scale and bias broadcast over a row.
void layerNormParts(const Check &c, const TensorView &x, const TensorView &mean,
                    const TensorView &inv, const TensorView &scale,
                    const TensorView *bias = nullptr) {
  int64_t axis = c.axis("axis", -1, x.rank());
  int64_t rows = product(x.shape, 0, axis);
  c.count(mean, rows);
  c.count(inv, rows);
  TensorView row;
  row.shape.assign(x.shape.begin() + axis, x.shape.end());
  c.broadcasts(scale, row);
  if (bias)
    c.broadcasts(*bias, row);
}

void narrowableOutput(const Check &c, const KernelArgs &args);

void layerNorm(const Check &c, const KernelArgs &args) {
  c.declared();
  for (const TensorView &v : args.inputs)
    if (v.present())
      c.type(v, plan::F32);
  narrowableOutput(c, args); // rounded under round_result, maybe 2 bytes
  c.type(c.out(1), plan::F32);
  c.type(c.out(2), plan::F32);
  const TensorView &x = c.in(0);
  c.same(x, c.out(0));
  layerNormParts(c, x, c.out(1), c.out(2), c.in(1), c.optional(2));
}

void widenedAsRead(const Check &c, const TensorView &v);

void layerNormGrad(const Check &c) {
  c.declared();
  widenedAsRead(c, c.in(0)); // the next product's rounded input gradient
  for (int k : {1, 2, 3, 4})
    c.type(c.in(k), plan::F32);
  for (int k : {0, 1, 2})
    c.type(c.out(k), plan::F32);
  const TensorView &x = c.in(1);
  c.same(x, c.in(0));
  c.same(x, c.out(0));
  layerNormParts(c, x, c.in(3), c.in(4), c.in(2));
  c.same(c.in(2), c.out(1));
  c.same(c.in(2), c.out(2));
  if (const TensorView *addend = c.optional(5)) { // a gradient sum fused
    c.type(*addend, plan::F32);
    c.same(*addend, x);
  }
}

/// A class loss's scores (N, C, d...) against labels (N, d...) and weights.
void classLoss(const Check &c, const TensorView &scores,
               const TensorView &labels, const TensorView *weights,
               bool classesLast = false) {
  c.rank(scores, 2, 8);
  c.type(labels, plan::I64);
  size_t classAxis = classesLast ? scores.shape.size() - 1 : 1;
  int64_t batch = scores.shape[0],
          spatial = classesLast ? product(scores.shape, 1, classAxis)
                                : product(scores.shape, 2);
  c.count(labels, saturatingMul(batch, spatial));
  if (weights)
    c.count(*weights, scores.shape[classAxis]);
}

/// An f32 result, or one stored in the 2-byte format its round_result
/// names (cdp-narrow-results).
void narrowableOutput(const Check &c, const KernelArgs &args) {
  const TensorView &out = c.out(0);
  std::string rounding = args.s("round_result", "");
  if (storedInTwoBytes(out))
    c.require(rounding == (out.dtype == plan::BF16 ? "bf16" : "f16"),
              "its 2-byte result needs round_result in that format");
  else
    c.type(out, plan::F32);
}

/// An operand whose kernels widen 2-byte values as they read them: float32,
/// or bf16 or f16 (the backward's packed copy, a result cdp-narrow-results
/// stores so).
void widenedAsRead(const Check &c, const TensorView &v) {
  if (!storedInTwoBytes(v))
    c.type(v, plan::F32);
}

/// widenedAsRead for an op that reads 2-byte values only under a
/// round_result of their format (autocast's rounding around it).
void widenedUnderRounding(const Check &c, const KernelArgs &args,
                          const TensorView &v) {
  widenedAsRead(c, v);
  if (storedInTwoBytes(v))
    c.require(args.s("round_result", "") ==
                  (v.dtype == plan::BF16 ? "bf16" : "f16"),
              "a 2-byte operand needs round_result in its format");
}

/// f32 inputs; an f32 result, or one stored in the 2-byte format its
/// round_result names (cdp-narrow-results).
void narrowableResult(const Check &c, const KernelArgs &args) {
  for (const TensorView &v : args.inputs)
    if (v.present())
      c.type(v, plan::F32);
  narrowableOutput(c, args);
}

/// An attention's (or its gradient's) tensors: a, b and v from input
/// `first` in float32 or the 2-byte format narrow_operands names, and so
/// the gradient's incoming gradient and its gradients of a, b and v, and
/// the forward's result where round_result names that format too
/// (cdp-narrow-results); the rest float32.
void attentionTypes(const Check &c, const KernelArgs &args, size_t first) {
  plan::DType narrow = narrowDTypeOf(c);
  bool backward = first == 1;
  // a, b, v, and the backward's incoming gradient (input 0 before them).
  auto operand = [&](size_t i) {
    return (i >= first && i < first + 3) || (backward && i == 0);
  };
  for (size_t i = 0; i < args.inputs.size(); ++i)
    if (const TensorView *v = c.optional(i))
      if (!operand(i) || v->dtype != narrow)
        c.type(*v, plan::F32);
  // The forward's result in 2 bytes needs round_result of the format its
  // products multiply in (they write it).
  if (!backward && storedInTwoBytes(c.out(0)))
    c.require(c.out(0).dtype == narrow,
              "its 2-byte result needs narrow_operands in that format");
  if (!backward)
    narrowableOutput(c, args);
  for (size_t i = backward ? 0 : 1; i < args.outputs.size(); ++i)
    if (!backward || i >= 3 || c.out(i).dtype != narrow)
      c.type(c.out(i), plan::F32);
}

/// cdp.attention's operands: a (..., M, K), b (..., K, N), v (..., N, D)
/// with one batch, a bias that broadcasts to the scores (..., M, N); the
/// result (..., M, D) and the stats (..., M, 2). Under layout "bshd" a, b,
/// v and the result are 4-D with the heads after the sequence (a
/// (B, M, H, K), b (B, N, H, K), v (B, N, H, D), the result (B, M, H, D)),
/// checked here in the logical order.
void attentionOperands(const Check &c, const KernelArgs &args,
                       const TensorView &storedA, const TensorView &storedB,
                       const TensorView &storedV, const TensorView *bias,
                       const TensorView &storedOutput,
                       const TensorView &stats) {
  std::string layout = args.s("layout", "bhsd");
  c.require(layout == "bhsd" || layout == "bshd",
            "layout '" + layout + "' is neither bhsd nor bshd");
  bool interleaved = isHeadsInterleaved(layout);
  if (interleaved)
    for (const TensorView *t : {&storedA, &storedB, &storedV, &storedOutput})
      c.rank(*t, 4, 4);
  auto logical = [&](const TensorView &t, bool keys) {
    TensorView view = t;
    view.shape = logicalShape(t.shape, interleaved, keys);
    return view;
  };
  const TensorView a = logical(storedA, false), b = logical(storedB, true),
                   v = logical(storedV, false),
                   output = logical(storedOutput, false);
  c.rank(a, 2, 8);
  c.require(b.rank() == a.rank() && v.rank() == a.rank(),
            "attention's operands have different ranks");
  auto batchEnd = [](const TensorView &t) { return t.shape.end() - 2; };
  c.require(std::equal(b.shape.begin(), batchEnd(b), v.shape.begin()) &&
                queryHeadsPerKeyHead(a.shape, b.shape) > 0,
            "attention's operands " + shapeText(a.shape) + ", " +
                shapeText(b.shape) + " and " + shapeText(v.shape) +
                " have different batch dimensions (the keys and v may "
                "have fewer heads, a divisor of the queries')");
  size_t r = a.shape.size();
  c.require(b.shape[r - 2] == a.shape[r - 1] &&
                v.shape[r - 2] == b.shape[r - 1],
            "attention's products do not chain");
  std::vector<int64_t> rows(a.shape.begin(), a.shape.end() - 1);
  TensorView scores = a;
  scores.shape = rows;
  scores.shape.push_back(b.shape[r - 1]);
  if (bias)
    c.broadcasts(*bias, scores);
  rows.push_back(v.shape[r - 1]);
  c.require(output.shape == rows, "attention's result is not (..., M, D)");
  rows.back() = 2;
  c.require(stats.shape == rows, "attention's stats are not (..., M, 2)");
}

void reduction(const Check &c, const KernelArgs &args, const TensorView &loss,
               int64_t elements) {
  std::string kind = args.s("reduction", "mean");
  c.require(kind == "mean" || kind == "sum" || kind == "none",
            "reduction '" + kind + "' is none of mean, sum and none");
  c.require(loss.numel() >= (kind == "none" ? elements : 1),
            "the loss tensor is smaller than the reduction writes");
}

/// An ONNX slice of `input` into `output`: every element read is inside.
void sliceWithin(const Check &c, const KernelArgs &args,
                 const TensorView &input, const TensorView &output) {
  c.sameType(input, output);
  c.require(input.rank() == output.rank(), "slice changes the rank");
  std::vector<int64_t> starts = args.ints("starts"), axes = args.ints("axes"),
                       steps = args.ints("steps");
  c.require(starts.size() == axes.size() && steps.size() == axes.size(),
            "attributes 'starts', 'axes' and 'steps' differ in length");
  std::vector<int64_t> start(input.rank(), 0), step(input.rank(), 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t axis = axes[i] < 0 ? axes[i] + input.rank() : axes[i];
    c.require(axis >= 0 && axis < input.rank(), "a slice axis is out of range");
    c.require(steps[i] != 0 && steps[i] > -kMostTagField * kMostTagField &&
                  steps[i] < kMostTagField * kMostTagField,
              "a slice step is 0 or too large");
    int64_t dim = input.shape[axis];
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    s = steps[i] > 0 ? std::clamp<int64_t>(s, 0, dim)
                     : std::clamp<int64_t>(s, 0, std::max<int64_t>(dim - 1, 0));
    start[axis] = s;
    step[axis] = steps[i];
  }
  for (int64_t d = 0; d < input.rank(); ++d) {
    if (output.shape[d] == 0)
      continue;
    int64_t last = start[d] + (output.shape[d] - 1) * step[d];
    c.require(last >= 0 && last < input.shape[d] && start[d] < input.shape[d],
              "the slice reads outside " + shapeText(input.shape));
  }
}

/// Gather along `axis` of `data`: the output holds outer × indices × inner.
void gatherSizes(const Check &c, const TensorView &data,
                 const TensorView &indices, const TensorView &result) {
  c.type(indices, plan::I64);
  int64_t axis = c.axis("axis", 0, data.rank());
  c.require(data.rank() > 0, "gather from a scalar");
  int64_t outer = product(data.shape, 0, axis),
          inner = product(data.shape, axis + 1);
  c.count(result, saturatingMul(saturatingMul(outer, indices.numel()), inner));
}

/// concat's inputs (split's outputs) along `axis` make `whole`.
void pieces(const Check &c, const std::vector<TensorView> &parts,
            const TensorView &whole) {
  int64_t axis = c.axis("axis", 0, whole.rank());
  int64_t total = 0;
  for (const TensorView &part : parts) {
    c.require(part.present(), "a piece is absent");
    c.sameType(part, whole);
    c.require(part.rank() == whole.rank(), "pieces differ in rank");
    for (int64_t d = 0; d < whole.rank(); ++d)
      c.require(d == axis || part.shape[d] == whole.shape[d],
                "piece " + shapeText(part.shape) + " does not fit " +
                    shapeText(whole.shape));
    total = saturatingAdd(total, part.shape[axis]);
  }
  c.require(whole.rank() > 0 && total == whole.shape[axis],
            "the pieces do not add up to " + shapeText(whole.shape));
}

void communication(const Check &c) {
  c.allF32();
  c.attribute("stage", 0, 0, 4095);
  c.attribute("cycle", 1, 0, kMostTagField);
  c.attribute("delay", 0, 0, kMostTagField);
  c.attribute("step_offset", 0, -kMostTagField, kMostTagField);
}

/// A device an instruction names besides its peer (CDP-ZeRO's `owner`
/// and `from`): absent (-1) or one of the run's.
void namedDevice(const Check &c, const KernelArgs &args, const char *name) {
  int64_t devices = args.communicator ? args.communicator->size() : 1;
  c.attribute(name, -1, -1, devices - 1);
}

/// A sharded update's operands: its inputs but the loss-scale buffer, last
/// where `loss_scale` is 1 (fp16), checked as three floats.
size_t lossScaledOperands(const Check &c, const KernelArgs &args) {
  if (c.attribute("loss_scale", 0, 0, 1) == 0)
    return args.inputs.size();
  c.require(args.inputs.size() >= 3, "needs its operands and the loss scale");
  c.count(c.in(args.inputs.size() - 1), 3);
  return args.inputs.size() - 1;
}

/// laysa's select and apply: `counts` gives each of the stage's P
/// parameters (inputs 0..P-1, their error feedback P..2P-1, all float32)
/// its selection size, at most its size (all of it: sent whole). Returns
/// the elements of the stage's values and of its indices.
std::pair<int64_t, int64_t> sparseStage(const Check &c,
                                        const KernelArgs &args) {
  std::vector<int64_t> counts = args.ints("counts");
  c.require(!counts.empty() && args.inputs.size() >= 2 * counts.size(),
            "needs each parameter and its error feedback");
  int64_t values = 0, indices = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    const TensorView &w = c.in(p), &state = c.in(counts.size() + p);
    c.type(w, plan::F32);
    c.type(state, plan::F32);
    c.count(state, w.numel());
    c.require(counts[p] >= 1 && counts[p] <= w.numel() &&
                  w.numel() <= std::numeric_limits<int32_t>::max(),
              "a selection count outside 1 to its parameter's size");
    values += counts[p];
    indices += counts[p] < w.numel() ? counts[p] : 0;
  }
  return {values, indices};
}

void pointToPoint(const Check &c, const KernelArgs &args) {
  int64_t devices = args.communicator ? args.communicator->size() : 1;
  c.attribute("peer", 0, 0, devices - 1);
  c.attribute("cycle", 1, 0, kMostTagField);
  c.attribute("micro_batch", 0, -kMostTagField, kMostTagField);
  c.attribute("micro_batches", 1, 1, kMostTagField);
  c.attribute("step_offset", 0, -kMostTagField, kMostTagField);
  c.attribute("value", 0, 0, (int64_t(1) << 24) - 1);
}

int64_t total(const std::vector<TensorView> &views) {
  int64_t n = 0;
  for (const TensorView &v : views)
    n = saturatingAdd(n, v.numel());
  return n;
}

Rules makeRules() {
  std::map<std::string, std::function<void(const Check &, const KernelArgs &)>>
      rules;
  auto plain = [](Rule rule) {
    return [rule](const Check &c, const KernelArgs &) { rule(c); };
  };
  for (const char *op : {"relu", "erf", "tanh", "sigmoid", "sqrt", "hard_swish",
                         "clip", "hard_sigmoid", "reciprocal", "sin", "cos",
                         "abs", "exp", "log", "silu"})
    rules[op] = plain(unary);
  // GELU may read the backward's 2-byte copy (cdp-read-narrow-operands)
  // and store its result in 2 bytes (cdp-narrow-results).
  rules["gelu"] = [](const Check &c, const KernelArgs &args) {
    c.declared();
    widenedAsRead(c, c.in(0));
    narrowableOutput(c, args);
    c.same(c.in(0), c.out(0));
  };
  for (const char *op : {"sub", "div", "pow", "min", "max"})
    rules[op] = plain(binary);
  // mul and add may read 2-byte operands (mul only under a round_result of
  // their format) and store a 2-byte result under their round_result
  // (cdp-narrow-results: GPT-2's scaling of q and k, its residual adds).
  for (bool mul : {true, false})
    rules[mul ? "mul" : "add"] = [mul](const Check &c, const KernelArgs &args) {
      if (!storedInTwoBytes(c.in(0)) && !storedInTwoBytes(c.in(1)) &&
          !storedInTwoBytes(c.out(0)))
        return binary(c);
      c.declared();
      for (int k : {0, 1}) {
        if (mul)
          widenedUnderRounding(c, args, c.in(k));
        else
          widenedAsRead(c, c.in(k));
        c.broadcasts(c.in(k), c.out(0));
      }
      narrowableOutput(c, args);
    };
  rules["round_to"] = plain([](const Check &c) {
    unary(c);
    std::string format = c.text("format", "");
    c.require(format == "bf16" || format == "f16",
              "format '" + format + "' is neither bf16 nor f16");
  });
  // Narrow values two to a float32 element (pack), and back (unpack).
  auto narrowPacking = [&plain](bool pack) {
    return plain([pack](const Check &c) {
      c.arity(1, 1, 1, 1);
      std::string format = c.text("format", "");
      c.require(format == "bf16" || format == "f16",
                "format '" + format + "' is neither bf16 nor f16");
      const TensorView &values = pack ? c.in(0) : c.out(0);
      const TensorView &narrow = pack ? c.out(0) : c.in(0);
      c.type(values, plan::F32);
      c.type(narrow, format == "bf16" ? plan::BF16 : plan::F16);
      c.same(values, narrow);
    });
  };
  rules["pack_narrow"] = narrowPacking(true);
  rules["unpack_narrow"] = narrowPacking(false);
  addSelectionRules(rules);
  rules["unary_grad"] = [](const Check &c, const KernelArgs &args) {
    c.declared();
    widenedUnderRounding(c, args, c.in(0));
    widenedAsRead(c, c.in(1));
    narrowableOutput(c, args);
    c.same(c.in(0), c.out(0));
    c.same(c.in(1), c.out(0));
  };
  rules["cast"] = plain([](const Check &c) {
    c.declared();
    for (const TensorView *v : {&c.in(0), &c.out(0)})
      c.require(v->dtype == plan::F32 || v->dtype == plan::I64 ||
                    v->dtype == plan::BOOL,
                "cast of a type other than f32, i64 or bool");
    c.count(c.out(0), c.in(0).numel());
  });
  rules["dropout"] = [](const Check &c, const KernelArgs &args) {
    c.arity(1, 3, 2, 2);
    widenedUnderRounding(c, args, c.in(0));
    narrowableOutput(c, args);
    c.type(c.out(1), plan::BOOL);
    c.same(c.in(0), c.out(0));
    c.count(c.out(1), c.in(0).numel());
  };
  rules["dropout_grad"] = [](const Check &c, const KernelArgs &args) {
    c.declared();
    c.type(c.in(0), plan::F32);
    c.type(c.in(1), plan::BOOL);
    narrowableOutput(c, args);
    c.same(c.in(0), c.out(0));
    c.count(c.in(1), c.out(0).numel());
  };
  rules["reduce_to"] = plain([](const Check &c) {
    c.declared();
    widenedAsRead(c, c.in(0));
    c.type(c.out(0), plan::F32);
    c.broadcasts(c.out(0), c.in(0));
  });
  rules["expand"] = plain([](const Check &c) {
    c.arity(1, 2, 1, 1);
    c.sameType(c.in(0), c.out(0));
    c.broadcasts(c.in(0), c.out(0));
  });
  rules["gemm"] = plain(gemm);
  rules["matmul"] = plain(matmul);
  rules["conv"] = plain([](const Check &c) {
    c.declared();
    convolution(c, c.in(0), c.in(1), c.out(0));
    if (const TensorView *bias = c.optional(2))
      c.count(*bias, c.in(1).shape[0]);
  });
  rules["conv_grad_input"] = plain([](const Check &c) {
    c.declared();
    convolution(c, c.out(0), c.in(1), c.in(0));
  });
  rules["conv_grad_weight"] = plain([](const Check &c) {
    c.declared();
    convolution(c, c.in(1), c.out(0), c.in(0));
  });
  rules["max_pool"] = rules["average_pool"] = plain([](const Check &c) {
    c.declared();
    c.allF32();
    pooling(c, c.in(0), c.out(0));
  });
  rules["max_pool_indices"] = plain([](const Check &c) {
    c.declared();
    c.type(c.in(0), plan::F32);
    c.type(c.out(0), plan::I64);
    pooling(c, c.in(0), c.out(0));
  });
  rules["max_pool_grad"] = plain([](const Check &c) {
    c.declared();
    c.allF32();
    c.same(c.in(1), c.out(0));
    pooling(c, c.in(1), c.in(0));
  });
  rules["average_pool_grad"] = plain([](const Check &c) {
    c.declared();
    c.allF32();
    pooling(c, c.out(0), c.in(0));
  });
  rules["global_average_pool"] = plain([](const Check &c) {
    c.declared();
    c.allF32();
    c.rank(c.in(0), 3, 8);
    c.count(c.out(0), c.in(0).shape[0] * c.in(0).shape[1]);
  });
  rules["batch_norm"] = plain(batchNorm);
  rules["batch_norm_grad"] = plain(batchNormGrad);
  rules["layer_norm"] = layerNorm;
  rules["layer_norm_grad"] = plain(layerNormGrad);
  rules["softmax"] = rules["log_softmax"] = plain([](const Check &c) {
    unary(c);
    c.axis("axis", -1, c.in(0).rank());
    if (const TensorView *bias = c.optional(1)) // softmax's, broadcast
      c.broadcasts(*bias, c.in(0));
  });
  rules["rotary"] = plain([](const Check &c) {
    unary(c);
    c.require(c.in(0).rank() > 0 && c.in(0).shape.back() % 2 == 0,
              "the input's last axis must have an even size");
    c.broadcasts(c.in(1), c.in(0));
    c.broadcasts(c.in(2), c.in(0));
  });
  rules["attention"] = [](const Check &c, const KernelArgs &args) {
    c.declared();
    attentionTypes(c, args, 0);
    attentionOperands(c, args, c.in(0), c.in(1), c.in(2), c.optional(3),
                      c.out(0), c.out(1));
  };
  rules["attention_grad"] = [](const Check &c, const KernelArgs &args) {
    c.declared();
    attentionTypes(c, args, 1);
    const TensorView *bias = c.optional(5);
    attentionOperands(c, args, c.in(1), c.in(2), c.in(3), bias, c.in(0),
                      c.in(4));
    // The keys' and v's gradients per query head (grouped-query attention).
    c.same(c.out(0), c.in(1));
    bool interleaved = isHeadsInterleaved(args.s("layout", ""));
    for (int k : {1, 2}) {
      TensorView gradient = c.in(k + 1);
      gradient.shape = perQueryHead<std::vector<int64_t>>(
          c.in(k + 1).shape, c.in(1).shape, interleaved);
      c.same(c.out(k), gradient);
    }
    bool biasGrad = args.outputs.size() > 3;
    c.require(!biasGrad || bias, "a bias gradient without a bias");
    if (biasGrad)
      c.same(c.out(3), *bias);
  };
  rules["softmax_grad"] = [](const Check &c, const KernelArgs &args) {
    c.declared();
    narrowableResult(c, args);
    c.same(c.in(0), c.out(0));
    c.same(c.in(1), c.out(0));
    c.axis("axis", -1, c.in(1).rank());
  };
  rules["softmax_cross_entropy_loss"] = [](const Check &c,
                                           const KernelArgs &args) {
    c.declared();
    const TensorView &scores = c.in(0), &labels = c.in(1);
    // The log-probabilities are optional (cdp-recompute-log-probabilities);
    // the scores may be 2-byte (cdp-narrow-results).
    const TensorView *logp = args.outputs.size() > 1 ? &c.out(1) : nullptr;
    for (const TensorView *v : {c.optional(2), &c.out(0), logp})
      if (v)
        c.type(*v, plan::F32);
    widenedAsRead(c, scores);
    classLoss(c, scores, labels, c.optional(2), args.i("classes_last", 0));
    if (logp)
      c.same(scores, *logp);
    reduction(c, args, c.out(0), labels.numel());
  };
  rules["softmax_cross_entropy_loss_grad"] = [](const Check &c,
                                                const KernelArgs &args) {
    c.declared();
    // The log-probabilities, or with from_scores the scores (2-byte ones
    // too, as the loss's): one shape.
    const TensorView &logp = c.in(1), &labels = c.in(2);
    for (const TensorView *v : {&c.in(0), c.optional(3)})
      if (v)
        c.type(*v, plan::F32);
    if (args.i("from_scores", 0) != 0)
      widenedAsRead(c, logp);
    else
      c.type(logp, plan::F32);
    narrowableOutput(c, args);
    classLoss(c, logp, labels, c.optional(3), args.i("classes_last", 0));
    c.same(logp, c.out(0));
    reduction(c, args, c.in(0), labels.numel());
  };
  rules["nll_loss"] = [](const Check &c, const KernelArgs &args) {
    c.declared();
    for (const TensorView *v : {&c.in(0), c.optional(2), &c.out(0)})
      if (v)
        c.type(*v, plan::F32);
    classLoss(c, c.in(0), c.in(1), c.optional(2));
    reduction(c, args, c.out(0), c.in(1).numel());
  };
  rules["nll_loss_grad"] = [](const Check &c, const KernelArgs &args) {
    c.declared();
    for (const TensorView *v : {&c.in(0), c.optional(2), &c.out(0)})
      if (v)
        c.type(*v, plan::F32);
    classLoss(c, c.out(0), c.in(1), c.optional(2));
    reduction(c, args, c.in(0), c.in(1).numel());
  };
  for (const char *op :
       {"reshape", "flatten", "squeeze", "unsqueeze", "identity"})
    rules[op] = plain([](const Check &c) {
      c.arity(1, 2, 1, 1);
      c.sameType(c.in(0), c.out(0));
      c.count(c.out(0), c.in(0).numel());
    });
  rules["transpose"] = [](const Check &c, const KernelArgs &args) {
    c.declared();
    const TensorView &x = c.in(0), &y = c.out(0);
    c.sameType(x, y);
    std::vector<int64_t> perm = args.ints("perm");
    c.require(static_cast<int64_t>(perm.size()) == x.rank() &&
                  y.rank() == x.rank(),
              "attribute 'perm' does not fit the tensors' rank");
    std::vector<bool> seen(perm.size(), false);
    for (size_t d = 0; d < perm.size(); ++d) {
      c.require(perm[d] >= 0 && perm[d] < x.rank() && !seen[perm[d]],
                "attribute 'perm' is not a permutation");
      seen[perm[d]] = true;
      c.require(y.shape[d] == x.shape[perm[d]],
                "output " + shapeText(y.shape) + " is not input " +
                    shapeText(x.shape) + " permuted");
    }
  };
  rules["concat"] = [](const Check &c, const KernelArgs &args) {
    c.arity(1, kMany, 1, 1);
    pieces(c, args.inputs, c.out(0));
  };
  rules["split"] = [](const Check &c, const KernelArgs &args) {
    c.arity(1, 2, 1, kMany);
    pieces(c, args.outputs, c.in(0));
  };
  rules["slice"] = [](const Check &c, const KernelArgs &args) {
    c.arity(1, 5, 1, 1);
    sliceWithin(c, args, c.in(0), c.out(0));
  };
  rules["slice_grad"] = [](const Check &c, const KernelArgs &args) {
    c.declared();
    c.allF32();
    sliceWithin(c, args, c.out(0), c.in(0));
  };
  rules["pad"] = plain([](const Check &c) {
    c.arity(1, 3, 1, 1);
    const TensorView &x = c.in(0), &y = c.out(0);
    c.sameType(x, y);
    c.require(y.rank() == x.rank(), "pad changes the rank");
    std::vector<int64_t> pads =
        c.ints("pads", 2 * x.rank(), 0, kMostTagField * kMostTagField);
    for (int64_t d = 0; d < x.rank(); ++d)
      c.require(y.shape[d] == x.shape[d] + pads[d] + pads[d + x.rank()],
                "output " + shapeText(y.shape) + " is not input " +
                    shapeText(x.shape) + " padded");
  });
  rules["gather"] = [](const Check &c, const KernelArgs &args) {
    c.declared();
    c.sameType(c.in(0), c.out(0));
    gatherSizes(c, c.in(0), c.in(1), c.out(0));
  };
  rules["gather_grad"] = [](const Check &c, const KernelArgs &args) {
    c.declared();
    c.type(c.in(0), plan::F32);
    c.type(c.out(0), plan::F32);
    gatherSizes(c, c.out(0), c.in(1), c.in(0));
  };
  rules["constant_of_shape"] = plain([](const Check &c) {
    c.arity(0, 1, 1, 1); // the kernel checks its value against the type
  });
  rules["shape"] = plain([](const Check &c) {
    c.declared();
    c.type(c.out(0), plan::I64);
    int64_t rank = c.in(0).rank();
    int64_t start = c.attribute("start", 0, -kMostTagField, kMostTagField);
    start = start < 0 ? std::max<int64_t>(0, start + rank) : start;
    c.require(start <= rank && c.out(0).numel() <= rank - start,
              "the result has more entries than the input has dimensions");
  });
  rules["reduce_sum"] = rules["reduce_mean"] = [](const Check &c,
                                                  const KernelArgs &args) {
    c.arity(1, 2, 1, 1);
    c.allF32();
    const TensorView &x = c.in(0);
    std::vector<int64_t> axes = args.ints("axes");
    std::vector<int64_t> kept = x.shape;
    for (int64_t a : axes) {
      c.require(a >= -x.rank() && a < x.rank(), "a reduced axis is outside");
      kept[a < 0 ? a + x.rank() : a] = 1;
    }
    if (axes.empty())
      kept.assign(kept.size(), 1);
    c.count(c.out(0), product(kept, 0));
  };
  rules["update"] = [](const Check &c, const KernelArgs &args) {
    c.declared();
    c.allF32();
    c.count(c.in(1), c.in(0).numel());
    if (args.inputs.size() > 2)
      c.count(c.in(2), 3); // the loss-scale buffer
  };
  // Dynamic loss scaling: the buffer is [scale, clean steps, overflow];
  // the clean steps count in float, exactly up to 2^24.
  rules["loss_scale"] = plain([](const Check &c) {
    c.arity(1, 1, 1, 1);
    c.allF32();
    c.count(c.in(0), 3);
    c.count(c.out(0), 1);
  });
  // Whether any of the gradients is not finite, as 1 or 0.
  rules["found_inf"] = plain([](const Check &c) {
    c.arity(0, kMany, 1, 1); // none: a stage without trained parameters
    c.allF32();
    c.count(c.out(0), 1);
  });
  // The buffer, then `flags` scalars (every stage's found_inf), then the
  // gradients unscaled in place; `adjust` 0: the gradients only, the
  // buffer read; 2: the buffer's skip flag set from the flags, the scale
  // kept (cdp v2's stages applied a step apart).
  rules["unscale_grads"] = [](const Check &c, const KernelArgs &args) {
    c.arity(2, kMany, 0, 0);
    c.allF32();
    c.count(c.in(0), 3);
    int64_t inputs = static_cast<int64_t>(args.inputs.size());
    int64_t flags = c.attribute("flags", 0, 0, inputs - 1);
    c.attribute("adjust", 1, 0, 2);
    for (int64_t k = 1; k <= flags; ++k)
      c.count(c.in(static_cast<size_t>(k)), 1);
    c.attribute("growth_interval", 2000, 1, int64_t{1} << 24);
    double growth = args.f("growth_factor", 2.0),
           backoff = args.f("backoff_factor", 0.5);
    c.require(growth > 1 && std::isfinite(growth) && backoff > 0 && backoff < 1,
              "needs growth_factor > 1 and 0 < backoff_factor < 1");
  };
  // The stage's parameters, then their mean gradients in the same order
  // (zero 1) or the device's shard of them (zero 2); zero 3: the shard of
  // the parameters and the shard of the mean gradients. fp16 (`loss_scale`
  // 1): the loss-scale buffer last.
  rules["shard_update"] = [](const Check &c, const KernelArgs &args) {
    size_t operands = lossScaledOperands(c, args);
    c.arity(2, kMany, 0, 0);
    c.allF32();
    int64_t zero = c.attribute("zero", 1, 1, 3);
    namedDevice(c, args, "owner"); // CDP-ZeRO: the whole stage, owned
    if (zero == 3) {
      c.require(operands == 2, "needs the parameter shard and its gradients");
      c.count(c.in(1), c.in(0).numel());
    }
    if (zero >= 2)
      return; // the shard's size is checked at load against the layout
    size_t tensors = operands / 2;
    c.require(operands % 2 == 0, "needs each parameter and its gradient");
    for (size_t t = 0; t < tensors; ++t)
      c.count(c.in(tensors + t), c.in(t).numel());
  };
  rules["shard_reduce"] = plain([](const Check &c) {
    c.arity(1, kMany, 1, 1);
    c.allF32();
  });
  // ZeRO stage 1 over a pipeline stage's replicas: the stage's parameters,
  // then their replica sums in the same order.
  rules["replica_shard_update"] = [](const Check &c, const KernelArgs &args) {
    size_t operands = lossScaledOperands(c, args);
    c.arity(2, kMany, 0, 0);
    c.allF32();
    size_t tensors = operands / 2;
    c.require(operands % 2 == 0, "needs each parameter and its gradient sum");
    for (size_t t = 0; t < tensors; ++t)
      c.count(c.in(tensors + t), c.in(t).numel());
  };
  // A pipeline stage's gradient sum over its replicas: the device's own in,
  // the sum out.
  rules["replica_sum"] = plain([](const Check &c) {
    c.arity(1, 1, 1, 1);
    c.allF32();
    c.count(c.out(0), c.in(0).numel());
  });
  // A device's share of the squared gradient norm, summed over the devices
  // in place.
  rules["norm_all_reduce"] = plain([](const Check &c) {
    c.arity(1, 1, 0, 0);
    c.allF32();
    c.count(c.in(0), 1);
    c.attribute("part", 0, 0, 1); // 1: overflow flags (fp16)
  });
  // ZeRO stage 3: the device's shard in, the stage's parameters (and its
  // padding) out, one after another (checked at load); the release reads
  // them and runs nothing.
  rules["shard_gather"] = plain([](const Check &c) {
    c.arity(1, 1, 1, kMany);
    c.allF32();
  });
  // laysa: a parameter, its gradient and its error feedback.
  rules["sparse_absorb"] = plain([](const Check &c) {
    c.arity(3, 3, 0, 0);
    c.allF32();
    c.count(c.in(1), c.in(0).numel());
    c.count(c.in(2), c.in(0).numel());
  });
  // The stage's P parameters, then their error feedback; out: the values
  // (float32) and, where some parameter is sparse, the indices (int32).
  rules["sparse_select"] = [](const Check &c, const KernelArgs &args) {
    std::pair<int64_t, int64_t> sizes = sparseStage(c, args);
    c.arity(static_cast<int>(args.inputs.size()),
            static_cast<int>(args.inputs.size()), sizes.second ? 2 : 1,
            sizes.second ? 2 : 1);
    c.type(c.out(0), plan::F32);
    c.count(c.out(0), sizes.first);
    if (sizes.second) {
      c.type(c.out(1), plan::I32);
      c.count(c.out(1), sizes.second);
    }
  };
  // The same, then the gathered values and indices (absent where no
  // parameter is sparse) of every device, in device order.
  rules["sparse_apply"] = [](const Check &c, const KernelArgs &args) {
    std::pair<int64_t, int64_t> sizes = sparseStage(c, args);
    int64_t devices = args.communicator ? args.communicator->size() : 1;
    c.require(args.i("devices", 1) == devices,
              "attribute 'devices' is not the run's device count");
    size_t first = 2 * args.ints("counts").size();
    c.arity(static_cast<int>(first + 2), static_cast<int>(first + 2), 0, 0);
    c.type(c.in(first), plan::F32);
    c.count(c.in(first), devices * sizes.first);
    if (sizes.second) {
      c.type(c.in(first + 1), plan::I32);
      c.count(c.in(first + 1), devices * sizes.second);
    }
  };
  // A selection's values (float32) and indices (int32, where there are
  // any) in; every device's, one after another, out.
  rules["sparse_gather"] = [](const Check &c, const KernelArgs &args) {
    int64_t devices = args.communicator ? args.communicator->size() : 1;
    c.arity(1, 2, 1, 2);
    c.require(args.inputs.size() == args.outputs.size(),
              "gathers as many buffers as it sends");
    c.attribute("stage", 0, 0, 4095);
    for (size_t k = 0; k < args.inputs.size(); ++k) {
      c.type(c.in(k), k == 0 ? plan::F32 : plan::I32);
      c.type(c.out(k), k == 0 ? plan::F32 : plan::I32);
      c.count(c.out(k), devices * c.in(k).numel());
    }
  };
  // CDP-ZeRO: the owner's master copy of a stage into the region the
  // stage travels in.
  rules["master_copy"] = plain([](const Check &c) {
    c.arity(1, 1, 1, 1);
    c.allF32();
    c.count(c.out(0), c.in(0).numel());
  });
  rules["shard_release"] = plain([](const Check &c) {
    c.arity(1, kMany, 0, 0);
    c.allF32();
  });
  rules["squared_norm"] = plain([](const Check &c) {
    c.arity(1, kMany, 1, 1);
    c.allF32();
    c.count(c.out(0), 1);
  });
  // The first `partials` inputs are scalar shares of the squared norm; the
  // rest are the gradients scaled in place.
  rules["clip_grad_norm"] = [](const Check &c, const KernelArgs &args) {
    c.arity(1, kMany, 0, 0);
    c.allF32();
    int64_t inputs = static_cast<int64_t>(args.inputs.size());
    int64_t partials = c.attribute("partials", 0, 0, inputs - 1);
    for (int64_t k = 0; k < partials; ++k)
      c.count(c.in(static_cast<size_t>(k)), 1);
    double maxNorm = args.f("max_norm", 0.0);
    c.require(maxNorm > 0 && std::isfinite(maxNorm),
              "attribute 'max_norm' must be a positive number");
  };
  rules["assign"] = plain([](const Check &c) {
    // Pipelines emit assigns of their own (no `name`): not the IR's form.
    c.arity(2, 2, 0, 0);
    c.sameType(c.in(0), c.in(1));
    c.count(c.in(1), c.in(0).numel());
  });
  rules["accumulate"] = plain([](const Check &c) {
    c.arity(1, 1, 1, 1);
    c.allF32();
    c.count(c.out(0), c.in(0).numel());
    c.attribute("slots", 1, 1, kMostTagField);
  });
  rules["gradient"] = plain([](const Check &c) { c.declared(); });
  rules["send"] = [](const Check &c, const KernelArgs &args) {
    c.arity(1, 1, 0, 0);
    pointToPoint(c, args);
  };
  rules["recv"] = [](const Check &c, const KernelArgs &args) {
    c.arity(0, 0, 1, 1);
    pointToPoint(c, args);
  };
  rules["load"] = plain([](const Check &c) {
    c.arity(0, 0, 1, 1); // the plan validator checks what it loads
    c.attribute("micro_batch", 0, 0, kMostTagField);
  });
  rules["reduce_start"] = [](const Check &c, const KernelArgs &args) {
    c.arity(1, kMany, 0, 0);
    communication(c);
  };
  rules["reduce_wait"] = [](const Check &c, const KernelArgs &args) {
    c.arity(0, 0, 1, kMany);
    communication(c);
  };
  rules["chain_reduce"] = [](const Check &c, const KernelArgs &args) {
    c.arity(1, kMany, 0, 2);
    communication(c);
    namedDevice(c, args, "owner");
    if (args.outputs.size() == 2)
      c.count(c.out(1), c.out(0).numel());
  };
  rules["chain_relay"] = [](const Check &c, const KernelArgs &args) {
    c.arity(0, 0, 2, 2);
    communication(c);
    c.count(c.out(1), c.out(0).numel());
  };
  // With `from` (CDP-ZeRO's owner): no buffers in, the mean arrives from
  // that device.
  rules["chain_wait"] = [](const Check &c, const KernelArgs &args) {
    namedDevice(c, args, "from");
    if (args.i("from", -1) >= 0) {
      c.arity(0, 0, 1, 1);
      communication(c);
      return;
    }
    c.arity(2, 2, 1, kMany);
    communication(c);
    c.count(c.in(0), total(args.outputs));
    c.count(c.in(1), total(args.outputs));
  };
  return rules;
}

const std::map<std::string,
               std::function<void(const Check &, const KernelArgs &)>> &
rules() {
  static const auto table = makeRules();
  return table;
}

} // namespace

void checkSignature(const KernelArgs &args) {
  auto rule = rules().find(args.instruction->op());
  if (rule == rules().end())
    args.fail("the op has no signature (an unknown op)");
  rule->second(Check(args), args);
}

std::vector<std::string> signedOps() {
  std::vector<std::string> ops;
  for (const auto &entry : rules())
    ops.push_back(entry.first);
  return ops;
}

} // namespace cdp::runtime
