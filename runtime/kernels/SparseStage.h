//===- SparseStage.h - laysa's exchange operands, every backend -*- C++ -*-===//
//
// What the CPU and CUDA kernels of laysa's exchange (sparse_absorb,
// sparse_select, sparse_apply) read from their instruction alike: the form
// of the error feedback, the stage's tensors, and each device's part of a
// gathered buffer.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_SPARSESTAGE_H
#define CDP_RUNTIME_KERNELS_SPARSESTAGE_H

#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Kernel.h"

#include <algorithm>
#include <string>
#include <vector>

namespace cdp::runtime {

/// Whether the instruction's error feedback is the mirror (laysa) or the
/// explicit residual (the naive baseline).
inline bool isMirrorForm(const KernelArgs &args) {
  std::string form = args.s("form", "mirror");
  if (form != "mirror" && form != "residual")
    args.fail("form must be mirror or residual, got '" + form + "'");
  return form == "mirror";
}

/// The stage's parameters and error feedback, as the select and apply
/// instructions list them: W_1..W_P, then state_1..state_P.
struct StageTensors {
  std::vector<TensorView> weights, states;
  std::vector<int64_t> counts;

  explicit StageTensors(const KernelArgs &args) : counts(args.ints("counts")) {
    size_t params = counts.size();
    if (args.inputs.size() < 2 * params)
      args.fail("needs the stage's parameters and their error feedback");
    weights.assign(args.inputs.begin(), args.inputs.begin() + params);
    states.assign(args.inputs.begin() + params,
                  args.inputs.begin() + 2 * params);
  }
  /// Parameter p sent whole: its values in index order, no indices.
  bool whole(size_t p) const { return counts[p] == weights[p].numel(); }
  /// The elements of the stage's largest parameter.
  int64_t largest() const {
    int64_t n = 0;
    for (const TensorView &w : weights)
      n = std::max(n, w.numel());
    return n;
  }
};

/// Device j's part of a gathered buffer of `devices` equal parts.
inline TensorView devicePart(const TensorView &all, size_t j, size_t devices) {
  if (!all.data)
    return all;
  int64_t part = all.numel() / static_cast<int64_t>(devices);
  TensorView view = all;
  view.shape = {part};
  view.data =
      static_cast<char *>(all.data) + j * part * plan::dtypeSize(all.dtype);
  return view;
}

/// An absorb kernel's checkpointed state: its step count and, where its
/// rule keeps one (`momentum` non-null), the momentum buffer laid out as
/// the weights. One shape for both backends' kernels.
inline KernelState absorbState(int64_t &steps, const TensorView &weights,
                               void *momentum) {
  KernelState result;
  result.counter = &steps;
  if (momentum) {
    TensorView view = weights;
    view.data = momentum;
    result.tensors.emplace_back("momentum_buffer", view);
  }
  return result;
}

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_SPARSESTAGE_H
