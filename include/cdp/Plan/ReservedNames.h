//===- ReservedNames.h - names of the compiler's own tensors ---*- C++ -*-===//
//
// Plan tensors the compiler adds (not the model's initializers), named so
// that the runtime can find them: shared by the passes that make them and
// the runtime that reports them.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_RESERVEDNAMES_H
#define CDP_PLAN_RESERVEDNAMES_H

namespace cdp {

/// Dynamic loss scaling's buffer, [scale, clean steps, overflow of the last
/// step] (cdp-autodiff's loss-scale option; cdp.unscale_grads).
inline constexpr const char *kLossScaleBuffer = "cdp.loss_scale";

} // namespace cdp

#endif // CDP_PLAN_RESERVEDNAMES_H
