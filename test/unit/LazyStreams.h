//===- LazyStreams.h - a CPU double of a GPU's streams ----------*- C++ -*-===//
//
// StreamOps whose work runs late: each stream queues its operations and
// runs them only when the host waits for them (a read, a download, the
// test's finish) or another stream's wait needs them. A reader that does
// not wait for its producer's event therefore reads what was there before
// (zeros), and a release that runs before a reader's work turns that
// reader's bytes into errors. Device memory is a reserved range of
// addresses with no access at all: the host touching a device pointer
// ends the test with SIGSEGV. Operations on released or foreign memory are
// recorded in `errors`. A route's stream (StreamLink::addRoute) sends over a
// wire: a send runs as soon as it is queued, with what it waits for (a GPU
// runs a route's stream on its own), and a receive takes the wire's next
// bytes when it runs.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_TEST_UNIT_LAZYSTREAMS_H
#define CDP_TEST_UNIT_LAZYSTREAMS_H

#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/DeviceLink.h"

#include <sys/mman.h>

#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace cdp::test {

class LazyStream;

/// Bytes between the two ends of a route, in the order they were put.
class LazyWire {
public:
  virtual ~LazyWire() = default;
  virtual void put(std::vector<char> bytes) = 0;
  /// The next bytes put; false where none is there.
  virtual bool take(std::vector<char> &bytes) = 0;
};

/// A wire between two devices of one process.
class QueueWire : public LazyWire {
public:
  void put(std::vector<char> bytes) override {
    std::lock_guard<std::mutex> lock(mutex);
    queue.push_back(std::move(bytes));
  }
  bool take(std::vector<char> &bytes) override {
    std::lock_guard<std::mutex> lock(mutex);
    if (queue.empty())
      return false;
    bytes = std::move(queue.front());
    queue.pop_front();
    return true;
  }

private:
  std::mutex mutex;
  std::deque<std::vector<char>> queue;
};

