//===- Communication.cu - communication on the GPU or through the host ---===//
//
// Where the communicator takes a GPU's memory -- in one process for the
// messages, reductions and collectives (the devices' links), under mpirun
// for the messages (the chain's hops and the replicas' sums too) and
// ZeRO's and laysa's collectives, as messages over NCCL's routes between
// processes' GPUs (NcclRoutes.cu) -- the CPU kernel of the op runs with
// the device's tensors and link (ZeRO's sums of the norm's shares too, in
// one process; ZeRO's updates are kernels of their own, Optimizer.cu).
// Otherwise (the reductions NCCL does not serve under mpirun and
// norm_all_reduce there, the indexing ops below) it runs on page-locked
// host mirrors of the tensors: the stream's work up to
// the instruction is waited for, the tensors are copied out, the CPU
// kernel runs (tags, optimizer state and logs are the CPU's), and what it
// wrote is copied back asynchronously. dp's and cdp's reductions go
// through NCCL where every device has a GPU of its own (NcclReduce.cu).
//
// A mirror covers a run of device memory, not a tensor (MirrorSpans.h).
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"

#include "../MirrorSpans.h"

#include "cdp/Runtime/Communicator.h"

namespace cdp::runtime::cuda {

namespace {

class HostStagedKernel : public Kernel {
public:
  /// `writesInputs`: the op updates some inputs in place (parameters,
  /// error feedback), so every mirror goes back, not only the outputs'.
  HostStagedKernel(const KernelArgs &args, const KernelFactory &cpu,
                   bool writesInputs)
      : device(deviceOf(args)) {
    for (const TensorView &view : args.inputs)
      reserve(view, writesInputs);
    for (const TensorView &view : args.outputs)
      reserve(view, /*written=*/true);
    mergeTouching();
    KernelArgs host = args;
    host.runsOn = nullptr;
    for (TensorView &view : host.inputs)
      redirect(view);
    for (TensorView &view : host.outputs)
      redirect(view);
    inner = cpu(host);
  }

  void run(const StepContext &context) override {
    cudaStream_t stream = streamOf(context);
    for (size_t k = 0; k < spans.size(); ++k)
      checkCuda(cudaMemcpyAsync(hosts[k]->as<void>(), spans[k].begin,
                                spans[k].bytes, cudaMemcpyDeviceToHost, stream),
                "stage to the host");
    checkCuda(cudaStreamSynchronize(stream), "stage to the host");
    StepContext host = context;
    host.queue = nullptr;
    inner->run(host);
    for (size_t k = 0; k < spans.size(); ++k)
      if (spans[k].written)
        checkCuda(cudaMemcpyAsync(spans[k].begin, hosts[k]->as<void>(),
                                  spans[k].bytes, cudaMemcpyHostToDevice,
                                  stream),
                  "stage to the GPU");
  }

  /// The CPU kernel's state (optimizer moments, step counts) lives in host
  /// memory, where checkpoints read it as they read the CPU backend's.
  KernelState state() override { return inner->state(); }
  int64_t workspaceBytes() const override { return inner->workspaceBytes(); }

private:
  void reserve(const TensorView &view, bool written) {
    if (view.present() && byteSize(view))
      spans.push_back(
          {static_cast<char *>(view.data), byteSize(view), written});
  }

  void mergeTouching() {
    spans = mergeSpans(std::move(spans));
    for (const MirrorSpan &span : spans)
      hosts.push_back(std::make_unique<PinnedBuffer>(device, span.bytes));
  }

  void redirect(TensorView &view) const {
    if (!view.present() || !byteSize(view))
      return;
    char *at = static_cast<char *>(view.data);
    size_t k = spanHolding(spans, at);
    view.data = hosts[k]->as<char>() + (at - spans[k].begin);
    view.space = MemorySpace::Host;
  }

  CudaDevice &device;
  std::vector<MirrorSpan> spans;                    ///< merged once reserved
  std::vector<std::unique_ptr<PinnedBuffer>> hosts; ///< one per span
  std::unique_ptr<Kernel> inner;
};

/// ZeRO stage 3's release marks the gathered stage dead; it runs nothing.
class NothingKernel : public Kernel {
public:
  void run(const StepContext &) override {}
  bool sameEveryStep() const override { return true; }
};

/// A pipeline stage's micro-batch of a graph input (`load`): the data
/// source writes it into one of two page-locked buffers, used in turn, and
/// it is copied up on the stream, so the stream is never waited for; a
/// buffer is written again once the copy out of it two loads before has
/// finished (an event each, long past in a step's work).
class LoadKernel : public Kernel {
public:
  explicit LoadKernel(const KernelArgs &args)
      : y(args.outputs[0]), input(static_cast<int>(args.i("input", 0))),
        microBatch(args.i("micro_batch", 0)),
        location(args.instruction->location()), bytes(byteSize(y)) {
    CudaDevice &device = deviceOf(args);
    checkCuda(cudaSetDevice(device.gpu()), "cudaSetDevice");
    for (int i = 0; i < 2; ++i) {
      staging[i] =
          std::make_unique<PinnedBuffer>(device, std::max<size_t>(bytes, 1));
      checkCuda(cudaEventCreateWithFlags(&copied[i], cudaEventDisableTiming),
                "load");
    }
  }
  ~LoadKernel() override {
    for (cudaEvent_t event : copied) {
      cudaEventSynchronize(event);
      cudaEventDestroy(event);
    }
  }

