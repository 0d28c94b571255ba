//===- ReplicaSumTest.cpp - a pipeline stage's gradients over its replicas ===//
//
// `replica_sum` on the devices of one stage of a LocalFabric (peers spread
// over the run as a replicated pipeline spreads them): every replica ends
// with ((g_0 + g_1) + g_2) + ... bit for bit, computed here in plain float
// arithmetic, for 2, 3 and 4 replicas over 3 steps whose values differ.
// The values are chosen so that another association or order gives other
// bits (1e8, -1e8 and 1 sum to 1 left to right, to 0 right to left). Peers
// that leave out the device, name one the run lacks or number fewer than 2
// are refused when the kernel is made.
//
//===----------------------------------------------------------------------===//

#include "LazyStreams.h"
#include "StubDevice.h"

#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Device.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

namespace {

namespace plan = cdp::plan;
using namespace cdp::runtime;

TensorView view(std::vector<float> &data) {
  TensorView v;
  v.data = data.data();
  v.shape = {static_cast<int64_t>(data.size())};
  v.dtype = plan::F32;
  return v;
}

plan::Instruction replicaSum(const std::vector<int64_t> &peers,
                             int64_t replica) {
  plan::Instruction instruction;
  instruction.set_op("replica_sum");
  instruction.add_inputs(7);
  instruction.add_outputs(8);
  plan::Attribute *list = instruction.add_attributes();
  list->set_name("peers");
  for (int64_t peer : peers)
    list->mutable_ints()->add_values(peer);
  plan::setIntAttribute(&instruction, "replica", replica);
  return instruction;
}

std::unique_ptr<Kernel> make(KernelArgs &args) {
  return (*KernelRegistry::instance().lookup("replica_sum", Backend::CPU))(
      args);
}

/// Replica r's gradient of step `step`: the three values whose sum depends
/// on the order, rotated by the replica, then random ones of mixed sizes.
std::vector<float> gradientOf(int r, int64_t step, size_t elements) {
  const float hard[3] = {1e8f, -1e8f, 1.0f};
  std::mt19937 rng(static_cast<unsigned>(100 * step + r));
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> g(elements);
  for (size_t i = 0; i < elements; ++i)
    g[i] = i < 3 ? hard[(i + r) % 3] * static_cast<float>(step + 1)
                 : std::ldexp(mantissa(rng), exponent(rng));
  return g;
}

TEST(ReplicaSum, EveryReplicaAddsInReplicaOrder) {
  const size_t elements = 257;
  for (int replicas : {2, 3, 4}) {
    int devices = 3 * replicas; // stage 2 of 3: devices 1, 4, 7, ...
    std::vector<int64_t> peers;
    for (int r = 0; r < replicas; ++r)
      peers.push_back(3 * r + 1);
    LocalFabric fabric(devices);
    std::vector<std::vector<std::vector<float>>> sums(
        replicas, std::vector<std::vector<float>>(3));
    std::vector<std::thread> threads;
    for (int r = 0; r < replicas; ++r)
      threads.emplace_back([&, r] {
        plan::Instruction instruction = replicaSum(peers, r);
        std::vector<float> gradient(elements), sum(elements);
        KernelArgs args;
        args.instruction = &instruction;
        args.inputs = {view(gradient)};
        args.outputs = {view(sum)};
        args.communicator = &fabric.endpoint(static_cast<int>(peers[r]));
        args.device = static_cast<int>(peers[r]);
        std::unique_ptr<Kernel> kernel = make(args);
        for (int64_t step = 0; step < 3; ++step) {
          std::vector<float> g = gradientOf(r, step, elements);
          std::copy(g.begin(), g.end(), gradient.begin()); // the view's
          StepContext context;
          context.step = step;
          kernel->run(context);
          sums[r][step] = sum;
        }
      });
    for (std::thread &thread : threads)
      thread.join();
    for (int64_t step = 0; step < 3; ++step) {
      std::vector<float> want = gradientOf(0, step, elements);
      for (int q = 1; q < replicas; ++q) {
        std::vector<float> g = gradientOf(q, step, elements);
        for (size_t i = 0; i < elements; ++i)
          want[i] = want[i] + g[i];
      }
      for (int r = 0; r < replicas; ++r)
        EXPECT_EQ(0, std::memcmp(sums[r][step].data(), want.data(),
                                 elements * sizeof(float)))
            << replicas << " replicas, step " << step << ", replica " << r;
    }
    if (replicas == 3) // the order shows: left to right 1, right to left 0
      EXPECT_EQ(sums[2][0][0], 1.0f);
  }
}

/// A device whose memory the host may not touch, as a kernel sees it: only
/// its link (a LazyDevice's), which the communicator moves its tensors
/// through.
class LinkedDevice : public cdp::test::StubGpuDevice {
public:
  explicit LinkedDevice(DeviceLink &link) : deviceLink(link) {}
  DeviceLink *link() override { return &deviceLink; }

private:
  DeviceLink &deviceLink;
};

// On GPUs sharing one (the devices' links): the gradients and sums never
// leave device memory (the host touching them would fault), the replicas'
// own gradients are copied and added on their streams, and every replica
// gets the host's bits.
TEST(ReplicaSum, OnTheDevicesItAddsInReplicaOrderToo) {
  const size_t elements = 257;
  const int replicas = 3, devices = 6;
  std::vector<int64_t> peers = {1, 3, 5};
  cdp::test::LazyGpu gpu(0);
  LocalFabric fabric(devices);
  std::vector<std::unique_ptr<cdp::test::LazyDevice>> lazy;
  std::vector<std::unique_ptr<LinkedDevice>> linked;
  for (int r = 0; r < replicas; ++r) {
    lazy.push_back(std::make_unique<cdp::test::LazyDevice>(gpu));
    linked.push_back(std::make_unique<LinkedDevice>(lazy.back()->link));
  }
  std::vector<std::vector<float>> sums(replicas);
  std::vector<std::thread> threads;
  for (int r = 0; r < replicas; ++r)
    threads.emplace_back([&, r] {
      cdp::test::LazyDevice &dev = *lazy[r];
      plan::Instruction instruction = replicaSum(peers, r);
      TensorView gradient, sum;
      gradient.data = dev.tensor(gradientOf(r, 2, elements));
      sum.data = dev.tensor(std::vector<float>(elements, 5.0f));
      gradient.shape = sum.shape = {static_cast<int64_t>(elements)};
      gradient.space = sum.space = MemorySpace::Device;
      KernelArgs args;
      args.instruction = &instruction;
      args.inputs = {gradient};
      args.outputs = {sum};
      args.communicator = &fabric.endpoint(static_cast<int>(peers[r]));
      args.device = static_cast<int>(peers[r]);
      args.runsOn = linked[r].get();
      std::unique_ptr<Kernel> kernel = make(args);
      StepContext context;
      context.step = 2;
      kernel->run(context);
      sums[r] = dev.stream->read(sum.f32(), elements);
    });
  for (std::thread &thread : threads)
    thread.join();
  std::vector<float> want = gradientOf(0, 2, elements);
  for (int q = 1; q < replicas; ++q) {
    std::vector<float> g = gradientOf(q, 2, elements);
    for (size_t i = 0; i < elements; ++i)
      want[i] = want[i] + g[i];
  }
  for (int r = 0; r < replicas; ++r)
    EXPECT_EQ(0, std::memcmp(sums[r].data(), want.data(), elements * 4))
        << "replica " << r;
  for (auto &dev : lazy)
    dev->stream->finish();
  EXPECT_EQ(gpu.downloads, 0);
  EXPECT_TRUE(gpu.errors.empty()) << gpu.errors.front();
}

TEST(ReplicaSum, RefusesPeersThatDoNotHoldTheDevice) {
  LocalFabric fabric(4);
  std::vector<float> gradient(4), sum(4);
  struct Case {
    std::vector<int64_t> peers;
    int64_t replica;
  };
  for (const Case &c : {Case{{0, 2}, 1}, Case{{1, 9}, 0}, Case{{1}, 0},
                        Case{{1, 3}, 2}, Case{{1, -1}, 0}}) {
    plan::Instruction instruction = replicaSum(c.peers, c.replica);
    KernelArgs args;
    args.instruction = &instruction;
    args.inputs = {view(gradient)};
    args.outputs = {view(sum)};
    args.communicator = &fabric.endpoint(1);
    args.device = 1;
    EXPECT_THROW(make(args), RuntimeError)
        << c.peers.size() << " peers, replica " << c.replica;
  }
}

} // namespace
