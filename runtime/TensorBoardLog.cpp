//===- TensorBoardLog.cpp - --tensorboard, event files --------------------===//
//
// The Event and Summary messages are written field by field (the few
// fields a scalar needs: tensorflow/core/util/event.proto and
// summary.proto), so no TensorFlow or TensorBoard protobuf is compiled in.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/TensorBoardLog.h"

#include "cdp/Plan/Paths.h"
#include "cdp/Runtime/Kernel.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

namespace cdp::runtime {

namespace {

constexpr uint32_t kCastagnoli = 0x82f63b78; // reflected polynomial

std::array<uint32_t, 256> crcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc >> 1) ^ ((crc & 1) ? kCastagnoli : 0);
    table[i] = crc;
  }
  return table;
}

void appendLittleEndian(std::string &out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void appendVarint(std::string &out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

/// A length-delimited field (wire type 2).
void appendBytesField(std::string &out, int field, const std::string &bytes) {
  appendVarint(out, (field << 3) | 2);
  appendVarint(out, bytes.size());
  out += bytes;
}

/// Summary.Value: tag = 1, simple_value = 2 (a float, wire type 5).
std::string scalarValue(const std::string &tag, float value) {
  std::string out;
  appendBytesField(out, 1, tag);
  appendVarint(out, (2 << 3) | 5);
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  appendLittleEndian(out, bits, 4);
  return out;
}

double secondsSinceEpoch() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace

uint32_t crc32c(const char *data, size_t size) {
  static const std::array<uint32_t, 256> table = crcTable();
  uint32_t crc = 0xffffffff;
  for (size_t i = 0; i < size; ++i)
    crc = table[(crc ^ static_cast<uint8_t>(data[i])) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffff;
}

uint32_t maskedCrc32c(const char *data, size_t size) {
  uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfRecord(const std::string &data) {
  std::string out;
  appendLittleEndian(out, data.size(), 8);
  appendLittleEndian(out, maskedCrc32c(out.data(), 8), 4);
  out += data;
  appendLittleEndian(out, maskedCrc32c(data.data(), data.size()), 4);
  return out;
}

std::string
eventBytes(double wallTime, int64_t step,
           const std::vector<std::pair<std::string, float>> &scalars,
           const std::string &fileVersion, bool start) {
  std::string out;
  appendVarint(out, (1 << 3) | 1); // wall_time, a double
  uint64_t bits;
  std::memcpy(&bits, &wallTime, sizeof(bits));
  appendLittleEndian(out, bits, 8);
  appendVarint(out, 2 << 3); // step, a varint
  appendVarint(out, static_cast<uint64_t>(step));
  if (!fileVersion.empty())
    appendBytesField(out, 3, fileVersion);
  if (start) { // session_log = 7: SessionLog{status = START (1)}
    std::string sessionLog;
    appendVarint(sessionLog, 1 << 3);
    appendVarint(sessionLog, 1);
    appendBytesField(out, 7, sessionLog);
  }
  if (!scalars.empty()) { // summary = 5: Summary{repeated value = 1}
    std::string summary;
    for (const auto &[tag, value] : scalars)
      appendBytesField(summary, 1, scalarValue(tag, value));
    appendBytesField(out, 5, summary);
  }
  return out;
}

void TensorBoardLog::open(const std::string &folder, int64_t start) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  double now = secondsSinceEpoch();
  // TensorFlow's name: events.out.tfevents.<seconds>.<host>; the pid
  // keeps two runs started in the same second apart.
  std::string path = folder + "/events.out.tfevents." +
                     std::to_string(static_cast<int64_t>(now)) + "." + host +
                     "." + std::to_string(getpid()) + ".cdp";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    throw RuntimeError(
        "--tensorboard " + folder +
        ": cannot write an event file there: " + std::strerror(errno));
  file.adopt(fd, "--tensorboard", path);
  std::string head = tfRecord(eventBytes(now, 0, {}, "brain.Event:2"));
  if (start > 0)
    head += tfRecord(eventBytes(now, start, {}, "", /*start=*/true));
  file.write(head);
}

void TensorBoardLog::writeStep(
    int64_t step, const std::vector<std::pair<std::string, float>> &scalars) {
  file.write(tfRecord(eventBytes(secondsSinceEpoch(), step, scalars)));
}

} // namespace cdp::runtime
