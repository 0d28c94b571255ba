//===- CudaKernels.h - shared helpers of the CUDA kernels -------*- C++ -*-===//
//
// Every CUDA kernel is made at load with its tensors bound, like the CPU
// ones, and enqueues its work on the device's stream when run: no
// allocation, no host synchronisation. Index arithmetic that the CPU
// kernels precompute into tables (broadcasts, transposes, slices) is an
// IndexMap here (../IndexMap.h): sizes and strides passed by value, the
// offset computed per element on the GPU with 32-bit dividers.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_CUDA_CUDAKERNELS_H
#define CDP_RUNTIME_KERNELS_CUDA_CUDAKERNELS_H

#include "../../device/CudaDevice.h"
#include "../IndexMap.h"
#include "../NarrowOperands.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Kernel.h"

#include <algorithm>
#include <memory>

namespace cdp::runtime::cuda {

void registerElementwise(KernelRegistry &registry);
void registerShape(KernelRegistry &registry);
/// Where, comparisons, logic, IsNaN and IsInf.
void registerSelection(KernelRegistry &registry);
void registerLinalg(KernelRegistry &registry);
void registerConvolution(KernelRegistry &registry);
void registerNormalization(KernelRegistry &registry);
/// cdp.attention and attention_grad.
void registerAttention(KernelRegistry &registry);
void registerPooling(KernelRegistry &registry);
void registerLoss(KernelRegistry &registry);
void registerOptimizer(KernelRegistry &registry);
void registerCommunication(KernelRegistry &registry);
/// Readies the kernel's device for messages in its memory: its link given
/// to the communicator (useLink), and under mpirun the routes this process
/// joined for it (to and from GPUs of other processes) added to the link,
/// once (NcclRoutes.cu).
void connectDevice(const KernelArgs &args);
/// laysa's sparse_absorb, sparse_select and sparse_apply.
void registerSparseExchange(KernelRegistry &registry);

/// Adds a kernel whose factory returns the step function directly;
/// `launches` says whether that function queues the same work every step
/// (Kernel::sameEveryStep: then --cuda-graphs records it once).
template <typename Factory>
void addKernel(KernelRegistry &registry, const std::string &op,
               Launches launches, Factory make) {
  registry.add(
      op, Backend::CUDA,
      [make, launches](const KernelArgs &args) -> std::unique_ptr<Kernel> {
        return std::make_unique<FunctionKernel>(make(args), 0, launches);
      });
}
/// A kernel whose work differs from step to step (a seed, a slot).
template <typename Factory>
void addKernel(KernelRegistry &registry, const std::string &op, Factory make) {
  addKernel(registry, op, Launches::PerStep, make);
}

inline CudaDevice &deviceOf(const KernelArgs &args) {
  return *static_cast<CudaDevice *>(args.runsOn);
}
inline cudaStream_t streamOf(const StepContext &context) {
  return static_cast<cudaStream_t>(context.queue);
}

constexpr int kThreads = 256;
inline unsigned blocksFor(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t(1) << 20));
}

/// Throws when the launch just made failed (a bad configuration); failures
/// while running surface at the step's end (CudaDevice::finishStep).
inline void launched(const char *kernel) {
  checkCuda(cudaGetLastError(), kernel);
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape);
int64_t product(const std::vector<int64_t> &shape, size_t begin = 0,
                size_t end = ~size_t(0));
inline int64_t normalizeAxis(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}
size_t byteSize(const TensorView &view);

/// Per dimension of `out`, the stride numpy broadcasting reads `in` with
/// (0 where `in` repeats).
std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &in,
                                      const std::vector<int64_t> &out);
/// Iterating `sizes`, an element's index along dimension `d` (a slot, a
/// row, a class), with the maps' 32-bit dividers.
IndexMap coordinateMap(const KernelArgs &args,
                       const std::vector<int64_t> &sizes, size_t d);
