//===- Chain.cu - cdp's chain reduction with the GPU's tensors ------------===//
//
// Where the communicator takes device memory for messages (in one process
// the devices' links; under mpirun NCCL's routes between processes' GPUs,
// else the host), the chain's hops move the GPU's tensors as they lie, and
// the two steps that touch values run here as kernels, with the CPU
// kernel's arithmetic: slot 0 turns its gradients' -0 into +0 (the
// all-reduce adds from +0), the last slot scales the sum by 1/N into its
// chain buffer (CDP-ZeRO: in place, for the owner), and a wait copies the
// mean out of the chain buffer of its step's parity. chain_relay touches
// nothing: its CPU kernel runs with the links.
//
//===----------------------------------------------------------------------===//

#include "../MessageBuffers.h"
#include "CudaKernels.h"
#include "Reduce.cuh"

#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/MessageTags.h"

namespace cdp::runtime::cuda {

namespace {

__global__ void positiveZeroKernel(float *x, int64_t n) {
  CDP_FOR_EACH(i, n) {
    if (x[i] == 0.0f)
      x[i] = 0.0f;
  }
}

__global__ void scaleIntoKernel(const float *in, float *out, int64_t n,
                                float scale) {
  CDP_FOR_EACH(i, n) { out[i] = in[i] * scale; }
}

/// The chain buffer (by step parity) that holds step `step`'s mean.
float *chainBuffer(const std::vector<TensorView> &buffers, int64_t step) {
  return buffers[static_cast<size_t>(step % 2)].f32();
}

[[noreturn]] void stopped(int device, const char *what) {
  throw RuntimeError("device " + std::to_string(device) +
                     ": stopped while waiting for " + what);
}

std::unique_ptr<Kernel> chainReduce(const KernelArgs &args) {
  std::vector<TensorView> grads = args.inputs, buffers = args.outputs;
  DeviceLink *link = deviceOf(args).link();
  std::vector<Buffer> parts = writtenBuffers(grads, link);
  int64_t stage = args.i("stage", 0), cycle = args.i("cycle", 1),
          timeStep = args.instruction->time_step(), count = totalCount(grads);
  Communicator *comm = args.communicator;
  int device = comm->rank(), devices = comm->size();
  bool last = device + 1 == devices;
  int owner = static_cast<int>(args.i("owner", -1));
  if (last && owner < 0 &&
      (buffers.size() != 2 || totalCount({buffers[0]}) != count))
    args.fail("the last slot's chain_reduce needs its two chain buffers");
  float scale = 1.0f / static_cast<float>(devices);
  return std::make_unique<FunctionKernel>([=](const StepContext &context) {
    cudaStream_t stream = streamOf(context);
    int64_t tau = timeStep + cycle * context.step;
    std::vector<ConstBuffer> partial(parts.begin(), parts.end());
    if (device == 0) {
      for (const TensorView &g : grads)
        if (g.numel())
          positiveZeroKernel<<<blocksFor(g.numel()), kThreads, 0, stream>>>(
              g.f32(), g.numel());
    } else if (!comm->recvAdd(device - 1,
                              tags::chainPartial(context.step, stage), parts)) {
      stopped(device, "a partial sum");
    }
    if (!last) {
      comm->send(device + 1, tags::chainPartial(context.step, stage), partial,
                 tau);
      return;
    }
    float *mean = owner >= 0 ? nullptr : chainBuffer(buffers, context.step);
    for (const TensorView &g : grads) {
      if (g.numel())
        scaleIntoKernel<<<blocksFor(g.numel()), kThreads, 0, stream>>>(
            g.f32(), owner >= 0 ? g.f32() : mean, g.numel(), scale);
      if (mean)
        mean += g.numel();
    }
    launched("chain_reduce");
    if (owner >= 0)
      comm->send(owner, tags::chainMean(context.step, stage), partial, tau);
    else if (device > 0)
      comm->send(device - 1, tags::chainMean(context.step, stage),
                 ConstBuffer(plan::F32, chainBuffer(buffers, context.step),
                             count, link),
                 tau);
  });
}

std::unique_ptr<Kernel> chainWait(const KernelArgs &args) {
  std::vector<TensorView> buffers = args.inputs, reduced = args.outputs;
  int64_t stage = args.i("stage", 0), delay = args.i("delay", 0);
  int from = static_cast<int>(args.i("from", -1)), device = args.device;
  if (from >= 0) { // CDP-ZeRO's owner: the mean from the chain's last
    Communicator *comm = args.communicator;
    Buffer mean =
        writtenBuffers({reduced.front()}, deviceOf(args).link()).front();
    return std::make_unique<FunctionKernel>([=](const StepContext &context) {
      if (!comm->recv(from, tags::chainMean(context.step - 1 - delay, stage),
                      mean))
        stopped(device, "a reduced gradient");
    });
  }
  if (buffers.size() != 2 || buffers[0].numel() != totalCount(reduced))
    args.fail("chain_wait reads two chain buffers of its stage's size");
  return std::make_unique<FunctionKernel>([=](const StepContext &context) {
    cudaStream_t stream = streamOf(context);
    const float *at = chainBuffer(buffers, context.step - 1 - delay);
    for (const TensorView &r : reduced) {
      checkCuda(cudaMemcpyAsync(r.data, at, byteSize(r),
                                cudaMemcpyDeviceToDevice, stream),
                "chain_wait");
      at += r.numel();
    }
  });
}

} // namespace

std::unique_ptr<Kernel> makeLinkedChainKernel(const std::string &op,
                                              const KernelArgs &args) {
  if (!args.communicator || !args.communicator->carriesDeviceMessages())
    return nullptr;
  connectDevice(args);
  if (op == "chain_reduce")
    return chainReduce(args);
  if (op == "chain_wait")
    return chainWait(args);
  return nullptr;
}

} // namespace cdp::runtime::cuda
