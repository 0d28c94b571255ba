//===- NoCuda.cpp - the CUDA backend's entry points in a CPU-only build ---===//

#include "cdp/Runtime/Device.h"

namespace cdp::runtime {

std::unique_ptr<Device> createCudaDevice(int index) {
  throw RuntimeError("device " + std::to_string(index) +
                     " needs the CUDA backend, which this cdp-run was built "
                     "without (configure with the CUDA toolkit present)");
}

void registerCudaKernels(KernelRegistry &) {}

void setAllowTf32(bool) {}

void setAllowNondeterministic(bool) {}

std::string prepareNcclAcrossProcesses(Fabric &) {
  return "this cdp-run was built without CUDA";
}

std::vector<std::string> prepareNcclRoutesAcrossProcesses(Fabric &,
                                                          const plan::Plan &) {
  return {};
}

} // namespace cdp::runtime
