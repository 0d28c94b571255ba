//===- CpuDevice.cpp - the host as a device -------------------------------===//

#include "cdp/Runtime/Device.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

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
  ~CpuDevice() override {
    if (scratch)
      munmap(scratch, span);
  }
  /// The block is a span of address space reserved once (no memory behind
  /// it), of which the part asked for is made usable: so it grows without
  /// moving, and the memory behind it is what the kernels touch.
  void *reserveScratch(size_t bytes) override {
    if (!scratch)
      reserveSpan();
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t rounded = (bytes + page - 1) / page * page;
    if (rounded <= usable)
      return scratch;
    if (rounded > span)
      throw RuntimeError(
          "the kernels' scratch needs " + std::to_string(bytes) +
          " bytes, more than the " + std::to_string(span) +
          " bytes of address space reserved for it (a quarter of this "
          "process's limit, ulimit -v): raise or lift the limit");
    if (mprotect(scratch, rounded, PROT_READ | PROT_WRITE) != 0)
      throw RuntimeError("cannot allocate " + std::to_string(bytes) +
                         " bytes of host memory for the kernels' scratch");
    usable = rounded;
    return scratch;
  }
  int64_t workspaceBytes() const override {
    return static_cast<int64_t>(usable);
  }

private:
  /// 1 TiB of address space, or a quarter of the process's limit on it
  /// (ulimit -v, which counts reserved spans too), or less where the
  /// system refuses that much.
  void reserveSpan() {
    span = size_t(1) << 40;
    rlimit limit;
    if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
      span = std::min<size_t>(span, limit.rlim_cur / 4);
    for (;; span /= 4) {
      void *at = mmap(nullptr, span, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (at != MAP_FAILED) {
        scratch = at;
        return;
      }
      if (span < (size_t(64) << 20))
        throw RuntimeError(std::string("cannot reserve the CPU device's "
                                       "scratch address space: ") +
                           std::strerror(errno));
    }
  }

  void *scratch = nullptr;
  size_t span = 0, usable = 0;
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
