//===- DeviceLinkTest.cpp - the in-process fabric over device memory ------===//
//
// Devices whose tensors lie in a GPU's memory exchange through their
// streams (StreamLink): tested on the CPU with LazyStreams, whose work runs
// only when waited for and whose memory the host cannot touch. A message
// between devices of one GPU never visits the host and carries what the
// sender's stream had written when it sent; a reduction's mean is the host
// fabric's bits; partial sums add in place; blocks are released after
// their last reader; across GPUs, into host memory and through a
// checkpoint, messages go by the host and arrive intact.
//
//===----------------------------------------------------------------------===//

#include "CollectiveChecks.h"
#include "LazyStreams.h"

#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace cdp;
using namespace cdp::runtime;
using cdp::test::LazyGpu;
using cdp::test::LazyStream;

namespace {

using GpuDevice = test::LazyDevice;

TEST(DeviceLink, MessageBetweenDevicesOfOneGpuStaysOnIt) {
  LazyGpu gpu(0);
  GpuDevice a(gpu), b(gpu);
  LocalFabric fabric(2);
  float *x = a.tensor({1, 2, 3});
  fabric.endpoint(0).send(1, 7, a.buffer(x, 3), 0);
  a.stream->write(x, {9, 9, 9}); // the sender goes on writing its tensor
  float *y = b.tensor({0, 0, 0});
  ASSERT_TRUE(fabric.endpoint(1).recv(0, 7, b.buffer(y, 3)));
  // The receiver's stream runs first: it must wait for the sender's copy.
  EXPECT_EQ(b.stream->read(y, 3), std::vector<float>({1, 2, 3}));
  EXPECT_EQ(a.stream->read(x, 3), std::vector<float>({9, 9, 9}));
  EXPECT_EQ(gpu.downloads, 0);
  EXPECT_EQ(gpu.liveAllocations(), 2); // the message's block released
  EXPECT_TRUE(gpu.errors.empty()) << gpu.errors.front();
  EXPECT_EQ(fabric.gatherSendLogs()[0].front().bytes, 12);
}

// The double itself: a copy that does not wait for its producer reads what
// was there before, so the tests above would catch a missing wait.
TEST(DeviceLink, LazyStreamsCatchAMissingWait) {
  LazyGpu gpu(0);
  LazyStream producer(gpu), consumer(gpu);
  auto *x = reinterpret_cast<float *>(gpu.allocate(4));
  auto *y = reinterpret_cast<float *>(gpu.allocate(4));
  producer.write(x, {5});
  consumer.copy(y, x, 4);
  EXPECT_EQ(consumer.read(y, 1), std::vector<float>({0}));
  consumer.wait(*producer.record());
  consumer.copy(y, x, 4);
  EXPECT_EQ(consumer.read(y, 1), std::vector<float>({5}));
}

/// Each device's contribution, in two parts, to one reduction.
std::vector<std::vector<float>> contributions() {
  return {{0.1f, -0.0f, 3e7f, 1.0f, -2.5f},
          {0.2f, -0.0f, 1.0f, 1e-8f, 7.25f},
          {0.3f, -0.0f, -3e7f, 3.0f, 1.0f / 3}};
}

std::vector<float> hostMean() {
  LocalFabric fabric(3);
  std::vector<std::vector<float>> parts = contributions();
  for (int d = 0; d < 3; ++d)
    fabric.endpoint(d).reduceStart(
        4,
        {ConstBuffer(plan::F32, parts[d].data(), 2),
         ConstBuffer(plan::F32, parts[d].data() + 2, 3)},
        0);
  std::vector<float> mean(5);
  EXPECT_TRUE(fabric.endpoint(0).reduceWait(4, {{plan::F32, mean.data(), 5}}));
  return mean;
}

TEST(DeviceLink, ReductionMeanIsTheHostsBitsOnEveryDevice) {
  LazyGpu gpu(0);
  std::vector<std::unique_ptr<GpuDevice>> devices;
  for (int d = 0; d < 3; ++d)
    devices.push_back(std::make_unique<GpuDevice>(gpu));
  LocalFabric fabric(3);
  std::vector<std::vector<float>> parts = contributions();
  std::vector<float *> grads, means;
  for (int d = 0; d < 3; ++d) {
    grads.push_back(devices[d]->tensor(parts[d]));
    means.push_back(devices[d]->tensor(std::vector<float>(5, 7.0f)));
  }
  for (int d = 0; d < 3; ++d) {
    GpuDevice &dev = *devices[d];
    fabric.endpoint(d).reduceStart(
        4, {dev.buffer(grads[d], 2), dev.buffer(grads[d] + 2, 3)}, 0);
    dev.stream->write(grads[d], std::vector<float>(5, 100.0f)); // next step
  }
  std::vector<float> expected = hostMean();
  EXPECT_FALSE(std::signbit(expected[1])); // summed from +0
  for (int d = 2; d >= 0; --d)
    ASSERT_TRUE(fabric.endpoint(d).reduceWait(
        4, {devices[d]->buffer(means[d], 3),
            devices[d]->buffer(means[d] + 3, 2)}));
  // Device 0 fetched last and released its block on its stream: run that
  // first, so a release that did not wait for the other readers shows.
  devices[0]->stream->finish();
  for (int d = 2; d >= 0; --d) {
    std::vector<float> got = devices[d]->stream->read(means[d], 5);
    for (int i = 0; i < 5; ++i)
      EXPECT_EQ(std::memcmp(&got[i], &expected[i], 4), 0)
          << "device " << d << " element " << i << ": " << got[i] << " vs "
          << expected[i];
  }
  for (auto &dev : devices)
    dev->stream->finish();
  EXPECT_EQ(gpu.downloads, 0);
  EXPECT_EQ(gpu.liveAllocations(), 6); // the three blocks released
  EXPECT_TRUE(gpu.errors.empty()) << gpu.errors.front();
}

// The chain's hop: the partial sum arrives onto the receiver's gradients.
TEST(DeviceLink, PartialSumArrivesInPlace) {
  LazyGpu gpu(0);
  GpuDevice a(gpu), b(gpu);
  LocalFabric fabric(2);
  float *partial = a.tensor({1.5f, -2.0f, 0.25f});
  float *own = b.tensor({1.0f, 1.0f, 1.0f});
  fabric.endpoint(0).send(1, 3, a.buffer(partial, 3), 0);
  ASSERT_TRUE(fabric.endpoint(1).recvAdd(
      0, 3, {b.buffer(own, 1), b.buffer(own + 1, 2)}));
  EXPECT_EQ(b.stream->read(own, 3), std::vector<float>({2.5f, -1.0f, 1.25f}));
  EXPECT_TRUE(gpu.errors.empty()) << gpu.errors.front();
}

// Devices on two GPUs, or a GPU device and a host one: by the host.
TEST(DeviceLink, AcrossGpusAndToTheHostByTheHost) {
  LazyGpu gpu0(0), gpu1(1);
  GpuDevice a(gpu0), b(gpu1);
  LocalFabric fabric(3);
  float *x = a.tensor({4, 5});
  fabric.endpoint(0).send(1, 1, a.buffer(x, 2), 0);
  fabric.endpoint(0).send(2, 1, a.buffer(x, 2), 0);
  float *y = b.tensor({0, 0});
  ASSERT_TRUE(fabric.endpoint(1).recv(0, 1, b.buffer(y, 2)));
  EXPECT_EQ(b.stream->read(y, 2), std::vector<float>({4, 5}));
  std::vector<float> host(2);
  ASSERT_TRUE(fabric.endpoint(2).recv(0, 1, {plan::F32, host.data(), 2}));
  EXPECT_EQ(host, std::vector<float>({4, 5}));
  EXPECT_EQ(gpu0.downloads, 2);
  // A host device's message into a GPU device's tensor.
  std::vector<float> z = {6, 7};
  fabric.endpoint(2).send(1, 2, {plan::F32, z.data(), 2}, 0);
  ASSERT_TRUE(fabric.endpoint(1).recv(2, 2, b.buffer(y, 2)));
  EXPECT_EQ(b.stream->read(y, 2), std::vector<float>({6, 7}));
  a.stream->finish();
  EXPECT_EQ(gpu0.liveAllocations(), 1);
  EXPECT_EQ(gpu1.liveAllocations(), 1);
  EXPECT_TRUE(gpu0.errors.empty() && gpu1.errors.empty());
}

// A route to a device of another process (NCCL's send and receive over
// the pair's stream, here a wire between two GPUs): messages arrive in the
// order sent, with what the sender's stream had written when it sent, and
// the sender's copy is released on the route's stream, after its bytes
// left (the sender's stream never waits for the receiver).
TEST(DeviceLink, RoutesAcrossCarryMessagesInOrder) {
  LazyGpu gpu0(0), gpu1(1);
  GpuDevice a(gpu0), b(gpu1);
  auto wire = std::make_shared<test::QueueWire>();
  auto out = std::make_shared<LazyStream>(gpu0, wire);
  auto in = std::make_shared<LazyStream>(gpu1, wire);
  a.link.addRoute(1, /*outgoing=*/true, out);
  b.link.addRoute(0, /*outgoing=*/false, in);
  EXPECT_TRUE(a.link.reaches(1, true));
  EXPECT_FALSE(a.link.reaches(1, false));
  EXPECT_FALSE(b.link.reaches(0, true));
  float *x = a.tensor({1, 2, 3});
  a.link.sendAcross(1, {a.buffer(x, 3)});
  a.stream->write(x, {9, 9}); // the sender goes on writing its tensor
  a.link.sendAcross(1, {a.buffer(x, 2)});
  a.stream->finish();
  // x and the second copy, whose release is queued on the route's stream
  // (the first's ran with the route's next send).
  EXPECT_EQ(gpu0.liveAllocations(), 2);
  std::shared_ptr<DeviceBlock> first = b.link.receiveAcross(0, 12);
  std::shared_ptr<DeviceBlock> second = b.link.receiveAcross(0, 8);
  float *y = b.tensor({0, 0, 0}), *z = b.tensor({0, 0});
  b.link.copyOut(*second, {b.buffer(z, 2)});
  b.link.copyOut(*first, {b.buffer(y, 3)});
  first.reset();
  second.reset();
  EXPECT_EQ(b.stream->read(y, 3), std::vector<float>({1, 2, 3}));
  EXPECT_EQ(b.stream->read(z, 2), std::vector<float>({9, 9}));
  for (LazyStream *stream :
       {a.stream.get(), b.stream.get(), in.get(), out.get()})
    stream->finish();                   // a GPU runs every stream on its own
  EXPECT_EQ(gpu0.liveAllocations(), 1); // x; both sent blocks released
  EXPECT_EQ(gpu1.liveAllocations(), 2); // y and z
  EXPECT_EQ(gpu0.downloads + gpu1.downloads, 0);
  EXPECT_TRUE(gpu0.errors.empty()) << gpu0.errors.front();
  EXPECT_TRUE(gpu1.errors.empty()) << gpu1.errors.front();
  EXPECT_THROW(a.link.receiveAcross(1, 4), RuntimeError);
}

// A reduction with a host device among GPU ones is summed on the host,
// the same bits.
TEST(DeviceLink, MixedReductionSumsOnTheHost) {
  LazyGpu gpu(0);
  GpuDevice a(gpu), b(gpu);
  LocalFabric fabric(3);
  std::vector<std::vector<float>> parts = contributions();
  float *g0 = a.tensor(parts[0]), *g1 = b.tensor(parts[1]);
  fabric.endpoint(0).reduceStart(4, {a.buffer(g0, 5)}, 0);
  fabric.endpoint(1).reduceStart(4, {b.buffer(g1, 5)}, 0);
  fabric.endpoint(2).reduceStart(4, {{plan::F32, parts[2].data(), 5}}, 0);
  std::vector<float> expected = hostMean(), host(5);
  ASSERT_TRUE(fabric.endpoint(2).reduceWait(4, {{plan::F32, host.data(), 5}}));
  EXPECT_EQ(std::memcmp(host.data(), expected.data(), 20), 0);
  ASSERT_TRUE(fabric.endpoint(0).reduceWait(4, {a.buffer(g0, 5)}));
  std::vector<float> got = a.stream->read(g0, 5);
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), 20), 0);
}

