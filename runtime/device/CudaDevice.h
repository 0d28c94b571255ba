//===- CudaDevice.h - a GPU as a plan's device ------------------*- C++ -*-===//
//
// One plan device on one GPU: its own stream, cuBLAS and cuDNN handles bound
// to that stream, and a status word kernels set instead of throwing (a GPU
// kernel cannot), read once per step with the step's other small values.
// Several devices may share one GPU; each then has its own stream.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_DEVICE_CUDADEVICE_H
#define CDP_RUNTIME_DEVICE_CUDADEVICE_H

#include "cdp/Runtime/Device.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <memory>
#include <string>

namespace cdp::runtime {

class CudaStreamOps;

/// What a kernel flags in the status word (bits).
enum CudaStatus : int {
  kLabelOutOfRange = 1,
  kIndexOutOfRange = 2,
};

/// Throws a RuntimeError naming `what` when `status` is an error.
void checkCuda(cudaError_t status, const char *what);
void checkCublas(cublasStatus_t status, const char *what);
void checkCudnn(cudnnStatus_t status, const char *what);

class CudaDevice : public Device {
public:
  explicit CudaDevice(int index);
  ~CudaDevice() override;
  Backend backend() const override { return Backend::CUDA; }
  MemorySpace space() const override { return MemorySpace::Device; }
  void *allocate(size_t bytes) override;
  void release(void *memory) override;
  void download(void *host, const void *memory, size_t bytes) override;
  void upload(void *memory, const void *host, size_t bytes) override;
  void fill(void *memory, unsigned char value, size_t bytes) override;
  void *queue() override;
  void synchronize() override;
  /// A CUDA graph captured from the stream (this thread's launches only).
  std::unique_ptr<Recording>
  record(const std::function<void()> &launches) override;
  void finishStep(int64_t step) override;
  /// Messages to devices of the same GPU stay on it, queued on `work`.
  DeviceLink *link() override { return streamLink.get(); }
  /// The same link, to which routes to other processes' GPUs are added
  /// (NcclRoutes.cu).
  StreamLink &ownLink() { return *streamLink; }

  /// Page-locked host memory for staging.
  void *allocateHost(size_t bytes) override;
  void releaseHost(void *memory) override;
  void uploadAhead(void *staging, const void *host, size_t bytes) override;
  void takeUploaded(void *memory, const void *staging, size_t bytes) override;

  int gpu() const { return gpuIndex; }
  cudaStream_t stream() const { return work; }
  cublasHandle_t blas() const { return blasHandle; }
  /// cuBLASLt's handle, made on first use (at load, by a product with an
  /// epilogue), and the workspace it shares with cuBLAS's handle: the
  /// device's products run one after another on its stream.
  cublasLtHandle_t blasLt();
  void *blasWorkspace() const { return blasMemory; }
  size_t blasWorkspaceBytes() const { return blasBytes; }
  cudnnHandle_t dnn() const { return dnnHandle; }
  /// Memory any kernel of this device may use while it runs (they run one
  /// after another on its stream), at least `bytes`: grown at load, never
  /// kept by a kernel (a later kernel's reservation may move it).
  void reserveShared(size_t bytes);
  void *shared() const { return sharedMemory; }
  int64_t workspaceBytes() const override {
    return static_cast<int64_t>(sharedSize) + kernelBytes;
  }
  /// Kernels' own device memory beside the plan's tensors (Scratch), which
  /// the report counts as workspace; optimizer state is counted apart.
  void *allocateForKernel(size_t bytes, bool optimizerState);
  void releaseForKernel(void *memory, size_t bytes, bool optimizerState);
  /// The status word kernels OR their CudaStatus bits into.
  int *status() const { return statusWord; }
  /// TF32 tensor cores for float32 products (cdp-run --allow-tf32).
  static void allowTf32(bool allow);
  static bool tf32Allowed();
  /// Library algorithms whose bits vary from run to run (cuDNN's fastest
  /// convolutions; cdp-run --allow-nondeterministic).
  static void allowNondeterministic(bool allow);
  static bool nondeterministicAllowed();
  /// cuBLASLt's epilogues for a gemm's bias (on unless a test compares the
  /// products without them).
  static void allowEpilogues(bool allow);
  static bool epiloguesAllowed();
  /// Products set up with an epilogue in this process, counted by
  /// Linalg.cu (where cuBLASLt had an algorithm for them).
  static void countEpilogue();
  static int64_t epiloguesChosen();

private:
  int deviceIndex, gpuIndex;
  cudaStream_t work = nullptr;
  cublasHandle_t blasHandle = nullptr;
  cublasLtHandle_t blasLtHandle = nullptr;
  cudnnHandle_t dnnHandle = nullptr;
  // uploadAhead's stream (made on first use) and the events that order its
  // copies with the kernels' stream.
  cudaStream_t copies = nullptr;
  cudaEvent_t uploaded = nullptr, taken = nullptr;
  void *sharedMemory = nullptr;
  size_t sharedSize = 0;
  /// Counts the shared block's moves: a graph recorded before one reads
  /// memory since released.
  std::shared_ptr<int64_t> sharedMoves = std::make_shared<int64_t>(0);
  int64_t kernelBytes = 0;    ///< workspace kernels hold (allocateForKernel)
  void *blasMemory = nullptr; ///< cuBLAS's workspace, blasBytes of it
  size_t blasBytes = 0;
  int *statusWord = nullptr;
  int *statusHost = nullptr;
  std::shared_ptr<CudaStreamOps> streamOps;
  std::unique_ptr<StreamLink> streamLink;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_DEVICE_CUDADEVICE_H
