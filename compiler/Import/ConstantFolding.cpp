//===- ConstantFolding.cpp - evaluating nodes on known values -------------===//
//
// A node whose inputs are all known (constants, integer initializers,
// initializers that are not trained, earlier folds) and whose result is
// small is evaluated here instead of becoming an op. This is how torch's
// shape arithmetic disappears (Shape -> Gather -> Unsqueeze -> Concat ->
// Reshape), and how exporters' attention masks, relative-position buckets
// and scales built from constants (Range, comparisons, Where, double
// constants under Sqrt and Cast) become plain tensors. Each op is one row
// of `foldRules`; integer arithmetic is exact and refused where it would
// overflow, floating arithmetic is done in the ONNX type (float32 as float,
// double/float16/bfloat16 as double).
//
//===----------------------------------------------------------------------===//

#include "Importer.h"
#include "cdp/Dialect/Graph/SliceBounds.h"

#include "llvm/ADT/StringMap.h"

#include <cmath>
#include <cstring>
#include <limits>

using namespace mlir;

namespace cdp::import {

namespace {

using Inputs = FoldInputs;

/// True when `shape` has at most kFoldLimit elements (overflow-safe).
bool fits(ArrayRef<int64_t> shape) {
  int64_t count = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(count, d, &count) || count > kFoldLimit)
      return false;
  return true;
}

int64_t normalizedAxis(Importer &im, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    raise(im.where() + ": axis " + Twine(axis) + " is out of range for rank " +
          Twine(rank));
  return axis < 0 ? axis + rank : axis;
}

//===----------------------------------------------------------------------===//
// Broadcasting
//===----------------------------------------------------------------------===//

/// numpy broadcasting of several shapes: the result shape, and for each
/// input the stride of each result dimension (0 where it broadcasts).
struct Broadcast {
  SmallVector<int64_t> shape;
  std::vector<SmallVector<int64_t>> strides;

  /// Where input `k` reads for result element `i`.
  int64_t offset(size_t k, int64_t i) const {
    int64_t at = 0;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      at += (i % shape[d]) * strides[k][d];
      i /= shape[d];
    }
    return at;
  }
};

Broadcast broadcast(Importer &im, ArrayRef<ArrayRef<int64_t>> shapes) {
  Broadcast b;
  size_t rank = 0;
  for (ArrayRef<int64_t> s : shapes)
    rank = std::max(rank, s.size());
  b.shape.assign(rank, 1);
  for (ArrayRef<int64_t> s : shapes)
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t &out = b.shape[rank - s.size() + d];
      if (s[d] != out && s[d] != 1 && out != 1)
        raise(im.where() + ": shapes do not broadcast: " + shapeText(s) +
              " against " + shapeText(b.shape));
      if (out == 1)
        out = s[d];
    }
  for (ArrayRef<int64_t> s : shapes) {
    SmallVector<int64_t> own = stridesOf(s), strides(rank, 0);
    for (size_t d = 0; d < s.size(); ++d)
      if (s[d] != 1)
        strides[rank - s.size() + d] = own[d];
    b.strides.push_back(strides);
  }
  return b;
}

Broadcast broadcast(Importer &im, const Inputs &in) {
  SmallVector<ArrayRef<int64_t>> shapes;
  for (const ConstTensor *t : in)
    shapes.push_back(t->shape);
  return broadcast(im, shapes);
}

//===----------------------------------------------------------------------===//
// Element-wise folds
//===----------------------------------------------------------------------===//

bool sameKinds(const Inputs &in) {
  return llvm::all_of(
      in, [&](const ConstTensor *t) { return t->kind == in[0]->kind; });
}

/// int64 arithmetic, refused rather than wrapped: a shape computed from a
/// wrapped value would be wrong without a word.
int64_t integerArithmetic(Importer &im, StringRef op, int64_t a, int64_t b) {
  int64_t result = 0;
  bool overflow = false;
  if (op == "Add" || op == "Sum")
    overflow = __builtin_add_overflow(a, b, &result);
  else if (op == "Sub")
    overflow = __builtin_sub_overflow(a, b, &result);
  else if (op == "Mul")
    overflow = __builtin_mul_overflow(a, b, &result);
  else if (op == "Min" || op == "Max")
    result = (op == "Min") == (a < b) ? a : b;
  else if (op == "Pow") {
    double p = std::pow(static_cast<double>(a), static_cast<double>(b));
    overflow = !(std::fabs(p) < 9.2e18);
    result = overflow ? 0 : static_cast<int64_t>(p);
  } else { // Div and Mod
    if (b == 0)
      raise(im.where() + ": integer division by zero");
    overflow = a == std::numeric_limits<int64_t>::min() && b == -1;
    if (!overflow && op == "Div")
      result = a / b;
    else if (!overflow) { // ONNX Mod (fmod = 0): the sign of the divisor
      result = a % b;
      if (result != 0 && (result < 0) != (b < 0))
        result += b;
    }
  }
  if (overflow)
    raise(im.where() + ": int64 arithmetic overflows");
  return result;
}