// Between two steps a checkpoint takes what is in flight to the host; a
// resumed fabric hands it to GPU devices as they were.
TEST(DeviceLink, InFlightStateGoesThroughTheHost) {
  LazyGpu gpu(0);
  GpuDevice a(gpu), b(gpu);
  std::string saved;
  std::vector<float> expected;
  {
    LocalFabric fabric(2);
    float *x = a.tensor({1, 2}), *g = a.tensor({0.5f, 8}),
          *h = b.tensor({0.25f, -8});
    fabric.endpoint(0).send(1, 9, a.buffer(x, 2), 0);
    fabric.endpoint(0).reduceStart(5, {a.buffer(g, 2)}, 0); // half given
    fabric.endpoint(0).reduceStart(6, {a.buffer(g, 2)}, 0); // all given
    fabric.endpoint(1).reduceStart(6, {b.buffer(h, 2)}, 0);
    saved = fabric.saveInFlight();
    std::vector<float> mean(2);
    ASSERT_TRUE(fabric.endpoint(0).reduceWait(6, {a.buffer(g, 2)}));
    mean = a.stream->read(g, 2);
    expected = {(0.5f + 0.25f) * 0.5f, (8.0f - 8.0f) * 0.5f};
    EXPECT_EQ(mean, expected);
    ASSERT_TRUE(fabric.endpoint(1).reduceWait(6, {b.buffer(h, 2)}));
    b.stream->finish();
  }
  LocalFabric resumed(2);
  resumed.restoreInFlight(saved);
  float *y = b.tensor({0, 0}), *h = b.tensor({1, 1}), *m = b.tensor({0, 0});
  ASSERT_TRUE(resumed.endpoint(1).recv(0, 9, b.buffer(y, 2)));
  EXPECT_EQ(b.stream->read(y, 2), std::vector<float>({1, 2}));
  ASSERT_TRUE(resumed.endpoint(1).reduceWait(6, {b.buffer(m, 2)}));
  EXPECT_EQ(b.stream->read(m, 2), expected);
  resumed.endpoint(1).reduceStart(5, {b.buffer(h, 2)}, 0);
  ASSERT_TRUE(resumed.endpoint(1).reduceWait(5, {b.buffer(m, 2)}));
  EXPECT_EQ(b.stream->read(m, 2), std::vector<float>({0.75f, 4.5f}));
  EXPECT_TRUE(gpu.errors.empty()) << gpu.errors.front();
}