  void run(const StepContext &context) override {
    if (!context.loader)
      throw RuntimeError("load of '" + location + "': no data source");
    int i = next;
    next = 1 - next;
    checkCuda(cudaEventSynchronize(copied[i]), "load");
    TensorView host = y;
    host.data = staging[i]->as<void>();
    host.space = MemorySpace::Host;
    (*context.loader)(input, context.step, microBatch, host);
    cudaStream_t stream = streamOf(context);
    checkCuda(cudaMemcpyAsync(y.data, host.data, bytes, cudaMemcpyHostToDevice,
                              stream),
              "load");
    checkCuda(cudaEventRecord(copied[i], stream), "load");
  }

private:
  TensorView y;
  int input;
  int64_t microBatch;
  std::string location;
  size_t bytes;
  std::unique_ptr<PinnedBuffer> staging[2];
  cudaEvent_t copied[2] = {nullptr, nullptr};
  int next = 0; ///< the buffer the next load writes
};

} // namespace

std::unique_ptr<Kernel> makeNcclKernel(const std::string &op,
                                       const KernelArgs &args);
/// chain_reduce and chain_wait where the communicator carries device
/// memory (Chain.cu), else null.
std::unique_ptr<Kernel> makeLinkedChainKernel(const std::string &op,
                                              const KernelArgs &args);
/// ZeRO's shard_update on the GPU where it can run there (Optimizer.cu),
/// else null.
std::unique_ptr<Kernel> makeDeviceShardUpdate(const std::string &op,
                                              const KernelArgs &args);

void registerCommunication(KernelRegistry &registry) {
  // Whether the op updates inputs in place, by op.
  const std::pair<const char *, bool> staged[] = {
      {"send", false},
      {"recv", false},
      {"reduce_start", false},
      {"reduce_wait", false},
      {"chain_reduce", false},
      {"chain_relay", false},
      {"chain_wait", false},
      {"shard_reduce", false},
      {"shard_gather", false},
      {"shard_update", true},
      {"replica_shard_update", true},
      {"replica_sum", false},
      {"norm_all_reduce", true},
      {"sparse_gather", false},
      // Indexing ops exporters emit for positions and masks; not yet
      // kernels of their own on the GPU.
      {"gather_elements", false},
      {"gather_elements_grad", false},
      {"gather_nd", false},
      {"gather_nd_grad", false},
      {"cum_sum", false},
      {"trilu", false}};
  for (auto [op, writesInputs] : staged) {
    const KernelFactory *cpu = registry.lookup(op, Backend::CPU);
    if (!cpu)
      continue;
    KernelFactory factory = *cpu;
    std::string name = op;
    bool reduction = name == "reduce_start" || name == "reduce_wait";
    // Sums of a few scalars: through the links where the communicator sums
    // device memory (one process), never through NCCL.
    bool inPlaceSum = name == "norm_all_reduce";
    bool message = name == "send" || name == "recv" || name == "chain_relay" ||
                   name == "replica_sum";
    bool collective = name == "shard_reduce" || name == "shard_gather" ||
                      name == "sparse_gather";
    registry.add(
        op, Backend::CUDA,
        [factory, reduction, inPlaceSum, message, collective,
         writes = writesInputs,
         name](const KernelArgs &args) -> std::unique_ptr<Kernel> {
          if (reduction)
            if (std::unique_ptr<Kernel> nccl = makeNcclKernel(name, args))
              return nccl;
          if (std::unique_ptr<Kernel> chain = makeLinkedChainKernel(name, args))
            return chain;
          if (std::unique_ptr<Kernel> shard = makeDeviceShardUpdate(name, args))
            return shard;
          // These CPU kernels only hand their tensors to the communicator:
          // one that takes device memory for them moves them through the
          // GPU's link (copies and sums queued on its stream), under mpirun
          // to and from other processes' GPUs over NCCL.
          Communicator *comm = args.communicator;
          if (comm &&
              ((message && comm->carriesDeviceMessages()) ||
               (collective && comm->carriesDeviceCollectives()) ||
               ((reduction || inPlaceSum) && comm->carriesDeviceMemory()))) {
            connectDevice(args);
            return factory(args);
          }
          return std::make_unique<HostStagedKernel>(args, factory, writes);
        });
  }
  registry.add("load", Backend::CUDA,
               [](const KernelArgs &args) -> std::unique_ptr<Kernel> {
                 return std::make_unique<LoadKernel>(args);
               });
  registry.add("shard_release", Backend::CUDA,
               [](const KernelArgs &) -> std::unique_ptr<Kernel> {
                 return std::make_unique<NothingKernel>();
               });
}

void registerCudaKernelsInto(KernelRegistry &registry) {
  registerElementwise(registry);
  registerShape(registry);
  registerLinalg(registry);
  registerConvolution(registry);
  registerNormalization(registry);
  registerAttention(registry);
  registerPooling(registry);
  registerLoss(registry);
  registerOptimizer(registry);
  registerCommunication(registry);
  registerSparseExchange(registry);
}

} // namespace cdp::runtime::cuda

namespace cdp::runtime {
void registerCudaKernels(KernelRegistry &registry) {
  cuda::registerCudaKernelsInto(registry);
}
} // namespace cdp::runtime
