//===- FoldCasts.cpp - Cast and CastLike on known values ------------------===//
//
// Constant folding of ONNX Cast and CastLike: to every numeric type, with
// float16 and bfloat16 rounded to nearest even as ONNX's reference does,
// and integers wrapped to their width.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include <cmath>
#include <cstring>

namespace cdp::import {

//===----------------------------------------------------------------------===//
// Casts
//===----------------------------------------------------------------------===//

/// float32's nearest float16 (round to nearest even), as a double.
static double roundToHalf(double v) {
  if (!std::isfinite(v) || v == 0)
    return v;
  int exponent;
  std::frexp(v, &exponent); // v = m * 2^exponent, 0.5 <= |m| < 1
  // float16 keeps 11 significant bits down to 2^-14, then fixed 2^-24 steps.
  int step = std::max(exponent - 11, -24);
  double scaled = std::ldexp(v, -step);
  double rounded = std::nearbyint(scaled); // ties to even
  double result = std::ldexp(rounded, step);
  return std::fabs(result) > 65504 ? std::copysign(INFINITY, v) : result;
}

static double roundToBfloat16(double v) {
  float f = static_cast<float>(v);
  if (!std::isfinite(f))
    return f;
  uint32_t word;
  std::memcpy(&word, &f, sizeof word);
  word += 0x7fff + ((word >> 16) & 1); // round to nearest even
  word &= 0xffff0000u;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

/// Converts `v` to ONNX type `to` within `out`'s kind.
void pushCast(Importer &im, ConstTensor &out, int32_t to, double v,
              int64_t exact, bool fromInteger) {
  using P = onnx::TensorProto;
  if (out.kind == ConstTensor::Bool) {
    out.ints.push_back(fromInteger ? exact != 0 : v != 0);
  } else if (out.kind == ConstTensor::F32 || out.kind == ConstTensor::F64) {
    double value = fromInteger ? static_cast<double>(exact) : v;
    if (to == P::FLOAT16)
      value = roundToHalf(static_cast<float>(value));
    else if (to == P::BFLOAT16)
      value = roundToBfloat16(value);
    out.push(value);
  } else if (fromInteger) {
    out.ints.push_back(exact);
  } else {
    out.ints.push_back(truncateToInt64(v));
  }
}

/// Narrows an exact integer to ONNX integer type `to` (two's-complement
/// wrap, as a C cast does).
static int64_t wrapInteger(int32_t to, int64_t v) {
  using P = onnx::TensorProto;
  switch (to) {
  case P::INT32:
    return static_cast<int32_t>(v);
  case P::INT16:
    return static_cast<int16_t>(v);
  case P::INT8:
    return static_cast<int8_t>(v);
  case P::UINT32:
    return static_cast<uint32_t>(v);
  case P::UINT16:
    return static_cast<uint16_t>(v);
  case P::UINT8:
    return static_cast<uint8_t>(v);
  default:
    return v;
  }
}

static bool castTo(Importer &im, const ConstTensor &x, int32_t to,
                   ConstTensor &out) {
  out = ConstTensor::empty(im.constKindOf(to, im.where() + " target"), x.shape);
  bool fromInteger = !x.isFloat();
  for (int64_t i = 0; i < x.size(); ++i) {
    int64_t exact = fromInteger ? x.ints[i] : 0;
    pushCast(im, out, to, fromInteger ? 0.0 : x.at(i), exact, fromInteger);
    if (out.kind == ConstTensor::I64)
      out.ints.back() = wrapInteger(to, out.ints.back());
  }
  return true;
}

bool foldCast(Importer &im, const FoldInputs &in, ConstTensor &out) {
  im.checkAttributes({"to", "saturate"});
  return castTo(im, *in[0], static_cast<int32_t>(im.intAttr("to", 0)), out);
}

/// The ONNX type a value of `kind` most likely has (CastLike's target).
static int32_t onnxTypeOfKind(ConstTensor::Kind kind) {
  switch (kind) {
  case ConstTensor::F32:
    return onnx::TensorProto::FLOAT;
  case ConstTensor::F64:
    return onnx::TensorProto::DOUBLE;
  case ConstTensor::Bool:
    return onnx::TensorProto::BOOL;
  default:
    return onnx::TensorProto::INT64;
  }
}

/// CastLike needs only its input known: the target is the other input's
/// type, whether that input is known or a runtime value.
bool foldCastLike(Importer &im, const FoldInputs &in, ConstTensor &out) {
  im.checkAttributes({"saturate"});
  ConstTensor::Kind target =
      in[1] ? in[1]->kind : im.kindOf(im.typeOf(im.input(1)).getElementType());
  return castTo(im, *in[0], onnxTypeOfKind(target), out);
}

} // namespace cdp::import
