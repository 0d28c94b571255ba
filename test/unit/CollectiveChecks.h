//===- CollectiveChecks.h - the communicator seam's collectives -*- C++ -*-===//
//
// Checks every communicator backend must pass, run by each device of a
// fabric on a thread of its own: in-process (CommunicatorTest) and under
// mpirun (MpiCommunicatorTest). Contributions are chosen so that float32
// sums depend on their order: every device must get device order's bits.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_TEST_UNIT_COLLECTIVECHECKS_H
#define CDP_TEST_UNIT_COLLECTIVECHECKS_H

#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Kernel.h"
#include "cdp/Runtime/NcclBootstrap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>

namespace cdp::runtime::checks {

/// Runs `body` for every device this process owns, each on a thread.
inline void onEveryDevice(Fabric &fabric,
                          const std::function<void(Communicator &)> &body) {
  std::vector<std::thread> threads;
  for (int d = 0; d < fabric.size(); ++d)
    if (fabric.owns(d))
      threads.emplace_back([&, d] { body(fabric.endpoint(d)); });
  for (std::thread &thread : threads)
    thread.join();
}

/// Element i of device d's contribution: magnitudes far apart, so that
/// float32 addition is not associative on them.
inline float contribution(int d, int64_t i) {
  return std::sin(static_cast<float>(7 * d + i)) *
         std::pow(10.0f, static_cast<float>((d + i) % 5) - 2.0f);
}

/// Device order's sum of element i over `devices`.
inline float orderedSum(int devices, int64_t i) {
  float sum = contribution(0, i);
  for (int d = 1; d < devices; ++d)
    sum += contribution(d, i);
  return sum;
}

inline void allReduceSumAndMean(Fabric &fabric) {
  const int64_t n = 37;
  int N = fabric.size();
  onEveryDevice(fabric, [&](Communicator &comm) {
    std::vector<float> sum(n), mean(n);
    for (int64_t i = 0; i < n; ++i)
      sum[i] = mean[i] = contribution(comm.rank(), i);
    ASSERT_TRUE(
        comm.allReduce(1, {plan::F32, sum.data(), n}, ReduceOp::Sum, 0));
    ASSERT_TRUE(
        comm.allReduce(2, {plan::F32, mean.data(), n}, ReduceOp::Mean, 0));
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(sum[i], orderedSum(N, i)) << "device " << comm.rank();
      EXPECT_EQ(mean[i], orderedSum(N, i) * (1.0f / static_cast<float>(N)));
    }
    // Integers exactly, int64 beyond float's 2^24 and double's 2^53.
    int64_t big = (int64_t(1) << 53) + comm.rank();
    int32_t index = 1000 * comm.rank() - 7;
    ASSERT_TRUE(comm.allReduce(3, {plan::I64, &big, 1}, ReduceOp::Sum, 0));
    ASSERT_TRUE(comm.allReduce(4, {plan::I32, &index, 1}, ReduceOp::Sum, 0));
    EXPECT_EQ(big, N * (int64_t(1) << 53) + N * (N - 1) / 2);
    EXPECT_EQ(index, 1000 * N * (N - 1) / 2 - 7 * N);
  });
}

inline void reduceScatterGivesEachDeviceItsChunk(Fabric &fabric) {
  const int64_t chunk = 5;
  int N = fabric.size();
  onEveryDevice(fabric, [&](Communicator &comm) {
    std::vector<float> in(N * chunk), out(chunk);
    for (int64_t i = 0; i < N * chunk; ++i)
      in[i] = contribution(comm.rank(), i);
    ASSERT_TRUE(comm.reduceScatter(5, {plan::F32, in.data(), N * chunk},
                                   {plan::F32, out.data(), chunk},
                                   ReduceOp::Sum, 0));
    for (int64_t i = 0; i < chunk; ++i)
      EXPECT_EQ(out[i], orderedSum(N, comm.rank() * chunk + i));
  });
}

