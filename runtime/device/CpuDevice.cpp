//===- CpuDevice.cpp - the host as a device -------------------------------===//

#include "cdp/Runtime/Device.h"

#include <cstdlib>
#include <cstring>

namespace cdp::runtime {

namespace {

/// Host memory; work runs on the calling thread (and its OpenMP team)
/// when a kernel is called, so there is no queue to wait for.
class CpuDevice : public Device {
public:
  Backend backend() const override { return Backend::CPU; }
  MemorySpace space() const override { return MemorySpace::Host; }
  void *allocate(size_t bytes) override {
    size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void *memory = std::aligned_alloc(64, rounded);
    if (!memory)
      throw RuntimeError("cannot allocate " + std::to_string(bytes) +
                         " bytes of host memory");
    std::memset(memory, 0, rounded);
    return memory;
  }
  void release(void *memory) override { std::free(memory); }
  void download(void *host, const void *memory, size_t bytes) override {
    std::memcpy(host, memory, bytes);
  }
  void upload(void *memory, const void *host, size_t bytes) override {
    std::memcpy(memory, host, bytes);
  }
  void fill(void *memory, unsigned char value, size_t bytes) override {
    std::memset(memory, value, bytes);
  }
};

} // namespace

void *Device::allocateHost(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void *memory = std::aligned_alloc(64, rounded);
  if (!memory)
    throw RuntimeError("cannot allocate " + std::to_string(bytes) +
                       " bytes of host memory");
  return memory;
}

void Device::releaseHost(void *memory) { std::free(memory); }

void Device::takeUploaded(void *memory, const void *staging, size_t bytes) {
  std::memcpy(memory, staging, bytes);
}

Backend parseBackend(const std::string &name) {
  if (name.empty() || name == "cpu")
    return Backend::CPU;
  if (name == "cuda")
    return Backend::CUDA;
  throw RuntimeError("the plan names device backend '" + name +
                     "'; this cdp-run knows cpu and cuda");
}

std::unique_ptr<Device> createDevice(Backend backend, int index) {
  if (backend == Backend::CPU)
    return std::make_unique<CpuDevice>();
  return createCudaDevice(index);
}

} // namespace cdp::runtime
