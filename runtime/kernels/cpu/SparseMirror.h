//===- SparseMirror.h - top-k selection and the mirror weight update -*- C++
//-*-===//
//
// LaySA's arithmetic on one layer, apart from where it runs
// (SparseExchange.cpp wraps it in the plan's instructions, and its
// sparse_absorb does the absorb with the optimizer's momentum and weight
// decay). A worker
// keeps a mirror M of its weights W, M = W - r, where r is the part of
// its updates it has not sent yet (error feedback):
//
//   absorb:  M <- M - lr * g            (the dense gradient is dead after)
//   select:  a = W - M; (I, V) = the k entries of largest |a|
//   apply:   S = (1/N) sum over workers n of V_n at I_n (in worker order)
//            W <- W - S;  M <- M - S + V_self at I_self
//
// which gives the same W as top-k with an explicit residual buffer
// (r <- r + lr g; select on r; r <- r - V_self at I_self) while keeping
// two copies of the layer instead of three.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_CPU_SPARSEMIRROR_H
#define CDP_RUNTIME_KERNELS_CPU_SPARSEMIRROR_H

#include <cstdint>
#include <vector>

namespace cdp::runtime::cpu {

/// A worker's sparse contribution: indices ascending, one value each.
struct SparseSelection {
  std::vector<int32_t> indices;
  std::vector<float> values;
};

/// The `k` entries of `a` (of `n`) with the largest magnitude; among equal
/// magnitudes the lowest index wins, so every run selects the same set.
/// Returned by ascending index.
SparseSelection selectTopK(const float *a, int64_t n, int64_t k);

/// The update a worker has not sent yet: a = W - M.
std::vector<float> pendingUpdate(const float *weights, const float *mirror,
                                 int64_t n);

/// Applies the workers' selections (in worker order, `self` this one's):
/// W <- W - S, M <- M - S + V_self at I_self, S their sum over N. A null
/// `mirror` updates W alone (the residual baseline).
void applySparseUpdate(float *weights, float *mirror, int64_t n,
                       const std::vector<SparseSelection> &workers, int self);

} // namespace cdp::runtime::cpu

#endif // CDP_RUNTIME_KERNELS_CPU_SPARSEMIRROR_H
