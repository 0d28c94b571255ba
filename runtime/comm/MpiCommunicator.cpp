//===- MpiCommunicator.cpp - devices over the processes of an MPI job -----===//
//
// Point to point: a message to device `to` travels on a communicator of
// its own (a duplicate of MPI_COMM_WORLD per device), with the sending
// device as the MPI tag and a header naming the plan's 64-bit tag, its
// dtype and count. MPI keeps messages between two processes on one
// communicator and tag in order, so a receiver probes the next message
// from its peer and sets aside any it does not want yet. A reduction's
// contribution goes to every other device, and each sums all of them in
// device order (the same bits as in-process): no device waits for another
// to compute a mean, so the schedule's waits are the only ones.
//
// A message between GPUs of different processes goes over the devices'
// routes where they have one (NCCL, a communicator per ordered pair): MPI
// carries its header alone, in the order the sender sent, and the receiver
// posts the receive of its bytes into a fresh block of its GPU as the
// header arrives -- so a pair's bytes meet their receives in the sender's
// order, whatever order the receiver's instructions take the messages in.
// Without a route, a device's message goes through the host.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/MpiCommunicator.h"

#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Bytes.h"
#include "cdp/Runtime/Kernel.h"
#include "cdp/Runtime/MessageTags.h"

#include <mpi.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

namespace cdp::runtime {

namespace {

/// Drops the sends that completed, and the buffers they read (`all`: waits
/// for every one first).
template <typename Buffer>
void reapSends(std::vector<std::pair<MPI_Request, Buffer>> &sends, bool all) {
  sends.erase(std::remove_if(sends.begin(), sends.end(),
                             [all](auto &send) {
                               int done = 1;
                               if (all)
                                 MPI_Wait(&send.first, MPI_STATUS_IGNORE);
                               else
                                 MPI_Test(&send.first, &done,
                                          MPI_STATUS_IGNORE);
                               return done != 0;
                             }),
              sends.end());
}

/// What precedes every message's payload.
struct Header {
  int64_t tag;
  int64_t count;
  int32_t dtype;
  /// 1: the payload follows over the sender's route (DeviceLink::
  /// sendAcross), not in this message.
  int32_t across;
};

Header readHeader(const std::vector<char> &message) {
  Header header;
  copyBytes(&header, message.data(), sizeof(Header));
  return header;
}

/// A message taken off MPI: its header and payload, or, sent across, its
/// header and the block of the receiver's device its payload arrives in.
struct Arrival {
  std::vector<char> message;
  std::shared_ptr<DeviceBlock> block;
  Header header() const { return readHeader(message); }
  int64_t payloadBytes() const {
    return block ? block->bytes()
                 : static_cast<int64_t>(message.size() - sizeof(Header));
  }
  /// The payload on the host (a block downloaded into `scratch`).
  const char *onHost(std::vector<char> &scratch) const {
    if (!block)
      return message.data() + sizeof(Header);
    scratch.resize(block->bytes());
    block->download(scratch.data());
    return scratch.data();
  }
  /// The payload in `link`'s device memory (host bytes uploaded).
  std::shared_ptr<DeviceBlock> onLink(DeviceLink &link) const {
    if (block)
      return block;
    return link.stashHost(message.data() + sizeof(Header), payloadBytes());
  }
};

class MpiFabric;

/// One device's endpoint on this process.
class MpiCommunicator : public Communicator {
public:
  MpiCommunicator(MpiFabric &fabric, int device, int devices)
      : fabric(fabric), device(device), sentTo(devices, 0),
        receivedFrom(devices, 0) {}
  ~MpiCommunicator() override;
  int rank() const override { return device; }
  int size() const override;
  bool carriesDeviceMessages() const override { return true; }
  bool carriesDeviceCollectives() const override { return true; }
  void useLink(DeviceLink *link) override { deviceLink = link; }
  using Communicator::send;
  void send(int to, int64_t tag, const std::vector<ConstBuffer> &parts,
            int64_t tau) override;
  bool recv(int from, int64_t tag, Buffer out) override;
  bool recvAdd(int from, int64_t tag,
               const std::vector<Buffer> &parts) override;
  bool arrived(int from, int64_t tag) override;
  void reduceStart(int64_t tag, const std::vector<ConstBuffer> &parts,
                   int64_t tau) override;
  bool reduceWait(int64_t tag, const std::vector<Buffer> &parts) override;
  using Communicator::reduceScatter;
  bool reduceScatter(int64_t tag, const std::vector<ConstBuffer> &in,
                     Buffer out, ReduceOp op, int64_t tau) override;
  using Communicator::allGather;
  bool allGather(int64_t tag, ConstBuffer in, const std::vector<Buffer> &out,
                 int64_t tau) override;
  void abort() override;
  std::vector<SendRecord> sendLog() const override { return log; }

protected:
  void sendToAll(int64_t tag, ConstBuffer data, int64_t tau) override;

public:
  /// Messages this device sent to each device (contributions included).
  const std::vector<int64_t> &sentCounts() const { return sentTo; }
  /// Receives every message `from` sent this device so far (`expected`
  /// of them), setting them aside: afterwards nothing is in flight
  /// towards it. False when the run was aborted.
  bool collectFrom(int from, int64_t expected);
  void saveInFlight(ByteWriter &out) const;
  void restoreInFlight(ByteReader &in);

private:
  /// Sends the parts as one message (the header, then their bytes) to each
  /// of `to` and returns it: one copy of the message is what every send
  /// reads (a copy per peer held a reduction's gradients N - 1 times).
  /// `across`: the header alone, the payload going over the route.
  std::shared_ptr<std::vector<char>> post(const std::vector<int> &to,
                                          int64_t tag,
                                          const std::vector<ConstBuffer> &parts,
                                          bool across = false);
  /// Each sender's messages arrive in order on channels (MPI tags): 0 for
  /// plain messages, 1 + stage mod K for contributions to a stage's
  /// mean-reductions. A device that waits for a message sets aside what
  /// its sender sent before it on the same channel: on one channel every
  /// wait took the contributions sent before it too, N - 1 copies of a
  /// stage's gradients held until the reduction's wait (cdp's last device
  /// ran out of memory under mpirun), and on one channel for all
  /// contributions a wait, in forward order, took the later stages' (sent
  /// first, in backward order). Per stage, a contribution stays in its
  /// sender's one copy until the reduction's wait receives it, since each
  /// stage's reductions are started and waited for in step order.
  static constexpr int kAllChannels = -1;
  int mpiTag(int sender, int channel) const;
  int channelOf(int64_t tag) const;
  /// Drops the sends that completed (all: waits for every one).
  void reap(bool all);
  /// Every device but this one, in order.
  std::vector<int> otherDevices() const;
  /// Receives the next message from `from` on `channel` (not
  /// kAllChannels) into `early` if one is there.
  bool receiveOne(int from, int channel);
  /// Throws a RuntimeError naming the peer when an MPI call with it failed.
  void checkMpi(int code, int peer) const;
  /// Receives messages from `from` on `channel` (or all) into `early`
  /// until `done()`; false when the run was aborted. Throws after
  /// --comm-timeout without one.
  bool receiveUntil(int from, int channel, const std::function<bool()> &done);
  Arrival *take(int from, int64_t tag);
  /// Waits for message `tag` from `from`, hands its header and payload to
  /// `use` and drops it; false when the run was aborted.
  bool receive(int from, int64_t tag,
               const std::function<void(const Header &, const Arrival &)> &use);
  /// Each device's block of a collective's messages `message` (`count`
  /// elements of `dtype` from every device), by device, in `link`'s
  /// memory; this device's is `mine`. False when the run was aborted.
  bool receiveBlocks(int64_t message, plan::DType dtype, int64_t count,
                     DeviceLink &link, std::shared_ptr<DeviceBlock> mine,
                     std::vector<std::shared_ptr<DeviceBlock>> &blocks);
  /// The same with the payload on the host.
  bool
  receiveOnHost(int from, int64_t tag,
                const std::function<void(const Header &, const char *)> &use);

