//===- CudaDevice.cpp - a GPU as a plan's device --------------------------===//

#include "CudaDevice.h"
#include "Cublas.h"
#include "CudaStreamOps.h"

#include <atomic>

namespace cdp::runtime {

namespace {
std::atomic<bool> tf32{false};
std::atomic<bool> epilogues{true};
std::atomic<int64_t> epiloguesSetUp{0};
std::atomic<bool> nondeterministic{false};
} // namespace

void checkCuda(cudaError_t status, const char *what) {
  if (status != cudaSuccess)
    throw RuntimeError(std::string(what) + ": " + cudaGetErrorString(status));
}

void checkCublas(cublasStatus_t status, const char *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError(std::string(what) + ": cuBLAS status " +
                       std::to_string(static_cast<int>(status)));
}

void checkCudnn(cudnnStatus_t status, const char *what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw RuntimeError(std::string(what) + ": " + cudnnGetErrorString(status));
}

/// Device d runs on GPU d mod the GPUs visible to this process, so that the
/// devices of one process spread over its GPUs and several share one when
/// there are more devices than GPUs.
CudaDevice::CudaDevice(int index) : deviceIndex(index) {
  int count = 0;
  cudaError_t found = cudaGetDeviceCount(&count);
  if (found != cudaSuccess || count == 0)
    throw RuntimeError(
        "device " + std::to_string(index) +
        " needs a GPU and none is visible (" +
        (found != cudaSuccess ? cudaGetErrorString(found) : "no devices") +
        "); run with --backend cpu");
  gpuIndex = index % count;
  checkCuda(cudaSetDevice(gpuIndex), "cudaSetDevice");
  checkCuda(cudaStreamCreateWithFlags(&work, cudaStreamNonBlocking),
            "cudaStreamCreate");
  const CublasApi &api = cublas();
  checkCublas(api.create(&blasHandle), "cublasCreate");
  checkCublas(api.setStream(blasHandle, work), "cublasSetStream");
  checkCublas(api.setMathMode(blasHandle, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                               : CUBLAS_DEFAULT_MATH),
              "cublasSetMathMode");
  // cuBLAS's workspace from our allocation, so that the report counts it:
  // the size cuBLAS recommends (32 MiB from Hopper on, else 4 MiB).
  cudaDeviceProp properties{};
  checkCuda(cudaGetDeviceProperties(&properties, gpuIndex),
            "cudaGetDeviceProperties");
  blasBytes = static_cast<size_t>(properties.major >= 9 ? 32 : 4) << 20;
  blasMemory = allocateForKernel(blasBytes, false);
  checkCublas(api.setWorkspace(blasHandle, blasMemory, blasBytes),
              "cublasSetWorkspace");
  checkCudnn(cudnnCreate(&dnnHandle), "cudnnCreate");
  checkCudnn(cudnnSetStream(dnnHandle, work), "cudnnSetStream");
  statusWord = static_cast<int *>(allocate(sizeof(int)));
  statusHost = static_cast<int *>(allocateHost(sizeof(int)));
  streamOps = std::make_shared<CudaStreamOps>(gpuIndex, work);
  streamLink = std::make_unique<StreamLink>(streamOps);
}

CudaDevice::~CudaDevice() {
  cudaSetDevice(gpuIndex);
  cudaStreamSynchronize(work);
  streamOps->detach();
  if (copies) {
    cudaStreamSynchronize(copies);
    cudaEventDestroy(uploaded);
    cudaEventDestroy(taken);
    cudaStreamDestroy(copies);
  }
  cudaFree(sharedMemory);
  cudaFree(blasMemory);
  cudaFree(statusWord);
  cudaFreeHost(statusHost);
  cudnnDestroy(dnnHandle);
  cublas().destroy(blasHandle);
  if (blasLtHandle)
    cublasLt().destroy(blasLtHandle);
  cudaStreamDestroy(work);
}

cublasLtHandle_t CudaDevice::blasLt() {
  if (!blasLtHandle)
    checkCublas(cublasLt().create(&blasLtHandle), "cublasLtCreate");
  return blasLtHandle;
}

void *CudaDevice::allocate(size_t bytes) {
  checkCuda(cudaSetDevice(gpuIndex), "cudaSetDevice");
  void *memory = nullptr;
  size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  if (cudaMalloc(&memory, rounded) != cudaSuccess) {
    cudaGetLastError(); // clear the error so that later calls work
    throw RuntimeError("cannot allocate " + std::to_string(bytes) +
                       " bytes on GPU " + std::to_string(gpuIndex) +
                       " (device " + std::to_string(deviceIndex) +
                       "): out of GPU memory");
  }
  checkCuda(cudaMemsetAsync(memory, 0, rounded, work), "cudaMemset");
  checkCuda(cudaStreamSynchronize(work), "cudaStreamSynchronize");
  return memory;
}

void CudaDevice::reserveShared(size_t bytes) {
  if (bytes <= sharedSize)
    return;
  if (sharedMemory)
    release(sharedMemory); // after the work queued that reads it
  sharedMemory = nullptr;
  sharedSize = 0;
  sharedMemory = allocate(bytes);
  sharedSize = bytes;
  ++*sharedMoves;
}

void *CudaDevice::allocateForKernel(size_t bytes, bool optimizerState) {
  void *memory = allocate(bytes);
  if (!optimizerState)
    kernelBytes += static_cast<int64_t>(bytes);
  return memory;
}

void CudaDevice::releaseForKernel(void *memory, size_t bytes,
                                  bool optimizerState) {
  release(memory);
  if (!optimizerState)
    kernelBytes -= static_cast<int64_t>(bytes);
}

void CudaDevice::release(void *memory) {
  cudaSetDevice(gpuIndex);
  cudaStreamSynchronize(work);
  cudaFree(memory);
}

void *CudaDevice::allocateHost(size_t bytes) {
  void *memory = nullptr;
  checkCuda(cudaMallocHost(&memory, std::max<size_t>(bytes, 1)),
            "cudaMallocHost");
  return memory;
}

void CudaDevice::releaseHost(void *memory) { cudaFreeHost(memory); }

void CudaDevice::download(void *host, const void *memory, size_t bytes) {
  checkCuda(cudaSetDevice(gpuIndex), "cudaSetDevice");
  checkCuda(cudaMemcpyAsync(host, memory, bytes, cudaMemcpyDeviceToHost, work),
            "copy to the host");
  checkCuda(cudaStreamSynchronize(work), "copy to the host");
}

void CudaDevice::upload(void *memory, const void *host, size_t bytes) {
  checkCuda(cudaSetDevice(gpuIndex), "cudaSetDevice");
  checkCuda(cudaMemcpyAsync(memory, host, bytes, cudaMemcpyHostToDevice, work),
            "copy to the GPU");
  checkCuda(cudaStreamSynchronize(work), "copy to the GPU");
}

/// The upload goes on a stream of its own, so that it overlaps the step
/// running on `work`; it waits for the last copy out of the staging memory
/// (`taken`) and is marked done by `uploaded`.
void CudaDevice::uploadAhead(void *staging, const void *host, size_t bytes) {
  checkCuda(cudaSetDevice(gpuIndex), "cudaSetDevice");
  if (!copies) {
    checkCuda(cudaStreamCreateWithFlags(&copies, cudaStreamNonBlocking),
              "cudaStreamCreate");
    checkCuda(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming),
              "cudaEventCreate");
    checkCuda(cudaEventCreateWithFlags(&taken, cudaEventDisableTiming),
              "cudaEventCreate");
  }
  // An event never recorded is complete: the first upload waits for nothing.
  checkCuda(cudaStreamWaitEvent(copies, taken, 0), "cudaStreamWaitEvent");
  checkCuda(
      cudaMemcpyAsync(staging, host, bytes, cudaMemcpyHostToDevice, copies),
      "copy to the GPU");
  checkCuda(cudaEventRecord(uploaded, copies), "cudaEventRecord");
}

