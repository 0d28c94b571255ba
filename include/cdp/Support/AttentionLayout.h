//===- AttentionLayout.h - cdp.attention's "bshd" operands ------*- C++ -*-===//
//
// Under layout "bshd" cdp.attention reads q, v and the result as
// (B, S, H, X) and the keys as (B, N, H, K), where the projections wrote
// them; its products are those of the logical (B, H, rows, cols) operands.
// The compiler's shape rules and the runtime's kernels both take that
// permutation from here. Plain C++: no LLVM, no runtime.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_SUPPORT_ATTENTIONLAYOUT_H
#define CDP_SUPPORT_ATTENTIONLAYOUT_H

namespace cdp {

/// The logical (B, H, rows, cols) shape of a 4-D operand stored "bshd":
/// (B, S, H, X) -> (B, H, S, X); the keys (B, N, H, K) -> (B, H, K, N).
template <typename Shape, typename Dims>
Shape headsFirst(const Dims &shape, bool keys) {
  if (keys)
    return {shape[0], shape[2], shape[3], shape[1]};
  return {shape[0], shape[2], shape[1], shape[3]};
}

} // namespace cdp

#endif // CDP_SUPPORT_ATTENTIONLAYOUT_H
