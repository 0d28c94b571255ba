//===- Kernel.h - runtime kernels and their registry ------------*- C++ -*-===//
//
// A kernel is created once per instruction when a plan is loaded, with its
// tensors already bound (memory is static), and then run every step without
// allocating. Kernels are registered by op name and backend, so that a CUDA
// backend can add its own next to the CPU ones.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNEL_H
#define CDP_RUNTIME_KERNEL_H

#include "cdp/Plan/plan.pb.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace cdp::runtime {

class Communicator;
class Device;

/// Every runtime failure: one line naming the instruction, device or tensor.
class RuntimeError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Where a tensor's bytes live: host memory, or a device's own (a GPU's),
/// which only kernels and the device's staging calls touch.
enum class MemorySpace { Host, Device };

/// A view of a tensor's storage.
struct TensorView {
  void *data = nullptr;
  std::vector<int64_t> shape;
  plan::DType dtype = plan::F32;
  MemorySpace space = MemorySpace::Host;

  bool present() const { return data != nullptr; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  float *f32() const { return static_cast<float *>(data); }
  int64_t *i64() const { return static_cast<int64_t *>(data); }
  uint8_t *b8() const { return static_cast<uint8_t *>(data); }
};

/// Copies micro-batch `microBatch` (0-based within step `step`) of graph
/// input `input` into `target`: pipelines load data where a stage needs it.
using Loader = std::function<void(int input, int64_t step, int64_t microBatch,
                                  const TensorView &target)>;

/// What a kernel knows about the step it runs in.
struct StepContext {
  int64_t step = 0;  ///< training step t
  int64_t slot = 0;  ///< micro-batch slot k within the step
  uint64_t seed = 0; ///< --seed (Dropout)
  const Loader *loader = nullptr;
  void *queue = nullptr; ///< the device's queue (Device::queue)
  /// Every instruction's work in launches of its own (profiling, tracing,
  /// the memory report time or watch instructions one by one): a kernel
  /// that took over the launches of the ones after it (Kernel::takeOver)
  /// leaves them their own.
  bool oneByOne = false;
};

/// State a kernel carries from step to step (optimizer moments and step
/// count), exposed for checkpoints and tests.
struct KernelState {
  /// Where a state tensor's elements lie in the parameters': element
  /// `offset` on of the kernel's `tensor`-th parameter (in the order of
  /// its stage) at `stateOffset` in the state, for `length` elements.
  struct Span {
    int tensor;
    int64_t offset, stateOffset, length;
  };
  std::vector<std::pair<std::string, TensorView>> tensors;
  int64_t *counter = nullptr;
  /// The steps the learning-rate schedule has made, where they can differ
  /// from the updates (`counter`): under fp16 a skipped step advances the
  /// schedule only. Null elsewhere.
  int64_t *scheduleCounter = nullptr;
  /// Empty: every state tensor is shaped as the kernel's one parameter
  /// (an update of one tensor); else the spans of a sharded update's
  /// shard (the same for each of its state tensors).
  std::vector<Span> spans;
};

class Kernel {
public:
  virtual ~Kernel() = default;
  virtual void run(const StepContext &context) = 0;
  virtual KernelState state() { return {}; }
  /// Memory the kernel sized at load, beyond the plan's tensors.
  virtual int64_t workspaceBytes() const { return 0; }
  /// The `count` kernels from `following` on, those of the instructions
  /// right after this one's, of the same op and run at the same points of
  /// every step: this kernel may do their work in its own launch (the
  /// optimizer's updates: one multi-tensor update instead of one launch per
  /// parameter). Returns how many of them, from the first, it takes over;
  /// they keep their state and counts, and launch nothing in a step this
  /// kernel ran them. Called once, at load.
  virtual size_t takeOver(Kernel *const *following, size_t count) {
    (void)following;
    (void)count;
    return 0;
  }
  /// Whether every run queues the same launches with the same arguments,
  /// whatever the step context holds but its queue, and changes nothing on
  /// the host: a run of such kernels may be recorded once and replayed
  /// (CUDA graphs, cdp-run --cuda-graphs). False for any kernel that reads
  /// the step, slot or seed, counts steps, waits for the device or talks
  /// to the communicator.
  virtual bool sameEveryStep() const { return false; }
};

/// How a kernel's runs differ from step to step (Kernel::sameEveryStep).
enum class Launches {
  /// Arguments or host work of their own each step (a seed, a count, a
  /// message, a wait).
  PerStep,
  /// The same launches with the same arguments every step.
  SameEveryStep,
};

/// A kernel made of one function, with the bytes it sized at load.
class FunctionKernel : public Kernel {
public:
  explicit FunctionKernel(std::function<void(const StepContext &)> body,
                          int64_t workspace = 0,
                          Launches launches = Launches::PerStep)
      : body(std::move(body)), workspace(workspace), launches(launches) {}
  void run(const StepContext &context) override { body(context); }
  int64_t workspaceBytes() const override { return workspace; }
  bool sameEveryStep() const override {
    return launches == Launches::SameEveryStep;
  }

private:
  std::function<void(const StepContext &)> body;
  int64_t workspace;
  Launches launches;
};

/// What a kernel factory gets: the instruction and its bound tensors.
struct KernelArgs {
  const plan::Instruction *instruction = nullptr;
  std::vector<TensorView> inputs; ///< absent optional inputs: !present()
  std::vector<TensorView> outputs;
  int threads = 1;
  Communicator *communicator = nullptr; ///< for communication instructions
  int device = 0;
  Device *runsOn = nullptr; ///< the device (its queue, its libraries)

  const plan::Attribute *find(const std::string &name) const;
  /// The attribute, or null when absent; fails when it holds another type
  /// (an edited plan), so that no kernel reads a default in its place.
  const plan::Attribute *find(const std::string &name,
                              plan::Attribute::ValueCase expected) const;
  int64_t i(const std::string &name, int64_t fallback) const;
  double f(const std::string &name, double fallback) const;
  std::string s(const std::string &name, const std::string &fallback) const;
  std::vector<int64_t> ints(const std::string &name) const;
  /// A list of reals (empty when absent).
  std::vector<double> floats(const std::string &name) const;
  plan::DType type(const std::string &name) const;
  const plan::Tensor *tensor(const std::string &name) const;
  /// Throws a RuntimeError naming the instruction.
  [[noreturn]] void fail(const std::string &message) const;
};

enum class Backend { CPU, CUDA };

using KernelFactory =
    std::function<std::unique_ptr<Kernel>(const KernelArgs &)>;

class KernelRegistry {
public:
  static KernelRegistry &instance();
  void add(const std::string &op, Backend backend, KernelFactory factory);
  const KernelFactory *lookup(const std::string &op, Backend backend) const;
  /// The ops with a kernel for `backend`.
  std::vector<std::string> ops(Backend backend) const;

private:
  std::map<std::pair<std::string, Backend>, KernelFactory> factories;
};

/// Registers the CPU kernels (called once by the runtime).
void registerCpuKernels(KernelRegistry &registry);
/// Registers the CUDA kernels where the build has them (else nothing).
void registerCudaKernels(KernelRegistry &registry);

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNEL_H
