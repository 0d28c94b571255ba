//===- StreamLink.cpp - messages in device memory, ordered by events ------===//
//
// The one place that orders a message's life across streams: the sender's
// copy, then the readers (each waits for the copy's event and records its
// own once its read is queued), then the release on the sender's stream
// after every reader's event. No call waits on the host but download.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/DeviceLink.h"
#include "cdp/Runtime/Kernel.h"

#include <algorithm>
#include <mutex>

namespace cdp::runtime {

class StreamLink::Block : public DeviceBlock {
public:
  Block(std::shared_ptr<StreamOps> owner, int64_t bytes)
      : owner(std::move(owner)), size(bytes),
        memory(static_cast<char *>(
            this->owner->allocate(std::max<int64_t>(bytes, 1)))) {}
  ~Block() override {
    for (const std::shared_ptr<StreamEvent> &read : reads)
      owner->wait(*read);
    owner->release(memory);
  }
  int domain() const override { return owner->domain(); }
  int64_t bytes() const override { return size; }
  void download(char *host) const override {
    owner->download(host, memory, size, *ready);
  }

  std::shared_ptr<StreamOps> owner;
  int64_t size;
  char *memory;
  std::shared_ptr<StreamEvent> ready;
  /// Readers' events (several devices read a reduction's blocks at once).
  mutable std::mutex mutex;
  mutable std::vector<std::shared_ptr<StreamEvent>> reads;
};

namespace {

/// The bytes a list of parts takes.
template <typename BufferType>
int64_t bytesOf(const std::vector<BufferType> &parts) {
  int64_t bytes = 0;
  for (const BufferType &part : parts)
    bytes += part.bytes();
  return bytes;
}

} // namespace

std::shared_ptr<DeviceBlock>
StreamLink::stash(const std::vector<ConstBuffer> &parts) {
  auto block = std::make_shared<Block>(ops, bytesOf(parts));
  char *at = block->memory;
  for (const ConstBuffer &part : parts) {
    ops->copy(at, part.data, part.bytes());
    at += part.bytes();
  }
  block->ready = ops->record();
  return block;
}

std::shared_ptr<DeviceBlock> StreamLink::stashHost(const char *host,
                                                   int64_t bytes) {
  auto block = std::make_shared<Block>(ops, bytes);
  ops->upload(block->memory, host, bytes);
  block->ready = ops->record();
  return block;
}

const StreamLink::Block &StreamLink::waitFor(const DeviceBlock &block,
                                             StreamOps *stream) {
  auto *ours = dynamic_cast<const Block *>(&block);
  if (!ours || ours->domain() != domain())
    throw RuntimeError("a device block read outside its domain (an internal "
                       "error)");
  (stream ? *stream : *ops).wait(*ours->ready);
  return *ours;
}

void StreamLink::doneReading(const std::vector<const Block *> &blocks,
                             StreamOps *stream) {
  std::shared_ptr<StreamEvent> read = (stream ? *stream : *ops).record();
  for (const Block *block : blocks) {
    std::lock_guard<std::mutex> lock(block->mutex);
    block->reads.push_back(read);
  }
}

void StreamLink::copyOut(const DeviceBlock &block,
                         const std::vector<Buffer> &parts) {
  if (bytesOf(parts) != block.bytes())
    throw RuntimeError("a device block of " + std::to_string(block.bytes()) +
                       " bytes copied into " + std::to_string(bytesOf(parts)));
  copyRange(block, 0, parts, 0, block.bytes());
}

void StreamLink::addOut(const DeviceBlock &block,
                        const std::vector<Buffer> &parts) {
  const Block &from = waitFor(block);
  const float *at = reinterpret_cast<const float *>(from.memory);
  for (const Buffer &part : parts) {
    ops->add(static_cast<float *>(part.data), at, part.count);
    at += part.count;
  }
  doneReading({&from});
}

void StreamLink::meanOut(const std::vector<const DeviceBlock *> &blocks,
                         float scale, const std::vector<Buffer> &parts) {
  std::vector<const Block *> ours;
  for (const DeviceBlock *block : blocks)
    ours.push_back(&waitFor(*block));
  int64_t offset = 0;
  for (const Buffer &part : parts) {
    std::vector<const float *> from;
    for (const Block *block : ours)
      from.push_back(reinterpret_cast<const float *>(block->memory) + offset);
    ops->mean(static_cast<float *>(part.data), from, part.count, scale);
    offset += part.count;
  }
  doneReading(ours);
}

void StreamLink::copyRange(const DeviceBlock &block, int64_t from,
                           const std::vector<Buffer> &parts, int64_t to,
                           int64_t bytes) {
  const Block &source = waitFor(block);
  if (from < 0 || bytes < 0 || from + bytes > source.size)
    throw RuntimeError("a copy of a device block's bytes [" +
                       std::to_string(from) + ", " +
                       std::to_string(from + bytes) + ") past its " +
                       std::to_string(source.size));
  for (const Buffer &part : parts) {
    int64_t size = part.bytes();
    if (to < size && bytes > 0) {
      int64_t n = std::min(size - to, bytes);
      ops->copy(static_cast<char *>(part.data) + to, source.memory + from, n);
      from += n;
      bytes -= n;
      to = 0;
    } else {
      to -= std::min(to, size);
    }
  }
  if (bytes > 0)
    throw RuntimeError("a device block's copy runs past its buffers");
  doneReading({&source});
}

void StreamLink::sumRange(const std::vector<const DeviceBlock *> &blocks,
                          int64_t from, int64_t count, float scale,
                          Buffer out) {
  std::vector<const Block *> ours;
  std::vector<const float *> sources;
  count = std::min(count, out.count);
  for (const DeviceBlock *block : blocks) {
    ours.push_back(&waitFor(*block));
    if (count > 0 && (from + count) * 4 > ours.back()->size)
      throw RuntimeError("a sum of a device block's elements past its end");
    sources.push_back(reinterpret_cast<const float *>(ours.back()->memory) +
                      from);
  }
  auto *to = static_cast<float *>(out.data);
  if (count > 0)
    ops->mean(to, sources, count, scale, /*fromZero=*/false);
  if (count < out.count)
    ops->zero(to + std::max<int64_t>(count, 0),
              (out.count - std::max<int64_t>(count, 0)) * 4);
  doneReading(ours);
}

void StreamLink::addRoute(int peer, bool outgoing,
                          std::shared_ptr<StreamOps> route) {
  if (route->domain() != domain())
    throw RuntimeError("a route's stream outside its device's domain (an "
                       "internal error)");
  routes[{peer, outgoing}] = std::move(route);
}

bool StreamLink::reaches(int peer, bool outgoing) const {
  return routes.count({peer, outgoing}) > 0;
}

const std::shared_ptr<StreamOps> &StreamLink::route(int peer,
                                                    bool outgoing) const {
  auto it = routes.find({peer, outgoing});
  if (it == routes.end())
    throw RuntimeError(std::string("no route ") + (outgoing ? "to" : "from") +
                       " device " + std::to_string(peer) +
                       " (an internal error)");
  return it->second;
}

// A copy on this device's stream, sent and then released on the route's:
// this device's stream never waits for the send, which lasts until the
// receiver asks for the bytes (a stream that waited could stall a
// pipeline whose messages cross).
void StreamLink::sendAcross(int peer, const std::vector<ConstBuffer> &parts) {
  const std::shared_ptr<StreamOps> &stream = route(peer, /*outgoing=*/true);
  std::shared_ptr<DeviceBlock> block = stash(parts);
  auto &copy = static_cast<Block &>(*block);
  stream->wait(*copy.ready);
  stream->sendAcross(copy.memory, copy.size);
  copy.owner = stream;
}

// The block belongs to the route's stream: allocated and filled there, and
// released there after its readers (this device's stream) are done.
std::shared_ptr<DeviceBlock> StreamLink::receiveAcross(int peer,
                                                       int64_t bytes) {
  const std::shared_ptr<StreamOps> &stream = route(peer, /*outgoing=*/false);
  auto block = std::make_shared<Block>(stream, bytes);
  stream->receiveAcross(block->memory, bytes);
  block->ready = stream->record();
  return block;
}

void DeviceLink::sendAcross(int peer, const std::vector<ConstBuffer> &) {
  throw RuntimeError("device " + std::to_string(peer) +
                     " is not reached from this device's memory (an internal "
                     "error)");
}

std::shared_ptr<DeviceBlock> DeviceLink::receiveAcross(int peer, int64_t) {
  throw RuntimeError("device " + std::to_string(peer) +
                     " is not reached from this device's memory (an internal "
                     "error)");
}

void StreamOps::sendAcross(const void *, int64_t) {
  throw RuntimeError("a stream with no route sends across (an internal "
                     "error)");
}

void StreamOps::receiveAcross(void *, int64_t) {
  throw RuntimeError("a stream with no route receives across (an internal "
                     "error)");
}

} // namespace cdp::runtime
