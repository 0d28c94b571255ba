//===- Communicator.cpp - what every communicator backend shares ----------===//

#include "cdp/Runtime/Communicator.h"

#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Kernel.h"
#include "cdp/Runtime/MpiCommunicator.h"

#include <cstdlib>

namespace cdp::runtime {

int64_t ConstBuffer::bytes() const { return count * plan::dtypeSize(dtype); }
int64_t Buffer::bytes() const { return count * plan::dtypeSize(dtype); }

void Communicator::checkPeer(int peer) const {
  if (peer < 0 || peer >= size() || peer == rank())
    throw RuntimeError("device " + std::to_string(rank()) + " names device " +
                       std::to_string(peer) + " as its peer; the run has " +
                       std::to_string(size()));
}

void Communicator::checkArrival(int64_t tag, int from, plan::DType dtype,
                                int64_t count, const Buffer &out) const {
  if (dtype != out.dtype || count != out.count)
    throw RuntimeError("message " + std::to_string(tag) + " from device " +
                       std::to_string(from) + " holds " +
                       std::to_string(count) + " " + plan::DType_Name(dtype) +
                       ", device " + std::to_string(rank()) + " expects " +
                       std::to_string(out.count) + " " +
                       plan::DType_Name(out.dtype));
}

void Communicator::checkReducible(plan::DType dtype) {
  if (dtype != plan::F32)
    throw RuntimeError("reductions are of float32 tensors, not " +
                       plan::DType_Name(dtype));
}

bool launchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
}

} // namespace cdp::runtime
