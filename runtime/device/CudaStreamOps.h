//===- CudaStreamOps.h - a GPU stream as a StreamLink's primitives -*- C++ -*-//
//
// A device's messages to devices on the same GPU stay in GPU memory: its
// link (CudaDevice::link) is a StreamLink over these primitives, queued on
// the device's own stream (runtime/kernels/cuda/StreamOps.cu).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_DEVICE_CUDASTREAMOPS_H
#define CDP_RUNTIME_DEVICE_CUDASTREAMOPS_H

#include "cdp/Runtime/DeviceLink.h"

#include <cuda_runtime.h>

#include <atomic>

namespace cdp::runtime {

/// Makes `gpu` the calling thread's current GPU until the scope ends.
class OnGpu {
public:
  explicit OnGpu(int gpu);
  ~OnGpu();

private:
  int previous = 0;
};

class CudaStreamOps : public StreamOps {
public:
  CudaStreamOps(int gpu, cudaStream_t stream);
  /// The domain is the GPU: its devices' streams share its memory.
  int domain() const override { return gpu; }
  void *allocate(int64_t bytes) override;
  void release(void *memory) override;
  void copy(void *to, const void *from, int64_t bytes) override;
  void upload(void *to, const char *host, int64_t bytes) override;
  void add(float *to, const float *from, int64_t count) override;
  void mean(float *to, const std::vector<const float *> &from, int64_t count,
            float scale, bool fromZero) override;
  void zero(void *to, int64_t bytes) override;
  std::shared_ptr<StreamEvent> record() override;
  void wait(const StreamEvent &event) override;
  void download(char *host, const void *from, int64_t bytes,
                const StreamEvent &ready) override;
  /// The device's stream is about to go (its device is destroyed after a
  /// synchronisation): blocks released later are freed at once.
  void detach();

protected:
  int gpuIndex() const { return gpu; }
  cudaStream_t handle() const { return stream; }

private:
  int gpu;
  std::atomic<cudaStream_t> stream;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_DEVICE_CUDASTREAMOPS_H
