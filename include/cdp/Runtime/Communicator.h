//===- Communicator.h - moving data between devices -------------*- C++ -*-===//
//
// The communicator seam: every device talks through its own endpoint, for
// itself only (its rank), with typed buffers. Backends implement it:
// in-process threads (LocalCommunicator, here), MPI processes and NCCL GPUs
// (later). Reductions are split into a start, where a device hands over its
// contribution and goes on, and a wait, where it blocks until the result is
// there: devices proceed at their own pace and meet only where the plan
// says. Each endpoint keeps the log of what it sent; a run gathers them.
//
// Beside what today's plans use, the seam carries what later strategies
// need: non-blocking sends and receives with request handles, and the
// collectives (all-reduce as sum or mean, reduce-scatter, all-gather of
// equal and of variable-length contributions, broadcast). Their default
// implementations combine point-to-point messages and add contributions
// in device order, so every device gets the same bits wherever its peers
// run; a backend with native collectives (NCCL) overrides them.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_COMMUNICATOR_H
#define CDP_RUNTIME_COMMUNICATOR_H

#include "cdp/Plan/plan.pb.h"
#include "cdp/Runtime/DeviceLink.h"
#include "cdp/Runtime/MessageTags.h"

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace cdp::runtime {

/// `count` elements of `dtype` that a message fills. With a `link` they
/// lie in that device's memory, which only a communicator that
/// carriesDeviceMemory() takes, and only through the link.
struct Buffer {
  plan::DType dtype = plan::F32;
  void *data = nullptr;
  int64_t count = 0;
  DeviceLink *link = nullptr;
  int64_t bytes() const;
};

/// `count` elements of `dtype` that a message reads.
struct ConstBuffer {
  ConstBuffer() = default;
  ConstBuffer(plan::DType dtype, const void *data, int64_t count,
              DeviceLink *link = nullptr)
      : dtype(dtype), data(data), count(count), link(link) {}
  /// A buffer a message fills may be read by another (implicit on purpose).
  ConstBuffer(const Buffer &buffer)
      : dtype(buffer.dtype), data(buffer.data), count(buffer.count),
        link(buffer.link) {}
  plan::DType dtype = plan::F32;
  const void *data = nullptr;
  int64_t count = 0;
  DeviceLink *link = nullptr; ///< as Buffer's
  int64_t bytes() const;
};

/// How a reduction combines the devices' contributions.
enum class ReduceOp { Sum, Mean };

/// A non-blocking send or receive in progress (Communicator::isend, irecv).
/// Its buffer belongs to the operation until test() or wait() says it
/// completed. A default Request is complete.
class Request {
public:
  /// The backend's side of one operation.
  class Pending {
  public:
    virtual ~Pending() = default;
    /// Completes the operation if it can without blocking; whether it did.
    virtual bool test() = 0;
    /// Blocks until it completes; false when the communicator was aborted.
    virtual bool wait() = 0;
  };
  Request() = default;
  explicit Request(std::unique_ptr<Pending> pending)
      : pending(std::move(pending)) {}
  /// Whether the operation completed (polls; never blocks).
  bool test();
  /// Blocks until the operation completes; false when aborted.
  bool wait();

private:
  std::unique_ptr<Pending> pending;
};

/// What allGatherV gives every device: each device's contribution, by
/// device, one after another in `bytes`.
struct Gathered {
  plan::DType dtype = plan::F32;
  std::vector<int64_t> counts; ///< elements, by device
  std::vector<char> bytes;
  /// Where device d's contribution starts in `bytes`.
  int64_t offset(int d) const;
};

/// One device's endpoint.
class Communicator {
public:
  virtual ~Communicator() = default;
  /// The device this endpoint speaks for, and how many there are.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Whether send, recv, recvAdd, reduceStart and reduceWait take buffers
  /// in a device's memory (with a DeviceLink). The others take host
  /// memory only, as every backend's collectives do.
  virtual bool carriesDeviceMemory() const { return false; }
  /// Whether send, recv and recvAdd take buffers in a device's memory:
  /// every communicator that carriesDeviceMemory(), and the MPI fabric's,
  /// which sends a message between GPUs of different processes over the
  /// devices' routes (DeviceLink::sendAcross) where there is one, and any
  /// other through the host.
  virtual bool carriesDeviceMessages() const { return carriesDeviceMemory(); }
  /// Whether reduceScatter and allGather (ZeRO's collectives) take buffers
  /// in a device's memory: likewise, the MPI fabric's as point-to-point
  /// messages in device memory, summed on the device in device order.
  virtual bool carriesDeviceCollectives() const {
    return carriesDeviceMemory();
  }
  /// This device's link, given before the device's first message: a
  /// fabric that receives a message into device memory as soon as it
  /// hears of it (MPI: in the order the sender sent them) needs it then.
  virtual void useLink(DeviceLink *link) {}

  /// Point to point: sends `data` to device `to` under `tag` and returns
  /// once the buffer may be reused; `tau` is the sender's time step (for
  /// the report; negative after training, and then not logged, as a
  /// message to the device itself never is).
  void send(int to, int64_t tag, ConstBuffer data, int64_t tau);
  /// The same with the message's data a list of buffers of one dtype read
  /// one after another (a stage's tensors where they lie).
  virtual void send(int to, int64_t tag, const std::vector<ConstBuffer> &parts,
                    int64_t tau) = 0;
  /// Blocks until the message `tag` from device `from` is there and copies
  /// it into `out` (same dtype and count, or a RuntimeError). Returns false
  /// when the communicator was aborted.
  virtual bool recv(int from, int64_t tag, Buffer out) = 0;
  /// Like recv, but the float32 message is added to what `parts` (filled
  /// one after another) hold, element by element: a partial sum arriving
  /// where the receiver's own contribution lies, with no buffer of its
  /// own (`part += message`, the same bits as `message + part`).
  virtual bool recvAdd(int from, int64_t tag,
                       const std::vector<Buffer> &parts) = 0;

  /// Whether message `tag` from device `from` is there, so that recv would
  /// not block.
  virtual bool arrived(int from, int64_t tag) = 0;
  /// Non-blocking point to point. Backends that copy what they send
  /// (in-process, MPI) complete an isend at once.
  virtual Request isend(int to, int64_t tag, ConstBuffer data, int64_t tau);
  virtual Request irecv(int from, int64_t tag, Buffer out);

  /// Collectives: every device of the run calls them with the same `tag`
  /// (0 <= tag < 2^56, apart from the point-to-point tags) and the same
  /// counts; `tau` is the sender's time step for the log. They return
  /// false when the communicator was aborted. Sum and mean reduce float32,
  /// int64 and int32 element by element (mean: float32 only).
  /// `data` becomes the reduction of every device's `data`.
  virtual bool allReduce(int64_t tag, Buffer data, ReduceOp op, int64_t tau);
  /// `in` holds size() chunks of out.count elements; device r's `out`
  /// becomes the reduction of every device's chunk r.
  bool reduceScatter(int64_t tag, ConstBuffer in, Buffer out, ReduceOp op,
                     int64_t tau);
  /// The same with `in` a list of buffers read one after another (a
  /// stage's tensors where they lie) holding at most size() × out.count
  /// elements; the missing tail counts as zeros (the padding of the last
  /// chunk), so no one has to pack the stage first.
  virtual bool reduceScatter(int64_t tag, const std::vector<ConstBuffer> &in,
                             Buffer out, ReduceOp op, int64_t tau);
  /// `out` (size() × in.count elements) becomes every device's `in`, in
  /// device order.
  bool allGather(int64_t tag, ConstBuffer in, Buffer out, int64_t tau);
  /// The same with `out` a list of buffers filled one after another,
  /// holding at most size() × in.count elements: the gathered elements
  /// past their end (the padding) are dropped.
  virtual bool allGather(int64_t tag, ConstBuffer in,
                         const std::vector<Buffer> &out, int64_t tau);
  /// Contributions of any length (sparse gradients: each device's top-k
  /// values or indices), one dtype: `out` gets them all, by device.
  virtual bool allGatherV(int64_t tag, ConstBuffer in, Gathered &out,
                          int64_t tau);
  /// Every device's `data` becomes device `root`'s.
  virtual bool broadcast(int64_t tag, Buffer data, int root, int64_t tau);

  /// Hands over this device's contribution to the mean-reduction `tag`:
  /// the float32 `parts` one after another (a stage's gradients where they
  /// lie, so no kernel packs them first). The communicator keeps its own
  /// copy, so the parts may change as soon as it returns.
  virtual void reduceStart(int64_t tag, const std::vector<ConstBuffer> &parts,
                           int64_t tau) = 0;
  /// Blocks until every device contributed to `tag`, then copies the mean
  /// (summed in device order, so every device gets the same bits) into
  /// `parts`, one after another. Returns false when the communicator was
  /// aborted.
  virtual bool reduceWait(int64_t tag, const std::vector<Buffer> &parts) = 0;

  /// Wakes every waiter of every device with failure (a device failed).
  virtual void abort() = 0;

  /// (time step, bytes, whether part of a collective) of every message
  /// and contribution this device sent, in order.
  struct SendRecord {
    int64_t tau, bytes;
    bool collective = false;
  };
  /// Whether a message tag is one of a collective's (collectiveTag's).
  static bool isCollectiveTag(int64_t tag) {
    return tags::kindOf(tag) == tags::Kind::Collective;
  }
  virtual std::vector<SendRecord> sendLog() const = 0;

protected:
  /// The checks every backend makes, with the same messages: `peer` is
  /// one of the run's devices (itself too: a pipeline device running two
  /// stages passes values between them through its own mailbox); a
  /// message of `count` `dtype` from `from`
  /// fits `out`; a reduction's data is float32.
  void checkPeer(int peer) const;
  void checkArrival(int64_t tag, int from, plan::DType dtype, int64_t count,
                    const Buffer &out) const;
  static void checkReducible(plan::DType dtype);
  /// Refuses a collective's list of buffers of another dtype than
  /// `dtype`, or holding more than `most` elements together (one line
  /// naming `collective`).
  static void checkParts(const std::vector<Buffer> &parts, plan::DType dtype,
                         int64_t most, const char *collective);
  static void checkParts(const std::vector<ConstBuffer> &parts,
                         plan::DType dtype, int64_t most,
                         const char *collective);
  /// A reduction's float32 parts, checked, one after another.
  static std::vector<float> concatenate(const std::vector<ConstBuffer> &parts);
  /// The dtype and element count of a message made of `parts` (one dtype,
  /// or a RuntimeError; float32 when there are none).
  static std::pair<plan::DType, int64_t>
  describe(const std::vector<ConstBuffer> &parts);
  /// Copies the parts one after another to `to`.
  static void copyParts(const std::vector<ConstBuffer> &parts, char *to);
  /// Checks that a float32 message of `count` elements from `from` fits
  /// `parts` (recvAdd), then adds it to them.
  void addArrival(int64_t tag, int from, plan::DType dtype, int64_t count,
                  const char *values, const std::vector<Buffer> &parts) const;
  /// How many float32 values the parts hold together (a RuntimeError naming
  /// the reduction and this device when one is not float32).
  int64_t reducedCount(int64_t tag, const std::vector<Buffer> &parts) const;
  /// Copies `values` into the parts, one after another.
  static void scatter(const float *values, const std::vector<Buffer> &parts);
  /// Sends `data` to every other device under `tag` (a fabric may send one
  /// copy to all).
  virtual void sendToAll(int64_t tag, ConstBuffer data, int64_t tau);
  /// The point-to-point tag of a collective's message (phase: which of its
  /// messages: 1 a reduce-scatter's, 2 an all-gather's), out of the plans'
  /// tag space.
  int64_t collectiveTag(int64_t tag, int phase) const;
  /// The link an all-gather's buffers lie on, checked (one dtype, room for
  /// at most every device's `in`); null where they are host memory.
  DeviceLink *gatherLink(ConstBuffer in, const std::vector<Buffer> &out) const;
  /// The link a reduce-scatter's chunk `out` lies on, checked (float32, the
  /// GPU's sums; `in` on the same device or the host, at most every
  /// device's chunk); null where both are host memory.
  DeviceLink *scatterLink(const std::vector<ConstBuffer> &in,
                          const Buffer &out) const;
  /// What a reduction on a device multiplies its sum by: 1/N for a mean.
  float scaleOf(ReduceOp op) const {
    return op == ReduceOp::Mean ? 1.0f / static_cast<float>(size()) : 1.0f;
  }
  /// Views of elements [offset, offset + count) of the parts laid one after
  /// another, as far as they hold them (fewer past their end).
  static std::vector<ConstBuffer> slice(const std::vector<ConstBuffer> &parts,
                                        int64_t offset, int64_t count);
};

/// The link every part's memory is reached through, or null where they are
/// host memory; parts of one message lie in one place (else a
/// RuntimeError).
DeviceLink *linkOf(const std::vector<Buffer> &parts);
DeviceLink *linkOf(const std::vector<ConstBuffer> &parts);

/// Checks a message restored from a checkpoint: a type cdp sends, a count
/// that is not negative, and `bytes` that are exactly its values'. Throws
/// a one-line RuntimeError naming the message otherwise (a re-sealed
/// checkpoint: the receive would copy past its tensor, or read past the
/// message).
void checkRestoredMessage(int64_t tag, int from, int to, int32_t dtype,
                          int64_t count, uint64_t bytes);

/// A reduction a backend carries outside the fabric (NCCL's all-reduce on
/// the GPUs) that some of this process's devices have yet to fetch: its
/// mean and those devices. Between two steps a checkpoint saves it: the
/// in-process fabric as its own reduction (a resumed run fetches it from
/// the fabric), the MPI fabric beside its messages (a resumed process's
/// devices take it with takeRestoredReduction).
struct HeldReduction {
  int64_t tag = 0;
  std::vector<int> waiting;
  std::vector<float> mean;
};
/// Registers what lists a backend's held reductions (one lister per
/// process; null: none).
void setHeldReductions(std::function<std::vector<HeldReduction>()> list);
std::vector<HeldReduction> heldReductions();
/// What a resumed MPI process's checkpoint held (restoreInFlight), and
/// device `device`'s mean of reduction `tag` from it, taken once (false
/// where there is none).
void restoreHeldReductions(std::vector<HeldReduction> held);
bool takeRestoredReduction(int64_t tag, int device, std::vector<float> &mean);

/// The devices of a run and where they live: every device's endpoint, the
/// processes they are spread over, and the few whole-run gathers a run
/// needs after training. In-process (LocalFabric) every device is a thread
/// of this process; under MPI (MpiFabric) each process owns a contiguous
/// range of devices.
class Fabric {
public:
  virtual ~Fabric() = default;
  /// Devices of the run.
  virtual int size() const = 0;
  /// Whether this process runs `device`.
  virtual bool owns(int device) const = 0;
  /// Device d's endpoint (this process's devices only).
  virtual Communicator &endpoint(int d) = 0;
  /// Whether this process writes the run's outputs (it runs device 0).
  virtual bool isRoot() const { return owns(0); }
  /// Adds `values` element-wise over the processes into the root's copy
  /// (each entry written by one device, zero elsewhere).
  virtual void sumOntoRoot(std::vector<double> &values) = 0;
  /// Every device's send log, by device, on the root.
  virtual std::vector<std::vector<Communicator::SendRecord>>
  gatherSendLogs() = 0;
  /// Every process's `mine`, by process, on the root (others: empty).
  virtual std::vector<std::string> gatherOntoRoot(const std::string &mine) = 0;
  /// The root's `rootBytes` on every process (others pass anything).
  virtual std::string shareFromRoot(const std::string &rootBytes) = 0;
  /// Returns when every process has called it.
  virtual void barrier() = 0;
  /// Ends the whole run after a device failed (MPI: every process).
  virtual void abortRun() = 0;
  /// This process's index among the run's, and their count (in-process:
  /// 0 of 1).
  virtual int processRank() const { return 0; }
  virtual int processCount() const { return 1; }
  /// The process that runs `device` (in-process: 0).
  virtual int processOf(int device) const { return 0; }

  /// Between two steps, while every device of every process waits there
  /// (a checkpoint): what is in flight towards this process's devices, as
  /// bytes -- messages sent and not yet received, contributions to
  /// reductions not every device has waited for. Devices send only what
  /// later steps receive, so this is all that crosses the step boundary
  /// outside the devices' memory. Collective under MPI.
  virtual std::string saveInFlight() = 0;
  /// Puts back what saveInFlight returned, before a resumed run's first
  /// step. Throws RuntimeError when the bytes are not such a state.
  virtual void restoreInFlight(const std::string &bytes) = 0;

  /// Device `device` waits outside the fabric (where the devices meet
  /// between steps, or done) and sends nothing until set back. In-process,
  /// a run whose devices all wait, none for anything in flight, then
  /// fails in one line instead of hanging (a checkpoint's state in flight
  /// that does not fit the plan).
  virtual void setParked(int device, bool parked) {}

  /// Live step losses for the root's progress line and --metrics, apart
  /// from the devices' messages: a device of another process posts its
  /// step `step` loss (non-blocking); the root takes what has arrived.
  /// In one process the root reads the losses itself: nothing moves.
  struct StepLoss {
    int device = 0;
    int64_t step = 0; ///< -1: the process is done posting
    float loss = 0;
    /// fp16 pipelines: the loss scale after the step, and whether its
    /// updates were skipped (0 where not known).
    float lossScale = 0;
    bool overflowed = false;
    /// A note of step `step`'s loss scale alone, posted apart from its
    /// loss where the scale is known a step later (2bw's loss stage).
    bool scaleOnly = false;
  };
  virtual void postStepLoss(const StepLoss &loss) {}
  /// Another process's posted loss, if one has arrived (`wait`: blocks
  /// until one does).
  virtual bool takeStepLoss(StepLoss &loss, bool wait) { return false; }

  /// Notes between the processes' main threads (mpirun's agreement on the
  /// step a SIGTERM stops at): `kind` and `value` to process `to`
  /// (non-blocking), and the next note that arrived, if any.
  struct Note {
    int from = 0;
    int64_t kind = 0, value = 0;
  };
  virtual void postNote(int to, int64_t kind, int64_t value) {}
  virtual bool takeNote(Note &note) { return false; }
  /// Under mpirun SIGTERM also comes from mpirun when another process of
  /// the job is gone, and the fabric's handler says which and ends this
  /// one; where none is gone, it calls `handler` instead.
  virtual void onTerminateRequest(void (*handler)(int)) {}
};

/// Devices as threads of this process: the fabric holds the messages in
/// flight, and each device gets its endpoint (`endpoint(d)`). A message is
/// a copy owned by the fabric; the receiver copies it into its own memory.
/// No device reads another's buffers.
class LocalFabric : public Fabric {
public:
  explicit LocalFabric(int devices);
  ~LocalFabric() override;
  int size() const override { return devices; }
  bool owns(int device) const override {
    return device >= 0 && device < devices;
  }
  Communicator &endpoint(int d) override;
  void sumOntoRoot(std::vector<double> &) override {}
  std::vector<std::string> gatherOntoRoot(const std::string &mine) override {
    return {mine};
  }
  std::string shareFromRoot(const std::string &rootBytes) override {
    return rootBytes;
  }
  void barrier() override {}
  std::vector<std::vector<Communicator::SendRecord>> gatherSendLogs() override;
  void abortRun() override;
  std::string saveInFlight() override;
  void restoreInFlight(const std::string &bytes) override;
  void setParked(int device, bool parked) override;

private:
  friend class LocalCommunicator;
  /// What a device waits for: nothing (it runs), a message, a reduction's
  /// mean, or something outside the fabric (parked).
  struct Wait {
    enum Kind {
      Running,
      Message,
      Reduction,
      Collective,
      Parked
    } kind = Running;
    int from = 0;
    int64_t tag = 0;
  };
  /// Called (holding `mutex`) when a device starts to wait: when every
  /// device waits and no message or mean they wait for is here, none ever
  /// will be; the run is stopped with `stall` saying who waits for what.
  void checkStall();
  /// Device d waits (`wait`) until `ready` (holding `lock`); false when the
  /// run was aborted, a RuntimeError when it stalled.
  bool waitFor(std::unique_lock<std::mutex> &lock, int d, Wait wait,
               const std::function<bool()> &ready);
  /// A reduction's contributions, by device: host values, or blocks in
  /// device memory (a GPU's; all of one domain once every device gave,
  /// else downloaded then). Host contributions are summed into `mean` at
  /// the last one; device blocks are kept and each waiter sums them on its
  /// own stream (DeviceLink::meanOut), or on the host where it must.
  struct Reduction {
    std::vector<std::vector<float>> contributions;
    std::vector<std::shared_ptr<DeviceBlock>> blocks;
    std::vector<float> mean;
    int arrived = 0, fetched = 0;
    bool done = false;
    /// Whether device d has contributed.
    bool gave(int d) const {
      return !contributions[d].empty() || (!blocks.empty() && blocks[d]);
    }
  };
  /// A collective over device memory (all-gather, reduce-scatter): every
  /// device's block, by device; each device takes what it needs once all
  /// arrived, and the last to take it drops it (within a step: none is in
  /// flight at a checkpoint).
  struct Gathering {
    std::vector<std::shared_ptr<DeviceBlock>> blocks;
    int arrived = 0, fetched = 0;
  };
  /// A message: host bytes, or a block in the sender's device memory.
  struct Message {
    plan::DType dtype;
    int64_t count;
    std::vector<char> bytes;
    std::shared_ptr<DeviceBlock> block;
    /// Its bytes on the host (a block downloaded once it is ready).
    std::vector<char> hostBytes() const;
  };
  /// Every contribution on the host (device blocks downloaded), and the
  /// mean of a reduction every device gave to, summed in device order.
  static std::vector<std::vector<float>> hostContributions(const Reduction &r);
  static std::vector<float> hostMean(const Reduction &r, int devices);
  /// Whether a restored reduction is in a state reduceStart and
  /// reduceWait leave one in.
  bool leftByARun(const Reduction &r) const;
  int devices;
  mutable std::mutex mutex;
  std::condition_variable changed;
  std::map<int64_t, Reduction> reductions;
  std::map<int64_t, Gathering> gatherings;
  /// (from, to, tag) -> the message.
  std::map<std::tuple<int, int, int64_t>, Message> mailboxes;
  bool aborted = false;
  std::vector<Wait> waits;
  std::string stall;
  std::vector<std::unique_ptr<Communicator>> endpoints;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_COMMUNICATOR_H
