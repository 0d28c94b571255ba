//===- Communicator.h - moving data between devices -------------*- C++ -*-===//
//
// One interface for every backend: in-process threads (LocalCommunicator,
// here), MPI processes and NCCL GPUs (later). Collectives are split into a
// start, where a device hands over its contribution and goes on, and a
// wait, where it blocks until the result is there: devices proceed at their
// own pace and meet only where the plan says.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_COMMUNICATOR_H
#define CDP_RUNTIME_COMMUNICATOR_H

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace cdp::runtime {

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int size() const = 0;
  /// Hands over `count` floats for the mean-reduction `tag`; copies them.
  virtual void reduceStart(int device, int64_t tag, const float *data,
                           int64_t count, int64_t tau) = 0;
  /// Blocks until every device contributed to `tag`, then copies the mean
  /// (summed in device order, so every device gets the same bits) into
  /// `out`. Returns false when the communicator was aborted.
  virtual bool reduceWait(int device, int64_t tag, float *out,
                          int64_t count) = 0;
  /// Wakes every waiter with failure (a device failed).
  virtual void abort() = 0;
  /// Bytes handed over by `device` so far.
  virtual int64_t bytesSent(int device) const = 0;

  /// Point to point: copies `count` floats into `to`'s mailbox under `tag`
  /// and returns; `tau` is the sender's time step (for the report).
  virtual void send(int from, int to, int64_t tag, const float *data,
                    int64_t count, int64_t tau) = 0;
  /// Blocks until `to`'s mailbox holds `tag`, then copies it out. Returns
  /// false when the communicator was aborted.
  virtual bool recv(int to, int64_t tag, float *out, int64_t count) = 0;

  /// (device, time step, bytes) of every message sent, in send order.
  struct SendRecord {
    int device;
    int64_t tau, bytes;
  };
  virtual std::vector<SendRecord> sendLog() const = 0;
};

/// Devices are threads of this process. A contribution is copied into a
/// message owned by the communicator; the result is copied out into the
/// waiting device's own memory. No device reads another's buffers.
class LocalCommunicator : public Communicator {
public:
  explicit LocalCommunicator(int devices);
  int size() const override { return devices; }
  void reduceStart(int device, int64_t tag, const float *data, int64_t count,
                   int64_t tau) override;
  bool reduceWait(int device, int64_t tag, float *out, int64_t count) override;
  void abort() override;
  int64_t bytesSent(int device) const override;
  void send(int from, int to, int64_t tag, const float *data, int64_t count,
            int64_t tau) override;
  bool recv(int to, int64_t tag, float *out, int64_t count) override;
  std::vector<SendRecord> sendLog() const override;

private:
  struct Reduction {
    std::vector<std::vector<float>> contributions;
    std::vector<float> mean;
    int arrived = 0, fetched = 0;
    bool done = false;
  };
  int devices;
  mutable std::mutex mutex;
  std::condition_variable changed;
  std::map<int64_t, Reduction> reductions;
  std::vector<int64_t> sent;
  std::map<std::pair<int, int64_t>, std::vector<float>> mailboxes;
  std::vector<SendRecord> log;
  bool aborted = false;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_COMMUNICATOR_H