inline void allGatherInDeviceOrder(Fabric &fabric) {
  int N = fabric.size();
  onEveryDevice(fabric, [&](Communicator &comm) {
    int32_t mine[2] = {comm.rank(), -comm.rank()};
    std::vector<int32_t> all(2 * N, 99);
    ASSERT_TRUE(comm.allGather(6, {plan::I32, mine, 2},
                               {plan::I32, all.data(), 2 * N}, 0));
    for (int d = 0; d < N; ++d) {
      EXPECT_EQ(all[2 * d], d);
      EXPECT_EQ(all[2 * d + 1], -d);
    }
  });
}

/// A stage as its tensors where they lie: reduce-scattered from parts cut
/// across the chunks' borders, padded with zeros past the last part, and
/// gathered back into parts cut differently, the padding dropped.
inline void collectivesOfParts(Fabric &fabric) {
  const int64_t chunk = 4;
  int N = fabric.size();
  int64_t stage = N * chunk - 3; // the last chunk holds 3 zeros of padding
  onEveryDevice(fabric, [&](Communicator &comm) {
    std::vector<float> grads(stage);
    for (int64_t i = 0; i < stage; ++i)
      grads[i] = contribution(comm.rank(), i);
    // Three tensors, cut after the first element and at the middle.
    int64_t middle = std::max<int64_t>(1, stage / 2);
    std::vector<ConstBuffer> in = {
        {plan::F32, grads.data(), 1},
        {plan::F32, grads.data() + 1, middle - 1},
        {plan::F32, grads.data() + middle, stage - middle}};
    std::vector<float> shard(chunk);
    ASSERT_TRUE(comm.reduceScatter(7, in, {plan::F32, shard.data(), chunk},
                                   ReduceOp::Sum, 0));
    for (int64_t i = 0; i < chunk; ++i) {
      int64_t at = comm.rank() * chunk + i;
      EXPECT_EQ(shard[i], at < stage ? orderedSum(N, at) : 0.0f)
          << "element " << at;
    }
    std::vector<float> params(stage, -1.0f);
    // Cut after two elements, where `in` is not cut, with an empty tensor.
    int64_t head = std::min<int64_t>(2, stage);
    std::vector<Buffer> out = {{plan::F32, params.data(), head},
                               {plan::F32, params.data() + head, 0},
                               {plan::F32, params.data() + head, stage - head}};
    ASSERT_TRUE(comm.allGather(8, {plan::F32, shard.data(), chunk}, out, 0));
    for (int64_t i = 0; i < stage; ++i)
      EXPECT_EQ(params[i], orderedSum(N, i)) << "element " << i;
  });
}

/// The chain's hop: each device adds the partial sum of the devices
/// before it into its own values, cut into tensors differently on the two
/// sides, and sends the sum on as its tensors; the last has the sum.
inline void partialSumsArriveInPlace(Fabric &fabric) {
  const int64_t n = 7;
  int N = fabric.size();
  onEveryDevice(fabric, [&](Communicator &comm) {
    int d = comm.rank();
    std::vector<float> values(n);
    for (int64_t i = 0; i < n; ++i)
      values[i] = contribution(d, i);
    int64_t cut = 1 + d % 3; // every device cuts its tensors elsewhere
    std::vector<Buffer> parts = {{plan::F32, values.data(), cut},
                                 {plan::F32, values.data() + cut, n - cut}};
    if (d > 0)
      ASSERT_TRUE(comm.recvAdd(d - 1, 11, parts));
    if (d + 1 < N) {
      comm.send(d + 1, 11, {parts[0], parts[1]}, 0);
      return;
    }
    for (int64_t i = 0; i < n; ++i) // partial + own is own + partial
      EXPECT_EQ(values[i], orderedSum(N, i)) << "element " << i;
  });
}

inline void allGatherOfVariableLengths(Fabric &fabric) {
  int N = fabric.size();
  onEveryDevice(fabric, [&](Communicator &comm) {
    // Device d sends d values (device 0: none), as top-k gradients would.
    std::vector<float> mine(comm.rank());
    for (int i = 0; i < comm.rank(); ++i)
      mine[i] = contribution(comm.rank(), i);
    Gathered all;
    ASSERT_TRUE(
        comm.allGatherV(7, {plan::F32, mine.data(), comm.rank()}, all, 0));
    ASSERT_EQ(all.counts.size(), static_cast<size_t>(N));
    for (int d = 0; d < N; ++d) {
      ASSERT_EQ(all.counts[d], d);
      const float *values =
          reinterpret_cast<const float *>(all.bytes.data() + all.offset(d));
      for (int i = 0; i < d; ++i)
        EXPECT_EQ(values[i], contribution(d, i));
    }
  });
}

