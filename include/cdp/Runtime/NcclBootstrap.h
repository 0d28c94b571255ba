//===- NcclBootstrap.h - an mpirun job's agreement on NCCL ------*- C++ -*-===//
//
// NCCL's ranks meet through a unique id that one of them makes and the
// others receive by other means: under mpirun, the job's processes. The
// root gathers where every device runs (host and GPU), and where each has
// a GPU of its own (NCCL takes one rank per GPU) makes the id and shares it;
// otherwise every process learns why not, and the reductions take another
// path. Host code, tested on the CPU: the GPU part (ncclCommInitRank over
// the agreed id) is runtime/kernels/cuda/NcclReduce.cu.
//
// A pipeline's messages between GPUs of different processes go over a
// two-rank communicator per ordered pair of devices (a route): the root
// makes one id per pair whose devices have GPUs of their own, and every
// process learns them all (runtime/kernels/cuda/NcclRoutes.cu joins them).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_NCCLBOOTSTRAP_H
#define CDP_RUNTIME_NCCLBOOTSTRAP_H

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace cdp::plan {
class Plan;
} // namespace cdp::plan

namespace cdp::runtime {

class Fabric;

/// Where one device of the run computes.
struct GpuPlace {
  int device = 0;
  std::string host;
  int gpu = 0;
};

/// Empty where every device has a GPU (`gpu` >= 0) and no two share one;
/// else the first device in device order that has none ("device D sees no
/// GPU on HOST") or the first pair that shares ("devices A and B share GPU
/// g of HOST").
std::string whyNotNccl(std::vector<GpuPlace> places);

/// Collective over the fabric's processes: each tells the root where its
/// devices (`mine`) run; where none share a GPU the root calls `makeId` and
/// every process returns its result. Otherwise every process returns empty
/// with `why` set to the same reason.
std::string agreeOnNcclId(Fabric &fabric, const std::vector<GpuPlace> &mine,
                          const std::function<std::string()> &makeId,
                          std::string &why);

/// The ordered pairs (from, to) of the plan's messages (its sends and cdp's
/// chain hops) between devices the fabric runs in different processes,
/// each once, in order.
std::vector<std::pair<int, int>> crossProcessSends(const plan::Plan &plan,
                                                   const Fabric &fabric);

/// One ordered pair's route: NCCL's unique id for its two-rank
/// communicator (rank 0 the sender), or, empty, why the pair's messages go
/// through the host instead.
struct RouteAgreement {
  int from = 0, to = 0;
  std::string id, why;
};

/// Collective over the fabric's processes (each passes the same `pairs`):
/// each tells the root where its devices (`mine`) run; the root calls
/// `makeId` for every pair whose devices have GPUs of their own (not one
/// shared) and every process returns the whole list, in `pairs`' order.
std::vector<RouteAgreement>
agreeOnRoutes(Fabric &fabric, const std::vector<GpuPlace> &mine,
              const std::vector<std::pair<int, int>> &pairs,
              const std::function<std::string()> &makeId);

} // namespace cdp::runtime

#endif // CDP_RUNTIME_NCCLBOOTSTRAP_H
