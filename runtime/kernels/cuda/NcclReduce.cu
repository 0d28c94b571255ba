//===- NcclReduce.cu - dp and cdp reductions through NCCL -----------------===//
//
// Where every device of an in-process run has a GPU of its own, the
// gradient reductions (`reduce_start`, `reduce_wait`) never leave the GPUs:
// reduce_start packs the stage's gradients into a device buffer on the
// compute stream, and the device's communication stream sums them over the
// devices with ncclAllReduce once the packing is done; reduce_wait makes
// the compute stream wait for that sum, then scales it by 1/N into the
// reduced gradients. No host synchronisation, and the all-reduce overlaps
// the computation that follows reduce_start.
//
// A reduction of step t lands in buffer t mod kDepth of its stage, so a
// wait may come up to kDepth - 1 steps later (cdp's delays); NCCL requires
// the collectives in the same order on every device, which dp and cdp's
// instruction streams give (each step, the stages in backward order).
//
//===----------------------------------------------------------------------===//

#include "../MessageBuffers.h"
#include "CudaKernels.h"
#include "Nccl.h"
#include "Reduce.cuh"

#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/MessageTags.h"
#include "cdp/Runtime/NcclBootstrap.h"

#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include <unistd.h>

namespace cdp::runtime::cuda {

namespace {

constexpr int64_t kDepth = 4;

/// The NCCL communicators of this process's devices. In one process they
/// are made together the first time a kernel asks (ncclCommInitAll: one per
/// GPU, device d on GPU d); under mpirun by prepareNcclAcrossProcesses,
/// before the kernels, over the id the processes agreed on.
class NcclClique {
public:
  static NcclClique &instance() {
    static NcclClique clique;
    return clique;
  }
  /// Device d's communicator in a run of `devices`, or null where NCCL
  /// cannot serve the run: under mpirun without an agreement, or when
  /// devices share a GPU (NCCL takes one rank per GPU).
  static ncclComm_t forDevice(int device, int devices) {
    NcclClique &clique = instance();
    std::lock_guard<std::mutex> lock(clique.mutex);
    if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE")) {
      auto it = clique.acrossProcesses.find(device);
      return it == clique.acrossProcesses.end() ? nullptr : it->second;
    }
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < devices)
      return nullptr;
    if (clique.comms.empty()) {
      std::vector<int> list(devices);
      for (int d = 0; d < devices; ++d)
        list[d] = d;
      clique.comms.resize(devices);
      checkNccl(ncclCommInitAll(clique.comms.data(), devices, list.data()),
                "ncclCommInitAll");
    }
    if (static_cast<int>(clique.comms.size()) != devices)
      return nullptr;
    return clique.comms[device];
  }

  /// How many of a run's `devices` this process runs with NCCL.
  int devicesHere(int devices) {
    std::lock_guard<std::mutex> lock(mutex);
    return acrossProcesses.empty() ? devices
                                   : static_cast<int>(acrossProcesses.size());
  }
  /// Under mpirun: this process's devices join the run's communicator
  /// over the agreed id (one group call, however many devices it runs).
  void joinAcrossProcesses(const std::vector<GpuPlace> &mine, int devices,
                           const ncclUniqueId &id) {
    std::lock_guard<std::mutex> lock(mutex);
    checkNccl(ncclGroupStart(), "ncclGroupStart");
    for (const GpuPlace &p : mine) {
      checkCuda(cudaSetDevice(p.gpu), "cudaSetDevice");
      checkNccl(
          ncclCommInitRank(&acrossProcesses[p.device], devices, id, p.device),
          "ncclCommInitRank");
    }
    checkNccl(ncclGroupEnd(), "ncclGroupEnd");
  }

private:
  std::mutex mutex;
  std::vector<ncclComm_t> comms;
  std::map<int, ncclComm_t> acrossProcesses;
};

