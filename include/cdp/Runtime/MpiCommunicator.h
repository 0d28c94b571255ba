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

namespace cdp::runtime {

/// Whether this process was started by mpirun (Open MPI's environment).
bool launchedByMpirun();

/// Initializes MPI and spreads `devices` over the job's processes. Returns
/// null with `error` set when the build has no MPI, the job's processes do
/// not divide the devices, or MPI lacks thread support. `timeoutSeconds`
/// bounds every wait for a message.
std::unique_ptr<Fabric> createMpiFabric(int devices, double timeoutSeconds,
                                        std::string &error);

} // namespace cdp::runtime

#endif // CDP_RUNTIME_MPICOMMUNICATOR_H
