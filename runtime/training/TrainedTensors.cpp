//===- TrainedTensors.cpp - the trained model, one tensor at a time -------===//
//
// After training the root writes and checks the trained model tensor by
// tensor, each read from the device that holds it: a pipeline stage's
// parameters from their stage, a ZeRO group's from the devices' shards,
// under mpirun from another process on request. Only one tensor is ever
// in flight, so the root's memory stays its own devices' plus the largest
// tensor (the model gathered whole on device 0 was its size once more).
// The optimizer's state (a portable checkpoint) is read the same way: each
// device first says which parts of which parameters' state its kernels
// hold (StateRecord), then the root asks for the parts it needs.
//
//===----------------------------------------------------------------------===//

#include "Run.h"

#include "cdp/Plan/ShardGroups.h"
#include "cdp/Runtime/MessageTags.h"

#include <mutex>
#include <thread>

namespace cdp::runtime::training {

namespace {

/// What device 0 asks another process's device for: elements [first,
/// first + count) of tensor `a` (kTensor) or of state tensor `b` of the
/// device's stateful kernel `a` (kStatePiece); its state records
/// (kStateRecords: their count, then the records); or nothing more.
enum RequestKind : int64_t {
  kDone = -1,
  kTensor = 0,
  kStateRecords = 1,
  kStatePiece = 2
};
struct Request {
  int64_t kind = kDone, a = 0, b = 0, first = 0, count = 0;
};
constexpr int64_t kRequestFields = 5;
constexpr int64_t kRecordFields = 8;

void sendRequest(Communicator &root, int device, const Request &request) {
  int64_t fields[kRequestFields] = {request.kind, request.a, request.b,
                                    request.first, request.count};
  root.send(device, tags::fetchRequest(), {plan::I64, fields, kRequestFields},
            -1);
}

/// Answers are read only while the run holds: a failed device ends them.
void receiveAnswer(Run &run, int device, const Buffer &into,
                   const std::string &what) {
  if (!run.fabric->endpoint(0).recv(device, tags::fetchReply(), into))
    fail("device 0: stopped while reading " + what + " from device " +
         std::to_string(device) + " (another device failed)");
}

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
  sendRequest(run.fabric->endpoint(0), device, {kTensor, id, 0, first, count});
  receiveAnswer(run, device, {run.plan.tensors(id).dtype(), out, count},
                "the trained '" + run.plan.tensors(id).name() + "'");
}

/// Elements [first, first + count) of a shard group's parameter, from
/// the shards each device holds (the owner's whole stage under CDP-ZeRO).
void readFromShards(Run &run, const plan::ShardGroup &group, int id,
                    int64_t first, int64_t count, char *out) {
  ShardLayout layout = plan::layoutOf(run.plan, group);
  int64_t begin = 0; // the parameter's first element in the group
  for (int p : group.params()) {
    if (p == id)
      break;
    begin += run.plan.tensors(p).bytes() / sizeof(float);
  }
  begin += first;
  int64_t end = begin + count;
  std::vector<int> holders = plan::shardHolders(run.plan, group);
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

/// The parameters, in its stage's order, whose elements a stateful
/// instruction's state spans name.
std::vector<int> stageParams(const plan::Plan &plan,
                             const plan::Instruction &instruction) {
  const std::string &op = instruction.op();
  int inputs = instruction.inputs_size(), count = 1;
  if (op == "shard_update") {
    int64_t zero = plan::intAttribute(instruction, "zero", 1);
    if (zero == 3) // the parameters' shard: its group names them
      for (const plan::ShardGroup &group : plan.schedule().shard_groups())
        if (group.shard() == instruction.inputs(0))
          return {group.params().begin(), group.params().end()};
    count = zero == 2 ? inputs - 1 : inputs / 2;
  } else if (op == "replica_shard_update") {
    count = inputs / 2;
  }
  if (count < 1 || count > inputs)
    fail("the optimizer state of '" + instruction.location() +
         "' names no parameter");
  return {instruction.inputs().begin(), instruction.inputs().begin() + count};
}

int stateCode(const std::string &name) {
  for (int code = 0; code < kStateNameCount; ++code)
    if (name == kStateNames[code])
      return code;
  fail("optimizer state '" + name + "' has no name in a checkpoint");
}

/// Elements [first, first + count) of state tensor `state` of `executor`'s
/// stateful kernel `kernel`.
TensorView statePiece(Executor &executor, int64_t kernel, int64_t state,
                      int64_t first, int64_t count) {
  auto kernels = executor.statefulKernels();
  if (kernel < 0 || kernel >= static_cast<int64_t>(kernels.size()))
    fail("device " + std::to_string(executor.device()) + " has no optimizer " +
         "state " + std::to_string(kernel));
  KernelState s = kernels[kernel].second->state();
  if (state < 0 || state >= static_cast<int64_t>(s.tensors.size()))
    fail("device " + std::to_string(executor.device()) + " has no optimizer " +
         "state " + std::to_string(kernel) + "." + std::to_string(state));
  TensorView whole = s.tensors[state].second;
  if (first < 0 || count < 0 || first + count > whole.numel())
    fail("device " + std::to_string(executor.device()) +
         ": optimizer state elements past its end asked for");
  return {static_cast<char *>(whole.data) + first * sizeof(float),
          {count},
          whole.dtype,
          whole.space};
}

std::vector<int64_t> flatten(const std::vector<StateRecord> &records) {
  std::vector<int64_t> fields;
  for (const StateRecord &r : records)
    fields.insert(fields.end(),
                  {r.kernel, r.state, r.name, r.param, r.paramOffset,
                   r.stateOffset, r.length, r.counter});
  return fields;
}

} // namespace

std::vector<StateRecord> localStateRecords(Run &run, Executor &executor) {
  std::vector<StateRecord> records;
  int64_t kernel = 0;
  for (auto &[instruction, stateful] : executor.statefulKernels()) {
    KernelState s = stateful->state();
    std::vector<int> params = stageParams(run.plan, *instruction);
    std::vector<KernelState::Span> spans = s.spans;
    if (spans.empty())
      spans.push_back({0, 0, 0, run.plan.tensors(params[0]).bytes() / 4});
    int64_t counter = s.counter ? *s.counter : 0;
    for (const KernelState::Span &span : spans) {
      if (span.tensor < 0 || span.tensor >= static_cast<int>(params.size()))
        fail("the optimizer state of '" + instruction->location() +
             "' names a parameter its instruction lacks");
      StateRecord r{executor.device(),
                    kernel,
                    -1,
                    -1,
                    params[span.tensor],
                    span.offset,
                    span.stateOffset,
                    span.length,
                    counter};
      if (s.tensors.empty())
        records.push_back(r);
      for (size_t j = 0; j < s.tensors.size(); ++j) {
        r.state = static_cast<int64_t>(j);
        r.name = stateCode(s.tensors[j].first);
        records.push_back(r);
      }
    }
    ++kernel;
  }
  return records;
}

TensorView stateView(Executor &executor, const StateRecord &record) {
  return statePiece(executor, record.kernel, record.state, record.stateOffset,
                    record.length);
}

std::vector<StateRecord> stateRecords(Run &run, int device) {
  if (!run.fabric || run.fabric->owns(device))
    return localStateRecords(run, *run.executors.at(device));
  sendRequest(run.fabric->endpoint(0), device, {kStateRecords});
  int64_t count = 0;
  receiveAnswer(run, device, {plan::I64, &count, 1}, "the optimizer state");
  std::vector<int64_t> fields(count * kRecordFields);
  receiveAnswer(run, device, {plan::I64, fields.data(), int64_t(fields.size())},
                "the optimizer state");
  std::vector<StateRecord> records;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t *f = fields.data() + i * kRecordFields;
    records.push_back({device, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]});
  }
  return records;
}