template <typename T> T floatArithmetic(StringRef op, T a, T b) {
  if (op == "Add" || op == "Sum")
    return a + b;
  if (op == "Sub")
    return a - b;
  if (op == "Mul")
    return a * b;
  if (op == "Div")
    return a / b;
  if (op == "Pow")
    return std::pow(a, b);
  if (op == "Mod")
    return std::fmod(a, b);
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<T>::quiet_NaN();
  return op == "Min" ? std::min(a, b) : std::max(a, b);
}

template <typename T> bool compare(StringRef op, T a, T b) {
  if (op == "Equal")
    return a == b;
  if (op == "Less")
    return a < b;
  if (op == "LessOrEqual")
    return a <= b;
  if (op == "Greater")
    return a > b;
  return a >= b; // GreaterOrEqual
}

/// Add, Sub, Mul, Div, Pow, Mod and the variadic Min, Max, Sum.
bool foldArithmetic(Importer &im, const Inputs &in, ConstTensor &out) {
  StringRef op = im.node->op_type();
  // Pow's exponent may have its own type; it is read as the base's.
  if (op != "Pow" && !sameKinds(in))
    return false;
  if (in[0]->kind == ConstTensor::Bool)
    return false;
  if (op == "Mod" && in[0]->isFloat() && im.intAttr("fmod", 0) == 0)
    return false; // ONNX needs fmod = 1 for floats
  Broadcast b = broadcast(im, in);
  if (!fits(b.shape))
    return false;
  out = ConstTensor::empty(in[0]->kind, b.shape);
  int64_t count = elementCount(b.shape);
  for (int64_t i = 0; i < count; ++i) {
    const ConstTensor &first = *in[0];
    int64_t at = b.offset(0, i);
    if (first.kind == ConstTensor::I64) {
      int64_t acc = first.ints[at];
      for (size_t k = 1; k < in.size(); ++k)
        acc = integerArithmetic(im, op, acc, in[k]->intAt(b.offset(k, i)));
      out.ints.push_back(acc);
    } else if (first.kind == ConstTensor::F32) {
      float acc = first.floats[at];
      for (size_t k = 1; k < in.size(); ++k)
        acc = floatArithmetic<float>(
            op, acc, static_cast<float>(in[k]->at(b.offset(k, i))));
      out.floats.push_back(acc);
    } else {
      double acc = first.doubles[at];
      for (size_t k = 1; k < in.size(); ++k)
        acc = floatArithmetic<double>(op, acc, in[k]->at(b.offset(k, i)));
      out.doubles.push_back(acc);
    }
  }
  return true;
}

/// Equal, Less, LessOrEqual, Greater, GreaterOrEqual; And, Or, Xor.
bool foldComparison(Importer &im, const Inputs &in, ConstTensor &out) {
  StringRef op = im.node->op_type();
  if (!sameKinds(in))
    return false;
  Broadcast b = broadcast(im, in);
  if (!fits(b.shape))
    return false;
  out = ConstTensor::empty(ConstTensor::Bool, b.shape);
  bool logic = op == "And" || op == "Or" || op == "Xor";
  int64_t count = elementCount(b.shape);
  for (int64_t i = 0; i < count; ++i) {
    const ConstTensor &x = *in[0], &y = *in[1];
    int64_t ix = b.offset(0, i), iy = b.offset(1, i);
    bool result;
    if (logic) {
      bool p = x.ints[ix] != 0, q = y.ints[iy] != 0;
      result = op == "And" ? (p && q) : op == "Or" ? (p || q) : (p != q);
    } else if (x.kind == ConstTensor::F32) {
      result = compare(op, x.floats[ix], y.floats[iy]);
    } else if (x.kind == ConstTensor::F64) {
      result = compare(op, x.doubles[ix], y.doubles[iy]);
    } else {
      result = compare(op, x.ints[ix], y.ints[iy]);
    }
    out.ints.push_back(result);
  }
  return true;
}

