//===- Communication.cu - communication staged through the host ----------===//
//
// The communicators carry host memory (in-process and MPI alike), so a
// GPU's send, recv, load, reductions and chain hops run the CPU kernel of
// the same op on page-locked host mirrors of their tensors: the stream's
// work up to the instruction is waited for, inputs and outputs are copied
// out, the CPU kernel runs (tags, chain order and logs are the CPU's), and
// the outputs are copied back asynchronously. dp's and cdp's reductions go
// through NCCL instead where every device has a GPU of its own
// (NcclReduce.cu).
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"

#include <map>

namespace cdp::runtime::cuda {

namespace {

class HostStagedKernel : public Kernel {
public:
  HostStagedKernel(const KernelArgs &args, const KernelFactory &cpu)
      : device(deviceOf(args)) {
    KernelArgs host = args;
    host.runsOn = nullptr;
    for (const TensorView &view : args.inputs)
      reserve(view, /*isOutput=*/false);
    for (const TensorView &view : args.outputs)
      reserve(view, /*isOutput=*/true);
    for (Mirror &m : mirrors)
      m.host = std::make_shared<PinnedBuffer>(device, m.bytes);
    for (TensorView &view : host.inputs)
      redirect(view);
    for (TensorView &view : host.outputs)
      redirect(view);
    inner = cpu(host);
  }

  void run(const StepContext &context) override {
    cudaStream_t stream = streamOf(context);
    for (const Mirror &m : mirrors)
      if (m.bytes)
        checkCuda(cudaMemcpyAsync(m.host->as<void>(), m.device, m.bytes,
                                  cudaMemcpyDeviceToHost, stream),
                  "stage to the host");
    checkCuda(cudaStreamSynchronize(stream), "stage to the host");
    StepContext host = context;
    host.queue = nullptr;
    inner->run(host);
    for (const Mirror &m : mirrors)
      if (m.written && m.bytes)
        checkCuda(cudaMemcpyAsync(m.device, m.host->as<void>(), m.bytes,
                                  cudaMemcpyHostToDevice, stream),
                  "stage to the GPU");
  }

private:
  struct Mirror {
    void *device;
    size_t bytes;
    std::shared_ptr<PinnedBuffer> host;
    bool written;
  };

  /// One mirror per distinct tensor memory, as large as its largest view.
  void reserve(const TensorView &view, bool isOutput) {
    if (!view.present())
      return;
    auto [found, added] = byPointer.emplace(view.data, mirrors.size());
    if (added)
      mirrors.push_back({view.data, 0, nullptr, false});
    Mirror &m = mirrors[found->second];
    m.bytes = std::max(m.bytes, byteSize(view));
    m.written = m.written || isOutput;
  }

  void redirect(TensorView &view) {
    if (!view.present())
      return;
    view.data = mirrors[byPointer.at(view.data)].host->as<void>();
    view.space = MemorySpace::Host;
  }

  CudaDevice &device;
  std::vector<Mirror> mirrors;
  std::map<void *, size_t> byPointer;
  std::unique_ptr<Kernel> inner;
};

} // namespace

std::unique_ptr<Kernel> makeNcclKernel(const std::string &op,
                                       const KernelArgs &args);

void registerCommunication(KernelRegistry &registry) {
  for (const char *op : {"send", "recv", "load", "reduce_start", "reduce_wait",
                         "chain_reduce", "chain_relay", "chain_wait"}) {
    const KernelFactory *cpu = registry.lookup(op, Backend::CPU);
    if (!cpu)
      continue;
    KernelFactory factory = *cpu;
    bool reduction =
        std::string(op) == "reduce_start" || std::string(op) == "reduce_wait";
    registry.add(op, Backend::CUDA,
                 [factory, reduction, name = std::string(op)](
                     const KernelArgs &args) -> std::unique_ptr<Kernel> {
                   if (reduction)
                     if (std::unique_ptr<Kernel> nccl =
                             makeNcclKernel(name, args))
                       return nccl;
                   return std::make_unique<HostStagedKernel>(args, factory);
                 });
  }
}

void registerCudaKernelsInto(KernelRegistry &registry) {
  registerElementwise(registry);
  registerShape(registry);
  registerLinalg(registry);
  registerConvolution(registry);
  registerNormalization(registry);
  registerPooling(registry);
  registerLoss(registry);
  registerOptimizer(registry);
  registerCommunication(registry);
}

} // namespace cdp::runtime::cuda

namespace cdp::runtime {
void registerCudaKernels(KernelRegistry &registry) {
  cuda::registerCudaKernelsInto(registry);
}
} // namespace cdp::runtime