/// One device's reductions in flight: a communication stream, and per
/// stage kDepth buffers with their completion events.
class NcclReductions {
public:
  static std::shared_ptr<NcclReductions> of(CudaDevice &device) {
    static std::mutex mutex;
    static std::map<CudaDevice *, std::weak_ptr<NcclReductions>> all;
    std::lock_guard<std::mutex> lock(mutex);
    std::shared_ptr<NcclReductions> found = all[&device].lock();
    if (!found) {
      found = std::make_shared<NcclReductions>(device);
      all[&device] = found;
    }
    return found;
  }

  explicit NcclReductions(CudaDevice &device) : device(device) {
    checkCuda(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking),
              "cudaStreamCreate");
  }
  ~NcclReductions() {
    cudaStreamSynchronize(comm);
    for (auto &[stage, s] : stages)
      for (cudaEvent_t e : s.done)
        cudaEventDestroy(e);
    cudaEventDestroy(packed);
    cudaStreamDestroy(comm);
  }

  struct Stage {
    int64_t count = 0;
    std::unique_ptr<Scratch> buffers; ///< kDepth x count floats
    std::vector<cudaEvent_t> done;
  };

  /// The stage's buffers, made by the first kernel to ask; `count` must
  /// agree between its reduce_start and reduce_wait.
  Stage &stage(const KernelArgs &args, int64_t id, int64_t count) {
    Stage &s = stages[id];
    if (!s.buffers) {
      s.count = count;
      s.buffers = std::make_unique<Scratch>(
          device, static_cast<size_t>(std::max<int64_t>(count, 1)) * kDepth *
                      sizeof(float));
      s.done.resize(kDepth);
      for (cudaEvent_t &e : s.done)
        checkCuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                  "cudaEventCreate");
      if (!packed)
        checkCuda(cudaEventCreateWithFlags(&packed, cudaEventDisableTiming),
                  "cudaEventCreate");
    }
    if (s.count != count)
      args.fail("stage " + std::to_string(id) + " reduces " +
                std::to_string(count) + " values here and " +
                std::to_string(s.count) + " at its other end");
    return s;
  }

  CudaDevice &device;
  cudaStream_t comm = nullptr;
  cudaEvent_t packed = nullptr;
  std::map<int64_t, Stage> stages;
};

/// The reductions NCCL carries that some device has yet to fetch, by tag:
/// a checkpoint saves them through the fabric (heldReductions), and a
/// resumed run's wait for one started before the resume (none here) fetches
/// it from the fabric instead.
class NcclInFlight {
public:
  static NcclInFlight &instance() {
    static NcclInFlight *all = [] {
      auto *made = new NcclInFlight; // outlives every device thread
      setHeldReductions([made] { return made->held(); });
      return made;
    }();
    return *all;
  }

  /// Device `device` started reduction `tag`: its sum will be at `sum`
  /// (`count` floats on GPU `gpu`) once `done` completes.
  void started(int64_t tag, int device, const float *sum, int64_t count,
               cudaEvent_t done, int gpu, float scale) {
    std::lock_guard<std::mutex> lock(mutex);
    Entry &e = entries[tag];
    e.starters.insert(device);
    e.sum = sum;
    e.count = count;
    e.done = done;
    e.gpu = gpu;
    e.scale = scale;
  }
  /// Whether `device` started `tag` here (else: before a resume); counts
  /// the fetch, forgetting the entry once all `devices` of this process
  /// fetched.
  bool fetch(int64_t tag, int device, int devices) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = entries.find(tag);
    if (it == entries.end() || !it->second.starters.count(device))
      return false;
    it->second.fetchedBy.insert(device);
    if (static_cast<int>(it->second.fetchedBy.size()) == devices)
      entries.erase(it);
    return true;
  }