template <typename T> T unaryMath(StringRef op, T x) {
  if (op == "Abs")
    return std::fabs(x);
  if (op == "Neg")
    return -x;
  if (op == "Sqrt")
    return std::sqrt(x);
  if (op == "Reciprocal")
    return T(1) / x;
  if (op == "Exp")
    return std::exp(x);
  if (op == "Log")
    return std::log(x);
  if (op == "Sin")
    return std::sin(x);
  if (op == "Cos")
    return std::cos(x);
  if (op == "Floor")
    return std::floor(x);
  if (op == "Ceil")
    return std::ceil(x);
  return std::erf(x); // Erf
}

/// Abs, Neg, Sqrt, Reciprocal, Exp, Log, Sin, Cos, Floor, Ceil, Erf; Not,
/// IsNaN, IsInf.
bool foldUnary(Importer &im, const Inputs &in, ConstTensor &out) {
  StringRef op = im.node->op_type();
  const ConstTensor &x = *in[0];
  if (op == "Not" || op == "IsNaN" || op == "IsInf") {
    if ((op == "Not") != (x.kind == ConstTensor::Bool) ||
        (op != "Not" && !x.isFloat()))
      return false;
    bool positive = im.intAttr("detect_positive", 1) != 0,
         negative = im.intAttr("detect_negative", 1) != 0;
    out = ConstTensor::empty(ConstTensor::Bool, x.shape);
    for (int64_t i = 0; i < x.size(); ++i) {
      double v = x.at(i);
      out.ints.push_back(op == "Not" ? !x.ints[i]
                         : op == "IsNaN"
                             ? std::isnan(v)
                             : std::isinf(v) && (v > 0 ? positive : negative));
    }
    return true;
  }
  out = ConstTensor::empty(x.kind, x.shape);
  if (x.kind == ConstTensor::Bool)
    return false;
  if (x.kind == ConstTensor::I64) {
    if (op != "Abs" && op != "Neg")
      return false;
    for (int64_t v : x.ints) {
      if (v == std::numeric_limits<int64_t>::min())
        raise(im.where() + ": int64 arithmetic overflows");
      out.ints.push_back(op == "Neg" ? -v : std::abs(v));
    }
    return true;
  }
  for (float v : x.floats)
    out.floats.push_back(unaryMath<float>(op, v));
  for (double v : x.doubles)
    out.doubles.push_back(unaryMath<double>(op, v));
  return true;
}

bool foldWhere(Importer &im, const Inputs &in, ConstTensor &out) {
  const ConstTensor &cond = *in[0], &a = *in[1], &b = *in[2];
  if (cond.kind != ConstTensor::Bool || a.kind != b.kind)
    return false;
  Broadcast shape = broadcast(im, in);
  if (!fits(shape.shape))
    return false;
  out = ConstTensor::empty(a.kind, shape.shape);
  int64_t count = elementCount(shape.shape);
  for (int64_t i = 0; i < count; ++i)
    out.append(cond.ints[shape.offset(0, i)] ? a : b,
               shape.offset(cond.ints[shape.offset(0, i)] ? 1 : 2, i));
  return true;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

bool foldIdentity(Importer &, const Inputs &in, ConstTensor &out) {
  out = *in[0];
  return true;
}

bool foldConstantOfShape(Importer &im, const Inputs &, ConstTensor &out) {
  im.checkAttributes({"value"});
  std::vector<int64_t> shape = im.constInts(0, "shape");
  out.kind = ConstTensor::F32;
  double fill = 0;
  if (const onnx::AttributeProto *a = im.attr("value")) {
    ConstTensor v = im.readTensor(a->t(), im.where() + " value");
    if (v.size() != 1)
      raise(im.where() + ": value must hold one element");
    out.kind = v.kind;
    fill = v.at(0);
  }
  Type elementType = out.kind == ConstTensor::F32
                         ? Type(im.builder.getF32Type())
                         : Type(im.builder.getI64Type());
  out.shape = im.checkedShape(shape, elementType, im.where() + " result");
  if (!fits(shape))
    return false;
  for (int64_t i = 0, n = elementCount(shape); i < n; ++i)
    out.push(fill);
  return true;
}

/// ONNX's gathers take int32 or int64 indices.
void requireIntegerIndices(Importer &im, const ConstTensor &indices) {
  if (indices.isFloat())
    raise(im.where() + ": indices must be int32 or int64, not floats");
}

bool foldGather(Importer &im, const Inputs &in, ConstTensor &out) {
  im.checkAttributes({"axis"});
  const ConstTensor &data = *in[0];
  const ConstTensor &indices = *in[1];
  int64_t rank = data.shape.size();
  if (rank == 0)
    raise(im.where() + ": cannot gather from a scalar");
  int64_t axis = normalizedAxis(im, im.intAttr("axis", 0), rank);
  int64_t outer = 1, inner = 1, dim = data.shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= data.shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= data.shape[d];
  requireIntegerIndices(im, indices);
  out = ConstTensor::empty(data.kind, {});
  out.shape.assign(data.shape.begin(), data.shape.begin() + axis);
  out.shape.append(indices.shape.begin(), indices.shape.end());
  out.shape.append(data.shape.begin() + axis + 1, data.shape.end());
  if (!fits(out.shape))
    return false;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < indices.size(); ++k) {
      int64_t index = indices.intAt(k);
      if (index < -dim || index >= dim)
        raise(im.where() + ": index " + Twine(index) +
              " is out of range for a dimension of " + Twine(dim));
      if (index < 0)
        index += dim;
      for (int64_t j = 0; j < inner; ++j)
        out.append(data, (o * dim + index) * inner + j);
    }
  return true;
}

