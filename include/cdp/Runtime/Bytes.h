//===- Bytes.h - state as bytes, and back -----------------------*- C++ -*-===//
//
// What the runtime writes for itself and reads back (checkpoints, a
// fabric's messages in flight, a process's trace sent to the root): fixed-
// size values in the host's byte order and length-prefixed blobs. The
// reader checks every length, so truncated or foreign bytes give one line
// naming them, never a read past the end.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_BYTES_H
#define CDP_RUNTIME_BYTES_H

#include "cdp/Runtime/Kernel.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace cdp::runtime {

/// memcpy, also for an empty range whose pointers may be null (an empty
/// vector's data()), which memcpy itself does not allow.
inline void copyBytes(void *to, const void *from, size_t bytes) {
  if (bytes)
    std::memcpy(to, from, bytes);
}

class ByteWriter {
public:
  template <typename T> void put(T value) {
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    out.append(reinterpret_cast<const char *>(&value), sizeof(T));
  }
  void putBlob(const void *data, size_t size) {
    put<uint64_t>(size);
    out.append(static_cast<const char *>(data), size);
  }
  void putString(const std::string &text) { putBlob(text.data(), text.size()); }
  template <typename T> void putVector(const std::vector<T> &values) {
    putBlob(values.data(), values.size() * sizeof(T));
  }
  std::string &bytes() { return out; }

private:
  std::string out;
};

class ByteReader {
public:
  /// `what` names the bytes in errors ("DIR/manifest.bin").
  ByteReader(const std::string &bytes, std::string what, size_t at = 0)
      : in(bytes), what(std::move(what)), at(at) {}
  template <typename T> T get() {
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    need(sizeof(T));
    T value;
    std::memcpy(&value, in.data() + at, sizeof(T));
    at += sizeof(T);
    return value;
  }
  std::string getString() {
    uint64_t size = get<uint64_t>();
    need(size);
    std::string text = in.substr(at, size);
    at += size;
    return text;
  }
  template <typename T> std::vector<T> getVector() {
    std::string blob = getString();
    if (blob.size() % sizeof(T))
      fail();
    std::vector<T> values(blob.size() / sizeof(T));
    if (!blob.empty()) // an empty vector's data() may be null
      std::memcpy(values.data(), blob.data(), blob.size());
    return values;
  }
  bool atEnd() const { return at == in.size(); }
  size_t offset() const { return at; }
  [[noreturn]] void fail() const {
    throw RuntimeError(what + " is truncated or not what cdp wrote");
  }

private:
  void need(uint64_t size) const {
    if (size > in.size() - at)
      fail();
  }
  const std::string &in;
  std::string what;
  size_t at;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_BYTES_H