void readStatePiece(Run &run, const StateRecord &record, char *out) {
  if (!run.fabric || run.fabric->owns(record.device)) {
    Executor &executor = *run.executors.at(record.device);
    executor.download(stateView(executor, record), out);
    return;
  }
  sendRequest(run.fabric->endpoint(0), record.device,
              {kStatePiece, record.kernel, record.state, record.stateOffset,
               record.length});
  receiveAnswer(run, record.device, {plan::F32, out, record.length},
                "the optimizer state");
}

void readTrained(Run &run, int id, int64_t first, int64_t count, char *out) {
  const plan::Tensor &t = run.plan.tensors(id);
  // Device 0 holds the whole trained model where the evaluation gathered
  // it; otherwise a tensor lies where the plan placed it.
  bool onDeviceZero = run.modelOnDeviceZero && run.first().view(id).present();
  const plan::ShardGroup *group =
      onDeviceZero ? nullptr : shardGroupOf(run.plan, id);
  int holder = !onDeviceZero && t.has_device() ? t.device() : 0;
  if (group)
    readFromShards(run, *group, id, first, count, out);
  else
    readPiece(run, holder, id, first, count, out);
}

TrainedValue fetchTrained(Run &run, int id) {
  const plan::Tensor &t = run.plan.tensors(id);
  TrainedValue value;
  value.view = {nullptr,
                {t.shape().begin(), t.shape().end()},
                t.dtype(),
                MemorySpace::Host};
  value.storage.resize(t.bytes());
  value.view.data = value.storage.data();
  readTrained(run, id, 0, value.view.numel(), value.storage.data());
  return value;
}