bool foldGatherElements(Importer &im, const Inputs &in, ConstTensor &out) {
  im.checkAttributes({"axis"});
  const ConstTensor &data = *in[0], &indices = *in[1];
  int64_t rank = data.shape.size();
  if (rank == 0 || static_cast<int64_t>(indices.shape.size()) != rank)
    raise(im.where() + ": data and indices must have one rank, at least 1");
  int64_t axis = normalizedAxis(im, im.intAttr("axis", 0), rank);
  requireIntegerIndices(im, indices);
  SmallVector<int64_t> dataStrides = stridesOf(data.shape);
  out = ConstTensor::empty(data.kind, indices.shape);
  for (int64_t i = 0; i < indices.size(); ++i) {
    int64_t rest = i, at = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      int64_t coordinate = rest % indices.shape[d];
      rest /= indices.shape[d];
      if (d == axis) {
        int64_t dim = data.shape[d];
        coordinate = indices.intAt(i);
        if (coordinate < -dim || coordinate >= dim)
          raise(im.where() + ": index " + Twine(coordinate) +
                " is out of range for a dimension of " + Twine(dim));
        coordinate += coordinate < 0 ? dim : 0;
      } else if (coordinate >= data.shape[d]) {
        raise(im.where() + ": indices of shape " + shapeText(indices.shape) +
              " exceed data of shape " + shapeText(data.shape));
      }
      at += coordinate * dataStrides[d];
    }
    out.append(data, at);
  }
  return true;
}

bool foldSqueeze(Importer &im, const Inputs &in, ConstTensor &out) {
  im.checkAttributes({"axes"});
  std::vector<int64_t> axes = im.opset >= 13 && im.hasInput(1)
                                  ? im.constInts(1, "axes")
                                  : im.intsAttr("axes");
  out = *in[0];
  int64_t rank = in[0]->shape.size();
  if (im.node->op_type() == "Unsqueeze") {
    int64_t outRank = rank + axes.size();
    for (int64_t &a : axes)
      a = normalizedAxis(im, a, outRank);
    std::sort(axes.begin(), axes.end());
    for (int64_t a : axes)
      out.shape.insert(out.shape.begin() + a, 1);
    return true;
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    bool listed = llvm::any_of(
        axes, [&](int64_t a) { return (a < 0 ? a + rank : a) == d; });
    if ((listed || axes.empty()) && in[0]->shape[d] == 1)
      continue;
    if (listed)
      raise(im.where() + ": cannot squeeze a dimension of size " +
            Twine(in[0]->shape[d]));
    shape.push_back(in[0]->shape[d]);
  }
  out.shape = shape;
  return true;
}

