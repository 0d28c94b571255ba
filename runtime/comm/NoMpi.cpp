//===- NoMpi.cpp - cdp-run built without Open MPI -------------------------===//

#include "cdp/Runtime/MpiCommunicator.h"

namespace cdp::runtime {

std::unique_ptr<Fabric> createMpiFabric(int, double, const RunAgreement &,
                                        std::string &error) {
  error = "this cdp-run was built without Open MPI (CDP_ENABLE_MPI=OFF); "
          "rebuild with libopenmpi-dev installed to run under mpirun";
  return nullptr;
}

} // namespace cdp::runtime
