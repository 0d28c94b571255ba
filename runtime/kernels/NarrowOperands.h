//===- NarrowOperands.h - narrow_operands and round_result ------*- C++ -*-===//
//
// cdp-mark-narrow-products marks a matmul or gemm whose operands hold only
// values exact in bf16 or fp16. The CUDA kernels then multiply the operands
// in that format with float32 sums (tensor cores); the CPU kernels multiply
// in float32, which gives the same value up to the order of the sums, and
// check the mark on a product's first three runs, so that a wrong mark fails
// there instead of rounding operands on a GPU alone.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_NARROWOPERANDS_H
#define CDP_RUNTIME_KERNELS_NARROWOPERANDS_H

#include "NarrowFloat.h"
#include "cdp/Runtime/Kernel.h"

#include <string>

namespace cdp::runtime {

enum class NarrowFormat { None, Bfloat16, Float16 };

/// The narrow format attribute `name` names (narrow_operands,
/// round_result); a RuntimeError naming the instruction for a format the
/// backends do not know.
inline NarrowFormat narrowFormatOf(const KernelArgs &args,
                                   const std::string &name) {
  std::string format = args.s(name, "");
  if (format.empty())
    return NarrowFormat::None;
  if (format == "bf16")
    return NarrowFormat::Bfloat16;
  if (format == "f16")
    return NarrowFormat::Float16;
  throw RuntimeError(args.instruction->op() + " at '" +
                     args.instruction->location() + "': " + name +
                     " must be bf16 or f16, got '" + format +
                     "' (recompile the plan)");
}

/// The product's mark.
inline NarrowFormat narrowOperandsOf(const KernelArgs &args) {
  return narrowFormatOf(args, "narrow_operands");
}

/// An op's `round_result`: the cdp.round_to cdp-fuse-roundings moved into
/// it, which the op applies to each value as it writes it.
inline NarrowFormat roundingOf(const KernelArgs &args) {
  return narrowFormatOf(args, "round_result");
}

/// `x` rounded to `format` (as it is where the format is None).
CDP_HOST_DEVICE inline float roundedTo(NarrowFormat format, float x) {
  return format == NarrowFormat::Bfloat16  ? roundToBfloat16(x)
         : format == NarrowFormat::Float16 ? roundToFloat16(x)
                                           : x;
}

/// Writes result `i` of an op with `rounding` (its round_result): rounded,
/// into float32 storage, or, where cdp-narrow-results stores the result in
/// 2 bytes (`twoBytes`), as that format's bits.
CDP_HOST_DEVICE inline void storeResult(void *out, int64_t i, float value,
                                        NarrowFormat rounding, bool twoBytes) {
  if (twoBytes)
    static_cast<uint16_t *>(out)[i] =
        narrowBitsOf(value, rounding == NarrowFormat::Bfloat16);
  else
    static_cast<float *>(out)[i] = roundedTo(rounding, value);
}

/// Whether `view` holds 2-byte values: a pack's result, a product's stored
/// operand, a result cdp-narrow-results stores so.
inline bool storedInTwoBytes(const TensorView &view) {
  return view.dtype == plan::BF16 || view.dtype == plan::F16;
}

/// How `view` holds its values: float32 (None) or 2-byte patterns.
inline NarrowFormat storedFormatOf(const TensorView &view) {
  return view.dtype == plan::BF16  ? NarrowFormat::Bfloat16
         : view.dtype == plan::F16 ? NarrowFormat::Float16
                                   : NarrowFormat::None;
}

/// Value `i` of an operand stored as `stored`: float32, or the 2-byte
/// patterns a reader of the backward's packed copy gets (widened exactly).
CDP_HOST_DEVICE inline float loadValue(const void *in, int64_t i,
                                       NarrowFormat stored) {
  if (stored == NarrowFormat::None)
    return static_cast<const float *>(in)[i];
  uint16_t bits = static_cast<const uint16_t *>(in)[i];
  return stored == NarrowFormat::Bfloat16 ? floatOfBfloat16(bits)
                                          : floatOfFloat16(bits);
}

/// An operand read by index whether it holds float32 values or 2-byte
/// patterns (a loss's scores: the LM head's logits cdp-narrow-results
/// stores in 2 bytes), widened exactly as read.
struct StoredValues {
  const void *data;
  NarrowFormat stored;
  CDP_HOST_DEVICE float operator[](int64_t i) const {
    return loadValue(data, i, stored);
  }
};

inline StoredValues storedValuesOf(const TensorView &view) {
  return {view.data, storedFormatOf(view)};
}

/// Whether `format` holds `x` exactly (a NaN counts: it stays a NaN).
CDP_HOST_DEVICE inline bool exactIn(NarrowFormat format, float x) {
  if (format == NarrowFormat::None || x != x)
    return true;
  float rounded =
      format == NarrowFormat::Bfloat16 ? roundToBfloat16(x) : roundToFloat16(x);
  return bitsOf(rounded) == bitsOf(x);
}

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_NARROWOPERANDS_H
