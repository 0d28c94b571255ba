//===- TensorBoardLog.h - --tensorboard, event files ------------*- C++ -*-===//
//
// TensorBoard's event files as TensorFlow writes them, without TensorFlow:
// a file of TFRecords (length, masked CRC-32C of the length, the bytes, their
// masked CRC-32C), each an `Event` protobuf (wall time, step, and a summary
// of scalar values). The first record names the format ("brain.Event:2");
// a resumed run starts a new file with a SessionLog START at its first
// step, which tells TensorBoard to drop the earlier file's later steps
// (the interrupted run's, which this one runs again).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_TENSORBOARDLOG_H
#define CDP_RUNTIME_TENSORBOARDLOG_H

#include "cdp/Runtime/StreamedFile.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cdp::runtime {

/// CRC-32C (Castagnoli), as TFRecord checksums its length and data.
uint32_t crc32c(const char *data, size_t size);
/// TFRecord's masked CRC: rotated right by 15 bits, plus 0xa282ead8.
uint32_t maskedCrc32c(const char *data, size_t size);
/// One TFRecord holding `data`.
std::string tfRecord(const std::string &data);
/// An Event protobuf: its wall time and step, and either the file version,
/// a SessionLog START (`start`), or scalar values (tag, value).
std::string
eventBytes(double wallTime, int64_t step,
           const std::vector<std::pair<std::string, float>> &scalars,
           const std::string &fileVersion = "", bool start = false);

class TensorBoardLog {
public:
  /// Makes `folder` if needed and starts a new event file in it for a run
  /// from step `start`. Throws a one-line RuntimeError when it cannot.
  void open(const std::string &folder, int64_t start);
  bool isOpen() const { return file.isOpen(); }
  /// One step's scalars, written at once (TensorBoard reads files that are
  /// still being written).
  void writeStep(int64_t step,
                 const std::vector<std::pair<std::string, float>> &scalars);
  /// Closes the file; a RuntimeError when a write failed.
  void close() { file.close(); }

private:
  StreamedFile file;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_TENSORBOARDLOG_H