inline void broadcastFromEveryRoot(Fabric &fabric) {
  int N = fabric.size();
  onEveryDevice(fabric, [&](Communicator &comm) {
    for (int root = 0; root < N; ++root) {
      int64_t value = comm.rank() == root ? 1000 + root : -1;
      ASSERT_TRUE(comm.broadcast(8 + root, {plan::I64, &value, 1}, root, 0));
      EXPECT_EQ(value, 1000 + root);
    }
  });
}

/// Device 1 posts its receive first and sees it incomplete, then tells
/// device 0 to send: the request completes with the data.
inline void nonBlockingReceiveCompletesOnWait(Fabric &fabric) {
  onEveryDevice(fabric, [&](Communicator &comm) {
    float go = 1, value = 0, sent = 2.5f;
    if (comm.rank() == 1) {
      Request request = comm.irecv(0, 21, {plan::F32, &value, 1});
      EXPECT_FALSE(request.test());
      comm.send(0, 20, {plan::F32, &go, 1}, 0);
      ASSERT_TRUE(request.wait());
      EXPECT_EQ(value, sent);
      EXPECT_TRUE(request.test());
    } else if (comm.rank() == 0) {
      ASSERT_TRUE(comm.recv(1, 20, {plan::F32, &go, 1}));
      Request request = comm.isend(1, 21, {plan::F32, &sent, 1}, 0);
      ASSERT_TRUE(request.wait());
    }
  });
}

/// NCCL's bootstrap (process-level, on the main thread): where no two
/// devices share a GPU, the root makes the id once and every process gets
/// the root's; where two do, no id is made and every process gets the same
/// reason. The places are made up (no GPU needed): 4 devices as 2 hosts of
/// 2 GPUs, then as one host's 2 GPUs.
inline void ncclAgreement(Fabric &fabric) {
  int me = fabric.processRank(), made = 0;
  auto makeId = [&] {
    ++made;
    return "the id of process " + std::to_string(me);
  };
  std::vector<GpuPlace> mine;
  for (int d = 0; d < fabric.size(); ++d)
    if (fabric.owns(d))
      mine.push_back({d, "node" + std::to_string(d / 2), d % 2});
  std::string why;
  EXPECT_EQ(agreeOnNcclId(fabric, mine, makeId, why), "the id of process 0");
  EXPECT_EQ(why, "");
  EXPECT_EQ(made, me == 0 ? 1 : 0);
  for (GpuPlace &p : mine)
    p.host = "node0";
  EXPECT_EQ(agreeOnNcclId(fabric, mine, makeId, why), "");
  EXPECT_EQ(why, "devices 0 and 2 share GPU 0 of node0");
  EXPECT_EQ(made, me == 0 ? 1 : 0);
}

/// The routes' bootstrap: one id per ordered pair whose devices have GPUs
/// of their own, made by the root in the pairs' order, every process
/// getting the whole list; a pair that shares a GPU or has a device without
/// one gets the reason. 4 devices on one host, devices 1 and 2 on one GPU.
inline void routeAgreement(Fabric &fabric) {
  int made = 0;
  auto makeId = [&] { return "id" + std::to_string(made++); };
  std::vector<GpuPlace> mine;
  for (int d = 0; d < fabric.size(); ++d)
    if (fabric.owns(d) && d != 3)
      mine.push_back({d, "node", d == 2 ? 1 : d});
  std::vector<std::pair<int, int>> pairs = {{0, 1}, {1, 2}, {3, 0}, {1, 0}};
  std::vector<RouteAgreement> routes =
      agreeOnRoutes(fabric, mine, pairs, makeId);
  ASSERT_EQ(routes.size(), 4u);
  EXPECT_EQ(routes[0].id, "id0");
  EXPECT_EQ(routes[1].why, "devices 1 and 2 share GPU 1 of node");
  EXPECT_EQ(routes[1].id, "");
  EXPECT_EQ(routes[2].why, "device 3 has no GPU");
  EXPECT_EQ(routes[3].id, "id1");
  EXPECT_EQ(routes[3].why, "");
  for (size_t k = 0; k < pairs.size(); ++k)
    EXPECT_EQ(std::make_pair(routes[k].from, routes[k].to), pairs[k]);
  EXPECT_EQ(made, fabric.isRoot() ? 2 : 0);
}