void CudaDevice::takeUploaded(void *memory, const void *staging, size_t bytes) {
  checkCuda(cudaSetDevice(gpuIndex), "cudaSetDevice");
  if (copies)
    checkCuda(cudaStreamWaitEvent(work, uploaded, 0), "cudaStreamWaitEvent");
  checkCuda(
      cudaMemcpyAsync(memory, staging, bytes, cudaMemcpyDeviceToDevice, work),
      "copy on the GPU");
  if (copies)
    checkCuda(cudaEventRecord(taken, work), "cudaEventRecord");
}

void CudaDevice::fill(void *memory, unsigned char value, size_t bytes) {
  checkCuda(cudaSetDevice(gpuIndex), "cudaSetDevice");
  checkCuda(cudaMemsetAsync(memory, value, bytes, work), "cudaMemset");
}

void *CudaDevice::queue() {
  // Called by the thread about to run a step: the GPU becomes its current.
  checkCuda(cudaSetDevice(gpuIndex), "cudaSetDevice");
  return work;
}

void CudaDevice::synchronize() {
  checkCuda(cudaStreamSynchronize(work), "a kernel failed");
  if (copies)
    checkCuda(cudaStreamSynchronize(copies), "copy to the GPU");
}

namespace {

/// An instantiated graph and what it was recorded against.
class CudaRecording : public Recording {
public:
  CudaRecording(cudaGraphExec_t graph, cudaStream_t stream,
                std::shared_ptr<int64_t> sharedMoves)
      : graph(graph), stream(stream), moves(std::move(sharedMoves)),
        recordedAt(*moves) {}
  ~CudaRecording() override {
    cudaStreamSynchronize(stream); // no launch of it still pending
    cudaGraphExecDestroy(graph);
  }
  bool replay() override {
    if (*moves != recordedAt)
      return false;
    checkCuda(cudaGraphLaunch(graph, stream), "replay a recorded step");
    return true;
  }

private:
  cudaGraphExec_t graph;
  cudaStream_t stream;
  std::shared_ptr<int64_t> moves;
  int64_t recordedAt;
};

} // namespace