bool foldReshape(Importer &im, const Inputs &in, ConstTensor &out) {
  // Shape arithmetic such as torch's expand(-1, ...) reshapes constants.
  im.checkAttributes({"allowzero"});
  std::vector<int64_t> shape =
      resolveReshape(in[0]->shape, im.constInts(1, "shape"), in[0]->size(),
                     im.intAttr("allowzero", 0) != 0, im.where());
  out = *in[0];
  out.shape.assign(shape.begin(), shape.end());
  return true;
}

bool foldFlatten(Importer &im, const Inputs &in, ConstTensor &out) {
  im.checkAttributes({"axis"});
  int64_t rank = in[0]->shape.size();
  int64_t axis = im.intAttr("axis", 1);
  if (axis < -rank || axis > rank)
    raise(im.where() + ": axis " + Twine(axis) + " is out of range");
  axis = axis < 0 ? axis + rank : axis;
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= in[0]->shape[d];
  out = *in[0];
  out.shape = {outer, outer ? in[0]->size() / outer : 0};
  return true;
}

/// Copies the elements of `x` in the order of a permutation of its axes.
ConstTensor transposed(const ConstTensor &x, ArrayRef<int64_t> perm) {
  SmallVector<int64_t> shape, strides = stridesOf(x.shape);
  for (int64_t p : perm)
    shape.push_back(x.shape[p]);
  ConstTensor out = ConstTensor::empty(x.kind, shape);
  for (int64_t i = 0, n = x.size(); i < n; ++i) {
    int64_t rest = i, at = 0;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      at += (rest % shape[d]) * strides[perm[d]];
      rest /= shape[d];
    }
    out.append(x, at);
  }
  return out;
}

bool foldTranspose(Importer &im, const Inputs &in, ConstTensor &out) {
  im.checkAttributes({"perm"});
  int64_t rank = in[0]->shape.size();
  std::vector<int64_t> perm = im.intsAttr("perm");
  if (!im.attr("perm"))
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  SmallVector<int64_t> sorted(perm.begin(), perm.end());
  std::sort(sorted.begin(), sorted.end());
  for (int64_t d = 0; d < rank; ++d)
    if (static_cast<int64_t>(sorted.size()) != rank || sorted[d] != d)
      raise(im.where() + ": perm is not a permutation of the " + Twine(rank) +
            " axes");
  out = transposed(*in[0], perm);
  return true;
}

bool foldConcat(Importer &im, const Inputs &in, ConstTensor &out) {
  im.checkAttributes({"axis"});
  if (!sameKinds(in))
    return false;
  int64_t rank = in[0]->shape.size();
  int64_t axis = normalizedAxis(im, im.intAttr("axis", 0), rank);
  out = ConstTensor::empty(in[0]->kind, in[0]->shape);
  out.shape[axis] = 0;
  for (const ConstTensor *part : in) {
    bool matches = static_cast<int64_t>(part->shape.size()) == rank;
    for (int64_t d = 0; matches && d < rank; ++d)
      matches = d == axis || part->shape[d] == in[0]->shape[d];
    if (!matches)
      raise(im.where() + ": cannot concatenate " + shapeText(part->shape) +
            " with " + shapeText(in[0]->shape) + " along axis " + Twine(axis));
    out.shape[axis] += part->shape[axis];
  }
  if (!fits(out.shape))
    return false;
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= in[0]->shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (const ConstTensor *part : in) {
      int64_t block = outer ? part->size() / outer : 0;
      for (int64_t j = 0; j < block; ++j)
        out.append(*part, o * block + j);
    }
  return true;
}

bool foldSlice(Importer &im, const Inputs &in, ConstTensor &out) {
  const ConstTensor &x = *in[0];
  int64_t rank = x.shape.size();
  auto [starts, ends, axes, steps] = im.sliceInputs();
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    raise(im.where() + ": starts, ends, axes and steps differ in length");
  // Per axis: the first index, the step and the count (ONNX clamping).
  SmallVector<int64_t> first(rank, 0), step(rank, 1), shape(x.shape);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t axis = normalizedAxis(im, axes[i], rank), dim = x.shape[axis];
    if (steps[i] == 0)
      raise(im.where() + ": a step is 0");
    SliceAxis kept = resolveSliceAxis(starts[i], ends[i], steps[i], dim);
    first[axis] = kept.first;
    step[axis] = steps[i];
    shape[axis] = kept.count;
  }
  SmallVector<int64_t> strides = stridesOf(x.shape);
  out = ConstTensor::empty(x.kind, shape);
  for (int64_t i = 0, n = elementCount(shape); i < n; ++i) {
    int64_t rest = i, at = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      at += (first[d] + (rest % shape[d]) * step[d]) * strides[d];
      rest /= shape[d];
    }
    out.append(x, at);
  }
  return true;
}

