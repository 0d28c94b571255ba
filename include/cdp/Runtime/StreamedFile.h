//===- StreamedFile.h - a file a run writes as it goes ----------*- C++ -*-===//
//
// What --metrics and --tensorboard share: each write goes out at once (a
// reader follows the file while the run goes); a failed write is
// remembered, not thrown mid-run, and close reports it.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_STREAMEDFILE_H
#define CDP_RUNTIME_STREAMEDFILE_H

#include <string>

namespace cdp::runtime {

class StreamedFile {
public:
  StreamedFile() = default;
  StreamedFile(const StreamedFile &) = delete;
  StreamedFile &operator=(const StreamedFile &) = delete;
  ~StreamedFile();

  /// Takes `fd`, open on `path`; errors name them as "`flag` `path`".
  void adopt(int fd, const std::string &flag, const std::string &path);
  bool isOpen() const { return fd >= 0; }
  void write(const std::string &bytes);
  /// Closes the file; a RuntimeError when a write failed.
  void close();

private:
  std::string name; ///< the flag and the path, for the error
  int fd = -1;
  bool failed = false;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_STREAMEDFILE_H
