//===- AttentionLayout.h - cdp.attention's "bshd" operands ------*- C++ -*-===//
//
// Under layout "bshd" cdp.attention reads q, v and the result as
// (B, S, H, X) and the keys as (B, N, H, K), where the projections wrote
// them; its products are those of the logical (B, H, rows, cols) operands.
// Grouped-query attention: the keys and v may have fewer heads than q (a
// divisor), query head h reading key/value head h / (H / H_kv). The
// compiler's shape rules and the runtime's kernels both take that
// permutation and that grouping from here. Plain C++: no LLVM, no runtime.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_SUPPORT_ATTENTIONLAYOUT_H
#define CDP_SUPPORT_ATTENTIONLAYOUT_H

#include <cstddef>

namespace cdp {

/// The logical (B, H, rows, cols) shape of a 4-D operand stored "bshd":
/// (B, S, H, X) -> (B, H, S, X); the keys (B, N, H, K) -> (B, H, K, N).
template <typename Shape, typename Dims>
Shape headsFirst(const Dims &shape, bool keys) {
  if (keys)
    return {shape[0], shape[2], shape[3], shape[1]};
  return {shape[0], shape[2], shape[1], shape[3]};
}

/// Query heads per key/value head of logical shapes `a` (..., H, M, K) and
/// `kv` (..., H_kv, X, Y): H / H_kv where the batch dimensions agree but
/// the last, which H_kv divides; 1 without batch dimensions; 0 where they
/// do not group.
template <typename Dims>
long long queryHeadsPerKeyHead(const Dims &a, const Dims &kv) {
  size_t rank = a.size();
  if (kv.size() != rank || rank < 2)
    return 0;
  if (rank == 2)
    return 1;
  for (size_t i = 0; i + 3 < rank; ++i)
    if (a[i] != kv[i])
      return 0;
  long long heads = a[rank - 3], kvHeads = kv[rank - 3];
  if (kvHeads <= 0 || heads % kvHeads != 0)
    return heads == kvHeads ? 1 : 0;
  return heads / kvHeads;
}

/// The axis of a stored operand's heads: after the sequence under "bshd",
/// else the last batch dimension.
inline long long headsAxis(long long rank, bool interleaved) {
  return interleaved ? 2 : rank - 3;
}

/// The stored shape of attention_grad's gradient of the keys or v (stored
/// shape `kv`): one per query head, `a`'s heads in place of kv's.
template <typename Shape, typename Dims>
Shape perQueryHead(const Dims &kv, const Dims &a, bool interleaved) {
  Shape shape(kv.begin(), kv.end());
  long long axis = headsAxis(static_cast<long long>(shape.size()), interleaved);
  if (axis >= 0 && axis < static_cast<long long>(a.size()))
    shape[axis] = a[axis];
  return shape;
}

} // namespace cdp

#endif // CDP_SUPPORT_ATTENTIONLAYOUT_H
