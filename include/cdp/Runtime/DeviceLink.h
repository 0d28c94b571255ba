//===- DeviceLink.h - messages that stay in a device's memory ---*- C++ -*-===//
//
// A communicator moves host memory it reads and writes itself. A GPU's
// tensors it may not touch: a message between devices sharing one GPU
// would go out to the host and back, and the sender's stream would have to
// stop for it. A device's link lets the communicator move such memory
// without reading it: every operation is queued on the device's own
// stream, ordered after the work queued before it, and never waits on the
// host. A message in flight is a DeviceBlock, a copy in device memory that
// is ready once its copy ran; readers on other streams wait for that
// (events on a GPU), and it is freed after its last reader's work.
//
// The in-process fabric (LocalFabric) carries blocks where both ends have
// links of the same domain (one GPU); otherwise, and to save a checkpoint's
// messages in flight, it downloads a block to the host. Between processes
// (MPI), a link may also reach a device of another process directly over a
// route of its own per peer and direction (NCCL's send and receive on a
// two-rank communicator and a stream of their own): the MPI fabric sends
// the message's header through the host and its bytes over the route.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_DEVICELINK_H
#define CDP_RUNTIME_DEVICELINK_H

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace cdp::runtime {

struct Buffer;
struct ConstBuffer;

/// A message's bytes in a device's memory.
class DeviceBlock {
public:
  virtual ~DeviceBlock() = default;
  /// Devices whose links share a domain copy each other's memory directly.
  virtual int domain() const = 0;
  virtual int64_t bytes() const = 0;
  /// Copies the block to host memory once it is ready (blocks the caller).
  virtual void download(char *host) const = 0;
};

/// One device's stream, seen by a communicator. Buffers handed to it hold
/// this device's memory; float32 is the only dtype the sums take.
class DeviceLink {
public:
  virtual ~DeviceLink() = default;
  virtual int domain() const = 0;
  /// A copy of `parts`, one after another, ready once the work queued on
  /// this device before the call (which writes them) and the copy ran.
  virtual std::shared_ptr<DeviceBlock>
  stash(const std::vector<ConstBuffer> &parts) = 0;
  /// A block holding `bytes` host bytes (a message restored from a
  /// checkpoint, or one from another domain); the host bytes may change
  /// once it returns.
  virtual std::shared_ptr<DeviceBlock> stashHost(const char *host,
                                                 int64_t bytes) = 0;
  /// Queued after `block` is ready: its bytes into `parts`, one after
  /// another (a block of this domain).
  virtual void copyOut(const DeviceBlock &block,
                       const std::vector<Buffer> &parts) = 0;
  /// Queued likewise: `part += block` element by element (float32; the
  /// same bits as block + part).
  virtual void addOut(const DeviceBlock &block,
                      const std::vector<Buffer> &parts) = 0;
  /// Queued after every block is ready: the float32 mean
  /// `((0 + b_0) + b_1 + ...) * scale`, summed in the blocks' order as
  /// the host's reductions sum (so the same bits), into `parts`.
  virtual void meanOut(const std::vector<const DeviceBlock *> &blocks,
                       float scale, const std::vector<Buffer> &parts) = 0;
  /// Queued after `block` is ready: its bytes [from, from + bytes) into
  /// the parts' concatenation at byte `to` (a gathered shard into place).
  virtual void copyRange(const DeviceBlock &block, int64_t from,
                         const std::vector<Buffer> &parts, int64_t to,
                         int64_t bytes) = 0;
  /// Queued after every block is ready: `out[i] = (b_0[from + i] + b_1[from
  /// + i] + ...) * scale` for i < count, summed from b_0 as the host's
  /// collectives sum (scale 1 for a sum), and zeros past `count` (a
  /// reduce-scatter's chunk, its padding).
  virtual void sumRange(const std::vector<const DeviceBlock *> &blocks,
                        int64_t from, int64_t count, float scale,
                        Buffer out) = 0;

  /// Whether device `peer` of another process is reached directly: for
  /// messages this device sends it (`outgoing`), or receives from it.
  virtual bool reaches(int peer, bool outgoing) const { return false; }
  /// Queued after the work before it: the parts' bytes, one after
  /// another, to device `peer` (a route reaches() says is there), after
  /// this link's earlier sends to it. The parts may change once it returns.
  virtual void sendAcross(int peer, const std::vector<ConstBuffer> &parts);
  /// A fresh block of `bytes` queued to receive the next message device
  /// `peer` sends across to this one (in the order it sent them): ready
  /// once the bytes arrived.
  virtual std::shared_ptr<DeviceBlock> receiveAcross(int peer, int64_t bytes);
};

/// The blocks as the link's sums take them.
inline std::vector<const DeviceBlock *>
rawBlocks(const std::vector<std::shared_ptr<DeviceBlock>> &blocks) {
  std::vector<const DeviceBlock *> raw;
  for (const std::shared_ptr<DeviceBlock> &block : blocks)
    raw.push_back(block.get());
  return raw;
}

/// A point in a stream's work (a CUDA event): what runs after it was
/// queued has not started before it.
class StreamEvent {
public:
  virtual ~StreamEvent() = default;
};

/// What a device's stream offers a StreamLink: memory, copies and two
/// float32 kernels, each queued after the stream's earlier work, and
/// events between streams of one domain. A GPU's are CUDA's; the unit
/// tests' are a CPU double that runs each stream's work only when
/// something waits for it, so a missing wait reads stale bytes.
class StreamOps {
public:
  virtual ~StreamOps() = default;
  virtual int domain() const = 0;
  /// Memory usable by work queued after this call, and its release after
  /// the work queued before the release.
  virtual void *allocate(int64_t bytes) = 0;
  virtual void release(void *memory) = 0;
  virtual void copy(void *to, const void *from, int64_t bytes) = 0;
  /// From host bytes, which may change once it returns.
  virtual void upload(void *to, const char *host, int64_t bytes) = 0;
  /// `to[i] += from[i]`.
  virtual void add(float *to, const float *from, int64_t count) = 0;
  /// `to[i] = ((0 + from[0][i]) + from[1][i] + ...) * scale`, or without
  /// the 0 (`fromZero` false: the collectives' sums, from[0][i] first).
  virtual void mean(float *to, const std::vector<const float *> &from,
                    int64_t count, float scale, bool fromZero = true) = 0;
  virtual void zero(void *to, int64_t bytes) = 0;
  /// The stream's current point, and a wait of this stream for a point of
  /// any stream of the domain.
  virtual std::shared_ptr<StreamEvent> record() = 0;
  virtual void wait(const StreamEvent &event) = 0;
  /// Host bytes of memory a stream of the domain wrote before `ready`
  /// (blocks the caller until then).
  virtual void download(char *host, const void *from, int64_t bytes,
                        const StreamEvent &ready) = 0;
  /// A route's stream (StreamLink::addRoute): `bytes` at `from` to the
  /// device at the route's other end, and the next `bytes` it sent into
  /// `to`, each after this stream's earlier work (NCCL's send and receive
  /// on the pair's communicator). Other streams have none.
  virtual void sendAcross(const void *from, int64_t bytes);
  virtual void receiveAcross(void *to, int64_t bytes);
};

/// A DeviceLink over a stream's primitives: a block is memory of the
/// sender's stream, ready at an event recorded after its copy; every
/// reader waits for that event before it reads and records one after, and
/// the block is released on its owner's stream after every reader's.
class StreamLink : public DeviceLink {
public:
  explicit StreamLink(std::shared_ptr<StreamOps> ops) : ops(std::move(ops)) {}
  int domain() const override { return ops->domain(); }
  std::shared_ptr<DeviceBlock>
  stash(const std::vector<ConstBuffer> &parts) override;
  std::shared_ptr<DeviceBlock> stashHost(const char *host,
                                         int64_t bytes) override;
  void copyOut(const DeviceBlock &block,
               const std::vector<Buffer> &parts) override;
  void addOut(const DeviceBlock &block,
              const std::vector<Buffer> &parts) override;
  void meanOut(const std::vector<const DeviceBlock *> &blocks, float scale,
               const std::vector<Buffer> &parts) override;
  void copyRange(const DeviceBlock &block, int64_t from,
                 const std::vector<Buffer> &parts, int64_t to,
                 int64_t bytes) override;
  void sumRange(const std::vector<const DeviceBlock *> &blocks, int64_t from,
                int64_t count, float scale, Buffer out) override;

  /// Device `peer` of another process, reached through `route` (a stream
  /// of this domain whose sendAcross or receiveAcross reaches it): one
  /// route per peer and direction, so that messages crossing each other
  /// (a pipeline's activations and gradients) never wait on one another.
  void addRoute(int peer, bool outgoing, std::shared_ptr<StreamOps> route);
  bool reaches(int peer, bool outgoing) const override;
  void sendAcross(int peer, const std::vector<ConstBuffer> &parts) override;
  std::shared_ptr<DeviceBlock> receiveAcross(int peer, int64_t bytes) override;

private:
  class Block;
  /// `block` as one of this domain's, its readiness waited for by
  /// `stream` (this link's own by default).
  const Block &waitFor(const DeviceBlock &block, StreamOps *stream = nullptr);
  /// Marks the blocks read by the work queued so far on `stream`.
  void doneReading(const std::vector<const Block *> &blocks,
                   StreamOps *stream = nullptr);
  const std::shared_ptr<StreamOps> &route(int peer, bool outgoing) const;
  std::shared_ptr<StreamOps> ops;
  /// (peer, outgoing) -> its route's stream.
  std::map<std::pair<int, bool>, std::shared_ptr<StreamOps>> routes;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_DEVICELINK_H