/// Device d's 7 gradient values: magnitudes far apart (float32 sums depend
/// on their order), and a -0 everywhere at element 5 (a sum from device 0's
/// value keeps it, one from +0 would not).
std::vector<float> scattered(int d) {
  std::vector<float> values(7);
  for (int64_t i = 0; i < 7; ++i)
    values[i] = i == 5 ? -0.0f : checks::contribution(d, i);
  return values;
}

// ZeRO's collectives over device memory give the host's bits: the
// reduce-scatter's chunk summed from device 0's (its padding zeros), the
// all-gather's shards in device order (the padding past the buffers
// dropped), and the same send logs.
TEST(DeviceLink, CollectivesGiveTheHostsBits) {
  LazyGpu gpu(0);
  std::vector<std::unique_ptr<GpuDevice>> devices;
  for (int d = 0; d < 3; ++d)
    devices.push_back(std::make_unique<GpuDevice>(gpu));
  LocalFabric host(3), onGpu(3);
  std::vector<std::vector<float>> hostChunks(3, std::vector<float>(3)),
      hostGathered(3, std::vector<float>(8)), gpuChunks(3), gpuGathered(3);
  checks::onEveryDevice(host, [&](Communicator &comm) {
    int d = comm.rank();
    std::vector<float> g = scattered(d);
    ASSERT_TRUE(comm.reduceScatter(11,
                                   {ConstBuffer(plan::F32, g.data(), 3),
                                    ConstBuffer(plan::F32, g.data() + 3, 4)},
                                   {plan::F32, hostChunks[d].data(), 3},
                                   ReduceOp::Mean, 5));
    std::vector<float> shard = {float(d), float(d) + 0.5f, -float(d)};
    ASSERT_TRUE(comm.allGather(
        12, ConstBuffer(plan::F32, shard.data(), 3),
        std::vector<Buffer>{{plan::F32, hostGathered[d].data(), 5},
                            {plan::F32, hostGathered[d].data() + 5, 3}},
        6));
    int32_t picked[2] = {d, -7 * d}, all[6];
    ASSERT_TRUE(comm.allGather(13, {plan::I32, picked, 2},
                               std::vector<Buffer>{{plan::I32, all, 6}}, 7));
  });
  checks::onEveryDevice(onGpu, [&](Communicator &comm) {
    int d = comm.rank();
    GpuDevice &dev = *devices[d];
    float *g = dev.tensor(scattered(d)), *chunk = dev.tensor({9, 9, 9});
    ASSERT_TRUE(comm.reduceScatter(11, {dev.buffer(g, 3), dev.buffer(g + 3, 4)},
                                   dev.buffer(chunk, 3), ReduceOp::Mean, 5));
    gpuChunks[d] = dev.stream->read(chunk, 3);
    float *shard = dev.tensor({float(d), float(d) + 0.5f, -float(d)}),
          *params = dev.tensor(std::vector<float>(8, 7.0f));
    ASSERT_TRUE(comm.allGather(
        12, dev.buffer(shard, 3),
        std::vector<Buffer>{dev.buffer(params, 5), dev.buffer(params + 5, 3)},
        6));
    gpuGathered[d] = dev.stream->read(params, 8);
    // laysa's gather of int32 indices through the links, byte for byte.
    int32_t picked[2] = {d, -7 * d};
    auto *at = reinterpret_cast<int32_t *>(gpu.allocate(8));
    auto *all = reinterpret_cast<int32_t *>(gpu.allocate(24));
    dev.stream->upload(at, reinterpret_cast<const char *>(picked), 8);
    ASSERT_TRUE(comm.allGather(13, {plan::I32, at, 2, &dev.link},
                               {{plan::I32, all, 6, &dev.link}}, 7));
    std::vector<float> bits =
        dev.stream->read(reinterpret_cast<float *>(all), 6);
    for (int p = 0; p < 3; ++p) {
      int32_t got[2];
      std::memcpy(got, bits.data() + 2 * p, 8);
      EXPECT_EQ(got[0], p);
      EXPECT_EQ(got[1], -7 * p);
    }
  });
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(std::memcmp(gpuChunks[d].data(), hostChunks[d].data(), 12), 0)
        << "device " << d;
    EXPECT_EQ(gpuGathered[d], hostGathered[d]) << "device " << d;
  }
  EXPECT_TRUE(std::signbit(gpuChunks[1][2])); // element 5: -0 kept
  EXPECT_EQ(gpuChunks[2][1], 0.0f);           // element 7: padding
  std::vector<std::vector<Communicator::SendRecord>> hostLogs =
                                                         host.gatherSendLogs(),
                                                     gpuLogs =
                                                         onGpu.gatherSendLogs();
  for (int d = 0; d < 3; ++d) {
    ASSERT_EQ(gpuLogs[d].size(), hostLogs[d].size());
    for (size_t k = 0; k < gpuLogs[d].size(); ++k)
      EXPECT_EQ(gpuLogs[d][k].bytes, hostLogs[d][k].bytes);
  }
  for (auto &dev : devices)
    dev->stream->finish();
  EXPECT_EQ(gpu.downloads, 0);
  EXPECT_EQ(gpu.liveAllocations(), 18); // 6 tensors a device; blocks freed
  EXPECT_TRUE(gpu.errors.empty()) << gpu.errors.front();
}

