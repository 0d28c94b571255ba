//===- RecomputeMode.h - what cdp-recompute keeps ---------------*- C++ -*-===//

#ifndef CDP_PASSES_RECOMPUTEMODE_H
#define CDP_PASSES_RECOMPUTEMODE_H

namespace cdp {

/// cdp-recompute's mode (cdp-compile --recompute): what the forward keeps
/// for the backward.
enum class RecomputeMode { Stage, Layer, Selective };

} // namespace cdp

#endif // CDP_PASSES_RECOMPUTEMODE_H
