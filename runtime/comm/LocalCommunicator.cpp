//===- LocalCommunicator.cpp - devices as threads of one process ----------===//

#include "cdp/Runtime/Communicator.h"

#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Bytes.h"
#include "cdp/Runtime/Kernel.h"

#include <algorithm>
#include <cstring>
#include <functional>

namespace cdp::runtime {

/// Device `device`'s endpoint of a LocalFabric.
class LocalCommunicator : public Communicator {
public:
  LocalCommunicator(LocalFabric &fabric, int device)
      : fabric(fabric), device(device) {}
  int rank() const override { return device; }
  int size() const override { return fabric.devices; }
  bool carriesDeviceMemory() const override { return true; }
  using Communicator::send;
  void send(int to, int64_t tag, const std::vector<ConstBuffer> &parts,
            int64_t tau) override;
  bool recv(int from, int64_t tag, Buffer out) override;
  bool recvAdd(int from, int64_t tag,
               const std::vector<Buffer> &parts) override;
  bool arrived(int from, int64_t tag) override;
  void reduceStart(int64_t tag, const std::vector<ConstBuffer> &parts,
                   int64_t tau) override;
  using Communicator::allGather;
  bool allGather(int64_t tag, ConstBuffer in, const std::vector<Buffer> &out,
                 int64_t tau) override;
  using Communicator::reduceScatter;
  bool reduceScatter(int64_t tag, const std::vector<ConstBuffer> &in,
                     Buffer out, ReduceOp op, int64_t tau) override;
  bool allReduce(int64_t tag, Buffer data, ReduceOp op, int64_t tau) override;
  bool reduceWait(int64_t tag, const std::vector<Buffer> &parts) override;
  void abort() override;
  std::vector<SendRecord> sendLog() const override;

private:
  /// Waits for message `tag` from `from` and hands it to `use`, then
  /// drops it; false when the fabric was aborted.
  bool receive(int from, int64_t tag,
               const std::function<void(const LocalFabric::Message &)> &use);
  /// The message's bytes on `link`'s device: its block where it lies in
  /// that domain, else a copy uploaded from the host.
  static std::shared_ptr<DeviceBlock>
  onLink(DeviceLink &link, const LocalFabric::Message &message);
  /// A collective over device memory: posts this device's block under
  /// `key`, waits for every device's, and gives them all on `link`'s
  /// domain; logs what the host collective would have sent (`bytes` to
  /// each other device). False when the fabric was aborted.
  bool gatherBlocks(int64_t key, std::shared_ptr<DeviceBlock> mine,
                    DeviceLink &link, int64_t bytes, int64_t tau,
                    std::vector<std::shared_ptr<DeviceBlock>> &all);
  /// Marks `r` done once every device gave to it.
  void complete(LocalFabric::Reduction &r);
  /// The mean of a reduction every device gave to, into `parts`.
  void fetchMean(LocalFabric::Reduction &r, int64_t tag,
                 const std::vector<Buffer> &parts);