// ZeRO's clipping sums the devices' shares of the squared norm (and their
// overflow flags) in place: through the links, summed on each GPU in device
// order, the host's bits for a sum and a mean; the data written right after
// the call (the next step) does not reach another device's sum.
TEST(DeviceLink, AllReduceInPlaceIsTheHostsBits) {
  LazyGpu gpu(0);
  std::vector<std::unique_ptr<GpuDevice>> devices;
  for (int d = 0; d < 3; ++d)
    devices.push_back(std::make_unique<GpuDevice>(gpu));
  LocalFabric host(3), onGpu(3);
  std::vector<std::vector<float>> parts = contributions(), hostSums = parts,
                                  hostMeans = parts, gpuSums(3), gpuMeans(3);
  checks::onEveryDevice(host, [&](Communicator &comm) {
    int d = comm.rank();
    ASSERT_TRUE(comm.allReduce(21, {plan::F32, hostSums[d].data(), 5},
                               ReduceOp::Sum, 3));
    ASSERT_TRUE(comm.allReduce(22, {plan::F32, hostMeans[d].data(), 5},
                               ReduceOp::Mean, 3));
  });
  checks::onEveryDevice(onGpu, [&](Communicator &comm) {
    int d = comm.rank();
    GpuDevice &dev = *devices[d];
    float *sum = dev.tensor(parts[d]), *mean = dev.tensor(parts[d]);
    ASSERT_TRUE(comm.allReduce(21, dev.buffer(sum, 5), ReduceOp::Sum, 3));
    ASSERT_TRUE(comm.allReduce(22, dev.buffer(mean, 5), ReduceOp::Mean, 3));
    gpuSums[d] = dev.stream->read(sum, 5);
    gpuMeans[d] = dev.stream->read(mean, 5);
    dev.stream->write(sum, std::vector<float>(5, 100.0f)); // the next step
  });
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(std::memcmp(gpuSums[d].data(), hostSums[d].data(), 20), 0)
        << "device " << d;
    EXPECT_EQ(std::memcmp(gpuMeans[d].data(), hostMeans[d].data(), 20), 0)
        << "device " << d;
    EXPECT_EQ(gpuSums[d], gpuSums[0]) << "device " << d;
  }
  EXPECT_EQ(hostSums[0][3], 1.0f + 1e-8f + 3.0f); // device order, from 0
  EXPECT_TRUE(std::signbit(gpuSums[2][1])); // -0 kept, as the host keeps it
  std::vector<std::vector<Communicator::SendRecord>> hostLogs =
                                                         host.gatherSendLogs(),
                                                     gpuLogs =
                                                         onGpu.gatherSendLogs();
  for (int d = 0; d < 3; ++d)
    EXPECT_EQ(gpuLogs[d].size(), hostLogs[d].size()) << "device " << d;
  for (auto &dev : devices)
    dev->stream->finish();
  EXPECT_EQ(gpu.downloads, 0);
  EXPECT_TRUE(gpu.errors.empty()) << gpu.errors.front();
}