bool foldExpand(Importer &im, const Inputs &in, ConstTensor &out) {
  im.checkAttributes({});
  std::vector<int64_t> target = im.constInts(1, "shape");
  SmallVector<ArrayRef<int64_t>> shapes{in[0]->shape, target};
  Broadcast b = broadcast(im, shapes);
  if (!fits(b.shape))
    return false;
  out = ConstTensor::empty(in[0]->kind, b.shape);
  for (int64_t i = 0, n = elementCount(b.shape); i < n; ++i)
    out.append(*in[0], b.offset(0, i));
  return true;
}

bool foldTile(Importer &im, const Inputs &in, ConstTensor &out) {
  im.checkAttributes({});
  const ConstTensor &x = *in[0];
  std::vector<int64_t> repeats = im.constInts(1, "repeats");
  if (repeats.size() != x.shape.size())
    raise(im.where() + ": repeats has " + Twine(repeats.size()) +
          " entries for rank " + Twine(x.shape.size()));
  SmallVector<int64_t> shape;
  for (size_t d = 0; d < repeats.size(); ++d) {
    if (repeats[d] < 0)
      raise(im.where() + ": a repeat is negative");
    int64_t size;
    if (__builtin_mul_overflow(x.shape[d], repeats[d], &size))
      return false;
    shape.push_back(size);
  }
  if (!fits(shape))
    return false;
  SmallVector<int64_t> strides = stridesOf(x.shape);
  out = ConstTensor::empty(x.kind, shape);
  for (int64_t i = 0, n = elementCount(shape); i < n; ++i) {
    int64_t rest = i, at = 0;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      at += ((rest % shape[d]) % x.shape[d]) * strides[d];
      rest /= shape[d];
    }
    out.append(x, at);
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Sequences and matrices
//===----------------------------------------------------------------------===//

bool foldRange(Importer &im, const Inputs &in, ConstTensor &out) {
  im.checkAttributes({});
  for (const ConstTensor *t : in)
    if (t->size() != 1 || t->kind == ConstTensor::Bool)
      raise(im.where() + ": start, limit and delta must be numeric scalars");
  if (!sameKinds(in))
    return false;
  double start = in[0]->at(0), limit = in[1]->at(0), delta = in[2]->at(0);
  if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) ||
      !std::isfinite(delta))
    raise(im.where() + ": Range needs finite bounds and a non-zero delta");
  double count = std::max(std::ceil((limit - start) / delta), 0.0);
  if (count > kFoldLimit)
    return false;
  out = ConstTensor::empty(in[0]->kind, {static_cast<int64_t>(count)});
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
    if (in[0]->kind == ConstTensor::I64) // exact: start + i * delta
      out.ints.push_back(in[0]->ints[0] + i * in[2]->ints[0]);
    else if (in[0]->kind == ConstTensor::F32) // ONNX: an accumulated sum
      out.floats.push_back(i == 0 ? in[0]->floats[0]
                                  : out.floats.back() + in[2]->floats[0]);
    else
      out.doubles.push_back(i == 0 ? start : out.doubles.back() + delta);
  }
  return true;
}

bool foldCumSum(Importer &im, const Inputs &in, ConstTensor &out) {
  im.checkAttributes({"exclusive", "reverse"});
  const ConstTensor &x = *in[0];
  if (x.kind == ConstTensor::Bool || in[1]->size() != 1)
    return false;
  int64_t rank = x.shape.size();
  int64_t axis = normalizedAxis(im, in[1]->intAt(0), rank);
  bool exclusive = im.intAttr("exclusive", 0),
       reverse = im.intAttr("reverse", 0);
  int64_t dim = x.shape[axis], inner = stridesOf(x.shape)[axis];
  out = x;
  int64_t outerCount = dim ? x.size() / (dim * inner) : 0;
  for (int64_t o = 0; o < outerCount; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double sumF = 0;
      int64_t sumI = 0;
      for (int64_t k = 0; k < dim; ++k) {
        int64_t pos = reverse ? dim - 1 - k : k;
        int64_t at = (o * dim + pos) * inner + j;
        double v = x.at(at);
        int64_t vi = x.kind == ConstTensor::I64 ? x.ints[at] : 0;
        if (x.kind == ConstTensor::I64)
          out.ints[at] =
              exclusive ? sumI : integerArithmetic(im, "Add", sumI, vi);
        else if (x.kind == ConstTensor::F32)
          out.floats[at] = static_cast<float>(exclusive ? sumF : sumF + v);
        else
          out.doubles[at] = exclusive ? sumF : sumF + v;
        if (x.kind == ConstTensor::I64)
          sumI = integerArithmetic(im, "Add", sumI, vi);
        else
          sumF = x.kind == ConstTensor::F32
                     ? static_cast<float>(static_cast<float>(sumF) + float(v))
                     : sumF + v;
      }
    }
  return true;
}