  LocalFabric &fabric;
  int device;
  mutable std::mutex logMutex;
  std::vector<SendRecord> log;
};

LocalFabric::LocalFabric(int devices) : devices(devices), waits(devices) {
  for (int d = 0; d < devices; ++d)
    endpoints.push_back(std::make_unique<LocalCommunicator>(*this, d));
}

LocalFabric::~LocalFabric() = default;

namespace {

/// `block` where `link` reads it: itself in the link's domain, else a copy
/// uploaded there from the host.
std::shared_ptr<DeviceBlock> inDomain(DeviceLink &link,
                                      std::shared_ptr<DeviceBlock> block) {
  if (block->domain() == link.domain())
    return block;
  std::vector<char> host(block->bytes());
  block->download(host.data());
  return link.stashHost(host.data(), block->bytes());
}

std::vector<float> downloadFloats(const DeviceBlock &block) {
  std::vector<float> values(block.bytes() / sizeof(float));
  block.download(reinterpret_cast<char *>(values.data()));
  return values;
}

} // namespace

std::vector<char> LocalFabric::Message::hostBytes() const {
  if (!block)
    return bytes;
  std::vector<char> host(block->bytes());
  block->download(host.data());
  return host;
}

std::vector<std::vector<float>>
LocalFabric::hostContributions(const Reduction &r) {
  std::vector<std::vector<float>> host = r.contributions;
  host.resize(std::max(host.size(), r.blocks.size())); // done: none left
  for (size_t d = 0; d < r.blocks.size(); ++d)
    if (r.blocks[d])
      host[d] = downloadFloats(*r.blocks[d]);
  return host;
}

// Sum in device order, from +0 (as a device's meanOut does): every device
// gets the same bits.
std::vector<float> LocalFabric::hostMean(const Reduction &r, int devices) {
  std::vector<std::vector<float>> parts = hostContributions(r);
  std::vector<float> mean(parts.empty() ? 0 : parts.front().size(), 0.0f);
  for (const std::vector<float> &part : parts)
    for (size_t i = 0; i < mean.size(); ++i)
      mean[i] += part[i];
  float scale = 1.0f / static_cast<float>(devices);
  for (float &v : mean)
    v *= scale;
  return mean;
}

Communicator &LocalFabric::endpoint(int d) { return *endpoints.at(d); }

void LocalFabric::abortRun() { endpoint(0).abort(); }

void LocalFabric::setParked(int device, bool parked) {
  std::lock_guard<std::mutex> lock(mutex);
  waits.at(device).kind = parked ? Wait::Parked : Wait::Running;
  if (parked)
    checkStall();
}

void LocalFabric::checkStall() {
  int waiter = -1;
  for (int d = 0; d < devices; ++d) {
    const Wait &w = waits[d];
    if (w.kind == Wait::Running)
      return;
    if (w.kind == Wait::Parked)
      continue;
    auto reduction = reductions.find(w.tag);
    auto gathering = gatherings.find(w.tag);
    if (w.kind == Wait::Message ? mailboxes.count({w.from, d, w.tag}) > 0
        : w.kind == Wait::Collective
            ? gathering != gatherings.end() &&
                  gathering->second.arrived == devices
            : reduction != reductions.end() && reduction->second.done)
      return; // woken, not yet running
    waiter = waiter < 0 ? d : waiter;
  }
  if (waiter < 0)
    return; // all between steps, or done
  const Wait &w = waits[waiter];
  stall =
      "every device waits and nothing in flight ends a wait: device " +
      std::to_string(waiter) + " for " +
      (w.kind == Wait::Message ? "message " + std::to_string(w.tag) +
                                     " from device " + std::to_string(w.from)
       : w.kind == Wait::Collective ? "collective " + std::to_string(w.tag / 4)
                                    : "reduction " + std::to_string(w.tag)) +
      "; was the run resumed from a checkpoint whose state in flight "
      "does not fit the plan?";
  aborted = true;
  changed.notify_all();
}

bool LocalFabric::waitFor(std::unique_lock<std::mutex> &lock, int d, Wait wait,
                          const std::function<bool()> &ready) {
  if (!aborted && !ready()) {
    waits[d] = wait;
    checkStall();
    changed.wait(lock, [&] { return aborted || ready(); });
    waits[d] = Wait();
  }
  if (aborted && !stall.empty())
    throw RuntimeError(stall);
  return !aborted;
}

std::vector<std::vector<Communicator::SendRecord>>
LocalFabric::gatherSendLogs() {
  std::vector<std::vector<Communicator::SendRecord>> logs;
  for (const auto &endpoint : endpoints)
    logs.push_back(endpoint->sendLog());
  return logs;
}

// The whole fabric: with every device parked between two steps, the
// mailboxes hold exactly the messages later steps receive and the
// reductions exactly those some device has yet to wait for.
std::string LocalFabric::saveInFlight() {
  std::lock_guard<std::mutex> lock(mutex);
  if (!gatherings.empty()) // every device leaves a collective it joined
    throw RuntimeError("a collective is in flight between two steps (an "
                       "internal error)");
  ByteWriter out;
  out.put<int32_t>(devices);
  out.put<uint64_t>(mailboxes.size());
  for (const auto &[key, message] : mailboxes) {
    out.put<int32_t>(std::get<0>(key));
    out.put<int32_t>(std::get<1>(key));
    out.put<int64_t>(std::get<2>(key));
    out.put<int32_t>(message.dtype);
    out.put<int64_t>(message.count);
    out.putVector(message.hostBytes());
  }
  // Reductions NCCL carries join the fabric's own, as means not every
  // device fetched.
  std::map<int64_t, Reduction> all = reductions;
  for (HeldReduction &held : heldReductions()) {
    Reduction &r = all[held.tag];
    if (r.arrived)
      throw RuntimeError("reduction " + std::to_string(held.tag) +
                         " is in flight twice");
    r.arrived = devices;
    r.fetched = devices - static_cast<int>(held.waiting.size());
    r.done = true;
    r.mean = std::move(held.mean);
  }
  out.put<uint64_t>(all.size());
  for (const auto &[tag, r] : all) {
    out.put<int64_t>(tag);
    out.put<int32_t>(r.arrived);
    out.put<int32_t>(r.fetched);
    out.put<uint8_t>(r.done);
    // A device reduction keeps its blocks where a host one has its mean.
    bool kept = r.done && r.mean.empty() && !r.blocks.empty();
    out.putVector(kept ? hostMean(r, devices) : r.mean);
    std::vector<std::vector<float>> parts =
        r.done ? std::vector<std::vector<float>>() : hostContributions(r);
    out.put<uint64_t>(parts.size());
    for (const std::vector<float> &part : parts)
      out.putVector(part);
  }
  return out.bytes();
}

void LocalFabric::restoreInFlight(const std::string &bytes) {
  ByteReader in(bytes, "the in-process messages in flight");
  if (in.get<int32_t>() != devices)
    in.fail();
  std::lock_guard<std::mutex> lock(mutex);
  mailboxes.clear();
  reductions.clear();
  for (uint64_t n = in.get<uint64_t>(); n > 0; --n) {
    int from = in.get<int32_t>(), to = in.get<int32_t>();
    if (!owns(from) || !owns(to))
      in.fail();
    int64_t tag = in.get<int64_t>();
    int32_t dtype = in.get<int32_t>();
    int64_t count = in.get<int64_t>();
    std::vector<char> bytes = in.getVector<char>();
    checkRestoredMessage(tag, from, to, dtype, count, bytes.size());
    if (mailboxes.count(std::make_tuple(from, to, tag)))
      in.fail();
    mailboxes[std::make_tuple(from, to, tag)] = {
        static_cast<plan::DType>(dtype), count, std::move(bytes)};
  }
  for (uint64_t n = in.get<uint64_t>(); n > 0; --n) {
    int64_t tag = in.get<int64_t>();
    if (reductions.count(tag))
      in.fail();
    Reduction &r = reductions[tag];
    r.arrived = in.get<int32_t>();
    r.fetched = in.get<int32_t>();
    r.done = in.get<uint8_t>();
    r.mean = in.getVector<float>();
    uint64_t parts = in.get<uint64_t>();
    if (parts > static_cast<uint64_t>(devices))
      in.fail();
    r.contributions.resize(parts);
    for (std::vector<float> &part : r.contributions)
      part = in.getVector<float>();
    if (!leftByARun(r))
      throw RuntimeError("reduction " + std::to_string(tag) +
                         " in flight is in no state a run leaves it (" +
                         std::to_string(r.arrived) + " contributions, " +
                         std::to_string(r.fetched) + " fetched)");
  }
  if (!in.atEnd())
    in.fail();
}

// Before the last contribution: some, each of the same size, one slot per
// device, nothing fetched. After it: every device's sum in the mean, some
// devices still to fetch it.
bool LocalFabric::leftByARun(const Reduction &r) const {
  if (r.done)
    return r.arrived == devices && r.fetched >= 0 && r.fetched < devices &&
           r.contributions.empty();
  if (r.arrived <= 0 || r.arrived >= devices || r.fetched != 0 ||
      !r.mean.empty() || r.contributions.size() != size_t(devices))
    return false;
  int given = 0;
  size_t size = 0;
  for (const std::vector<float> &part : r.contributions) {
    if (part.empty())
      continue;
    if (given++ && part.size() != size)
      return false;
    size = part.size();
  }
  return given == r.arrived;
}

void LocalCommunicator::send(int to, int64_t tag,
                             const std::vector<ConstBuffer> &parts,
                             int64_t tau) {
  checkPeer(to);
  auto [dtype, count] = describe(parts);
  LocalFabric::Message message{dtype, count, {}, nullptr};
  if (DeviceLink *link = linkOf(parts)) {
    message.block = link->stash(parts);
  } else {
    message.bytes.resize(count * plan::dtypeSize(dtype));
    copyParts(parts, message.bytes.data());
  }
  int64_t bytes = count * plan::dtypeSize(dtype);
  {
    std::lock_guard<std::mutex> lock(fabric.mutex);
    auto key = std::make_tuple(device, to, tag);
    if (fabric.mailboxes.count(key))
      throw RuntimeError("device " + std::to_string(to) +
                         " already has message " + std::to_string(tag) +
                         " from device " + std::to_string(device));
    fabric.mailboxes[key] = std::move(message);
    fabric.changed.notify_all();
  }
  if (tau < 0 || to == device)
    return; // after training, or to itself: not part of a step's traffic
  std::lock_guard<std::mutex> lock(logMutex);
  log.push_back({tau, bytes, isCollectiveTag(tag)});
}

bool LocalCommunicator::receive(
    int from, int64_t tag,
    const std::function<void(const LocalFabric::Message &)> &use) {
  checkPeer(from);
  std::unique_lock<std::mutex> lock(fabric.mutex);
  auto key = std::make_tuple(from, device, tag);
  if (!fabric.waitFor(lock, device, {LocalFabric::Wait::Message, from, tag},
                      [&] { return fabric.mailboxes.count(key) > 0; }))
    return false;
  use(fabric.mailboxes[key]);
  fabric.mailboxes.erase(key);
  return true;
}

std::shared_ptr<DeviceBlock>
LocalCommunicator::onLink(DeviceLink &link,
                          const LocalFabric::Message &message) {
  if (message.block)
    return inDomain(link, message.block);
  return link.stashHost(message.bytes.data(),
                        static_cast<int64_t>(message.bytes.size()));
}

bool LocalCommunicator::recv(int from, int64_t tag, Buffer out) {
  return receive(from, tag, [&](const LocalFabric::Message &message) {
    checkArrival(tag, from, message.dtype, message.count, out);
    if (out.link)
      out.link->copyOut(*onLink(*out.link, message), {out});
    else
      copyBytes(out.data, message.hostBytes().data(), out.bytes());
  });
}

bool LocalCommunicator::recvAdd(int from, int64_t tag,
                                const std::vector<Buffer> &parts) {
  return receive(from, tag, [&](const LocalFabric::Message &message) {
    if (DeviceLink *link = linkOf(parts)) {
      checkArrival(tag, from, message.dtype, message.count,
                   {plan::F32, nullptr, reducedCount(tag, parts)});
      link->addOut(*onLink(*link, message), parts);
      return;
    }
    addArrival(tag, from, message.dtype, message.count,
               message.hostBytes().data(), parts);
  });
}

bool LocalCommunicator::arrived(int from, int64_t tag) {
  std::lock_guard<std::mutex> lock(fabric.mutex);
  return fabric.mailboxes.count(std::make_tuple(from, device, tag)) > 0;
}

void LocalCommunicator::reduceStart(int64_t tag,
                                    const std::vector<ConstBuffer> &parts,
                                    int64_t tau) {
  DeviceLink *link = linkOf(parts);
  std::vector<float> contribution;
  std::shared_ptr<DeviceBlock> block;
  if (link) {
    for (const ConstBuffer &part : parts)
      checkReducible(part.dtype);
    block = link->stash(parts);
  } else {
    contribution = concatenate(parts);
  }
  int64_t count = describe(parts).second;
  {
    std::lock_guard<std::mutex> lock(fabric.mutex);
    LocalFabric::Reduction &r = fabric.reductions[tag];
    if (r.contributions.empty())
      r.contributions.resize(fabric.devices);
    if (r.blocks.empty()) // also a reduction restored from a checkpoint
      r.blocks.resize(fabric.devices);
    if (r.gave(device))
      throw RuntimeError("device " + std::to_string(device) +
                         " contributed twice to reduction " +
                         std::to_string(tag));
    for (int d = 0; d < fabric.devices; ++d) {
      int64_t theirs = r.blocks[d]
                           ? r.blocks[d]->bytes() / int64_t(sizeof(float))
                           : static_cast<int64_t>(r.contributions[d].size());
      if (r.gave(d) && theirs != count)
        throw RuntimeError("device " + std::to_string(device) + " adds " +
                           std::to_string(count) + " values to reduction " +
                           std::to_string(tag) + ", another device " +
                           std::to_string(theirs));
    }
    r.contributions[device] = std::move(contribution);
    r.blocks[device] = std::move(block);
    if (++r.arrived == fabric.devices)
      complete(r);
  }
  std::lock_guard<std::mutex> lock(logMutex);
  log.push_back({tau, count * int64_t(sizeof(float)), true}); // a reduction
}

bool LocalCommunicator::reduceWait(int64_t tag,
                                   const std::vector<Buffer> &parts) {
  int64_t count = reducedCount(tag, parts);
  std::unique_lock<std::mutex> lock(fabric.mutex);
  if (!fabric.waitFor(lock, device, {LocalFabric::Wait::Reduction, 0, tag},
                      [&] {
                        auto it = fabric.reductions.find(tag);
                        return it != fabric.reductions.end() && it->second.done;
                      }))
    return false;
  LocalFabric::Reduction &r = fabric.reductions[tag];
  int64_t held = r.mean.empty() && !r.blocks.empty()
                     ? r.blocks.front()->bytes() / int64_t(sizeof(float))
                     : static_cast<int64_t>(r.mean.size());
  if (held != count)
    throw RuntimeError("reduction " + std::to_string(tag) + " has " +
                       std::to_string(held) + " float32 values, " + "device " +
                       std::to_string(device) + " expects " +
                       std::to_string(count));
  fetchMean(r, tag, parts);
  if (++r.fetched == fabric.devices)
    fabric.reductions.erase(tag);
  return true;
}

// Keys apart from each other's (tags are below 2^56).
constexpr int64_t kGatherKey = 2, kScatterKey = 1, kAllReduceKey = 3;

bool LocalCommunicator::gatherBlocks(
    int64_t key, std::shared_ptr<DeviceBlock> mine, DeviceLink &link,
    int64_t bytes, int64_t tau,
    std::vector<std::shared_ptr<DeviceBlock>> &all) {
  {
    std::unique_lock<std::mutex> lock(fabric.mutex);
    LocalFabric::Gathering &g = fabric.gatherings[key];
    if (g.blocks.empty())
      g.blocks.resize(fabric.devices);
    if (g.blocks[device])
      throw RuntimeError("device " + std::to_string(device) +
                         " joined collective " + std::to_string(key / 4) +
                         " twice");
    g.blocks[device] = std::move(mine);
    if (++g.arrived == fabric.devices)
      fabric.changed.notify_all();
    if (!fabric.waitFor(
            lock, device, {LocalFabric::Wait::Collective, 0, key},
            [&] { return fabric.gatherings[key].arrived == fabric.devices; }))
      return false;
    all = fabric.gatherings[key].blocks;
    if (++fabric.gatherings[key].fetched == fabric.devices)
      fabric.gatherings.erase(key);
  }
  for (std::shared_ptr<DeviceBlock> &block : all)
    block = inDomain(link, std::move(block));
  if (tau >= 0) {
    std::lock_guard<std::mutex> lock(logMutex);
    for (int d = 1; d < fabric.devices; ++d)
      log.push_back({tau, bytes, true});
  }
  return true;
}

// Every device of a collective passes device buffers, or none does: the
// device path meets in the fabric's gatherings, the host path in messages
// (a run's devices share one backend, so they never mix).
bool LocalCommunicator::allGather(int64_t tag, ConstBuffer in,
                                  const std::vector<Buffer> &out, int64_t tau) {
  DeviceLink *link = gatherLink(in, out);
  if (!link)
    return Communicator::allGather(tag, in, out, tau);
  int64_t room = 0;
  for (const Buffer &part : out)
    room += part.bytes();
  std::vector<std::shared_ptr<DeviceBlock>> all;
  if (!gatherBlocks(tag * 4 + kGatherKey, link->stash({in}), *link, in.bytes(),
                    tau, all))
    return false;
  // Device d's shard lands at d * in.bytes(); the padding past `out` is
  // dropped.
  for (int d = 0; d < fabric.devices; ++d) {
    int64_t at = d * in.bytes(), bytes = std::min(in.bytes(), room - at);
    if (bytes > 0)
      link->copyRange(*all[d], 0, out, at, bytes);
  }
  return true;
}

bool LocalCommunicator::reduceScatter(int64_t tag,
                                      const std::vector<ConstBuffer> &in,
                                      Buffer out, ReduceOp op, int64_t tau) {
  DeviceLink *link = scatterLink(in, out);
  if (!link)
    return Communicator::reduceScatter(tag, in, out, op, tau);
  int64_t given = describe(in).second;
  std::vector<std::shared_ptr<DeviceBlock>> all;
  if (!gatherBlocks(tag * 4 + kScatterKey, link->stash(in), *link, out.bytes(),
                    tau, all))
    return false;
  // This device's chunk, added in device order from device 0's; the
  // elements past what the devices gave (the padding) are zeros.
  int64_t from = device * out.count;
  link->sumRange(rawBlocks(all), from, std::max<int64_t>(given - from, 0),
                 scaleOf(op), out);
  return true;
}

// Every device's `data` on its GPU: gathered as the all-gather's blocks and
// summed on each device's stream in device order from device 0's, the
// host's bits (a mean then scaled by 1 / devices, as the host's).
bool LocalCommunicator::allReduce(int64_t tag, Buffer data, ReduceOp op,
                                  int64_t tau) {
  if (!data.link)
    return Communicator::allReduce(tag, data, op, tau);
  checkReducible(data.dtype); // the GPU sums float32 only
  DeviceLink &link = *data.link;
  std::vector<std::shared_ptr<DeviceBlock>> all;
  if (!gatherBlocks(tag * 4 + kAllReduceKey, link.stash({ConstBuffer(data)}),
                    link, data.bytes(), tau, all))
    return false;
  link.sumRange(rawBlocks(all), 0, data.count, scaleOf(op), data);
  return true;
}

// Host contributions are summed at once; device blocks all of one domain
// are kept for the waiters to sum on their streams; a mix goes to the host.
void LocalCommunicator::complete(LocalFabric::Reduction &r) {
  bool kept = true;
  for (const std::shared_ptr<DeviceBlock> &block : r.blocks)
    kept = kept && block && block->domain() == r.blocks.front()->domain();
  if (!kept) {
    r.mean = LocalFabric::hostMean(r, fabric.devices);
    r.blocks.clear();
  }
  r.contributions.clear();
  r.done = true;
  fabric.changed.notify_all();
}

void LocalCommunicator::fetchMean(LocalFabric::Reduction &r, int64_t tag,
                                  const std::vector<Buffer> &parts) {
  DeviceLink *link = linkOf(parts);
  float scale = 1.0f / static_cast<float>(fabric.devices);
  if (!r.blocks.empty() && link &&
      r.blocks.front()->domain() == link->domain()) {
    link->meanOut(rawBlocks(r.blocks), scale, parts);
    return;
  }
  if (r.mean.empty() && !r.blocks.empty())
    r.mean = LocalFabric::hostMean(r, fabric.devices);
  if (!link) {
    scatter(r.mean.data(), parts);
    return;
  }
  reducedCount(tag, parts);
  std::shared_ptr<DeviceBlock> mean =
      link->stashHost(reinterpret_cast<const char *>(r.mean.data()),
                      static_cast<int64_t>(r.mean.size() * sizeof(float)));
  link->copyOut(*mean, parts);
}

void LocalCommunicator::abort() {
  std::lock_guard<std::mutex> lock(fabric.mutex);
  fabric.aborted = true;
  fabric.changed.notify_all();
}

std::vector<Communicator::SendRecord> LocalCommunicator::sendLog() const {
  std::lock_guard<std::mutex> lock(logMutex);
  return log;
}

} // namespace cdp::runtime
