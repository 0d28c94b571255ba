//===- SparseStage.h - laysa's exchange operands, every backend -*- C++ -*-===//
//
// What the CPU and CUDA kernels of laysa's exchange (sparse_absorb,
// sparse_select, sparse_apply) read from their instruction alike: the form
// of the error feedback, and each device's part of a gathered buffer.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_SPARSESTAGE_H
#define CDP_RUNTIME_KERNELS_SPARSESTAGE_H

#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Kernel.h"

#include <string>

namespace cdp::runtime {

/// Whether the instruction's error feedback is the mirror (laysa) or the
/// explicit residual (the naive baseline).
inline bool isMirrorForm(const KernelArgs &args) {
  std::string form = args.s("form", "mirror");
  if (form != "mirror" && form != "residual")
    args.fail("form must be mirror or residual, got '" + form + "'");
  return form == "mirror";
}

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

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_SPARSESTAGE_H
