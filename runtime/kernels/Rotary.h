//===- Rotary.h - the rotary embedding's element, both backends -*- C++ -*-===//
//
// cdp.rotary (rotate-half form): element d of a row of D values is
// x[d] cos[d] + rotate_half(x)[d] sin[d], rotate_half(x) = concat(-x2, x1).
// Written once for the CPU's kernel and the GPU's: each product rounded to
// float32, then the sum rounded, as the exported Mul, Mul and Add compute it
// (on the GPU with __fmul_rn and __fadd_rn, which the compiler never fuses
// into one multiply-add), so the fused op gives the unfused graph's bits.
// Under narrow_operands the adjoint's products are rounded to the format
// before the sum, as autocast's graph rounds each gradient it keeps.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_ROTARY_H
#define CDP_RUNTIME_KERNELS_ROTARY_H

#include "HostDevice.h"
#include "NarrowOperands.h"

namespace cdp::runtime {

CDP_HOST_DEVICE inline float productRounded(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

CDP_HOST_DEVICE inline float sumRounded(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// The rotary embedding of `x` at a position in the row's first half
/// (`firstHalf`: rotate_half reads -partner there) or its second (+partner),
/// `partner` the value D/2 away in the same row.
CDP_HOST_DEVICE inline float rotaryOf(float x, float partner, bool firstHalf,
                                      float cos, float sin) {
  float rotated = firstHalf ? -partner : partner;
  return sumRounded(productRounded(x, cos), productRounded(rotated, sin));
}

/// The adjoint (x's gradient): dy cos + rotate_half^T(dy sin) with
/// rotate_half^T(z) = concat(z2, -z1): the partner's gradient times the
/// partner's sin, negated in the second half; each product rounded to
/// `format` first (none: float32 only).
CDP_HOST_DEVICE inline float rotaryAdjointOf(float dy, float partnerDy,
                                             bool firstHalf, float cos,
                                             float partnerSin,
                                             NarrowFormat format) {
  float carried = roundedTo(format, productRounded(partnerDy, partnerSin));
  return sumRounded(roundedTo(format, productRounded(dy, cos)),
                    firstHalf ? carried : -carried);
}

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_ROTARY_H
