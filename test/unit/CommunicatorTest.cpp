//===- CommunicatorTest.cpp - the in-process communicator seam ------------===//
//
// Device endpoints of a LocalFabric as threads: typed messages arrive bit
// for bit (int64 above 2^24, bool), a receive of the wrong type or size is
// an error, a reduction's mean is the same bits on every device, every
// endpoint logs only what it sent, and abort wakes every waiter; the
// collectives and non-blocking requests (CollectiveChecks.h, which the MPI
// backend passes too under mpirun).
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Communicator.h"
#include "CollectiveChecks.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <thread>

using namespace cdp;
using namespace cdp::runtime;

namespace {

TEST(Communicator, TypedMessagesArriveBitForBit) {
  LocalFabric fabric(2);
  std::vector<int64_t> big = {(int64_t(1) << 53) + 1, -7, INT64_MIN};
  std::vector<uint8_t> mask = {1, 0, 1, 1};
  std::thread sender([&] {
    fabric.endpoint(0).send(1, 5, {plan::I64, big.data(), 3}, 0);
    fabric.endpoint(0).send(1, 6, {plan::BOOL, mask.data(), 4}, 1);
  });
  std::vector<int64_t> gotBig(3);
  std::vector<uint8_t> gotMask(4);
  // Received out of order: messages are matched by sender and tag.
  EXPECT_TRUE(fabric.endpoint(1).recv(0, 6, {plan::BOOL, gotMask.data(), 4}));
  EXPECT_TRUE(fabric.endpoint(1).recv(0, 5, {plan::I64, gotBig.data(), 3}));
  sender.join();
  EXPECT_EQ(gotBig, big);
  EXPECT_EQ(gotMask, mask);
  // Each endpoint logs what it sent: 24 + 4 bytes from device 0 only.
  std::vector<std::vector<Communicator::SendRecord>> logs =
      fabric.gatherSendLogs();
  ASSERT_EQ(logs[0].size(), 2u);
  EXPECT_EQ(logs[0][0].bytes, 24);
  EXPECT_EQ(logs[0][1].bytes, 4);
  EXPECT_EQ(logs[0][1].tau, 1);
  EXPECT_TRUE(logs[1].empty());
}

// A device running two pipeline stages passes values between them through
// its own mailbox: no traffic on a link, so nothing logged.
TEST(Communicator, MessagesToItselfArriveUnlogged) {
  LocalFabric fabric(2);
  std::vector<float> x = {1.5f, -2.0f};
  fabric.endpoint(1).send(1, 9, {plan::F32, x.data(), 2}, 0);
  std::vector<float> got(2);
  EXPECT_TRUE(fabric.endpoint(1).recv(1, 9, {plan::F32, got.data(), 2}));
  EXPECT_EQ(got, x);
  EXPECT_TRUE(fabric.gatherSendLogs()[1].empty());
  EXPECT_THROW(fabric.endpoint(1).send(2, 9, {plan::F32, x.data(), 2}, 0),
               RuntimeError);
}

TEST(Communicator, ReceiveOfAnotherTypeOrSizeIsAnError) {
  LocalFabric fabric(2);
  float x[2] = {1, 2};
  fabric.endpoint(0).send(1, 1, {plan::F32, x, 2}, 0);
  int64_t y[2];
  EXPECT_THROW(fabric.endpoint(1).recv(0, 1, {plan::I64, y, 2}), RuntimeError);
  float z[3];
  EXPECT_THROW(fabric.endpoint(1).recv(0, 1, {plan::F32, z, 3}), RuntimeError);
  EXPECT_THROW(fabric.endpoint(0).send(2, 1, {plan::F32, x, 2}, 0),
               RuntimeError); // no device 2
}

TEST(Communicator, MeanIsTheSameBitsOnEveryDevice) {
  const int devices = 3;
  LocalFabric fabric(devices);
  // 0.1 + 0.2 + 0.3 in float32 depends on the order; every device must
  // get device order's result.
  std::vector<std::vector<float>> means(devices, std::vector<float>(1));
  std::vector<std::thread> threads;
  for (int d = 0; d < devices; ++d)
    threads.emplace_back([&, d] {
      float mine = 0.1f * static_cast<float>(d + 1);
      Communicator &endpoint = fabric.endpoint(d);
      endpoint.reduceStart(9, {{plan::F32, &mine, 1}}, d);
      ASSERT_TRUE(endpoint.reduceWait(9, {{plan::F32, means[d].data(), 1}}));
    });
  for (std::thread &thread : threads)
    thread.join();
  // Summed from zero in device order, then scaled by 1/N.
  float expected = 0.0f;
  for (int d = 0; d < devices; ++d)
    expected += 0.1f * static_cast<float>(d + 1);
  expected *= 1.0f / static_cast<float>(devices);
  for (int d = 0; d < devices; ++d)
    EXPECT_EQ(means[d][0], expected) << "device " << d;
}

TEST(Communicator, ReductionOfPartsComesBackInTheSameParts) {
  // A stage's gradients are several tensors: each device hands them over
  // where they lie, cut differently on the two sides, and gets the means
  // back in its own cut.
  LocalFabric fabric(2);
  std::vector<std::vector<float>> means(2, std::vector<float>(5));
  std::vector<std::thread> threads;
  for (int d = 0; d < 2; ++d)
    threads.emplace_back([&, d] {
      float scale = static_cast<float>(d + 1);
      float a[2] = {1 * scale, 2 * scale},
            b[3] = {3 * scale, 4 * scale, 5 * scale};
      Communicator &endpoint = fabric.endpoint(d);
      endpoint.reduceStart(3, {{plan::F32, a, 2}, {plan::F32, b, 3}}, 0);
      float *out = means[d].data();
      ASSERT_TRUE(endpoint.reduceWait(3, {{plan::F32, out, 1},
                                          {plan::F32, out + 1, 0},
                                          {plan::F32, out + 1, 4}}));
    });
  for (std::thread &thread : threads)
    thread.join();
  for (int d = 0; d < 2; ++d)
    EXPECT_EQ(means[d], (std::vector<float>{1.5f, 3.0f, 4.5f, 6.0f, 7.5f}))
        << "device " << d;
}

TEST(Communicator, ReductionsAreOfFloats) {
  LocalFabric fabric(1);
  int64_t x = 3;
  EXPECT_THROW(fabric.endpoint(0).reduceStart(1, {{plan::I64, &x, 1}}, 0),
               RuntimeError);
}

TEST(Communicator, AbortWakesEveryWaiter) {
  LocalFabric fabric(3);
  bool received = true, reduced = true;
  std::thread receiver([&] {
    float y;
    received = fabric.endpoint(1).recv(0, 1, {plan::F32, &y, 1});
  });
  std::thread reducer([&] {
    float y;
    reduced = fabric.endpoint(2).reduceWait(4, {{plan::F32, &y, 1}});
  });
  fabric.endpoint(0).abort();
  receiver.join();
  reducer.join();
  EXPECT_FALSE(received);
  EXPECT_FALSE(reduced);
}

TEST(Communicator, AllReduceSumAndMean) {
  LocalFabric fabric(4);
  checks::allReduceSumAndMean(fabric);
}

TEST(Communicator, ReduceScatter) {
  LocalFabric fabric(4);
  checks::reduceScatterGivesEachDeviceItsChunk(fabric);
}

TEST(Communicator, CollectivesOfParts) {
  for (int devices : {1, 2, 3, 5}) {
    LocalFabric fabric(devices);
    checks::collectivesOfParts(fabric);
  }
}

TEST(Communicator, PartialSumsArriveInPlace) {
  LocalFabric fabric(4);
  checks::partialSumsArriveInPlace(fabric);
  LocalFabric two(2);
  float x[3] = {1, 2, 3}, y[2] = {0, 0};
  two.endpoint(0).send(1, 5, {plan::F32, x, 3}, 0);
  EXPECT_THROW(two.endpoint(1).recvAdd(0, 5, {{plan::F32, y, 2}}),
               RuntimeError); // 3 values do not fit 2
}

TEST(Communicator, CollectivesRefuseTooManyParts) {
  LocalFabric fabric(2);
  float x[5];
  Communicator &comm = fabric.endpoint(0);
  std::vector<ConstBuffer> in = {{plan::F32, x, 3}, {plan::F32, x, 2}};
  EXPECT_THROW(comm.reduceScatter(1, in, {plan::F32, x, 2}, ReduceOp::Sum, 0),
               RuntimeError); // 5 elements into 2 chunks of 2
  std::vector<Buffer> out = {{plan::F32, x, 3}, {plan::I32, x, 1}};
  EXPECT_THROW(comm.allGather(2, {plan::F32, x, 2}, out, 0),
               RuntimeError); // an int32 part
  std::vector<Buffer> negative = {{plan::F32, x, 5}, {plan::F32, x, -1}};
  EXPECT_THROW(comm.allGather(3, {plan::F32, x, 2}, negative, 0),
               RuntimeError); // 4 elements in all, but one part is -1
}

TEST(Communicator, AllGather) {
  LocalFabric fabric(3);
  checks::allGatherInDeviceOrder(fabric);
  checks::allGatherOfVariableLengths(fabric);
}

TEST(Communicator, Broadcast) {
  LocalFabric fabric(3);
  checks::broadcastFromEveryRoot(fabric);
}

TEST(Communicator, NonBlockingReceive) {
  LocalFabric fabric(2);
  checks::nonBlockingReceiveCompletesOnWait(fabric);
}

TEST(Communicator, RouteAgreement) {
  LocalFabric fabric(4);
  checks::routeAgreement(fabric);
  checks::crossProcessSendsOfAPlan(fabric);
}

TEST(Communicator, NcclAgreement) {
  LocalFabric fabric(4);
  checks::ncclAgreement(fabric);
  // Two devices on one host's one GPU: the first pair in device order.
  EXPECT_EQ(whyNotNccl({{3, "a", 1}, {0, "a", 0}, {1, "a", 1}}),
            "devices 1 and 3 share GPU 1 of a");
  EXPECT_EQ(whyNotNccl({{0, "a", 0}, {1, "b", 0}}), "");
  EXPECT_EQ(whyNotNccl({{1, "b", -1}, {0, "a", 0}, {2, "a", 0}}),
            "device 1 sees no GPU on b");
}

TEST(Communicator, CollectivesRefuseWhatTheyCannotReduce) {
  LocalFabric fabric(1);
  uint8_t mask = 1;
  int64_t count = 3;
  Communicator &comm = fabric.endpoint(0);
  EXPECT_THROW(comm.allReduce(1, {plan::BOOL, &mask, 1}, ReduceOp::Sum, 0),
               RuntimeError);
  EXPECT_THROW(comm.allReduce(2, {plan::I64, &count, 1}, ReduceOp::Mean, 0),
               RuntimeError); // a mean of integers
  float x[3];
  EXPECT_THROW(comm.reduceScatter(3, {plan::F32, x, 3}, {plan::F32, x, 2},
                                  ReduceOp::Sum, 0),
               RuntimeError); // 3 is not 1 chunk of 2
  EXPECT_THROW(
      comm.allReduce(int64_t(1) << 57, {plan::F32, x, 1}, ReduceOp::Sum, 0),
      RuntimeError); // tag out of range
}

} // namespace
