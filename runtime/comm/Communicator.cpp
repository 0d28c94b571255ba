//===- Communicator.cpp - what every communicator backend shares ----------===//

#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Bytes.h"
#include "cdp/Runtime/MessageTags.h"

#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Kernel.h"
#include "cdp/Runtime/MpiCommunicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

namespace cdp::runtime {

int64_t ConstBuffer::bytes() const { return count * plan::dtypeSize(dtype); }
int64_t Buffer::bytes() const { return count * plan::dtypeSize(dtype); }

void Communicator::checkPeer(int peer) const {
  if (peer < 0 || peer >= size())
    throw RuntimeError("device " + std::to_string(rank()) + " names device " +
                       std::to_string(peer) + " as its peer; the run has " +
                       std::to_string(size()));
}

void Communicator::checkArrival(int64_t tag, int from, plan::DType dtype,
                                int64_t count, const Buffer &out) const {
  if (dtype != out.dtype || count != out.count)
    throw RuntimeError("message " + std::to_string(tag) + " from device " +
                       std::to_string(from) + " holds " +
                       std::to_string(count) + " " + plan::DType_Name(dtype) +
                       ", device " + std::to_string(rank()) + " expects " +
                       std::to_string(out.count) + " " +
                       plan::DType_Name(out.dtype));
}

void checkRestoredMessage(int64_t tag, int from, int to, int32_t dtype,
                          int64_t count, uint64_t bytes) {
  std::string message = "message " + std::to_string(tag) + " from device " +
                        std::to_string(from) + " to device " +
                        std::to_string(to) + " in flight";
  if (!plan::DType_IsValid(dtype))
    throw RuntimeError(message + " has type " + std::to_string(dtype) +
                       ", not one cdp sends");
  auto type = static_cast<plan::DType>(dtype);
  int64_t size = plan::dtypeSize(type);
  if (count < 0 || count > std::numeric_limits<int64_t>::max() / size ||
      bytes != static_cast<uint64_t>(count * size))
    throw RuntimeError(
        message + " holds " + std::to_string(bytes) + " bytes where its " +
        std::to_string(count) + " " + plan::DType_Name(type) + " values take " +
        (count < 0 ? std::string("none") : std::to_string(count * size)));
}

namespace {
std::mutex heldMutex;
std::function<std::vector<HeldReduction>()> heldLister;
} // namespace

void setHeldReductions(std::function<std::vector<HeldReduction>()> list) {
  std::lock_guard<std::mutex> lock(heldMutex);
  heldLister = std::move(list);
}

std::vector<HeldReduction> heldReductions() {
  std::lock_guard<std::mutex> lock(heldMutex);
  return heldLister ? heldLister() : std::vector<HeldReduction>();
}

namespace {
std::map<int64_t, HeldReduction> restoredHeld;
} // namespace

void restoreHeldReductions(std::vector<HeldReduction> held) {
  std::lock_guard<std::mutex> lock(heldMutex);
  restoredHeld.clear();
  for (HeldReduction &h : held)
    restoredHeld[h.tag] = std::move(h);
}

bool takeRestoredReduction(int64_t tag, int device, std::vector<float> &mean) {
  std::lock_guard<std::mutex> lock(heldMutex);
  auto it = restoredHeld.find(tag);
  if (it == restoredHeld.end())
    return false;
  std::vector<int> &waiting = it->second.waiting;
  auto at = std::find(waiting.begin(), waiting.end(), device);
  if (at == waiting.end())
    return false;
  waiting.erase(at);
  mean = it->second.mean;
  if (waiting.empty())
    restoredHeld.erase(it);
  return true;
}

void Communicator::checkReducible(plan::DType dtype) {
  if (dtype != plan::F32)
    throw RuntimeError("reductions are of float32 tensors, not " +
                       plan::DType_Name(dtype));
}

namespace {

/// The elements `parts` hold together; a RuntimeError naming `what` when
/// one holds a negative count or is of another dtype than `dtype`.
template <typename BufferType>
int64_t countParts(const std::vector<BufferType> &parts, plan::DType dtype,
                   const std::string &what) {
  int64_t count = 0;
  for (const BufferType &part : parts) {
    if (part.count < 0)
      throw RuntimeError(what + " given a buffer of " +
                         std::to_string(part.count) + " elements");
    if (part.dtype != dtype)
      throw RuntimeError(what + " of " + plan::DType_Name(dtype) +
                         " with a buffer of " + plan::DType_Name(part.dtype));
    count += part.count;
  }
  return count;
}

/// A host copy of a part a device link holds would read device memory on
/// the host: only a communicator that carriesDeviceMemory() may be given
/// one, and it moves it through the link.
template <typename BufferType> void requireHost(const BufferType &part) {
  if (part.link)
    throw RuntimeError("a communicator without device links was handed a "
                       "device's memory (an internal error)");
}

template <typename BufferType>
DeviceLink *commonLink(const std::vector<BufferType> &parts) {
  DeviceLink *link = parts.empty() ? nullptr : parts.front().link;
  for (const BufferType &part : parts)
    if (part.link != link)
      throw RuntimeError("a message's buffers lie on different devices");
  return link;
}

} // namespace

DeviceLink *linkOf(const std::vector<Buffer> &parts) {
  return commonLink(parts);
}

DeviceLink *linkOf(const std::vector<ConstBuffer> &parts) {
  return commonLink(parts);
}

void Communicator::send(int to, int64_t tag, ConstBuffer data, int64_t tau) {
  send(to, tag, std::vector<ConstBuffer>{data}, tau);
}

std::pair<plan::DType, int64_t>
Communicator::describe(const std::vector<ConstBuffer> &parts) {
  plan::DType dtype = parts.empty() ? plan::F32 : parts.front().dtype;
  return {dtype, countParts(parts, dtype, "a message")};
}

void Communicator::copyParts(const std::vector<ConstBuffer> &parts, char *to) {
  for (const ConstBuffer &part : parts) {
    requireHost(part);
    copyBytes(to, part.data, part.bytes());
    to += part.bytes();
  }
}

std::vector<float>
Communicator::concatenate(const std::vector<ConstBuffer> &parts) {
  for (const ConstBuffer &part : parts)
    checkReducible(part.dtype);
  std::vector<float> values(describe(parts).second);
  copyParts(parts, reinterpret_cast<char *>(values.data()));
  return values;
}

void Communicator::addArrival(int64_t tag, int from, plan::DType dtype,
                              int64_t count, const char *values,
                              const std::vector<Buffer> &parts) const {
  checkArrival(tag, from, dtype, count,
               {plan::F32, nullptr, reducedCount(tag, parts)});
  for (const Buffer &part : parts) {
    requireHost(part);
    float *acc = static_cast<float *>(part.data);
    for (int64_t i = 0; i < part.count; ++i) {
      float value; // a message's bytes need not be aligned for float
      std::memcpy(&value, values + i * sizeof(float), sizeof(float));
      acc[i] += value;
    }
    values += part.bytes();
  }
}

int64_t Communicator::reducedCount(int64_t tag,
                                   const std::vector<Buffer> &parts) const {
  return countParts(parts, plan::F32,
                    "reduction " + std::to_string(tag) + " on device " +
                        std::to_string(rank()));
}

void Communicator::scatter(const float *values,
                           const std::vector<Buffer> &parts) {
  for (const Buffer &part : parts) {
    requireHost(part);
    copyBytes(part.data, values, part.bytes());
    values += part.count;
  }
}

bool Request::test() {
  if (pending && pending->test())
    pending.reset();
  return !pending;
}

bool Request::wait() {
  if (pending && !pending->wait())
    return false;
  pending.reset();
  return true;
}

int64_t Gathered::offset(int d) const {
  int64_t elements = 0;
  for (int i = 0; i < d; ++i)
    elements += counts[i];
  return elements * plan::dtypeSize(dtype);
}

namespace {

/// A receive that waits in recv() (the default irecv).
class PendingReceive : public Request::Pending {
public:
  PendingReceive(Communicator &comm, int from, int64_t tag, Buffer out)
      : comm(comm), from(from), tag(tag), out(out) {}
  bool test() override {
    return comm.arrived(from, tag) && comm.recv(from, tag, out);
  }
  bool wait() override { return comm.recv(from, tag, out); }

private:
  Communicator &comm;
  int from;
  int64_t tag;
  Buffer out;
};

/// Refuses a dtype that reductions cannot add.
void checkAddable(plan::DType dtype) {
  if (dtype != plan::F32 && dtype != plan::I64 && dtype != plan::I32)
    throw RuntimeError("reductions add float32, int64 or int32, not " +
                       plan::DType_Name(dtype));
}

/// Refuses a reduction the collectives cannot make, before any message.
void checkReduction(plan::DType dtype, ReduceOp op) {
  checkAddable(dtype);
  if (op == ReduceOp::Mean && dtype != plan::F32)
    throw RuntimeError("a mean reduces float32, not " +
                       plan::DType_Name(dtype) + "; use a sum");
}

/// acc[i] += part[i] for `count` elements of `dtype` (checkAddable).
void accumulate(plan::DType dtype, void *acc, const void *part, int64_t count) {
  auto add = [&](auto *a, const auto *p) {
    for (int64_t i = 0; i < count; ++i)
      a[i] += p[i];
  };
  switch (dtype) {
  case plan::F32:
    return add(static_cast<float *>(acc), static_cast<const float *>(part));
  case plan::I64:
    return add(static_cast<int64_t *>(acc), static_cast<const int64_t *>(part));
  case plan::I32:
    return add(static_cast<int32_t *>(acc), static_cast<const int32_t *>(part));
  default:
    checkAddable(dtype);
  }
}

/// A mean's sum scaled by 1 / devices, as the plans' reductions do; a sum
/// stays as it is.
void scaleForMean(Buffer sum, int devices, ReduceOp op) {
  if (op != ReduceOp::Mean)
    return;
  float scale = 1.0f / static_cast<float>(devices);
  float *values = static_cast<float *>(sum.data);
  for (int64_t i = 0; i < sum.count; ++i)
    values[i] *= scale;
}

/// `out` becomes the reduction of `devices` contributions of out.count
/// elements laid one after another in `parts`: added in device order (the
/// same bits on every device), a mean then scaled by 1 / devices as the
/// plans' reductions do.
void reduceInDeviceOrder(Buffer out, const std::vector<char> &parts,
                         int devices, ReduceOp op) {
  int64_t bytes = out.bytes();
  copyBytes(out.data, parts.data(), bytes);
  for (int d = 1; d < devices; ++d)
    accumulate(out.dtype, out.data, parts.data() + d * bytes, out.count);
  scaleForMean(out, devices, op);
}

/// Refuses a collective's list of buffers of another dtype than the
/// collective's, or holding more than `most` elements together.
template <typename BufferType>
void checkPartsOf(const std::vector<BufferType> &parts, plan::DType dtype,
                  int64_t most, const char *collective) {
  int64_t count = countParts(parts, dtype, collective);
  if (count > most)
    throw RuntimeError(std::string(collective) + " of at most " +
                       std::to_string(most) + " elements given buffers of " +
                       std::to_string(count));
}

/// Calls visit(part, first, done, n) for each piece of elements [offset,
/// offset + count) of the parts laid one after another: `n` elements from
/// element `first` of `part`, the range's elements [done, done + n).
/// Returns how many of the range's elements the parts hold.
template <typename BufferType, typename Visit>
int64_t forEachPiece(const std::vector<BufferType> &parts, int64_t offset,
                     int64_t count, Visit visit) {
  int64_t done = 0;
  for (const BufferType &part : parts) {
    if (done == count)
      break;
    if (offset >= part.count) {
      offset -= part.count;
      continue;
    }
    int64_t n = std::min(part.count - offset, count - done);
    visit(part, offset, done, n);
    done += n;
    offset = 0;
  }
  return done;
}

/// Elements [offset, offset + out.count) of the parts read one after
/// another into `out`; past the parts' end, zeros.
void readRange(const std::vector<ConstBuffer> &parts, int64_t offset,
               Buffer out) {
  int64_t size = plan::dtypeSize(out.dtype);
  char *to = static_cast<char *>(out.data);
  int64_t done = forEachPiece(
      parts, offset, out.count,
      [&](const ConstBuffer &part, int64_t first, int64_t at, int64_t n) {
        copyBytes(to + at * size,
                  static_cast<const char *>(part.data) + first * size,
                  n * size);
      });
  std::memset(to + done * size, 0, (out.count - done) * size);
}

/// `in` into elements [offset, offset + in.count) of the parts filled one
/// after another; what falls past their end is dropped.
void writeRange(ConstBuffer in, int64_t offset,
                const std::vector<Buffer> &parts) {
  int64_t size = plan::dtypeSize(in.dtype);
  const char *from = static_cast<const char *>(in.data);
  forEachPiece(parts, offset, in.count,
               [&](const Buffer &part, int64_t first, int64_t at, int64_t n) {
                 copyBytes(static_cast<char *>(part.data) + first * size,
                           from + at * size, n * size);
               });
}

} // namespace

Request Communicator::isend(int to, int64_t tag, ConstBuffer data,
                            int64_t tau) {
  send(to, tag, data, tau);
  return Request();
}

Request Communicator::irecv(int from, int64_t tag, Buffer out) {
  checkPeer(from);
  return Request(std::make_unique<PendingReceive>(*this, from, tag, out));
}

int64_t Communicator::collectiveTag(int64_t tag, int phase) const {
  if (tag < 0 || tag >= (int64_t(1) << 56))
    throw RuntimeError("collective tag " + std::to_string(tag) +
                       " is out of range (0 to 2^56 - 1)");
  return tags::collective(tag, phase);
}

DeviceLink *Communicator::gatherLink(ConstBuffer in,
                                     const std::vector<Buffer> &out) const {
  DeviceLink *link = linkOf(out);
  if (!link && !in.link)
    return nullptr;
  if (link != in.link)
    throw RuntimeError("an all-gather's buffers lie on different devices");
  checkParts(out, in.dtype, in.count * size(), "all-gather");
  return link;
}

DeviceLink *Communicator::scatterLink(const std::vector<ConstBuffer> &in,
                                      const Buffer &out) const {
  DeviceLink *link = linkOf(in);
  if (!link && !out.link)
    return nullptr;
  if (link && link != out.link)
    throw RuntimeError("a reduce-scatter's buffers lie on different devices");
  checkReducible(out.dtype); // the GPU sums float32 only
  checkParts(in, out.dtype, out.count * size(), "reduce-scatter");
  return out.link;
}

std::vector<ConstBuffer>
Communicator::slice(const std::vector<ConstBuffer> &parts, int64_t offset,
                    int64_t count) {
  std::vector<ConstBuffer> views;
  forEachPiece(parts, offset, count,
               [&](const ConstBuffer &part, int64_t first, int64_t, int64_t n) {
                 int64_t size = plan::dtypeSize(part.dtype);
                 views.emplace_back(part.dtype,
                                    static_cast<const char *>(part.data) +
                                        first * size,
                                    n, part.link);
               });
  return views;
}

void Communicator::sendToAll(int64_t tag, ConstBuffer data, int64_t tau) {
  for (int d = 0; d < size(); ++d)
    if (d != rank())
      send(d, tag, data, tau);
}

void Communicator::checkParts(const std::vector<Buffer> &parts,
                              plan::DType dtype, int64_t most,
                              const char *collective) {
  checkPartsOf(parts, dtype, most, collective);
}
void Communicator::checkParts(const std::vector<ConstBuffer> &parts,
                              plan::DType dtype, int64_t most,
                              const char *collective) {
  checkPartsOf(parts, dtype, most, collective);
}

bool Communicator::allReduce(int64_t tag, Buffer data, ReduceOp op,
                             int64_t tau) {
  if (data.link)
    throw RuntimeError("an all-reduce of device memory over a communicator "
                       "that does not carry it");
  checkReduction(data.dtype, op);
  int64_t bytes = data.bytes();
  std::vector<char> contributions(size() * bytes);
  copyBytes(contributions.data() + rank() * bytes, data.data, bytes);
  int64_t message = collectiveTag(tag, 0);
  sendToAll(message, data, tau);
  for (int d = 0; d < size(); ++d)
    if (d != rank() &&
        !recv(d, message,
              {data.dtype, contributions.data() + d * bytes, data.count}))
      return false;
  reduceInDeviceOrder(data, contributions, size(), op);
  return true;
}

bool Communicator::reduceScatter(int64_t tag, ConstBuffer in, Buffer out,
                                 ReduceOp op, int64_t tau) {
  if (in.count != out.count * size())
    throw RuntimeError("reduce-scatter of " + std::to_string(in.count) +
                       " elements into " + std::to_string(size()) +
                       " chunks of " + std::to_string(out.count));
  return reduceScatter(tag, std::vector<ConstBuffer>{in}, out, op, tau);
}

bool Communicator::reduceScatter(int64_t tag,
                                 const std::vector<ConstBuffer> &in, Buffer out,
                                 ReduceOp op, int64_t tau) {
  checkParts(in, out.dtype, out.count * size(), "reduce-scatter");
  checkReduction(out.dtype, op);
  int64_t message = collectiveTag(tag, 1);
  std::vector<char> chunk(out.bytes());
  Buffer chunkBuffer{out.dtype, chunk.data(), out.count};
  for (int d = 0; d < size(); ++d)
    if (d != rank()) {
      readRange(in, d * out.count, chunkBuffer);
      send(d, message, chunkBuffer, tau);
    }
  // Added in device order from device 0's chunk: the same bits on every
  // device, and one chunk of memory beside `out`.
  for (int d = 0; d < size(); ++d) {
    if (d == rank())
      readRange(in, d * out.count, chunkBuffer);
    else if (!recv(d, message, chunkBuffer))
      return false;
    if (d == 0)
      copyBytes(out.data, chunk.data(), out.bytes());
    else
      accumulate(out.dtype, out.data, chunk.data(), out.count);
  }
  scaleForMean(out, size(), op);
  return true;
}

bool Communicator::allGather(int64_t tag, ConstBuffer in, Buffer out,
                             int64_t tau) {
  if (out.count != in.count * size())
    throw RuntimeError("all-gather of " + std::to_string(in.count) +
                       " elements from " + std::to_string(size()) +
                       " devices into " + std::to_string(out.count));
  return allGather(tag, in, std::vector<Buffer>{out}, tau);
}

bool Communicator::allGather(int64_t tag, ConstBuffer in,
                             const std::vector<Buffer> &out, int64_t tau) {
  checkParts(out, in.dtype, in.count * size(), "all-gather");
  int64_t message = collectiveTag(tag, 2);
  sendToAll(message, in, tau);
  writeRange(in, rank() * in.count, out);
  std::vector<char> chunk(in.bytes());
  Buffer chunkBuffer{in.dtype, chunk.data(), in.count};
  for (int d = 0; d < size(); ++d) {
    if (d == rank())
      continue;
    if (!recv(d, message, chunkBuffer))
      return false;
    writeRange(chunkBuffer, d * in.count, out);
  }
  return true;
}

bool Communicator::allGatherV(int64_t tag, ConstBuffer in, Gathered &out,
                              int64_t tau) {
  // First the counts, then contributions of those sizes.
  int64_t counts = collectiveTag(tag, 3), values = collectiveTag(tag, 4);
  sendToAll(counts, {plan::I64, &in.count, 1}, tau);
  sendToAll(values, in, tau);
  out.dtype = in.dtype;
  out.counts.assign(size(), 0);
  out.counts[rank()] = in.count;
  for (int d = 0; d < size(); ++d)
    if (d != rank() && !recv(d, counts, {plan::I64, &out.counts[d], 1}))
      return false;
  int64_t total = 0;
  for (int64_t count : out.counts)
    total += count;
  out.bytes.assign(total * plan::dtypeSize(in.dtype), 0);
  copyBytes(out.bytes.data() + out.offset(rank()), in.data, in.bytes());
  for (int d = 0; d < size(); ++d)
    if (d != rank() &&
        !recv(d, values,
              {in.dtype, out.bytes.data() + out.offset(d), out.counts[d]}))
      return false;
  return true;
}

bool Communicator::broadcast(int64_t tag, Buffer data, int root, int64_t tau) {
  int64_t message = collectiveTag(tag, 5);
  if (rank() == root) {
    sendToAll(message, data, tau);
    return true;
  }
  checkPeer(root);
  return recv(root, message, data);
}

bool launchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
}

} // namespace cdp::runtime