// NCCL's reductions live on the GPUs, outside the fabric: a checkpoint
// saves the ones in flight (the means, and how many devices fetched each)
// as the fabric's own, and the resumed fabric hands them out.
TEST(DeviceLink, ReductionsHeldOutsideTheFabricAreSaved) {
  setHeldReductions(
      [] { return std::vector<HeldReduction>{{8, {1}, {0.5f, -1.0f}}}; });
  std::string saved;
  {
    LocalFabric fabric(2);
    std::vector<float> g = {3, 4};
    fabric.endpoint(0).reduceStart(9, {{plan::F32, g.data(), 2}}, 0);
    saved = fabric.saveInFlight();
  }
  setHeldReductions(nullptr);
  LocalFabric resumed(2);
  resumed.restoreInFlight(saved);
  LazyGpu gpu(0);
  GpuDevice b(gpu);
  float *mean = b.tensor({0, 0});
  ASSERT_TRUE(resumed.endpoint(1).reduceWait(8, {b.buffer(mean, 2)}));
  EXPECT_EQ(b.stream->read(mean, 2), std::vector<float>({0.5f, -1.0f}));
  std::vector<float> h = {5, 6}, got(2);
  resumed.endpoint(1).reduceStart(9, {{plan::F32, h.data(), 2}}, 0);
  ASSERT_TRUE(resumed.endpoint(1).reduceWait(9, {{plan::F32, got.data(), 2}}));
  EXPECT_EQ(got, std::vector<float>({4, 5}));
}

} // namespace
