//===- Nccl.h - NCCL's errors as the runtime's ------------------*- C++ -*-===//

#ifndef CDP_RUNTIME_KERNELS_CUDA_NCCL_H
#define CDP_RUNTIME_KERNELS_CUDA_NCCL_H

#include "cdp/Runtime/Kernel.h"

#include <nccl.h>

#include <string>

namespace cdp::runtime::cuda {

/// Throws a RuntimeError naming `what` and NCCL's reason on a failure.
inline void checkNccl(ncclResult_t status, const char *what) {
  if (status != ncclSuccess)
    throw RuntimeError(std::string(what) + ": " + ncclGetErrorString(status));
}

} // namespace cdp::runtime::cuda

#endif // CDP_RUNTIME_KERNELS_CUDA_NCCL_H
