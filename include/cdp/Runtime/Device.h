//===- Device.h - the device seam: memory and execution ---------*- C++ -*-===//
//
// A backend's device owns the memory a plan's device uses and the queue its
// kernels run on. The executor allocates the arena and the persistent
// tensors through it, and everything outside a kernel (the loader, --feed,
// --dump-params, --save-onnx, checkpoints, the NaN check) moves bytes only
// through its staging calls, never through a raw pointer into device
// memory. The CPU device's memory is the host's, so its staging is a plain
// copy and the executor hands host code the tensor itself; a GPU device
// (CUDA) copies through the driver.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_DEVICE_H
#define CDP_RUNTIME_DEVICE_H

#include "cdp/Runtime/DeviceLink.h"
#include "cdp/Runtime/Kernel.h"

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cdp::runtime {

class Fabric;

/// Launches recorded once and replayed as one (a CUDA graph).
class Recording {
public:
  virtual ~Recording() = default;
  /// Queues the recorded launches again on the device's queue; false, and
  /// nothing queued, where they no longer hold (memory a launch reads
  /// moved since the recording): record them again.
  virtual bool replay() = 0;
};

class Device {
public:
  virtual ~Device() = default;
  virtual Backend backend() const = 0;
  /// Where the memory `allocate` returns lives.
  virtual MemorySpace space() const = 0;
  /// `bytes` of zeroed memory, 64-byte aligned; throws RuntimeError when
  /// the device has not that much.
  virtual void *allocate(size_t bytes) = 0;
  virtual void release(void *memory) = 0;
  /// Staging: copies between host memory and this device's, complete when
  /// they return (after the work queued before them).
  virtual void download(void *host, const void *memory, size_t bytes) = 0;
  virtual void upload(void *memory, const void *host, size_t bytes) = 0;
  /// Sets `bytes` of device memory to `value`.
  virtual void fill(void *memory, unsigned char value, size_t bytes) = 0;
  /// Host memory to stage through (page-locked on a GPU, so that copies
  /// from it run asynchronously), and its release.
  virtual void *allocateHost(size_t bytes);
  virtual void releaseHost(void *memory);
  /// Uploads ahead of the step that reads them (the next micro-batch copied
  /// while the current step runs). `uploadAhead` queues a copy from host
  /// memory of allocateHost's into `staging` (this device's memory) on a
  /// queue of its own, after every copy out of `staging` queued before;
  /// `takeUploaded` queues on the kernels' queue the copy from `staging`
  /// into `memory`, after every upload queued before. The host memory must
  /// stay unchanged until the step that takes it ends. The CPU's are plain
  /// copies made when called.
  virtual void uploadAhead(void *staging, const void *host, size_t bytes) {
    upload(staging, host, bytes);
  }
  virtual void takeUploaded(void *memory, const void *staging, size_t bytes);
  /// The queue kernels enqueue work on, passed to them in the step context
  /// (a CUDA stream; the CPU runs work when called and has none).
  virtual void *queue() { return nullptr; }
  /// Returns when all work queued so far is done, uploads ahead included.
  virtual void synchronize() {}
  /// After a step's instructions: a device whose kernels cannot throw (a
  /// GPU's) waits for them here and throws the RuntimeError one of them
  /// flagged (a label out of range), naming the step.
  virtual void finishStep(int64_t step) { (void)step; }
  /// How a communicator moves this device's memory without reading it
  /// (a GPU's stream); null where the host reads it (the CPU's).
  virtual DeviceLink *link() { return nullptr; }
  /// Memory the device holds for its kernels beyond what each kernel
  /// reports (a GPU's: the kernels' scratch, cuBLAS's workspace, the block
  /// its narrow products convert their operands into; the CPU's scratch
  /// block).
  virtual int64_t workspaceBytes() const { return 0; }
  /// The device's scratch block, grown at load to at least `bytes`: memory
  /// a kernel uses only while it runs (operands widened from 2 bytes, a
  /// result before it is packed). The device's kernels run one after
  /// another, so they share it, and it is as large as the largest of them
  /// asks. Its address never moves: a kernel may keep it from load on, but
  /// not what it wrote there. Null where the device has none (a GPU's
  /// kernels have reserveShared).
  virtual void *reserveScratch(size_t bytes) {
    (void)bytes;
    return nullptr;
  }
  /// Records what `launches` queues on queue() without running it, for
  /// Recording::replay; null where the device cannot record (the CPU runs
  /// work as it is asked) or the recording failed (a launch that cannot be
  /// recorded, such as a wait for the device). Either way nothing of it ran:
  /// the caller runs the launches itself.
  virtual std::unique_ptr<Recording>
  record(const std::function<void()> &launches) {
    (void)launches;
    return nullptr;
  }
};

/// Device memory of its own, released with it.
class DeviceBuffer {
public:
  DeviceBuffer(Device &device, size_t bytes)
      : device(device), memory(device.allocate(bytes)) {}
  ~DeviceBuffer() { device.release(memory); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  void *data() const { return memory; }

private:
  Device &device;
  void *memory;
};

/// Device `index` of `backend`. Throws RuntimeError when this build or
/// machine lacks it.
std::unique_ptr<Device> createDevice(Backend backend, int index);

/// Device `index` as a GPU (the build's CUDA backend, or a RuntimeError
/// saying the build has none).
std::unique_ptr<Device> createCudaDevice(int index);

/// Whether GPU devices created from now on may use TF32 tensor cores for
/// float32 products (cdp-run --allow-tf32; off by default).
void setAllowTf32(bool allow);

/// Whether GPU kernels may use library algorithms whose results vary in the
/// last bits from run to run (cdp-run --allow-nondeterministic; off by
/// default, so that a resumed run equals an uninterrupted one).
void setAllowNondeterministic(bool allow);

/// Under mpirun, before this process's GPU devices are made: the job's
/// processes agree on NCCL for dp's and cdp's reductions (collective over
/// `fabric`), which then serves them where every device has a GPU of its
/// own; returns why not otherwise (empty when it does). A CPU-only build
/// says it has no NCCL.
std::string prepareNcclAcrossProcesses(Fabric &fabric);

/// Under mpirun, before this process's GPU devices are made: the job's
/// processes join a two-rank NCCL communicator for every ordered pair of
/// devices in different processes that the plan's sends join (collective
/// over `fabric`), over which those messages go GPU to GPU. Returns a note
/// for each pair that goes through host memory instead, and why (devices
/// sharing a GPU, or one without). A CPU-only build joins none.
std::vector<std::string>
prepareNcclRoutesAcrossProcesses(Fabric &fabric, const plan::Plan &plan);

/// The backend a plan's device names ("cpu", the default, or "cuda").
/// Throws RuntimeError for another name.
Backend parseBackend(const std::string &name);

} // namespace cdp::runtime

#endif // CDP_RUNTIME_DEVICE_H
