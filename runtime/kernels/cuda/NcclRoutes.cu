//===- NcclRoutes.cu - a pipeline's messages between processes' GPUs ------===//
//
// Under mpirun, a message between GPUs of different processes goes over a
// two-rank NCCL communicator of its ordered pair of devices (rank 0 the
// sender), joined at load over the id the processes agreed on
// (agreeOnRoutes), before the devices' kernels are made. Each end of a
// pair is a route of its device's link (StreamLink::addRoute): a stream of
// its own on the device's GPU whose sendAcross is ncclSend and whose
// receiveAcross is ncclRecv. The MPI fabric carries each message's header
// and posts the receive as the header arrives, in the sender's order.
//
// One communicator per direction: NCCL runs a communicator's operations in
// the order they were issued, so a pipeline's activations and gradients,
// crossing on one communicator, would wait on each other.
//
//===----------------------------------------------------------------------===//

#include "../../device/CudaStreamOps.h"
#include "CudaKernels.h"
#include "Nccl.h"

#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/NcclBootstrap.h"

#include <cstring>
#include <mutex>
#include <set>

#include <unistd.h>

namespace cdp::runtime::cuda {

namespace {

cudaStream_t newStream(int gpu) {
  OnGpu on(gpu);
  cudaStream_t stream = nullptr;
  checkCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            "a route's stream");
  return stream;
}

/// One end of a route: its own stream on the device's GPU, and the pair's
/// communicator, whose other rank is `peer`.
class CudaRouteOps : public CudaStreamOps {
public:
  CudaRouteOps(int gpu, ncclComm_t comm, int peer)
      : CudaStreamOps(gpu, newStream(gpu)), comm(comm), peer(peer),
        own(handle()) {}
  ~CudaRouteOps() override {
    OnGpu on(gpuIndex());
    cudaStreamSynchronize(own);
    cudaStreamDestroy(own);
  }
  // Both ends skip an empty message alike.
  void sendAcross(const void *from, int64_t bytes) override {
    if (bytes == 0)
      return;
    OnGpu on(gpuIndex());
    checkNccl(
        ncclSend(from, static_cast<size_t>(bytes), ncclUint8, peer, comm, own),
        "ncclSend (a message to another process's GPU)");
  }
  void receiveAcross(void *to, int64_t bytes) override {
    if (bytes == 0)
      return;
    OnGpu on(gpuIndex());
    checkNccl(
        ncclRecv(to, static_cast<size_t>(bytes), ncclUint8, peer, comm, own),
        "ncclRecv (a message from another process's GPU)");
  }

private:
  ncclComm_t comm;
  int peer;
  cudaStream_t own;
};

/// The routes' communicators this process joined, by ordered pair, and
/// the devices whose links have them.
class NcclRoutes {
public:
  static NcclRoutes &instance() {
    static NcclRoutes *routes = new NcclRoutes; // outlives the device threads
    return *routes;
  }

  /// Joins every agreed pair one of `mine` is an end of, in the list's
  /// order on every process: each join waits for the pair's other end, and
  /// in one order the first pair not yet joined always has both ends there.
  void join(const std::vector<RouteAgreement> &agreed,
            const std::vector<GpuPlace> &mine) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const RouteAgreement &route : agreed) {
      if (route.id.empty())
        continue;
      for (const GpuPlace &place : mine) {
        if (place.device != route.from && place.device != route.to)
          continue;
        ncclUniqueId id;
        if (route.id.size() != sizeof(id.internal))
          throw RuntimeError("NCCL's unique id came as " +
                             std::to_string(route.id.size()) + " bytes");
        std::memcpy(id.internal, route.id.data(), route.id.size());
        OnGpu on(place.gpu);
        End end{route.from, route.to, nullptr};
        checkNccl(ncclCommInitRank(&end.comm, 2, id,
                                   place.device == route.from ? 0 : 1),
                  "ncclCommInitRank (a route between processes)");
        ends.push_back(end);
      }
    }
  }

  /// Adds device `device`'s routes to its link, once.
  void install(CudaDevice &gpu, int device) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!installed.insert(device).second)
      return;
    for (const End &end : ends) {
      bool outgoing = end.from == device;
      if (!outgoing && end.to != device)
        continue;
      gpu.ownLink().addRoute(outgoing ? end.to : end.from, outgoing,
                             std::make_shared<CudaRouteOps>(gpu.gpu(), end.comm,
                                                            outgoing ? 1 : 0));
    }
  }

private:
  struct End {
    int from, to;
    ncclComm_t comm;
  };
  std::mutex mutex;
  std::vector<End> ends;
  std::set<int> installed;
};

} // namespace

void connectDevice(const KernelArgs &args) {
  if (!args.runsOn || args.runsOn->backend() != Backend::CUDA)
    return;
  NcclRoutes::instance().install(deviceOf(args), args.device);
  if (args.communicator)
    args.communicator->useLink(deviceOf(args).link());
}

} // namespace cdp::runtime::cuda

namespace cdp::runtime {

std::vector<std::string>
prepareNcclRoutesAcrossProcesses(Fabric &fabric, const plan::Plan &plan) {
  std::vector<std::pair<int, int>> pairs = crossProcessSends(plan, fabric);
  if (pairs.empty())
    return {};
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess)
    gpus = 0;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::vector<GpuPlace> mine;
  for (int d = 0; d < fabric.size(); ++d)
    if (fabric.owns(d) && gpus > 0) // CudaDevice: device d on GPU d mod GPUs
      mine.push_back({d, host[0] ? host : "localhost", d % gpus});
  std::vector<RouteAgreement> agreed = agreeOnRoutes(fabric, mine, pairs, [] {
    ncclUniqueId made;
    cuda::checkNccl(ncclGetUniqueId(&made), "ncclGetUniqueId");
    return std::string(made.internal, sizeof(made.internal));
  });
  cuda::NcclRoutes::instance().join(agreed, mine);
  std::vector<std::string> notes;
  for (const RouteAgreement &route : agreed)
    if (route.id.empty())
      notes.push_back("the messages from device " + std::to_string(route.from) +
                      " to device " + std::to_string(route.to) +
                      " go through host memory, not NCCL: " + route.why);
  return notes;
}

} // namespace cdp::runtime