private:
  struct Entry {
    std::set<int> starters, fetchedBy;
    const float *sum = nullptr;
    int64_t count = 0;
    cudaEvent_t done = nullptr;
    int gpu = 0;
    float scale = 1;
  };
  /// Between two steps: each entry's mean as its waits would write it.
  std::vector<HeldReduction> held() {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<HeldReduction> list;
    int current = 0; // the caller's GPU, given back
    cudaGetDevice(&current);
    for (auto &[tag, e] : entries) {
      HeldReduction h{tag, {}, std::vector<float>(e.count)};
      for (int d : e.starters)
        if (!e.fetchedBy.count(d))
          h.waiting.push_back(d);
      checkCuda(cudaSetDevice(e.gpu), "cudaSetDevice");
      checkCuda(cudaEventSynchronize(e.done), "a reduction in flight");
      checkCuda(cudaMemcpy(h.mean.data(), e.sum, e.count * sizeof(float),
                           cudaMemcpyDeviceToHost),
                "a reduction in flight");
      for (float &v : h.mean)
        v *= e.scale;
      list.push_back(std::move(h));
    }
    cudaSetDevice(current);
    return list;
  }
  std::mutex mutex;
  std::map<int64_t, Entry> entries;
};

__global__ void scaleKernel(const float *in, float *out, int64_t n,
                            float scale) {
  CDP_FOR_EACH(i, n) { out[i] = in[i] * scale; }
}

std::unique_ptr<Kernel> ncclReduceStart(const KernelArgs &args, ncclComm_t nccl,
                                        int devices) {
  std::vector<TensorView> grads = args.inputs;
  int64_t count = totalCount(grads), stageId = args.i("stage", 0);
  int device = args.device, gpu = deviceOf(args).gpu();
  float scale = 1.0f / static_cast<float>(devices);
  auto reductions = NcclReductions::of(deviceOf(args));
  NcclReductions::Stage &stage = reductions->stage(args, stageId, count);
  float *buffers = stage.buffers->as<float>();
  std::vector<cudaEvent_t> done = stage.done;
  return std::make_unique<FunctionKernel>([=](const StepContext &context) {
    cudaStream_t compute = streamOf(context);
    int64_t slot = context.step % kDepth;
    float *at = buffers + slot * count;
    for (const TensorView &g : grads) {
      checkCuda(cudaMemcpyAsync(at, g.data, byteSize(g),
                                cudaMemcpyDeviceToDevice, compute),
                "pack gradients");
      at += g.numel();
    }
    checkCuda(cudaEventRecord(reductions->packed, compute), "event");
    checkCuda(cudaStreamWaitEvent(reductions->comm, reductions->packed),
              "event wait");
    checkNccl(ncclAllReduce(buffers + slot * count, buffers + slot * count,
                            count, ncclFloat, ncclSum, nccl, reductions->comm),
              "ncclAllReduce");
    checkCuda(cudaEventRecord(done[slot], reductions->comm), "event");
    NcclInFlight::instance().started(tags::reduction(context.step, stageId),
                                     device, buffers + slot * count, count,
                                     done[slot], gpu, scale);
  });
}

/// A restored mean into the reduced gradients, one after another (rare: the
/// first wait of a resumed run; synchronous, so `mean` may go).
void uploadMean(const std::vector<float> &mean,
                const std::vector<TensorView> &reduced, cudaStream_t stream) {
  const float *at = mean.data();
  for (const TensorView &r : reduced) {
    checkCuda(cudaMemcpyAsync(r.data, at, byteSize(r), cudaMemcpyHostToDevice,
                              stream),
              "a restored reduction");
    at += r.numel();
  }
  checkCuda(cudaStreamSynchronize(stream), "a restored reduction");
}

