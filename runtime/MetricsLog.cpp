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

void MetricsLog::open(const std::string &path, int64_t start) {
  int fd;
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
  file.adopt(fd, "--metrics", path);
}

} // namespace cdp::runtime