/// One GPU: its memory and its streams (a domain).
class LazyGpu {
public:
  explicit LazyGpu(int domain, int64_t capacity = 1 << 22)
      : domain(domain), capacity(capacity), backing(capacity) {
    base = static_cast<char *>(
        mmap(nullptr, capacity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  }
  ~LazyGpu() { munmap(base, capacity); }

  /// Memory live from now on (a tensor of the plan's arena).
  char *allocate(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    return allocateLocked(bytes);
  }
  /// How many allocations are live, and the host downloads so far.
  int liveAllocations() {
    std::lock_guard<std::mutex> lock(mutex);
    return static_cast<int>(live.size());
  }

  const int domain;
  std::vector<std::string> errors;
  int downloads = 0;

private:
  friend class LazyStream;
  struct Op {
    std::function<void()> run;
    LazyStream *waitsFor = nullptr; ///< a wait: for that stream's point
    int64_t point = 0;
  };

  char *allocateLocked(int64_t bytes) {
    int64_t size = (bytes + 63) / 64 * 64;
    if (next + size > capacity) {
      errors.push_back("out of device memory");
      return base;
    }
    char *at = base + next;
    next += size;
    live[at] = bytes;
    return at;
  }
  /// The host bytes behind device range [at, at + bytes), or null with an
  /// error when the range is not inside one live allocation.
  char *host(const void *at, int64_t bytes, const char *what) {
    const char *p = static_cast<const char *>(at);
    auto it = live.upper_bound(const_cast<char *>(p));
    if (it != live.begin()) {
      --it;
      if (p + bytes <= it->first + it->second)
        return backing.data() + (p - base);
    }
    errors.push_back(std::string(what) + " outside live device memory");
    return nullptr;
  }

  std::mutex mutex;
  int64_t capacity, next = 0;
  std::vector<char> backing;
  char *base = nullptr;
  std::map<char *, int64_t> live;
};

class LazyEvent : public runtime::StreamEvent {
public:
  LazyEvent(LazyStream *stream, int64_t point) : stream(stream), point(point) {}
  LazyStream *stream;
  int64_t point; ///< the stream's queued operations when recorded
};

class LazyStream : public runtime::StreamOps {
public:
  explicit LazyStream(LazyGpu &gpu, std::shared_ptr<LazyWire> wire = nullptr)
      : gpu(gpu), wire(std::move(wire)) {}
  int domain() const override { return gpu.domain; }

  void *allocate(int64_t bytes) override {
    std::lock_guard<std::mutex> lock(gpu.mutex);
    return gpu.allocateLocked(bytes);
  }
  void release(void *memory) override {
    queue([this, memory] {
      char *at = static_cast<char *>(memory);
      auto it = gpu.live.find(at);
      if (it == gpu.live.end()) {
        gpu.errors.push_back("release of memory not allocated");
        return;
      }
      std::memset(gpu.backing.data() + (at - gpu.base), 0xff, it->second);
      gpu.live.erase(it);
    });
  }
  void copy(void *to, const void *from, int64_t bytes) override {
    queue([=] {
      char *dst = gpu.host(to, bytes, "copy to");
      char *src = gpu.host(from, bytes, "copy from");
      if (dst && src)
        std::memmove(dst, src, bytes);
    });
  }
  void upload(void *to, const char *host, int64_t bytes) override {
    std::vector<char> bytesNow(host, host + bytes);
    queue([=] {
      if (char *dst = gpu.host(to, bytes, "upload to"))
        std::memcpy(dst, bytesNow.data(), bytes);
    });
  }
  void add(float *to, const float *from, int64_t count) override {
    queue([=] {
      auto *dst = reinterpret_cast<float *>(gpu.host(to, count * 4, "add to"));
      auto *src = reinterpret_cast<const float *>(
          gpu.host(from, count * 4, "add from"));
      if (dst && src)
        for (int64_t i = 0; i < count; ++i)
          dst[i] += src[i];
    });
  }
  void zero(void *to, int64_t bytes) override {
    queue([=] {
      if (char *dst = gpu.host(to, bytes, "zero"))
        std::memset(dst, 0, bytes);
    });
  }
  void mean(float *to, const std::vector<const float *> &from, int64_t count,
            float scale, bool fromZero) override {
    queue([=] {
      auto *dst = reinterpret_cast<float *>(gpu.host(to, count * 4, "mean to"));
      std::vector<const float *> src;
      for (const float *f : from)
        src.push_back(reinterpret_cast<const float *>(
            gpu.host(f, count * 4, "mean from")));
      for (const float *s : src)
        if (!s)
          return;
      if (!dst)
        return;
      for (int64_t i = 0; i < count; ++i) {
        float sum = fromZero ? 0.0f + src[0][i] : src[0][i];
        for (size_t k = 1; k < src.size(); ++k)
          sum += src[k][i];
        dst[i] = sum * scale;
      }
    });
  }
  std::shared_ptr<runtime::StreamEvent> record() override {
    std::lock_guard<std::mutex> lock(gpu.mutex);
    return std::make_shared<LazyEvent>(this, queued);
  }
  void wait(const runtime::StreamEvent &event) override {
    auto &e = dynamic_cast<const LazyEvent &>(event);
    std::lock_guard<std::mutex> lock(gpu.mutex);
    ops.push_back({nullptr, e.stream, e.point});
    ++queued;
  }
  void download(char *host, const void *from, int64_t bytes,
                const runtime::StreamEvent &ready) override {
    auto &e = dynamic_cast<const LazyEvent &>(ready);
    std::lock_guard<std::mutex> lock(gpu.mutex);
    e.stream->runUntil(e.point);
    ++gpu.downloads;
    if (char *src = gpu.host(from, bytes, "download from"))
      std::memcpy(host, src, bytes);
  }

  void sendAcross(const void *from, int64_t bytes) override {
    queue([=] {
      if (const char *src = gpu.host(from, bytes, "send from"))
        wire->put(std::vector<char>(src, src + bytes));
    });
    finish();
  }
  void receiveAcross(void *to, int64_t bytes) override {
    queue([=] {
      std::vector<char> arrived;
      if (!wire->take(arrived)) {
        gpu.errors.push_back("a receive ran before its send");
        return;
      }
      if (static_cast<int64_t>(arrived.size()) != bytes) {
        gpu.errors.push_back("a receive of " + std::to_string(bytes) +
                             " bytes got " + std::to_string(arrived.size()));
        return;
      }
      if (char *dst = gpu.host(to, bytes, "receive into"))
        std::memcpy(dst, arrived.data(), bytes);
    });
  }

  /// A kernel of the test: writes `values` at `to` in stream order.
  void write(float *to, std::vector<float> values) {
    queue([=] {
      if (char *dst = gpu.host(to, values.size() * 4, "write to"))
        std::memcpy(dst, values.data(), values.size() * 4);
    });
  }
  /// Runs everything queued, then reads `count` floats at `from`.
  std::vector<float> read(const float *from, int64_t count) {
    std::lock_guard<std::mutex> lock(gpu.mutex);
    runUntil(queued);
    std::vector<float> values(count);
    if (char *src = gpu.host(from, count * 4, "read from"))
      std::memcpy(values.data(), src, count * 4);
    return values;
  }
  /// Runs everything queued so far.
  void finish() {
    std::lock_guard<std::mutex> lock(gpu.mutex);
    runUntil(queued);
  }

private:
  void queue(std::function<void()> run) {
    std::lock_guard<std::mutex> lock(gpu.mutex);
    ops.push_back({std::move(run)});
    ++queued;
  }
  /// Runs this stream's operations up to `point` (holding gpu.mutex),
  /// first the work another stream's wait needs.
  void runUntil(int64_t point) {
    if (done >= point)
      return; // also a stream's wait for its own earlier point
    if (running) {
      gpu.errors.push_back("streams wait for each other");
      return;
    }
    running = true;
    while (done < point && !ops.empty()) {
      LazyGpu::Op op = std::move(ops.front());
      ops.pop_front();
      ++done;
      if (op.waitsFor)
        op.waitsFor->runUntil(op.point);
      else
        op.run();
    }
    running = false;
  }

  LazyGpu &gpu;
  std::shared_ptr<LazyWire> wire;
  std::deque<LazyGpu::Op> ops;
  int64_t queued = 0, done = 0;
  bool running = false;
};

/// A device of a LazyGpu: its stream, link and a tensor helper.
struct LazyDevice {
  explicit LazyDevice(LazyGpu &gpu)
      : gpu(gpu), stream(std::make_shared<LazyStream>(gpu)), link(stream) {}
  /// A float tensor of `values` written by a kernel on this stream.
  float *tensor(const std::vector<float> &values) {
    auto *at = reinterpret_cast<float *>(gpu.allocate(values.size() * 4));
    stream->write(at, values);
    return at;
  }
  runtime::Buffer buffer(float *at, int64_t count) {
    return {plan::F32, at, count, &link};
  }
  LazyGpu &gpu;
  std::shared_ptr<LazyStream> stream;
  runtime::StreamLink link;
};

} // namespace cdp::test

#endif // CDP_TEST_UNIT_LAZYSTREAMS_H