std::unique_ptr<Kernel> ncclReduceWait(const KernelArgs &args, int devices) {
  std::vector<TensorView> reduced = args.outputs;
  int64_t count = totalCount(reduced), stageId = args.i("stage", 0),
          delay = args.i("delay", 0);
  if (delay + 1 >= kDepth)
    args.fail("waits " + std::to_string(delay + 1) +
              " steps for its reduction; the NCCL path keeps " +
              std::to_string(kDepth - 1));
  auto reductions = NcclReductions::of(deviceOf(args));
  NcclReductions::Stage &stage = reductions->stage(args, stageId, count);
  float *buffers = stage.buffers->as<float>();
  std::vector<cudaEvent_t> done = stage.done;
  float scale = 1.0f / static_cast<float>(devices);
  int device = args.device, here = NcclClique::instance().devicesHere(devices);
  Communicator *comm = args.communicator;
  std::vector<Buffer> resumed = writtenBuffers(reduced, deviceOf(args).link());
  // The wait keeps the reductions alive too: it may be made before the
  // stage's reduce_start (an update waits for the step before's sum).
  return std::make_unique<FunctionKernel>(
      [=, keep = reductions](const StepContext &context) {
        (void)keep;
        cudaStream_t compute = streamOf(context);
        int64_t step = context.step - 1 - delay;
        int64_t tag = tags::reduction(step, stageId);
        if (!NcclInFlight::instance().fetch(tag, device, here)) {
          // Started before a resume: the checkpoint held it (under mpirun
          // beside the messages, else in the fabric).
          std::vector<float> mean;
          if (takeRestoredReduction(tag, device, mean)) {
            uploadMean(mean, reduced, compute);
            return;
          }
          bool arrived = true;
          if (comm->carriesDeviceMemory()) {
            arrived = comm->reduceWait(tag, resumed);
          } else { // MPI: the means to the host, then up
            mean.assign(count, 0.0f);
            arrived = comm->reduceWait(tag, {{plan::F32, mean.data(), count}});
            if (arrived)
              uploadMean(mean, reduced, compute);
          }
          if (!arrived)
            throw RuntimeError("device " + std::to_string(device) +
                               ": stopped while waiting for a reduction");
          return;
        }
        int64_t slot = ((step % kDepth) + kDepth) % kDepth;
        checkCuda(cudaStreamWaitEvent(compute, done[slot]), "event wait");
        const float *at = buffers + slot * count;
        for (const TensorView &r : reduced) {
          if (r.numel())
            scaleKernel<<<blocksFor(r.numel()), kThreads, 0, compute>>>(
                at, r.f32(), r.numel(), scale);
          at += r.numel();
        }
        launched("reduce_wait");
      });
}

} // namespace

/// The NCCL kernel of `op` where NCCL can serve this run, else null.
std::unique_ptr<Kernel> makeNcclKernel(const std::string &op,
                                       const KernelArgs &args) {
  if (!args.communicator)
    return nullptr;
  int devices = args.communicator->size();
  ncclComm_t nccl = NcclClique::forDevice(args.device, devices);
  if (!nccl)
    return nullptr;
  return op == "reduce_start" ? ncclReduceStart(args, nccl, devices)
                              : ncclReduceWait(args, devices);
}

} // namespace cdp::runtime::cuda

namespace cdp::runtime {

std::string prepareNcclAcrossProcesses(Fabric &fabric) {
  // Without a GPU this process's devices fail as they are made, ending the
  // job (MPI_Abort), so it need not agree: the others' wait is cut short.
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0)
    return "";
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::vector<GpuPlace> mine;
  for (int d = 0; d < fabric.size(); ++d)
    if (fabric.owns(d)) // CudaDevice: device d on GPU d mod the visible GPUs
      mine.push_back({d, host[0] ? host : "localhost", d % gpus});
  std::string why;
  std::string id = agreeOnNcclId(
      fabric, mine,
      [] {
        ncclUniqueId made;
        cuda::checkNccl(ncclGetUniqueId(&made), "ncclGetUniqueId");
        return std::string(made.internal, sizeof(made.internal));
      },
      why);
  if (id.empty())
    return why;
  ncclUniqueId agreed;
  if (id.size() != sizeof(agreed.internal))
    throw RuntimeError("NCCL's unique id came as " + std::to_string(id.size()) +
                       " bytes");
  std::memcpy(agreed.internal, id.data(), id.size());
  cuda::NcclClique::instance().joinAcrossProcesses(mine, fabric.size(), agreed);
  return "";
}

} // namespace cdp::runtime