bool forEachTrainedChunk(Run &run, int id,
                         const std::function<bool(int64_t first, int64_t count,
                                                  const char *)> &visit) {
  constexpr int64_t kChunkBytes = int64_t(16) << 20;
  const plan::Tensor &t = run.plan.tensors(id);
  int64_t size = plan::dtypeSize(t.dtype()), numel = t.bytes() / size;
  int64_t chunk = std::max<int64_t>(1, kChunkBytes / size);
  std::vector<char> bytes(std::min(numel, chunk) * size);
  for (int64_t first = 0; first < numel; first += chunk) {
    int64_t count = std::min(chunk, numel - first);
    readTrained(run, id, first, count, bytes.data());
    if (!visit(first, count, bytes.data()))
      return false;
  }
  return true;
}

/// One device of a process other than the root: answers device 0's
/// requests until it asks for no more.
static void serveDevice(Run &run, int device) {
  Communicator &endpoint = run.fabric->endpoint(device);
  Executor &executor = *run.executors.at(device);
  for (;;) {
    int64_t fields[kRequestFields] = {kDone, 0, 0, 0, 0};
    if (!endpoint.recv(0, tags::fetchRequest(),
                       {plan::I64, fields, kRequestFields}))
      return; // the run was aborted: the root says why
    Request request{fields[0], fields[1], fields[2], fields[3], fields[4]};
    if (request.kind == kDone)
      return;
    if (request.kind == kStateRecords) {
      std::vector<int64_t> records = flatten(localStateRecords(run, executor));
      int64_t count = static_cast<int64_t>(records.size()) / kRecordFields;
      endpoint.send(0, tags::fetchReply(), {plan::I64, &count, 1}, -1);
      endpoint.send(0, tags::fetchReply(),
                    {plan::I64, records.data(), int64_t(records.size())}, -1);
      continue;
    }
    if (request.kind == kTensor &&
        (request.a < 0 || request.a >= run.plan.tensors_size()))
      fail("device 0 asked for tensor " + std::to_string(request.a) +
           ", which the plan does not hold");
    if (request.kind != kTensor && request.kind != kStatePiece)
      fail("device 0 asked for something unknown (" +
           std::to_string(request.kind) + ")");
    TensorView asked = request.kind == kTensor
                           ? piece(executor, static_cast<int>(request.a),
                                   request.first, request.count)
                           : statePiece(executor, request.a, request.b,
                                        request.first, request.count);
    HostTensor host = executor.stageOut(asked);
    endpoint.send(0, tags::fetchReply(),
                  {host.view().dtype, host.view().data, request.count}, -1);
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
  for (int d = 0; d < run.deviceCount; ++d)
    if (!run.fabric->owns(d))
      sendRequest(run.fabric->endpoint(0), d, {kDone});
}

} // namespace cdp::runtime::training
