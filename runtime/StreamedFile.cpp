//===- StreamedFile.cpp - a file a run writes as it goes ------------------===//

#include "cdp/Runtime/StreamedFile.h"

#include "cdp/Plan/Paths.h"
#include "cdp/Runtime/Kernel.h"

#include <unistd.h>

namespace cdp::runtime {

StreamedFile::~StreamedFile() {
  if (fd >= 0)
    ::close(fd);
}

void StreamedFile::adopt(int file, const std::string &flag,
                         const std::string &path) {
  fd = file;
  name = flag + " " + path;
}

void StreamedFile::write(const std::string &bytes) {
  if (!failed)
    failed = !writeAll(fd, bytes);
}

void StreamedFile::close() {
  if (fd < 0)
    return;
  bool closed = ::close(fd) == 0;
  fd = -1;
  if (failed || !closed)
    throw RuntimeError(name + ": write failed");
}

} // namespace cdp::runtime
