//===- MpiCommunicator.h - devices over the processes of an MPI job -*- C++
//-*-===//
//
// `mpirun -np R cdp-run ...`: the plan's D devices are spread over the R
// processes, rank r running devices r·D/R .. (r+1)·D/R - 1, each on a
// thread of its own (MPI_THREAD_MULTIPLE). Open MPI moves the messages.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_MPICOMMUNICATOR_H
#define CDP_RUNTIME_MPICOMMUNICATOR_H

#include "cdp/Runtime/Communicator.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cdp::runtime {

/// Whether this process was started by mpirun (Open MPI's environment).
bool launchedByMpirun();

/// What every process of a job must share: the plan's checksum, a hash of
/// the command line (what may differ between processes aside) and, per
/// data file (by the flag that names it), a hash of its size and content.
struct RunAgreement {
  uint64_t plan = 0, flags = 0;
  std::vector<std::pair<std::string, uint64_t>> files;
};

/// Initializes MPI and spreads `devices` over the job's processes, once
/// every process has the root's `agreement`. Returns null with `error` set
/// when the build has no MPI, the processes disagree (on the root; the
/// others return null with `error` empty and exit quietly, so the job
/// prints one line), the job's processes do not divide the devices, or MPI
/// lacks thread support. `timeoutSeconds` bounds every wait for a message.
std::unique_ptr<Fabric> createMpiFabric(int devices, double timeoutSeconds,
                                        const RunAgreement &agreement,
                                        std::string &error);

} // namespace cdp::runtime

#endif // CDP_RUNTIME_MPICOMMUNICATOR_H
