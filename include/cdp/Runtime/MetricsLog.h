//===- MetricsLog.h - --metrics, one JSON line per step ---------*- C++ -*-===//
//
// The log keeps what earlier runs wrote where that is the user's: a run
// resumed from a checkpoint keeps the lines of the steps before it and
// drops those of later steps (the interrupted run's, which it runs again);
// /dev/stdout and /dev/stderr are this process's own streams, not files
// to reopen (opening /dev/stdout truncated a log the shell opened with
// >>).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_METRICSLOG_H
#define CDP_RUNTIME_METRICSLOG_H

#include "cdp/Runtime/StreamedFile.h"

#include <cstdint>
#include <string>

namespace cdp::runtime {

class MetricsLog {
public:
  /// Opens `path` for a run from step `start`: from 0 it starts the log
  /// afresh; later (--resume) it keeps the lines of earlier steps. Throws
  /// a one-line RuntimeError when the file cannot be written.
  void open(const std::string &path, int64_t start);
  bool isOpen() const { return file.isOpen(); }
  /// Writes one line (without its newline) at once.
  void writeLine(const std::string &line) { file.write(line + "\n"); }
  /// Closes the log; a RuntimeError when a write failed.
  void close() { file.close(); }

private:
  StreamedFile file;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_METRICSLOG_H