  MpiFabric &fabric;
  int device;
  std::vector<SendRecord> log;
  /// Sends in flight: their requests and the copies they read.
  std::vector<std::pair<MPI_Request, std::shared_ptr<std::vector<char>>>>
      pending;
  /// Messages that arrived before they were asked for, by (from, tag).
  std::map<std::pair<int, int64_t>, Arrival> early;
  /// This device's link (useLink), which receives payloads sent across.
  DeviceLink *deviceLink = nullptr;
  /// This device's contributions, by reduction tag, until its wait: the
  /// messages that carry them to the other devices.
  std::map<int64_t, std::shared_ptr<std::vector<char>>> own;
  /// Messages posted to each device, and received from each (a checkpoint
  /// compares them to find what is still in flight).
  std::vector<int64_t> sentTo, receivedFrom;
};

class MpiFabric : public Fabric {
public:
  MpiFabric(int devices, int rank, int ranks, double timeout,
            int contributionChannels)
      : devices(devices), myRank(rank), processes(ranks), timeout(timeout),
        contributionChannels(contributionChannels) {
    perDevice.resize(devices);
    // Errors come back to the caller (a lost peer), which names them and
    // ends the job, instead of Open MPI aborting with its own words only.
    for (MPI_Comm &comm : perDevice) {
      MPI_Comm_dup(MPI_COMM_WORLD, &comm);
      MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &control);
    MPI_Comm_dup(MPI_COMM_WORLD, &live);
    for (int d = 0; d < devices; ++d)
      endpoints.push_back(
          owns(d) ? std::make_unique<MpiCommunicator>(*this, d, devices)
                  : nullptr);
  }
  ~MpiFabric() override {
    endpoints.clear(); // completes their sends
    completeStepLosses();
    MPI_Barrier(control);
    for (MPI_Comm &comm : perDevice)
      MPI_Comm_free(&comm);
    MPI_Comm_free(&control);
    MPI_Comm_free(&live);
    MPI_Finalize();
  }
  int size() const override { return devices; }
  int perRank() const { return devices / processes; }
  int rankOf(int device) const { return device / perRank(); }
  bool owns(int device) const override {
    return device >= 0 && device < devices && rankOf(device) == myRank;
  }
  Communicator &endpoint(int d) override {
    if (!owns(d))
      throw RuntimeError("device " + std::to_string(d) +
                         " runs on another process");
    return *endpoints[d];
  }
  void sumOntoRoot(std::vector<double> &values) override {
    std::vector<double> sum(values.size());
    MPI_Reduce(values.data(), sum.data(), static_cast<int>(values.size()),
               MPI_DOUBLE, MPI_SUM, 0, control);
    if (myRank == 0)
      values = sum;
  }
  std::vector<std::vector<Communicator::SendRecord>> gatherSendLogs() override;
  std::vector<std::string> gatherOntoRoot(const std::string &mine) override {
    int size = static_cast<int>(mine.size());
    std::vector<int> sizes(processes), offsets(processes);
    MPI_Gather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, control);
    int total = 0;
    for (int r = 0; r < processes; ++r) {
      offsets[r] = total;
      total += sizes[r];
    }
    std::string all(myRank == 0 ? total : 0, '\0');
    MPI_Gatherv(mine.data(), size, MPI_CHAR, all.data(), sizes.data(),
                offsets.data(), MPI_CHAR, 0, control);
    std::vector<std::string> parts;
    if (myRank == 0)
      for (int r = 0; r < processes; ++r)
        parts.push_back(all.substr(offsets[r], sizes[r]));
    return parts;
  }
  std::string shareFromRoot(const std::string &rootBytes) override {
    int64_t size = myRank == 0 ? static_cast<int64_t>(rootBytes.size()) : 0;
    MPI_Bcast(&size, 1, MPI_INT64_T, 0, control);
    std::string bytes = myRank == 0 ? rootBytes : std::string(size, '\0');
    MPI_Bcast(bytes.data(), static_cast<int>(size), MPI_CHAR, 0, control);
    return bytes;
  }
  void barrier() override { MPI_Barrier(control); }
  void postStepLoss(const StepLoss &loss) override {
    if (myRank == 0)
      return;
    std::lock_guard<std::mutex> lock(liveMutex);
    reapSends(livePosts, false); // the delivered ones (one a step)
    auto message = std::make_unique<std::vector<double>>(std::vector<double>{
        double(loss.device), double(loss.step), double(loss.loss),
        double(loss.lossScale), loss.overflowed ? 1.0 : 0.0,
        loss.scaleOnly ? 1.0 : 0.0});
    MPI_Request request;
    MPI_Isend(message->data(), kStepLossFields, MPI_DOUBLE, 0, 0, live,
              &request);
    livePosts.emplace_back(request, std::move(message));
  }
  bool takeStepLoss(StepLoss &loss, bool wait) override {
    if (myRank != 0)
      return false;
    int arrived = 0;
    MPI_Status status;
    if (wait)
      MPI_Probe(MPI_ANY_SOURCE, 0, live, &status), arrived = 1;
    else
      MPI_Iprobe(MPI_ANY_SOURCE, 0, live, &arrived, &status);
    if (!arrived)
      return false;
    std::array<double, kStepLossFields> message;
    MPI_Recv(message.data(), kStepLossFields, MPI_DOUBLE, status.MPI_SOURCE, 0,
             live, MPI_STATUS_IGNORE);
    loss.device = static_cast<int>(message[0]);
    loss.step = static_cast<int64_t>(message[1]);
    loss.loss = static_cast<float>(message[2]);
    loss.lossScale = static_cast<float>(message[3]);
    loss.overflowed = message[4] != 0.0;
    loss.scaleOnly = message[5] != 0.0;
    return true;
  }
  void postNote(int to, int64_t kind, int64_t value) override {
    std::lock_guard<std::mutex> lock(liveMutex);
    reapSends(livePosts, false);
    auto message = std::make_unique<std::vector<double>>(
        std::vector<double>{double(myRank), double(kind), double(value)});
    MPI_Request request;
    MPI_Isend(message->data(), 3, MPI_DOUBLE, to, kNoteTag, live, &request);
    livePosts.emplace_back(request, std::move(message));
  }
  bool takeNote(Note &note) override {
    int arrived = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kNoteTag, live, &arrived, &status);
    if (!arrived)
      return false;
    std::array<double, 3> message;
    MPI_Recv(message.data(), 3, MPI_DOUBLE, status.MPI_SOURCE, kNoteTag, live,
             MPI_STATUS_IGNORE);
    note.from = static_cast<int>(message[0]);
    note.kind = static_cast<int64_t>(message[1]);
    note.value = static_cast<int64_t>(message[2]);
    return true;
  }
  void onTerminateRequest(void (*handler)(int)) override;
  /// The posted losses delivered (the root takes every one before the run
  /// ends), their buffers freed.
  void completeStepLosses() {
    std::lock_guard<std::mutex> lock(liveMutex);
    reapSends(livePosts, true);
  }
  int processRank() const override { return myRank; }
  int processOf(int device) const override { return rankOf(device); }
  int processCount() const override { return processes; }
  std::string saveInFlight() override;
  void restoreInFlight(const std::string &bytes) override;
  void abortRun() override {
    aborted = true;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  /// The notes' tag on `live` (the step losses use 0).
  static constexpr int kNoteTag = 1;
  /// A posted step loss: device, step, loss, loss scale, overflowed.
  static constexpr int kStepLossFields = 6;
  int devices, myRank, processes;
  double timeout;
  /// K: each sender's MPI tags are its plain channel and K for
  /// contributions (a stage's on 1 + stage mod K).
  int contributionChannels;
  std::atomic<bool> aborted{false};
  std::vector<MPI_Comm> perDevice;
  MPI_Comm control;
  /// Live step losses to the root (postStepLoss): sends in flight and the
  /// values they read.
  MPI_Comm live;
  std::mutex liveMutex;
  std::vector<std::pair<MPI_Request, std::unique_ptr<std::vector<double>>>>
      livePosts;
  std::vector<std::unique_ptr<MpiCommunicator>> endpoints;
};

int MpiCommunicator::size() const { return fabric.devices; }

MpiCommunicator::~MpiCommunicator() { reap(true); }

void MpiCommunicator::reap(bool all) { reapSends(pending, all); }

std::vector<int> MpiCommunicator::otherDevices() const {
  std::vector<int> others;
  for (int d = 0; d < fabric.devices; ++d)
    if (d != device)
      others.push_back(d);
  return others;
}

int MpiCommunicator::mpiTag(int sender, int channel) const {
  return sender * (fabric.contributionChannels + 1) + channel;
}

int MpiCommunicator::channelOf(int64_t tag) const {
  if (tags::kindOf(tag) != tags::Kind::Contribution)
    return 0;
  int64_t stage = (tag & (tags::bit(61) - 1)) % 4096; // tags::reduction's
  return 1 + static_cast<int>(stage % fabric.contributionChannels);
}

std::shared_ptr<std::vector<char>>
MpiCommunicator::post(const std::vector<int> &to, int64_t tag,
                      const std::vector<ConstBuffer> &parts, bool across) {
  reap(false);
  auto [dtype, count] = describe(parts);
  int64_t bytes = across ? 0 : count * plan::dtypeSize(dtype);
  auto message = std::make_shared<std::vector<char>>(sizeof(Header) + bytes);
  Header header{tag, count, static_cast<int32_t>(dtype), across ? 1 : 0};
  copyBytes(message->data(), &header, sizeof(Header));
  if (!across)
    copyParts(parts, message->data() + sizeof(Header));
  for (int peer : to) {
    MPI_Request request;
    checkMpi(MPI_Isend(message->data(), static_cast<int>(message->size()),
                       MPI_BYTE, fabric.rankOf(peer),
                       mpiTag(device, channelOf(tag)), fabric.perDevice[peer],
                       &request),
             peer);
    ++sentTo[peer];
    pending.emplace_back(request, message);
  }
  return message;
}

int64_t messageBytes(const std::vector<char> &message) {
  return static_cast<int64_t>(message.size() - sizeof(Header));
}

void MpiCommunicator::send(int to, int64_t tag,
                           const std::vector<ConstBuffer> &parts, int64_t tau) {
  checkPeer(to);
  auto [dtype, count] = describe(parts);
  int64_t bytes = count * plan::dtypeSize(dtype);
  DeviceLink *link = linkOf(parts);
  if (link && link->reaches(to, /*outgoing=*/true)) {
    post({to}, tag, parts, /*across=*/true);
    link->sendAcross(to, parts);
  } else if (link) { // no route: through the host
    std::vector<char> staged(bytes);
    link->stash(parts)->download(staged.data());
    post({to}, tag, {ConstBuffer(dtype, staged.data(), count)});
  } else {
    post({to}, tag, parts);
  }
  if (tau >= 0 && to != device)
    log.push_back({tau, bytes, isCollectiveTag(tag)});
}

/// One copy of the message read by every peer's send (a ZeRO-3 gather's
/// shard was held once per peer until received).
void MpiCommunicator::sendToAll(int64_t tag, ConstBuffer data, int64_t tau) {
  std::vector<int> others = otherDevices();
  int64_t bytes = messageBytes(*post(others, tag, {data}));
  if (tau >= 0)
    for (size_t i = 0; i < others.size(); ++i)
      log.push_back({tau, bytes, isCollectiveTag(tag)});
}

void MpiCommunicator::checkMpi(int code, int peer) const {
  if (code == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw RuntimeError("device " + std::to_string(device) +
                     ": lost contact with device " + std::to_string(peer) +
                     " (process " + std::to_string(fabric.rankOf(peer)) +
                     "), which may have died: " + std::string(text, length));
}

bool MpiCommunicator::receiveOne(int from, int channel) {
  int found = 0;
  MPI_Message handle;
  MPI_Status status;
  checkMpi(MPI_Improbe(fabric.rankOf(from), mpiTag(from, channel),
                       fabric.perDevice[device], &found, &handle, &status),
           from);
  if (!found)
    return false;
  int bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  std::vector<char> message(bytes);
  checkMpi(
      MPI_Mrecv(message.data(), bytes, MPI_BYTE, &handle, MPI_STATUS_IGNORE),
      from);
  ++receivedFrom[from];
  Arrival arrival{std::move(message), nullptr};
  Header header = arrival.header();
  if (header.across) {
    // Posted now, in the order the sender sent: its route delivers in it.
    if (!deviceLink)
      throw RuntimeError("device " + std::to_string(device) + ": message " +
                         std::to_string(header.tag) + " from device " +
                         std::to_string(from) +
                         " comes over a GPU route, and this device has no "
                         "link (an internal error)");
    arrival.block = deviceLink->receiveAcross(
        from,
        header.count * plan::dtypeSize(static_cast<plan::DType>(header.dtype)));
  }
  early[{from, header.tag}] = std::move(arrival);
  return true;
}

bool MpiCommunicator::arrived(int from, int64_t tag) {
  checkPeer(from);
  while (receiveOne(from, channelOf(tag))) {
  }
  return early.count({from, tag}) > 0;
}

bool MpiCommunicator::receiveUntil(int from, int channel,
                                   const std::function<bool()> &done) {
  auto started = std::chrono::steady_clock::now();
  int idle = 0;
  auto receiveNext = [&] {
    if (channel != kAllChannels)
      return receiveOne(from, channel);
    bool any = false;
    for (int c = 0; c <= fabric.contributionChannels; ++c)
      any = receiveOne(from, c) || any;
    return any;
  };
  while (!done()) {
    if (fabric.aborted)
      return false;
    if (!receiveNext()) {
      // A waiting device also drops the copies of its sends that arrived:
      // reaped only at its next send, a pipeline's last stage held a tied
      // weight's gradient (206 MB on GPT-2 medium) into the next step.
      reap(false);
      // Poll gently: a waiting device should not take a core from one that
      // computes.
      if (++idle > 1000)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      double waited = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - started)
                          .count();
      if (waited > fabric.timeout)
        throw RuntimeError("device " + std::to_string(device) +
                           ": no message from device " + std::to_string(from) +
                           " (process " + std::to_string(fabric.rankOf(from)) +
                           ") for " +
                           std::to_string(static_cast<int>(fabric.timeout)) +
                           " s (--comm-timeout); that process may have died");
      continue;
    }
    idle = 0;
  }
  return true;
}

/// The message (from, tag), waiting for it; null when the run was aborted.
/// Messages from `from` that come first are set aside.
Arrival *MpiCommunicator::take(int from, int64_t tag) {
  auto key = std::make_pair(from, tag);
  if (!receiveUntil(from, channelOf(tag), [&] { return early.count(key) > 0; }))
    return nullptr;
  return &early[key];
}

bool MpiCommunicator::collectFrom(int from, int64_t expected) {
  return receiveUntil(from, kAllChannels,
                      [&] { return receivedFrom[from] >= expected; });
}

void MpiCommunicator::saveInFlight(ByteWriter &out) const {
  out.put<int32_t>(device);
  out.put<uint64_t>(early.size());
  for (const auto &[key, arrival] : early) {
    out.put<int32_t>(key.first);
    out.put<int64_t>(key.second);
    // A payload sent across is saved as if it had come through MPI.
    Header header = arrival.header();
    header.across = 0;
    std::vector<char> scratch, message(sizeof(Header));
    copyBytes(message.data(), &header, sizeof(Header));
    const char *payload = arrival.onHost(scratch);
    message.insert(message.end(), payload, payload + arrival.payloadBytes());
    out.putVector(message);
  }
  out.put<uint64_t>(own.size());
  for (const auto &[tag, message] : own) {
    out.put<int64_t>(tag);
    out.putBlob(message->data() + sizeof(Header), messageBytes(*message));
  }
}

void MpiCommunicator::restoreInFlight(ByteReader &in) {
  if (in.get<int32_t>() != device)
    in.fail();
  early.clear();
  own.clear();
  for (uint64_t n = in.get<uint64_t>(); n > 0; --n) {
    int from = in.get<int32_t>();
    int64_t tag = in.get<int64_t>();
    std::vector<char> message = in.getVector<char>();
    Header header;
    if (from < 0 || from >= fabric.devices || message.size() < sizeof(Header) ||
        early.count({from, tag}))
      in.fail();
    copyBytes(&header, message.data(), sizeof(Header));
    if (header.tag != tag || header.across != 0)
      in.fail();
    checkRestoredMessage(tag, from, device, header.dtype, header.count,
                         message.size() - sizeof(Header));
    early[{from, tag}] = Arrival{std::move(message), nullptr};
  }
  for (uint64_t n = in.get<uint64_t>(); n > 0; --n) {
    int64_t tag = in.get<int64_t>();
    std::vector<float> values = in.getVector<float>();
    auto message = std::make_shared<std::vector<char>>(
        sizeof(Header) + values.size() * sizeof(float));
    Header header{tags::contribution(tag), static_cast<int64_t>(values.size()),
                  static_cast<int32_t>(plan::F32), 0};
    copyBytes(message->data(), &header, sizeof(Header));
    copyBytes(message->data() + sizeof(Header), values.data(),
              values.size() * sizeof(float));
    own[tag] = std::move(message);
  }
}

bool MpiCommunicator::receive(
    int from, int64_t tag,
    const std::function<void(const Header &, const Arrival &)> &use) {
  checkPeer(from);
  Arrival *arrival = take(from, tag);
  if (!arrival)
    return false;
  use(arrival->header(), *arrival);
  early.erase({from, tag});
  return true;
}

bool MpiCommunicator::receiveOnHost(
    int from, int64_t tag,
    const std::function<void(const Header &, const char *)> &use) {
  return receive(from, tag, [&](const Header &header, const Arrival &arrival) {
    std::vector<char> scratch;
    use(header, arrival.onHost(scratch));
  });
}

bool MpiCommunicator::recv(int from, int64_t tag, Buffer out) {
  return receive(from, tag, [&](const Header &header, const Arrival &arrival) {
    checkArrival(tag, from, static_cast<plan::DType>(header.dtype),
                 header.count, out);
    if (out.link) {
      out.link->copyOut(*arrival.onLink(*out.link), {out});
      return;
    }
    std::vector<char> scratch;
    copyBytes(out.data, arrival.onHost(scratch), out.bytes());
  });
}

bool MpiCommunicator::recvAdd(int from, int64_t tag,
                              const std::vector<Buffer> &parts) {
  return receive(from, tag, [&](const Header &header, const Arrival &arrival) {
    auto dtype = static_cast<plan::DType>(header.dtype);
    if (DeviceLink *link = linkOf(parts)) {
      checkArrival(tag, from, dtype, header.count,
                   {plan::F32, nullptr, reducedCount(tag, parts)});
      link->addOut(*arrival.onLink(*link), parts);
      return;
    }
    std::vector<char> scratch;
    addArrival(tag, from, dtype, header.count, arrival.onHost(scratch), parts);
  });
}

void MpiCommunicator::reduceStart(int64_t tag,
                                  const std::vector<ConstBuffer> &parts,
                                  int64_t tau) {
  for (const ConstBuffer &part : parts)
    checkReducible(part.dtype);
  std::shared_ptr<std::vector<char>> message =
      post(otherDevices(), tags::contribution(tag), parts);
  own[tag] = message;
  log.push_back({tau, messageBytes(*message), true}); // a reduction
}

bool MpiCommunicator::reduceWait(int64_t tag,
                                 const std::vector<Buffer> &parts) {
  int64_t count = reducedCount(tag, parts);
  auto mine = own.find(tag);
  if (mine == own.end() || readHeader(*mine->second).count != count)
    throw RuntimeError("device " + std::to_string(device) +
                       " waits for reduction " + std::to_string(tag) + " of " +
                       std::to_string(count) +
                       " float32 values it did not contribute");
  // Sum in device order, from zero, as in-process: the same bits on every
  // device and in every run. Into the reduced gradients themselves, each
  // contribution added where it arrived: no buffer of the stage's size.
  int64_t contribution = tags::contribution(tag);
  for (const Buffer &part : parts)
    std::fill_n(static_cast<float *>(part.data), part.count, 0.0f);
  for (int d = 0; d < fabric.devices; ++d) {
    if (d == device) {
      addArrival(contribution, d, plan::F32, count,
                 mine->second->data() + sizeof(Header), parts);
      continue;
    }
    if (!receiveOnHost(d, contribution,
                       [&](const Header &header, const char *data) {
                         addArrival(contribution, d,
                                    static_cast<plan::DType>(header.dtype),
                                    header.count, data, parts);
                       }))
      return false;
  }
  own.erase(mine);
  float scale = 1.0f / static_cast<float>(fabric.devices);
  for (const Buffer &part : parts)
    for (float *v = static_cast<float *>(part.data), *end = v + part.count;
         v != end; ++v)
      *v *= scale;
  return true;
}

bool MpiCommunicator::receiveBlocks(
    int64_t message, plan::DType dtype, int64_t count, DeviceLink &link,
    std::shared_ptr<DeviceBlock> mine,
    std::vector<std::shared_ptr<DeviceBlock>> &blocks) {
  blocks.assign(fabric.devices, nullptr);
  blocks[device] = std::move(mine);
  for (int d = 0; d < fabric.devices; ++d) {
    if (d == device)
      continue;
    if (!receive(d, message, [&](const Header &header, const Arrival &arrival) {
          checkArrival(message, d, static_cast<plan::DType>(header.dtype),
                       header.count, {dtype, nullptr, count});
          blocks[d] = arrival.onLink(link);
        }))
      return false;
  }
  return true;
}

// Device memory (ZeRO's reduce-scatter of a stage's gradients on GPUs): the
// chunks go as messages (over the routes between processes' GPUs), only
// the elements the devices hold (the padding is not sent), and this
// device's chunk is summed on the device in device order from device 0's,
// zeros past the elements: the host collective's bits. The send log
// records what the host collective sends, padding included.
bool MpiCommunicator::reduceScatter(int64_t tag,
                                    const std::vector<ConstBuffer> &in,
                                    Buffer out, ReduceOp op, int64_t tau) {
  DeviceLink *link = scatterLink(in, out);
  if (!link)
    return Communicator::reduceScatter(tag, in, out, op, tau);
  int64_t message = collectiveTag(tag, 1), given = describe(in).second;
  auto held = [&](int d) {
    return std::clamp<int64_t>(given - d * out.count, 0, out.count);
  };
  for (int d = 0; d < fabric.devices; ++d)
    if (d != device) {
      send(d, message, slice(in, d * out.count, held(d)), -1);
      log.push_back({tau, out.bytes(), true});
    }
  std::vector<std::shared_ptr<DeviceBlock>> blocks;
  std::shared_ptr<DeviceBlock> mine =
      link->stash(slice(in, device * out.count, held(device)));
  if (!receiveBlocks(message, plan::F32, held(device), *link, std::move(mine),
                     blocks))
    return false;
  link->sumRange(rawBlocks(blocks), 0, held(device), scaleOf(op), out);
  return true;
}

// Device memory (ZeRO's gathers of parameters, laysa's of the selections'
// values and indices, on GPUs): each contribution goes to every device as
// a message; device d's lands at d * in.count, the padding past `out`
// dropped.
bool MpiCommunicator::allGather(int64_t tag, ConstBuffer in,
                                const std::vector<Buffer> &out, int64_t tau) {
  DeviceLink *link = gatherLink(in, out);
  if (!link)
    return Communicator::allGather(tag, in, out, tau);
  int64_t message = collectiveTag(tag, 2);
  for (int d = 0; d < fabric.devices; ++d)
    if (d != device)
      send(d, message, {in}, tau);
  std::vector<std::shared_ptr<DeviceBlock>> blocks;
  if (!receiveBlocks(message, in.dtype, in.count, *link, link->stash({in}),
                     blocks))
    return false;
  int64_t room = 0;
  for (const Buffer &part : out)
    room += part.bytes();
  for (int d = 0; d < fabric.devices; ++d) {
    int64_t at = d * in.bytes(), bytes = std::min(in.bytes(), room - at);
    if (bytes > 0)
      link->copyRange(*blocks[d], 0, out, at, bytes);
  }
  return true;
}

void MpiCommunicator::abort() { fabric.aborted = true; }

std::vector<std::vector<Communicator::SendRecord>> MpiFabric::gatherSendLogs() {
  // (device, tau, bytes, collective) of this process's devices, to rank 0.
  std::vector<int64_t> mine;
  for (int d = 0; d < devices; ++d)
    if (owns(d))
      for (const Communicator::SendRecord &record : endpoints[d]->sendLog())
        mine.insert(mine.end(),
                    {d, record.tau, record.bytes, record.collective ? 1 : 0});
  std::vector<std::vector<Communicator::SendRecord>> logs(devices);
  for (const std::string &part :
       gatherOntoRoot(std::string(reinterpret_cast<const char *>(mine.data()),
                                  mine.size() * sizeof(int64_t)))) {
    std::vector<int64_t> fields(part.size() / sizeof(int64_t));
    copyBytes(fields.data(), part.data(), part.size());
    for (size_t i = 0; i + 3 < fields.size(); i += 4)
      logs[fields[i]].push_back(
          {fields[i + 1], fields[i + 2], fields[i + 3] != 0});
  }
  return logs;
}

// Every process adds its devices' send counts into the run's matrix; each
// device then receives what the matrix says was sent to it, so that all
// in flight sits in the endpoints, which save it.
std::string MpiFabric::saveInFlight() {
  std::vector<int64_t> sent(static_cast<size_t>(devices) * devices, 0);
  for (int d = 0; d < devices; ++d)
    if (owns(d))
      std::copy(endpoints[d]->sentCounts().begin(),
                endpoints[d]->sentCounts().end(), sent.begin() + d * devices);
  MPI_Allreduce(MPI_IN_PLACE, sent.data(), static_cast<int>(sent.size()),
                MPI_INT64_T, MPI_SUM, control);
  ByteWriter out;
  for (int d = 0; d < devices; ++d) {
    if (!owns(d))
      continue;
    for (int from = 0; from < devices; ++from)
      if (from != d &&
          !endpoints[d]->collectFrom(from, sent[from * devices + d]))
        throw RuntimeError("stopped while saving the messages in flight "
                           "(another device failed)");
    endpoints[d]->saveInFlight(out);
  }
  // The reductions NCCL holds for this process's devices, after them (a
  // checkpoint without any ends there).
  for (const HeldReduction &held : heldReductions()) {
    out.put<int64_t>(held.tag);
    out.putVector(held.waiting);
    out.putVector(held.mean);
  }
  return out.bytes();
}

void MpiFabric::restoreInFlight(const std::string &bytes) {
  ByteReader in(bytes, "this process's messages in flight");
  for (int d = 0; d < devices; ++d)
    if (owns(d))
      endpoints[d]->restoreInFlight(in);
  std::vector<HeldReduction> held;
  while (!in.atEnd()) {
    HeldReduction h;
    h.tag = in.get<int64_t>();
    h.waiting = in.getVector<int>();
    h.mean = in.getVector<float>();
    // A reduction's tag (step * 4096 + stage), some of this process's
    // devices each once, and values: else not what a checkpoint holds.
    std::set<int> devicesWaiting(h.waiting.begin(), h.waiting.end());
    if (h.tag < 0 || h.tag >= tags::bit(52) || h.mean.empty() ||
        h.waiting.empty() || devicesWaiting.size() != h.waiting.size())
      in.fail();
    for (int d : h.waiting)
      if (!owns(d))
        in.fail();
    held.push_back(std::move(h));
  }
  restoreHeldReductions(std::move(held));
}

/// When mpirun ends this process (SIGTERM) because another process of the
/// job is gone, says which: the job's processes on this machine are
/// checked by pid in the handler: gone, or a zombie its parent has not yet
/// reaped (open, read, kill and write are async-signal-safe; the paths and
/// lines are made beforehand). Processes on other machines cannot be
/// checked from here; mpirun's banner names them.
namespace lost {
constexpr int kMaxProcesses = 1024;
pid_t pids[kMaxProcesses];     ///< 0: this process, or on another machine
char stats[kMaxProcesses][40]; ///< /proc/<pid>/stat
char lines[kMaxProcesses][128];
int processes = 0;
/// Called where no process is gone (a stop request), or null.
std::atomic<void (*)(int)> requestHandler{nullptr};

bool isGone(int r) {
  if (kill(pids[r], 0) == -1)
    return errno == ESRCH;
  int fd = open(stats[r], O_RDONLY);
  if (fd < 0)
    return true;
  char text[256];
  ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0)
    return true;
  text[n] = 0;
  // "pid (name) S ...": the state follows the last ')'.
  const char *name = std::strrchr(text, ')');
  return name && name[1] == ' ' && (name[2] == 'Z' || name[2] == 'X');
}

void onTerminate(int number) {
  int saved = errno;
  bool gone = false;
  for (int r = 0; r < processes; ++r)
    if (pids[r] > 0 && isGone(r)) {
      gone = true;
      (void)!write(STDERR_FILENO, lines[r], std::strlen(lines[r]));
    }
  errno = saved;
  void (*handler)(int) = requestHandler.load();
  if (!gone && handler) {
    handler(number); // a stop request: the run stops at a checkpoint
    return;
  }
  signal(SIGTERM, SIG_DFL);
  raise(SIGTERM);
}

void reportOnTerminate(int rank, int ranks) {
  struct Entry {
    char host[64];
    int64_t pid;
  } mine{};
  gethostname(mine.host, sizeof(mine.host) - 1);
  mine.pid = getpid();
  std::vector<Entry> all(ranks);
  MPI_Allgather(&mine, sizeof(Entry), MPI_BYTE, all.data(), sizeof(Entry),
                MPI_BYTE, MPI_COMM_WORLD);
  processes = std::min(ranks, kMaxProcesses);
  for (int r = 0; r < processes; ++r) {
    bool here = r != rank && std::strcmp(all[r].host, mine.host) == 0;
    pids[r] = here ? static_cast<pid_t>(all[r].pid) : 0;
    std::snprintf(stats[r], sizeof(stats[r]), "/proc/%lld/stat",
                  static_cast<long long>(all[r].pid));
    std::snprintf(lines[r], sizeof(lines[r]),
                  "cdp-run: error: process %d of the job (pid %lld) is gone; "
                  "process %d ends too\n",
                  r, static_cast<long long>(all[r].pid), rank);
  }
  struct sigaction action = {};
  action.sa_handler = onTerminate;
  sigaction(SIGTERM, &action, nullptr);
}
} // namespace lost

