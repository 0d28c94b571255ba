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
#include "LazyStreams.h"
#include "cdp/Runtime/Communicator.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>

using namespace cdp;
using namespace cdp::runtime;

namespace {

Fabric *fabric = nullptr;
/// The routes' wires travel on a communicator of their own.
MPI_Comm wires = MPI_COMM_NULL;

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
TEST(MpiCommunicator, RouteAgreement) {
  checks::routeAgreement(*fabric);
  checks::crossProcessSendsOfAPlan(*fabric);
}

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
/// A route's wire between processes: a send goes out at once (MPI_Isend,
/// its bytes kept until delivered), a receive blocks for the next bytes of
/// its pair (MPI keeps a tag's messages in order).
class MpiWire : public cdp::test::LazyWire {
public:
  MpiWire(int peerProcess, int tag) : peer(peerProcess), tag(tag) {}
  ~MpiWire() override {
    for (auto &[request, bytes] : sends)
      MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
  void put(std::vector<char> bytes) override {
    sends.emplace_back(MPI_REQUEST_NULL,
                       std::make_unique<std::vector<char>>(std::move(bytes)));
    std::vector<char> &out = *sends.back().second;
    MPI_Isend(out.data(), static_cast<int>(out.size()), MPI_BYTE, peer, tag,
              wires, &sends.back().first);
  }
  bool take(std::vector<char> &bytes) override {
    MPI_Status status;
    MPI_Probe(peer, tag, wires, &status);
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    bytes.resize(count);
    MPI_Recv(bytes.data(), count, MPI_BYTE, peer, tag, wires,
             MPI_STATUS_IGNORE);
    return true;
  }

private:
  int peer, tag;
  std::vector<std::pair<MPI_Request, std::unique_ptr<std::vector<char>>>> sends;
};

/// A LazyGpu of its own (constructed before the device that uses it).
struct OwnGpu {
  explicit OwnGpu(int domain) : owned(domain) {}
  cdp::test::LazyGpu owned;
};

/// A GPU device of the test: its own LazyGpu (domain = device), stream and
/// link, with a route to and from every device of another process.
struct RoutedDevice : OwnGpu, cdp::test::LazyDevice {
  explicit RoutedDevice(int device) : OwnGpu(device), LazyDevice(owned) {
    for (int peer = 0; peer < fabric->size(); ++peer) {
      if (fabric->owns(peer))
        continue;
      int process = processOf(peer);
      for (bool outgoing : {true, false}) {
        int tag = outgoing ? device * fabric->size() + peer
                           : peer * fabric->size() + device;
        auto route = std::make_shared<cdp::test::LazyStream>(
            gpu, std::make_shared<MpiWire>(process, tag));
        link.addRoute(peer, outgoing, route);
        routes.push_back(route);
      }
    }
  }
  static int processOf(int device) {
    return device / (fabric->size() / fabric->processCount());
  }
  /// Runs every stream (a GPU runs them on its own).
  void finish() {
    stream->finish();
    for (auto &route : routes)
      route->finish();
  }
  std::vector<std::shared_ptr<cdp::test::LazyStream>> routes;
};

// Messages in device memory between devices of different processes go
// over their routes: MPI carries the headers, each payload is received
// into the receiver's GPU in the order it was sent, whatever order the
// receiver asks in, with what the sender's stream had written when it
// sent, and nothing visits the host. Between devices of one process the
// same messages go through the host. A checkpoint between steps saves a
// payload still on its way as a host message, and a resumed run receives
// it into device memory.
TEST(MpiCommunicator, DeviceMessagesCrossOverRoutes) {
  int N = fabric->size();
  std::vector<std::unique_ptr<RoutedDevice>> devices(N);
  for (int d = 0; d < N; ++d)
    if (fabric->owns(d))
      devices[d] = std::make_unique<RoutedDevice>(d);
  checks::onEveryDevice(*fabric, [&](Communicator &comm) {
    int d = comm.rank(), next = (d + 1) % N, prev = (d + N - 1) % N;
    RoutedDevice &dev = *devices[d];
    EXPECT_TRUE(comm.carriesDeviceMessages());
    EXPECT_FALSE(comm.carriesDeviceMemory());
    comm.useLink(&dev.link);
    float f = static_cast<float>(d);
    float *x = dev.tensor({f, f + 0.5f, -f});
    comm.send(next, 10, dev.buffer(x, 3), 0);
    dev.stream->write(x, {100 + f, 7}); // the sender goes on writing it
    comm.send(next, 11, dev.buffer(x, 2), 0);
    float *partial = dev.tensor({1.5f, -2.0f});
    comm.send(next, 12, dev.buffer(partial, 2), 0);
    comm.send(next, 13, dev.buffer(partial, 2), 0);
    bool routed = RoutedDevice::processOf(next) != RoutedDevice::processOf(d);
    // Taken in another order than sent.
    float p = static_cast<float>(prev);
    float *y = dev.tensor({0, 0}), *z = dev.tensor({0, 0, 0});
    float *own = dev.tensor({1, 1});
    ASSERT_TRUE(comm.recv(prev, 11, dev.buffer(y, 2)));
    ASSERT_TRUE(
        comm.recvAdd(prev, 12, {dev.buffer(own, 1), dev.buffer(own + 1, 1)}));
    ASSERT_TRUE(comm.recv(prev, 10, dev.buffer(z, 3)));
    std::vector<float> host(2);
    ASSERT_TRUE(comm.recv(prev, 13, {plan::F32, host.data(), 2}));
    EXPECT_EQ(dev.stream->read(y, 2), std::vector<float>({100 + p, 7}));
    EXPECT_EQ(dev.stream->read(z, 3), std::vector<float>({p, p + 0.5f, -p}));
    EXPECT_EQ(dev.stream->read(own, 2), std::vector<float>({2.5f, -1.0f}));
    EXPECT_EQ(host, std::vector<float>({1.5f, -2.0f}));
    // The sender's downloads: none over a route, one a message by the host;
    // the receiver downloads only message 13, which it takes on the host.
    bool routedIn = RoutedDevice::processOf(prev) != RoutedDevice::processOf(d);
    EXPECT_EQ(dev.gpu.downloads, (routed ? 0 : 4) + (routedIn ? 1 : 0))
        << "device " << d;
    comm.send(next, 20, dev.buffer(x, 2), 0); // in flight at the checkpoint
  });
  std::string saved = fabric->saveInFlight();
  fabric->restoreInFlight(saved);
  checks::onEveryDevice(*fabric, [&](Communicator &comm) {
    int d = comm.rank(), prev = (d + N - 1) % N;
    RoutedDevice &dev = *devices[d];
    float *w = dev.tensor({0, 0});
    ASSERT_TRUE(comm.recv(prev, 20, dev.buffer(w, 2)));
    EXPECT_EQ(dev.stream->read(w, 2),
              std::vector<float>({100 + static_cast<float>(prev), 7}));
    dev.finish();
    EXPECT_TRUE(dev.gpu.errors.empty()) << dev.gpu.errors.front();
  });
  fabric->barrier(); // every wire's sends received before they go
}

// ZeRO's collectives in device memory: the chunks and shards go as device
// messages (over the routes between processes), each device's chunk summed
// on its GPU in device order: the host collective's bits, the padding past
// the stage zero-filled or dropped, nothing visiting the host over a route.
// laysa's gather of int32 indices goes the same way.
TEST(MpiCommunicator, DeviceCollectivesGiveTheHostsBits) {
  int N = fabric->size();
  const int64_t stage = 4 * 5 - 3, chunk = 5; // the last chunk padded
  std::vector<std::unique_ptr<RoutedDevice>> devices(N);
  for (int d = 0; d < N; ++d)
    if (fabric->owns(d))
      devices[d] = std::make_unique<RoutedDevice>(d);
  checks::onEveryDevice(*fabric, [&](Communicator &comm) {
    int d = comm.rank();
    RoutedDevice &dev = *devices[d];
    EXPECT_TRUE(comm.carriesDeviceCollectives());
    comm.useLink(&dev.link);
    std::vector<float> grads(stage);
    for (int64_t i = 0; i < stage; ++i)
      grads[i] = checks::contribution(d, i);
    std::vector<float> expected(chunk);
    ASSERT_TRUE(comm.reduceScatter(
        30,
        {ConstBuffer(plan::F32, grads.data(), 7),
         ConstBuffer(plan::F32, grads.data() + 7, stage - 7)},
        {plan::F32, expected.data(), chunk}, ReduceOp::Mean, 0));
    float *g = dev.tensor(grads);
    float *mine = dev.tensor(std::vector<float>(chunk, 7.0f));
    ASSERT_TRUE(
        comm.reduceScatter(31, {dev.buffer(g, 7), dev.buffer(g + 7, stage - 7)},
                           dev.buffer(mine, chunk), ReduceOp::Mean, 0));
    std::vector<float> got = dev.stream->read(mine, chunk);
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), chunk * 4), 0)
        << "device " << d << ": " << got[0] << " vs " << expected[0];
    // The parameters gathered from every device's shard.
    std::vector<float> shard(chunk), whole(stage);
    for (int64_t i = 0; i < chunk; ++i)
      shard[i] = checks::contribution(d, 100 + i);
    ASSERT_TRUE(comm.allGather(32, ConstBuffer(plan::F32, shard.data(), chunk),
                               {{plan::F32, whole.data(), 8},
                                {plan::F32, whole.data() + 8, stage - 8}},
                               0));
    float *s = dev.tensor(shard);
    float *w = dev.tensor(std::vector<float>(stage, -1.0f));
    ASSERT_TRUE(comm.allGather(33, dev.buffer(s, chunk),
                               {dev.buffer(w, 8), dev.buffer(w + 8, stage - 8)},
                               0));
    EXPECT_EQ(dev.stream->read(w, stage), whole) << "device " << d;
    // laysa's indices: int32, gathered byte for byte.
    std::vector<int32_t> picked = {d, -d, 1000 + d};
    auto *at = reinterpret_cast<int32_t *>(dev.gpu.allocate(3 * 4));
    auto *all = reinterpret_cast<int32_t *>(dev.gpu.allocate(3 * 4 * N));
    dev.stream->upload(reinterpret_cast<char *>(at),
                       reinterpret_cast<const char *>(picked.data()), 12);
    ASSERT_TRUE(comm.allGather(34, {plan::I32, at, 3, &dev.link},
                               {{plan::I32, all, 3 * N, &dev.link}}, 0));
    std::vector<float> gathered =
        dev.stream->read(reinterpret_cast<float *>(all), 3 * N);
    for (int p = 0; p < N; ++p) {
      int32_t got[3];
      std::memcpy(got, gathered.data() + 3 * p, 12);
      EXPECT_EQ(got[0], p);
      EXPECT_EQ(got[1], -p);
      EXPECT_EQ(got[2], 1000 + p);
    }
    // Only the messages to devices of its own process went by the host: a
    // chunk, a shard and the indices to each.
    int local = 0;
    for (int p = 0; p < N; ++p)
      local +=
          p != d && RoutedDevice::processOf(p) == RoutedDevice::processOf(d);
    EXPECT_EQ(dev.gpu.downloads, 3 * local) << "device " << d;
    dev.finish();
    EXPECT_TRUE(dev.gpu.errors.empty()) << dev.gpu.errors.front();
  });
  fabric->barrier();
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
  MPI_Comm_dup(MPI_COMM_WORLD, &wires);
  int status = RUN_ALL_TESTS();
  std::printf("process %d of %d: %s\n", mpi->processRank(), mpi->processCount(),
              status == 0 ? "passed" : "FAILED");
  mpi->barrier();
  MPI_Comm_free(&wires);
  return status;
}
