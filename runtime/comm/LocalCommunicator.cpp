//===- LocalCommunicator.cpp - devices as threads of one process ----------===//

#include "cdp/Runtime/Communicator.h"

#include "cdp/Runtime/Kernel.h"

#include <cstring>

namespace cdp::runtime {

LocalCommunicator::LocalCommunicator(int devices)
    : devices(devices), sent(devices, 0) {}

void LocalCommunicator::reduceStart(int device, int64_t tag, const float *data,
                                    int64_t count, int64_t tau) {
  std::vector<float> message(data, data + count); // the copy that travels
  std::lock_guard<std::mutex> lock(mutex);
  Reduction &r = reductions[tag];
  if (r.contributions.empty())
    r.contributions.resize(devices);
  if (!r.contributions[device].empty())
    throw RuntimeError("device " + std::to_string(device) +
                       " contributed twice to reduction " +
                       std::to_string(tag));
  r.contributions[device] = std::move(message);
  sent[device] += count * static_cast<int64_t>(sizeof(float));
  log.push_back({device, tau, count * static_cast<int64_t>(sizeof(float))});
  if (++r.arrived == devices) {
    // Sum in device order: every device gets the same bits.
    r.mean.assign(count, 0.0f);
    for (const std::vector<float> &part : r.contributions)
      for (int64_t i = 0; i < count; ++i)
        r.mean[i] += part[i];
    float scale = 1.0f / static_cast<float>(devices);
    for (float &v : r.mean)
      v *= scale;
    r.contributions.clear();
    r.done = true;
    changed.notify_all();
  }
}

bool LocalCommunicator::reduceWait(int device, int64_t tag, float *out,
                                   int64_t count) {
  std::unique_lock<std::mutex> lock(mutex);
  changed.wait(lock, [&] {
    auto it = reductions.find(tag);
    return aborted || (it != reductions.end() && it->second.done);
  });
  if (aborted)
    return false;
  Reduction &r = reductions[tag];
  if (static_cast<int64_t>(r.mean.size()) != count)
    throw RuntimeError("reduction " + std::to_string(tag) + " has " +
                       std::to_string(r.mean.size()) + " values, device " +
                       std::to_string(device) + " expects " +
                       std::to_string(count));
  std::memcpy(out, r.mean.data(), count * sizeof(float));
  if (++r.fetched == devices)
    reductions.erase(tag);
  return true;
}

void LocalCommunicator::send(int from, int to, int64_t tag, const float *data,
                             int64_t count, int64_t tau) {
  std::vector<float> message(data, data + count); // the copy that travels
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(to, tag);
  if (mailboxes.count(key))
    throw RuntimeError("device " + std::to_string(to) +
                       " already has message " + std::to_string(tag));
  mailboxes[key] = std::move(message);
  int64_t bytes = count * static_cast<int64_t>(sizeof(float));
  sent[from] += bytes;
  log.push_back({from, tau, bytes});
  changed.notify_all();
}

bool LocalCommunicator::recv(int to, int64_t tag, float *out, int64_t count) {
  std::unique_lock<std::mutex> lock(mutex);
  auto key = std::make_pair(to, tag);
  changed.wait(lock, [&] { return aborted || mailboxes.count(key); });
  if (aborted)
    return false;
  std::vector<float> &message = mailboxes[key];
  if (static_cast<int64_t>(message.size()) != count)
    throw RuntimeError("message " + std::to_string(tag) + " has " +
                       std::to_string(message.size()) + " values, device " +
                       std::to_string(to) + " expects " +
                       std::to_string(count));
  std::memcpy(out, message.data(), count * sizeof(float));
  mailboxes.erase(key);
  return true;
}

std::vector<Communicator::SendRecord> LocalCommunicator::sendLog() const {
  std::lock_guard<std::mutex> lock(mutex);
  return log;
}

void LocalCommunicator::abort() {
  std::lock_guard<std::mutex> lock(mutex);
  aborted = true;
  changed.notify_all();
}

int64_t LocalCommunicator::bytesSent(int device) const {
  std::lock_guard<std::mutex> lock(mutex);
  return sent[device];
}

} // namespace cdp::runtime