void MpiFabric::onTerminateRequest(void (*handler)(int)) {
  static_assert(std::atomic<void (*)(int)>::is_always_lock_free);
  lost::requestHandler = handler;
}

/// Every process's values, by process (MPI_COMM_WORLD).
std::vector<uint64_t> allGather(const std::vector<uint64_t> &mine, int ranks) {
  std::vector<uint64_t> all(mine.size() * ranks);
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_UINT64_T,
                all.data(), static_cast<int>(mine.size()), MPI_UINT64_T,
                MPI_COMM_WORLD);
  return all;
}

/// The first process whose agreement differs from process 0's (0: none),
/// with `error` saying how. Plan and command line first: where they agree,
/// every process names the same files, one hash each.
int firstDisagreement(const RunAgreement &agreement, int ranks,
                      std::string &error) {
  std::vector<uint64_t> all = allGather(
      {agreement.plan, agreement.flags, agreement.files.size()}, ranks);
  for (int r = 1; r < ranks; ++r) {
    std::string process = "mpirun's process " + std::to_string(r);
    if (all[3 * r] != all[0]) {
      error = process + " runs another plan than process 0; give every "
                        "process the same plan";
      return r;
    }
    if (all[3 * r + 1] != all[1] || all[3 * r + 2] != all[2]) {
      error = process + " runs with other flags than process 0; give every "
                        "process the same command line";
      return r;
    }
  }
  std::vector<uint64_t> hashes;
  for (const auto &[name, hash] : agreement.files)
    hashes.push_back(hash);
  if (hashes.empty())
    return 0;
  all = allGather(hashes, ranks);
  for (int r = 1; r < ranks; ++r)
    for (size_t f = 0; f < hashes.size(); ++f)
      if (all[r * hashes.size() + f] != all[f]) {
        error = "mpirun's process " + std::to_string(r) +
                " reads other data than process 0 (" +
                agreement.files[f].first +
                " differs); give every process the same files";
        return r;
      }
  return 0;
}

} // namespace

