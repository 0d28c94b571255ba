//===- MetricsLog.cpp - --metrics, one JSON line per step -----------------===//

#include "cdp/Runtime/MetricsLog.h"

#include "cdp/Plan/Paths.h"
#include "cdp/Runtime/Kernel.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace cdp::runtime {

namespace {

/// The step a line names ({"step":N,...}); -1 for another line.
int64_t stepOf(const std::string &line) {
  static const std::string key = "{\"step\":";
  if (line.compare(0, key.size(), key) != 0)
    return -1;
  return std::strtoll(line.c_str() + key.size(), nullptr, 10);
}

/// Keeps the lines of `path` before step `start` (a regular file only:
/// what the user keeps elsewhere is not ours to rewrite).
void keepStepsBefore(const std::string &path, int64_t start) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode))
    return;
  std::ifstream in(path);
  std::string line, kept;
  bool dropped = false;
  while (std::getline(in, line)) {
    int64_t step = stepOf(line);
    if (step >= start) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
  }
  std::string error;
  if (dropped && !writeFileAtomically(path, kept, error))
    throw RuntimeError("--metrics " + path + ": " + error);
}

} // namespace

MetricsLog::~MetricsLog() {
  if (fd >= 0)
    ::close(fd);
}

void MetricsLog::open(const std::string &file, int64_t start) {
  path = file;
  if (path == "/dev/stdout" || path == "/dev/stderr") {
    fd = fcntl(path == "/dev/stdout" ? 1 : 2, F_DUPFD_CLOEXEC, 3);
  } else {
    if (start > 0)
      keepStepsBefore(path, start);
    fd = ::open(path.c_str(),
                O_WRONLY | O_CREAT | O_CLOEXEC |
                    (start > 0 ? O_APPEND : O_TRUNC),
                0644);
  }
  if (fd < 0)
    throw RuntimeError("--metrics " + path +
                       ": cannot write: " + std::strerror(errno));
}

void MetricsLog::writeLine(const std::string &line) {
  if (!failed)
    failed = !writeAll(fd, line + "\n");
}

void MetricsLog::close() {
  if (fd < 0)
    return;
  bool closed = ::close(fd) == 0;
  fd = -1;
  if (failed || !closed)
    throw RuntimeError("--metrics " + path + ": write failed");
}

} // namespace cdp::runtime
