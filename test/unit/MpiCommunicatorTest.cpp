//===- MpiCommunicatorTest.cpp - the MPI backend of the seam --------------===//
//
// The checks every communicator backend passes (CollectiveChecks.h), on
// an MPI fabric of 4 devices spread over the job's processes: run under
// `mpirun -np R` with R dividing 4 (test/Runtime/mpi-collectives.test).
// Each process runs its devices on threads; every message between devices
// of different processes goes through Open MPI.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/MpiCommunicator.h"
#include "CollectiveChecks.h"
#include "cdp/Runtime/Communicator.h"

#include <gtest/gtest.h>

#include <cstdio>

using namespace cdp::runtime;

namespace {

Fabric *fabric = nullptr;

TEST(MpiCommunicator, AllReduceSumAndMean) {
  checks::allReduceSumAndMean(*fabric);
}
TEST(MpiCommunicator, ReduceScatter) {
  checks::reduceScatterGivesEachDeviceItsChunk(*fabric);
}
TEST(MpiCommunicator, AllGather) {
  checks::allGatherInDeviceOrder(*fabric);
  checks::allGatherOfVariableLengths(*fabric);
}
TEST(MpiCommunicator, CollectivesOfParts) {
  checks::collectivesOfParts(*fabric);
}
TEST(MpiCommunicator, PartialSumsArriveInPlace) {
  checks::partialSumsArriveInPlace(*fabric);
}
TEST(MpiCommunicator, Broadcast) { checks::broadcastFromEveryRoot(*fabric); }
TEST(MpiCommunicator, NcclAgreement) { checks::ncclAgreement(*fabric); }

// The reductions NCCL holds for a process's devices at a checkpoint travel
// with its messages in flight: after the restore, each waiting device takes
// its mean once, and no other device does.
TEST(MpiCommunicator, HeldReductionsTravelInCheckpoints) {
  int first = 0;
  while (!fabric->owns(first))
    ++first;
  setHeldReductions([&] {
    return std::vector<HeldReduction>{{77, {first}, {1.5f, float(first)}}};
  });
  std::string saved = fabric->saveInFlight();
  setHeldReductions(nullptr);
  fabric->restoreInFlight(saved);
  std::vector<float> mean;
  EXPECT_FALSE(takeRestoredReduction(78, first, mean));
  if (fabric->owns(first + 1))
    EXPECT_FALSE(takeRestoredReduction(77, first + 1, mean));
  ASSERT_TRUE(takeRestoredReduction(77, first, mean));
  EXPECT_EQ(mean, (std::vector<float>{1.5f, float(first)}));
  EXPECT_FALSE(takeRestoredReduction(77, first, mean));
}
TEST(MpiCommunicator, NonBlockingReceive) {
  checks::nonBlockingReceiveCompletesOnWait(*fabric);
}

} // namespace

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  std::string error;
  std::unique_ptr<Fabric> mpi = createMpiFabric(4, 60, RunAgreement(), error);
  if (!mpi) {
    std::fprintf(stderr, "MpiCommunicatorChecks: %s\n", error.c_str());
    return 1;
  }
  fabric = mpi.get();
  int status = RUN_ALL_TESTS();
  std::printf("process %d of %d: %s\n", mpi->processRank(), mpi->processCount(),
              status == 0 ? "passed" : "FAILED");
  mpi->barrier();
  return status;
}
