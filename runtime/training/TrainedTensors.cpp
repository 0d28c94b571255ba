//===- TrainedTensors.cpp - the trained model, one tensor at a time -------===//
//
// After training the root writes and checks the trained model tensor by
// tensor, each read from the device that holds it: a pipeline stage's
// parameters from their stage, a ZeRO group's from the devices' shards,
// under mpirun from another process on request. Only one tensor is ever
// in flight, so the root's memory stays its own devices' plus the largest
// tensor (the model gathered whole on device 0 was its size once more).
//
//===----------------------------------------------------------------------===//

#include "Run.h"

#include "cdp/Plan/ShardGroups.h"

#include <mutex>
#include <thread>

namespace cdp::runtime::training {

namespace {

/// Beside the step and gather tags: device 0's request for a piece of a
/// tensor (its id, first element, count; id -1: no more requests) and the
/// piece in answer.
constexpr int64_t kFetchRequestTag = (int64_t(3) << 60) | (int64_t(1) << 44);
constexpr int64_t kFetchReplyTag = (int64_t(3) << 60) | (int64_t(1) << 45);

/// Elements [first, first + count) of tensor `id` as `executor` holds it.
TensorView piece(const Executor &executor, int id, int64_t first,
                 int64_t count) {
  const TensorView &whole = executor.held(id);
  if (first < 0 || count < 0 || first + count > whole.numel())
    throw RuntimeError("device " + std::to_string(executor.device()) +
                       ": elements [" + std::to_string(first) + ", " +
                       std::to_string(first + count) + ") of '" +
                       executor.tensor(id).name() + "' asked for, past its " +
                       std::to_string(whole.numel()));
  size_t size = plan::dtypeSize(whole.dtype);
  return {static_cast<char *>(whole.data) + first * size,
          {count},
          whole.dtype,
          whole.space};
}

/// Elements [first, first + count) of tensor `id` on `device` into `out`.
void readPiece(Run &run, int device, int id, int64_t first, int64_t count,
               char *out) {
  if (!run.fabric || run.fabric->owns(device)) {
    const Executor &executor = *run.executors.at(device);
    executor.download(piece(executor, id, first, count), out);
    return;
  }
  Communicator &root = run.fabric->endpoint(0);
  int64_t request[3] = {id, first, count};
  root.send(device, kFetchRequestTag, {plan::I64, request, 3}, -1);
  if (!root.recv(device, kFetchReplyTag,
                 {run.plan.tensors(id).dtype(), out, count}))
    fail("device 0: stopped while reading the trained '" +
         run.plan.tensors(id).name() + "' from device " +
         std::to_string(device) + " (another device failed)");
}

/// A shard group parameter whole, from the shards each device holds (the
/// owner's whole stage under CDP-ZeRO).
void readFromShards(Run &run, const plan::ShardGroup &group, int id,
                    char *out) {
  ShardLayout layout = plan::layoutOf(run.plan, group);
  int64_t begin = 0; // the parameter's first element in the group
  for (int p : group.params()) {
    if (p == id)
      break;
    begin += run.plan.tensors(p).bytes() / sizeof(float);
  }
  int64_t end = begin + run.plan.tensors(id).bytes() / sizeof(float);
  std::vector<int> holders;
  if (group.has_owner())
    holders.push_back(group.owner());
  else
    for (int d = 0; d < run.deviceCount; ++d)
      holders.push_back(d);
  int64_t shard = layout.paddedSize() / static_cast<int64_t>(holders.size());
  for (size_t i = 0; i < holders.size(); ++i) {
    int64_t from = std::max<int64_t>(begin, i * shard);
    int64_t to = std::min<int64_t>(end, (i + 1) * shard);
    if (from < to)
      readPiece(run, holders[i], group.shard(), from - i * shard, to - from,
                out + (from - begin) * sizeof(float));
  }
}

/// The shard group that holds parameter `id`, or null.
const plan::ShardGroup *shardGroupOf(const plan::Plan &plan, int id) {
  for (const plan::ShardGroup &group : plan.schedule().shard_groups())
    for (int p : group.params())
      if (p == id)
        return &group;
  return nullptr;
}

} // namespace

TrainedValue fetchTrained(Run &run, int id) {
  const plan::Tensor &t = run.plan.tensors(id);
  TrainedValue value;
  value.view = {nullptr,
                {t.shape().begin(), t.shape().end()},
                t.dtype(),
                MemorySpace::Host};
  value.storage.resize(t.bytes());
  value.view.data = value.storage.data();
  // Device 0 holds the whole trained model where the evaluation gathered
  // it; otherwise a tensor lies where the plan placed it.
  bool onDeviceZero = run.modelOnDeviceZero && run.first().view(id).present();
  const plan::ShardGroup *group =
      onDeviceZero ? nullptr : shardGroupOf(run.plan, id);
  int holder = !onDeviceZero && t.has_device() ? t.device() : 0;
  if (group)
    readFromShards(run, *group, id, value.storage.data());
  else
    readPiece(run, holder, id, 0, value.view.numel(), value.storage.data());
  return value;
}

/// One device of a process other than the root: answers device 0's
/// requests until it asks for no more.
static void serveDevice(Run &run, int device) {
  Communicator &endpoint = run.fabric->endpoint(device);
  const Executor &executor = *run.executors.at(device);
  for (;;) {
    int64_t request[3] = {-1, 0, 0};
    if (!endpoint.recv(0, kFetchRequestTag, {plan::I64, request, 3}))
      return; // the run was aborted: the root says why
    int id = static_cast<int>(request[0]);
    if (id < 0)
      return;
    if (id >= run.plan.tensors_size())
      fail("device 0 asked for tensor " + std::to_string(id) +
           ", which the plan does not hold");
    TensorView asked = piece(executor, id, request[1], request[2]);
    HostTensor host = executor.stageOut(asked);
    endpoint.send(0, kFetchReplyTag,
                  {host.view().dtype, host.view().data, request[2]}, -1);
  }
}

void serveTrainedTensors(Run &run) {
  std::vector<std::thread> servers;
  std::string firstError;
  std::mutex errorMutex;
  for (int d = 0; d < run.deviceCount; ++d)
    if (run.fabric->owns(d))
      servers.emplace_back([&, d] {
        try {
          serveDevice(run, d);
        } catch (const RuntimeError &e) {
          std::lock_guard<std::mutex> lock(errorMutex);
          if (firstError.empty())
            firstError = e.what();
        }
      });
  for (std::thread &server : servers)
    server.join();
  if (!firstError.empty())
    fail(firstError);
}

void endTrainedFetches(Run &run) {
  Communicator &root = run.fabric->endpoint(0);
  int64_t done[3] = {-1, 0, 0};
  for (int d = 0; d < run.deviceCount; ++d)
    if (!run.fabric->owns(d))
      root.send(d, kFetchRequestTag, {plan::I64, done, 3}, -1);
}

} // namespace cdp::runtime::training