bool foldTrilu(Importer &im, const Inputs &in, ConstTensor &out) {
  im.checkAttributes({"upper"});
  const ConstTensor &x = *in[0];
  int64_t rank = x.shape.size();
  if (rank < 2)
    raise(im.where() + ": Trilu needs rank 2 or more");
  int64_t k = in.size() > 1 && in[1] ? in[1]->intAt(0) : 0;
  bool upper = im.intAttr("upper", 1) != 0;
  int64_t rows = x.shape[rank - 2], cols = x.shape[rank - 1];
  out = x;
  for (int64_t i = 0; i < x.size(); ++i) {
    int64_t c = i % cols, r = (i / cols) % rows;
    bool keep = upper ? c - r >= k : c - r <= k;
    if (keep)
      continue;
    if (out.kind == ConstTensor::F32)
      out.floats[i] = 0;
    else if (out.kind == ConstTensor::F64)
      out.doubles[i] = 0;
    else
      out.ints[i] = 0;
  }
  return true;
}

/// Small float products on constants (rotary frequency tables).
bool foldMatMul(Importer &im, const Inputs &in, ConstTensor &out) {
  const ConstTensor &a = *in[0], &b = *in[1];
  if (!a.isFloat() || a.kind != b.kind || a.shape.size() < 2 ||
      b.shape.size() < 2)
    return false;
  int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back();
  int64_t n = b.shape.back();
  if (b.shape[b.shape.size() - 2] != k)
    raise(im.where() + ": cannot multiply " + shapeText(a.shape) + " by " +
          shapeText(b.shape));
  SmallVector<ArrayRef<int64_t>> batches{
      ArrayRef<int64_t>(a.shape).drop_back(2),
      ArrayRef<int64_t>(b.shape).drop_back(2)};
  Broadcast batch = broadcast(im, batches);
  SmallVector<int64_t> shape(batch.shape);
  shape.append({m, n});
  if (!fits(shape) || m * n * k > 64 * kFoldLimit)
    return false;
  out = ConstTensor::empty(a.kind, shape);
  for (int64_t bi = 0, count = elementCount(batch.shape); bi < count; ++bi) {
    int64_t baseA = batch.offset(0, bi) * m * k,
            baseB = batch.offset(1, bi) * k * n;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double accD = 0;
        float accF = 0;
        for (int64_t j = 0; j < k; ++j) {
          if (a.kind == ConstTensor::F32)
            accF += a.floats[baseA + r * k + j] * b.floats[baseB + j * n + c];
          else
            accD += a.doubles[baseA + r * k + j] * b.doubles[baseB + j * n + c];
        }
        out.push(a.kind == ConstTensor::F32 ? accF : accD);
      }
  }
  return true;
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

using Fold = bool (*)(Importer &, const Inputs &, ConstTensor &);

struct FoldRule {
  Fold fold;
  /// Inputs that must be present (else the op's builder names the missing
  /// one) and known.
  int required;
  /// Only input 0 must be known (CastLike reads input 1's type alone).
  bool firstOnly = false;
};