/// Thread-local capture: other devices' threads sharing the GPU go on
/// allocating and waiting meanwhile. A launch that cannot be captured (a
/// wait for the stream, an allocation) invalidates the capture and throws
/// in its kernel; the capture then ends empty, the error is cleared and
/// the caller runs the launches itself.
std::unique_ptr<Recording>
CudaDevice::record(const std::function<void()> &launches) {
  checkCuda(cudaSetDevice(gpuIndex), "cudaSetDevice");
  if (cudaStreamBeginCapture(work, cudaStreamCaptureModeThreadLocal) !=
      cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  bool captured = true;
  try {
    launches();
  } catch (const std::exception &) {
    captured = false;
  }
  cudaGraph_t graph = nullptr;
  cudaError_t ended = cudaStreamEndCapture(work, &graph);
  cudaGraphExec_t exec = nullptr;
  if (captured && ended == cudaSuccess && graph &&
      cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
    exec = nullptr;
  if (graph)
    cudaGraphDestroy(graph);
  cudaGetLastError(); // a failed capture's error is not the next launch's
  if (!exec)
    return nullptr;
  return std::make_unique<CudaRecording>(exec, work, sharedMoves);
}

/// The step's one small read: the status word, which also surfaces any
/// asynchronous kernel failure of the step.
void CudaDevice::finishStep(int64_t step) {
  std::string where = "device " + std::to_string(deviceIndex) + ", step " +
                      std::to_string(step);
  checkCuda(cudaMemcpyAsync(statusHost, statusWord, sizeof(int),
                            cudaMemcpyDeviceToHost, work),
            where.c_str());
  checkCuda(cudaStreamSynchronize(work), where.c_str());
  int flags = *statusHost;
  if (!flags)
    return;
  checkCuda(cudaMemsetAsync(statusWord, 0, sizeof(int), work), "cudaMemset");
  if (flags & kLabelOutOfRange)
    throw RuntimeError(where +
                       ": a label is out of range for the loss's classes "
                       "(check the labels data)");
  throw RuntimeError(where + ": a gather index is out of range");
}

void CudaDevice::allowTf32(bool allow) { tf32 = allow; }
void CudaDevice::allowNondeterministic(bool allow) { nondeterministic = allow; }
bool CudaDevice::nondeterministicAllowed() { return nondeterministic; }
bool CudaDevice::tf32Allowed() { return tf32; }
void CudaDevice::allowEpilogues(bool allow) { epilogues = allow; }
bool CudaDevice::epiloguesAllowed() { return epilogues; }
void CudaDevice::countEpilogue() { ++epiloguesSetUp; }
int64_t CudaDevice::epiloguesChosen() { return epiloguesSetUp; }

void setAllowTf32(bool allow) { CudaDevice::allowTf32(allow); }
void setAllowNondeterministic(bool allow) {
  CudaDevice::allowNondeterministic(allow);
}

std::unique_ptr<Device> createCudaDevice(int index) {
  return std::make_unique<CudaDevice>(index);
}

} // namespace cdp::runtime