/// The channel of each element of an (N, C, spatial...) tensor.
IndexMap channelMap(const KernelArgs &args, const std::vector<int64_t> &shape);
/// Iterating `out`, the element of `in` numpy broadcasting reads.
IndexMap broadcastMap(const KernelArgs &args, const std::vector<int64_t> &in,
                      const std::vector<int64_t> &out);
/// Iterating `out`, the element of `in` read through strides `strides`
/// (one per dimension of `out`) from `base`.
IndexMap stridedMap(const KernelArgs &args, const std::vector<int64_t> &out,
                    const std::vector<int64_t> &strides, int64_t base = 0);

/// Copies (element width `width` bytes) y[i] = x[map(i)] for i < n.
void gatherCopy(cudaStream_t stream, const void *x, void *y, int64_t n,
                size_t width, const IndexMap &map);

/// A tensor seen as segments to reduce: `outer` iterates the kept
/// dimensions (in order: the reduced tensor's layout), `inner` the reduced
/// ones, both giving offsets into the tensor.
struct Segments {
  IndexMap outer, inner;
  int64_t outputs = 1, count = 1;
};
Segments segmentsOf(const KernelArgs &args, const std::vector<int64_t> &shape,
                    const std::vector<bool> &reduced);

class Scratch;

/// Sums over a tensor's segments, split over enough blocks to fill the GPU
/// however few the segments are (a bias gradient, batch-norm channels):
/// each block or thread sums one chunk of one segment into a partial in
/// double, and a second kernel adds every segment's partials in order, so
/// that a result does not change from run to run. Sized at load.
class SegmentedSum {
public:
  /// What is summed: x, x * x, or x * z (z laid out as x); or x's values
  /// where x holds 2-byte bf16 or fp16 patterns (a gradient stored so).
  enum class Term { Value, Square, Product, Bfloat16Value, Float16Value };
  SegmentedSum(const KernelArgs &args, const std::vector<int64_t> &shape,
               const std::vector<bool> &reduced);
  int64_t outputs() const { return segments.outputs; }
  int64_t count() const { return segments.count; }
  /// out[o] = the sum of the term over segment o.
  void sums(cudaStream_t stream, const float *x, const float *z, Term term,
            double *out) const;
  /// y[o] = scale * the sum of x over segment o (x's values as `term`
  /// reads them: Value, Bfloat16Value or Float16Value), rounded to
  /// `rounding` where it names a format.
  void sumInto(cudaStream_t stream, const void *x, float *y, double scale,
               Term term = Term::Value,
               NarrowFormat rounding = NarrowFormat::None) const;

private:
  void partial(cudaStream_t stream, const float *x, const float *z,
               Term term) const;
  Segments segments;
  bool contiguous; ///< the reduced elements are adjacent in memory
  int64_t splits = 1, chunk = 1;
  std::shared_ptr<Scratch> partials;
};

/// Device memory a kernel owns beside the plan's tensors, sized at load:
/// workspace in the report, or the optimizer state its kernel lists.
class Scratch {
public:
  enum Use { Workspace, OptimizerState };
  Scratch(CudaDevice &device, size_t bytes, Use use = Workspace)
      : device(device), bytes(bytes), use(use),
        memory(device.allocateForKernel(bytes, use == OptimizerState)) {}
  ~Scratch() { device.releaseForKernel(memory, bytes, use == OptimizerState); }
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
  template <typename T> T *as() const { return static_cast<T *>(memory); }

private:
  CudaDevice &device;
  size_t bytes;
  Use use;
  void *memory;
};

/// Page-locked host memory a kernel stages through.
class PinnedBuffer {
public:
  PinnedBuffer(CudaDevice &device, size_t bytes)
      : device(device), memory(device.allocateHost(bytes)) {}
  ~PinnedBuffer() { device.releaseHost(memory); }
  PinnedBuffer(const PinnedBuffer &) = delete;
  PinnedBuffer &operator=(const PinnedBuffer &) = delete;
  template <typename T> T *as() const { return static_cast<T *>(memory); }

private:
  CudaDevice &device;
  void *memory;
};

} // namespace cdp::runtime::cuda

#endif // CDP_RUNTIME_KERNELS_CUDA_CUDAKERNELS_H