const llvm::StringMap<FoldRule> &foldRules() {
  static const llvm::StringMap<FoldRule> rules = [] {
    llvm::StringMap<FoldRule> r;
    for (const char *op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod"})
      r[op] = {foldArithmetic, 2};
    for (const char *op : {"Min", "Max", "Sum"})
      r[op] = {foldArithmetic, 1};
    for (const char *op : {"Equal", "Less", "LessOrEqual", "Greater",
                           "GreaterOrEqual", "And", "Or", "Xor"})
      r[op] = {foldComparison, 2};
    for (const char *op :
         {"Abs", "Neg", "Sqrt", "Reciprocal", "Exp", "Log", "Sin", "Cos",
          "Floor", "Ceil", "Erf", "Not", "IsNaN", "IsInf"})
      r[op] = {foldUnary, 1};
    r["Where"] = {foldWhere, 3};
    r["Cast"] = {foldCast, 1};
    r["CastLike"] = {foldCastLike, 2, /*firstOnly=*/true};
    r["Identity"] = {foldIdentity, 1};
    r["ConstantOfShape"] = {foldConstantOfShape, 1};
    r["Gather"] = {foldGather, 2};
    r["GatherElements"] = {foldGatherElements, 2};
    r["Unsqueeze"] = r["Squeeze"] = {foldSqueeze, 1};
    r["Reshape"] = {foldReshape, 2};
    r["Flatten"] = {foldFlatten, 1};
    r["Transpose"] = {foldTranspose, 1};
    r["Concat"] = {foldConcat, 1};
    r["Slice"] = {foldSlice, 3};
    r["Expand"] = {foldExpand, 2};
    r["Tile"] = {foldTile, 2};
    r["Range"] = {foldRange, 3};
    r["CumSum"] = {foldCumSum, 2};
    r["Trilu"] = {foldTrilu, 1};
    r["MatMul"] = {foldMatMul, 2};
    return r;
  }();
  return rules;
}

/// Shape needs only its input's type; Constant only its attribute.
bool foldShape(Importer &im) {
  im.checkAttributes({"start", "end"});
  RankedTensorType type = im.typeOf(im.input(0));
  int64_t rank = type.getRank();
  auto clamp = [&](int64_t v) {
    return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank);
  };
  int64_t start = clamp(im.intAttr("start", 0)),
          end = clamp(im.intAttr("end", rank));
  ConstTensor shape = ConstTensor::empty(ConstTensor::I64, {});
  for (int64_t d = start; d < end; ++d)
    shape.ints.push_back(type.getDimSize(d));
  shape.shape = {static_cast<int64_t>(shape.ints.size())};
  im.bindConst(0, std::move(shape));
  return true;
}

bool foldConstant(Importer &im) {
  im.checkAttributes(
      {"value", "value_float", "value_floats", "value_int", "value_ints"});
  ConstTensor value;
  if (const onnx::AttributeProto *a = im.attr("value")) {
    value = im.readTensor(a->t(), im.where() + " value");
  } else if (const onnx::AttributeProto *a = im.attr("value_float")) {
    value.floats = {a->f()};
  } else if (const onnx::AttributeProto *a = im.attr("value_floats")) {
    value.floats.assign(a->floats().begin(), a->floats().end());
    value.shape = {static_cast<int64_t>(value.floats.size())};
  } else if (const onnx::AttributeProto *a = im.attr("value_int")) {
    value.kind = ConstTensor::I64;
    value.ints = {a->i()};
  } else if (const onnx::AttributeProto *a = im.attr("value_ints")) {
    value.kind = ConstTensor::I64;
    value.ints.assign(a->ints().begin(), a->ints().end());
    value.shape = {static_cast<int64_t>(value.ints.size())};
  } else {
    raise(im.where() + " has no value attribute");
  }
  im.bindConst(0, std::move(value));
  return true;
}

} // namespace

std::vector<std::string> foldedOps() {
  std::vector<std::string> ops{"Shape", "Constant"};
  for (const auto &rule : foldRules())
    ops.push_back(rule.getKey().str());
  std::sort(ops.begin(), ops.end());
  return ops;
}

bool tryFold(Importer &im, StringRef opType) {
  if (opType == "Shape")
    return foldShape(im);
  if (opType == "Constant")
    return foldConstant(im);
  auto rule = foldRules().find(opType);
  if (rule == foldRules().end())
    return false;
  const FoldRule &r = rule->second;
  for (int i = 0; i < r.required; ++i)
    if (!im.hasInput(i))
      return false;
  Inputs in;
  for (int i = 0; i < im.node->input_size(); ++i) {
    const ConstTensor *known = im.constInput(i);
    bool needed = im.hasInput(i) && (!r.firstOnly || i == 0);
    if (needed && !known)
      return false;
    in.push_back(known);
  }
  if (in.empty())
    return false;
  ConstTensor out;
  if (!r.fold(im, in, out) || out.size() > kFoldLimit)
    return false;
  im.bindConst(0, std::move(out));
  return true;
}

} // namespace cdp::import
