//===- LocalCommunicator.cpp - devices as threads of one process ----------===//

#include "cdp/Runtime/Communicator.h"

#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Kernel.h"

#include <cstring>

namespace cdp::runtime {

/// Device `device`'s endpoint of a LocalFabric.
class LocalCommunicator : public Communicator {
public:
  LocalCommunicator(LocalFabric &fabric, int device)
      : fabric(fabric), device(device) {}
  int rank() const override { return device; }
  int size() const override { return fabric.devices; }
  void send(int to, int64_t tag, ConstBuffer data, int64_t tau) override;
  bool recv(int from, int64_t tag, Buffer out) override;
  void reduceStart(int64_t tag, ConstBuffer data, int64_t tau) override;
  bool reduceWait(int64_t tag, Buffer out) override;
  void abort() override;
  std::vector<SendRecord> sendLog() const override;

private:
  LocalFabric &fabric;
  int device;
  mutable std::mutex logMutex;
  std::vector<SendRecord> log;
};

LocalFabric::LocalFabric(int devices) : devices(devices) {
  for (int d = 0; d < devices; ++d)
    endpoints.push_back(std::make_unique<LocalCommunicator>(*this, d));
}

LocalFabric::~LocalFabric() = default;

Communicator &LocalFabric::endpoint(int d) { return *endpoints.at(d); }

void LocalFabric::abortRun() { endpoint(0).abort(); }

std::vector<std::vector<Communicator::SendRecord>>
LocalFabric::gatherSendLogs() {
  std::vector<std::vector<Communicator::SendRecord>> logs;
  for (const auto &endpoint : endpoints)
    logs.push_back(endpoint->sendLog());
  return logs;
}

void LocalCommunicator::send(int to, int64_t tag, ConstBuffer data,
                             int64_t tau) {
  checkPeer(to);
  const char *bytes = static_cast<const char *>(data.data);
  LocalFabric::Message message{data.dtype, data.count,
                               std::vector<char>(bytes, bytes + data.bytes())};
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
  if (tau < 0)
    return; // after training: not part of a step's traffic
  std::lock_guard<std::mutex> lock(logMutex);
  log.push_back({tau, data.bytes()});
}

bool LocalCommunicator::recv(int from, int64_t tag, Buffer out) {
  checkPeer(from);
  std::unique_lock<std::mutex> lock(fabric.mutex);
  auto key = std::make_tuple(from, device, tag);
  fabric.changed.wait(
      lock, [&] { return fabric.aborted || fabric.mailboxes.count(key); });
  if (fabric.aborted)
    return false;
  LocalFabric::Message &message = fabric.mailboxes[key];
  checkArrival(tag, from, message.dtype, message.count, out);
  std::memcpy(out.data, message.bytes.data(), message.bytes.size());
  fabric.mailboxes.erase(key);
  return true;
}

void LocalCommunicator::reduceStart(int64_t tag, ConstBuffer data,
                                    int64_t tau) {
  checkReducible(data.dtype);
  const float *values = static_cast<const float *>(data.data);
  std::vector<float> contribution(values, values + data.count);
  {
    std::lock_guard<std::mutex> lock(fabric.mutex);
    LocalFabric::Reduction &r = fabric.reductions[tag];
    if (r.contributions.empty())
      r.contributions.resize(fabric.devices);
    if (!r.contributions[device].empty())
      throw RuntimeError("device " + std::to_string(device) +
                         " contributed twice to reduction " +
                         std::to_string(tag));
    r.contributions[device] = std::move(contribution);
    if (++r.arrived == fabric.devices) {
      // Sum in device order: every device gets the same bits.
      r.mean.assign(data.count, 0.0f);
      for (const std::vector<float> &part : r.contributions)
        for (int64_t i = 0; i < data.count; ++i)
          r.mean[i] += part[i];
      float scale = 1.0f / static_cast<float>(fabric.devices);
      for (float &v : r.mean)
        v *= scale;
      r.contributions.clear();
      r.done = true;
      fabric.changed.notify_all();
    }
  }
  std::lock_guard<std::mutex> lock(logMutex);
  log.push_back({tau, data.bytes()});
}

bool LocalCommunicator::reduceWait(int64_t tag, Buffer out) {
  std::unique_lock<std::mutex> lock(fabric.mutex);
  fabric.changed.wait(lock, [&] {
    auto it = fabric.reductions.find(tag);
    return fabric.aborted || (it != fabric.reductions.end() && it->second.done);
  });
  if (fabric.aborted)
    return false;
  LocalFabric::Reduction &r = fabric.reductions[tag];
  if (out.dtype != plan::F32 ||
      static_cast<int64_t>(r.mean.size()) != out.count)
    throw RuntimeError("reduction " + std::to_string(tag) + " has " +
                       std::to_string(r.mean.size()) + " float32 values, " +
                       "device " + std::to_string(device) + " expects " +
                       std::to_string(out.count) + " " +
                       plan::DType_Name(out.dtype));
  std::memcpy(out.data, r.mean.data(), out.bytes());
  if (++r.fetched == fabric.devices)
    fabric.reductions.erase(tag);
  return true;
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
