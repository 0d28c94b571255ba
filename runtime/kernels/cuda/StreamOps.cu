//===- StreamOps.cu - a GPU stream's primitives for device messages -------===//
//
// What StreamLink needs of a device's stream: memory from the GPU's
// stream-ordered pool (kept, not returned to the driver at every sync, so a
// step's messages reuse it), copies, the float32 sum and mean of blocks, and
// events. Each call makes the block's GPU current for its own duration: a
// message's block may be released from another device's thread.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "Reduce.cuh"

#include "../../device/CudaStreamOps.h"

#include <cstdint>
#include <limits>

namespace cdp::runtime {

namespace {

class CudaEvent : public StreamEvent {
public:
  CudaEvent() {
    checkCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
              "cudaEventCreate");
  }
  ~CudaEvent() override { cudaEventDestroy(event); }
  cudaEvent_t event = nullptr;
};

cudaEvent_t eventOf(const StreamEvent &event) {
  return static_cast<const CudaEvent &>(event).event;
}

/// Up to kSources blocks summed per launch; more run as several launches
/// that carry the running sum in `out` (float32 either way: the same bits).
constexpr int kSources = 8;
struct Sources {
  const float *from[kSources];
  int count;
};

/// `first`: the sum starts here, from +0 (`fromZero`) or from the first
/// source; else from the running sum in `out`.
__global__ void sumKernel(float *out, Sources sources, int64_t n, bool first,
                          bool fromZero, bool last, float scale) {
  CDP_FOR_EACH(i, n) {
    int k = 0;
    float sum;
    if (!first)
      sum = out[i];
    else if (fromZero)
      sum = 0.0f;
    else
      sum = sources.from[k++][i];
    for (; k < sources.count; ++k)
      sum += sources.from[k][i];
    out[i] = last ? sum * scale : sum;
  }
}

__global__ void addKernel(float *out, const float *from, int64_t n) {
  CDP_FOR_EACH(i, n) { out[i] += from[i]; }
}

} // namespace

OnGpu::OnGpu(int gpu) {
  cudaGetDevice(&previous);
  if (previous != gpu)
    checkCuda(cudaSetDevice(gpu), "cudaSetDevice");
}

OnGpu::~OnGpu() { cudaSetDevice(previous); }

CudaStreamOps::CudaStreamOps(int gpu, cudaStream_t stream)
    : gpu(gpu), stream(stream) {
  OnGpu on(gpu);
  cudaMemPool_t pool;
  checkCuda(cudaDeviceGetDefaultMemPool(&pool, gpu), "cudaDeviceGetMemPool");
  uint64_t keep = std::numeric_limits<uint64_t>::max();
  checkCuda(
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
      "cudaMemPoolSetAttribute");
}

void CudaStreamOps::detach() { stream = nullptr; }

void *CudaStreamOps::allocate(int64_t bytes) {
  OnGpu on(gpu);
  void *memory = nullptr;
  checkCuda(cudaMallocAsync(&memory, bytes, stream), "a message's memory");
  return memory;
}

// A block outliving its device (a run ended by a failure) is freed at once:
// the device's stream was synchronised and is gone.
void CudaStreamOps::release(void *memory) {
  OnGpu on(gpu);
  if (stream)
    cudaFreeAsync(memory, stream);
  else
    cudaFree(memory);
}

void CudaStreamOps::copy(void *to, const void *from, int64_t bytes) {
  OnGpu on(gpu);
  checkCuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream),
            "a message's copy");
}

// Rare (a checkpoint's messages, another domain's): synchronous, so the
// host bytes are free to change when it returns.
void CudaStreamOps::upload(void *to, const char *host, int64_t bytes) {
  OnGpu on(gpu);
  checkCuda(cudaMemcpyAsync(to, host, bytes, cudaMemcpyHostToDevice, stream),
            "a message's upload");
  checkCuda(cudaStreamSynchronize(stream), "a message's upload");
}

void CudaStreamOps::add(float *to, const float *from, int64_t count) {
  if (count == 0)
    return;
  OnGpu on(gpu);
  addKernel<<<cuda::blocksFor(count), cuda::kThreads, 0, stream>>>(to, from,
                                                                   count);
  cuda::launched("a partial sum's addition");
}

void CudaStreamOps::zero(void *to, int64_t bytes) {
  OnGpu on(gpu);
  checkCuda(cudaMemsetAsync(to, 0, bytes, stream), "a chunk's padding");
}

void CudaStreamOps::mean(float *to, const std::vector<const float *> &from,
                         int64_t count, float scale, bool fromZero) {
  if (count == 0)
    return;
  OnGpu on(gpu);
  size_t done = 0;
  do {
    Sources sources{};
    while (sources.count < kSources && done < from.size())
      sources.from[sources.count++] = from[done++];
    sumKernel<<<cuda::blocksFor(count), cuda::kThreads, 0, stream>>>(
        to, sources, count, done <= kSources, fromZero, done == from.size(),
        scale);
    cuda::launched("a reduction's mean");
  } while (done < from.size());
}

std::shared_ptr<StreamEvent> CudaStreamOps::record() {
  OnGpu on(gpu);
  auto event = std::make_shared<CudaEvent>();
  checkCuda(cudaEventRecord(event->event, stream), "cudaEventRecord");
  return event;
}

void CudaStreamOps::wait(const StreamEvent &event) {
  OnGpu on(gpu);
  if (stream)
    checkCuda(cudaStreamWaitEvent(stream, eventOf(event), 0),
              "cudaStreamWaitEvent");
}

void CudaStreamOps::download(char *host, const void *from, int64_t bytes,
                             const StreamEvent &ready) {
  OnGpu on(gpu);
  checkCuda(cudaEventSynchronize(eventOf(ready)), "a message's copy");
  checkCuda(cudaMemcpy(host, from, bytes, cudaMemcpyDeviceToHost),
            "a message's download");
}

} // namespace cdp::runtime