/// The pairs a plan's messages join across processes (its sends, ZeRO's
/// collectives, the chain's hops, the replicas' sums and shards): each once, in
/// order, the evaluation program's too, only between devices of different
/// processes (none in one process).
inline void crossProcessSendsOfAPlan(Fabric &fabric) {
  plan::Plan plan;
  auto send = [&](int from, int to, bool eval = false) {
    plan::Device &device = *plan.mutable_devices(from);
    plan::Instruction *instruction =
        eval ? device.add_eval_instructions() : device.add_instructions();
    instruction->set_op("send");
    plan::Attribute *peer = instruction->add_attributes();
    peer->set_name("peer");
    peer->set_i(to);
  };
  for (int d = 0; d < 4; ++d)
    plan.add_devices();
  send(3, 0);
  send(0, 3);
  send(0, 1);
  send(0, 3);
  send(1, 2, /*eval=*/true);
  plan.mutable_devices(2)->add_instructions()->set_op("recv");
  // cdp's chain: partial sums up the slots, the mean back down (2 -> 1, 1
  // -> 0), and a last slot's mean to its stage's owner (3 -> 1).
  for (int d = 0; d < 4; ++d)
    plan.mutable_devices(d)->add_instructions()->set_op(d == 0 ? "chain_reduce"
                                                               : "chain_relay");
  plan.mutable_devices(2)->add_instructions()->set_op("chain_reduce");
  plan::Instruction *last = plan.mutable_devices(3)->add_instructions();
  last->set_op("chain_reduce");
  plan::Attribute *owner = last->add_attributes();
  owner->set_name("owner");
  owner->set_i(1);
  // ZeRO: a gather reaches every other device (1 -> 3 new); stage 3's
  // update exchanges nothing.
  plan.mutable_devices(1)->add_instructions()->set_op("shard_gather");
  plan::Instruction *update = plan.mutable_devices(2)->add_instructions();
  update->set_op("shard_update");
  plan::Attribute *zero = update->add_attributes();
  zero->set_name("zero");
  zero->set_i(3);
  // A pipeline stage's gradient summed over its replicas (0 -> 2 new).
  plan::Instruction *sum = plan.mutable_devices(0)->add_instructions();
  sum->set_op("replica_sum");
  plan::Attribute *peers = sum->add_attributes();
  peers->set_name("peers");
  peers->mutable_ints()->add_values(0);
  peers->mutable_ints()->add_values(2);
  // ZeRO 1 over the replicas: the updated shard to the others (2 -> 0 new).
  plan::Instruction *shard = plan.mutable_devices(2)->add_instructions();
  shard->set_op("replica_shard_update");
  *shard->add_attributes() = *peers;
  std::vector<std::pair<int, int>> pairs = {{0, 1}, {0, 2}, {0, 3}, {1, 0},
                                            {1, 2}, {1, 3}, {2, 0}, {2, 1},
                                            {2, 3}, {3, 0}, {3, 1}, {3, 2}};
  std::vector<std::pair<int, int>> expected;
  for (auto pair : pairs)
    if (fabric.processOf(pair.first) != fabric.processOf(pair.second))
      expected.push_back(pair);
  EXPECT_EQ(crossProcessSends(plan, fabric), expected);
  if (fabric.processCount() == 4)
    EXPECT_EQ(expected.size(), 12u);
}

} // namespace cdp::runtime::checks

#endif // CDP_TEST_UNIT_COLLECTIVECHECKS_H
