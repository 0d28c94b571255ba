//===- MessageBuffers.h - a kernel's tensors as a message's buffers -*- C++
//-*-//
//
// The CPU and CUDA kernels that talk to a communicator hand it their tensors
// where they lie, as lists of typed buffers read or filled one after
// another (a stage's tensors, so no kernel packs them first); with a device
// link, in that device's memory.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_MESSAGEBUFFERS_H
#define CDP_RUNTIME_KERNELS_MESSAGEBUFFERS_H

#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Kernel.h"

#include <vector>

namespace cdp::runtime {

/// The elements the tensors hold together.
inline int64_t totalCount(const std::vector<TensorView> &views) {
  int64_t n = 0;
  for (const TensorView &v : views)
    n += v.numel();
  return n;
}

/// Tensors as a communicator's list of buffers, read or filled one after
/// another. With a `link` the tensors lie in that device's memory (a GPU's
/// send, recv, reductions and ZeRO's collectives where the communicator
/// carries device memory).
inline std::vector<ConstBuffer>
readBuffers(const std::vector<TensorView> &views, DeviceLink *link = nullptr) {
  std::vector<ConstBuffer> buffers;
  for (const TensorView &v : views)
    buffers.emplace_back(v.dtype, v.data, v.numel(), link);
  return buffers;
}
inline std::vector<Buffer> writtenBuffers(const std::vector<TensorView> &views,
                                          DeviceLink *link = nullptr) {
  std::vector<Buffer> buffers;
  for (const TensorView &v : views)
    buffers.push_back({v.dtype, v.data, v.numel(), link});
  return buffers;
}

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_MESSAGEBUFFERS_H