std::unique_ptr<Fabric> createMpiFabric(int devices, double timeoutSeconds,
                                        const RunAgreement &agreement,
                                        std::string &error) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int differs = firstDisagreement(agreement, ranks, error);
  if (differs > 0) {
    if (rank != 0)
      error.clear(); // the root says it, once
    MPI_Finalize();
    return nullptr;
  }
  if (provided < MPI_THREAD_MULTIPLE)
    error = "this MPI does not support threads (MPI_THREAD_MULTIPLE), "
            "which cdp-run's device threads need";
  else if (ranks > devices)
    error = "mpirun starts " + std::to_string(ranks) +
            " processes for a plan of " + std::to_string(devices) +
            " devices; use at most " + std::to_string(devices);
  else if (devices % ranks)
    error = "mpirun's " + std::to_string(ranks) +
            " processes do not divide the plan's " + std::to_string(devices) +
            " devices; use a divisor of " + std::to_string(devices);
  // MPI tags per sending device: a plain channel and K for contributions
  // (as many as the tag bound allows, up to a tag's 4096 stages).
  int *tagBound = nullptr, found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagBound, &found);
  int64_t tags = found && tagBound ? int64_t{*tagBound} + 1 : 32768;
  int64_t channels = std::min<int64_t>(4096, tags / devices - 1);
  if (error.empty() && channels < 1)
    error = "this MPI tells messages apart by at most " + std::to_string(tags) +
            " tags, 2 per device: a plan of " + std::to_string(devices) +
            " devices needs more";
  if (!error.empty()) {
    MPI_Finalize();
    return nullptr;
  }
  lost::reportOnTerminate(rank, ranks);
  return std::make_unique<MpiFabric>(devices, rank, ranks, timeoutSeconds,
                                     static_cast<int>(channels));
}

} // namespace cdp::runtime
