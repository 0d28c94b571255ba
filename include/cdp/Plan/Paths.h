//===- Paths.h - output paths checked before any work ---------*- C++ -*-===//
//
// Both tools check every output path before they import, compile or train:
// an output must not be one of the run's inputs (writing it would destroy
// the input), and its folder must exist (failing after hours of training,
// or after writing another output, loses work).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_PATHS_H
#define CDP_PLAN_PATHS_H

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace cdp {

/// Empty when `path`, an input, may be read: a regular file, or a path
/// that does not exist (its open then says so); else why not. A FIFO would
/// block the read forever, a device never end it.
std::string checkInputFile(const std::string &path);

/// Empty when `path`, the output of `flag`, may be written (not an input;
/// its folder exists and a file can be made there); else one line saying
/// why not. "-" (standard output) always may. An output written
/// whole and renamed into place (`replaced`) may not be a device or FIFO;
/// a stream written as it goes (--metrics) may.
std::string checkOutputPath(const std::string &flag, const std::string &path,
                            const std::vector<std::string> &inputs,
                            bool replaced = true);

/// The same for an output folder (`--dump-params DIR`): empty when it is a
/// folder, or can be made, and files can be made in it; else one line
/// saying why not (a regular file there, a missing parent, a read-only
/// file system).
/// A folder `replaced` whole (writeFolderAtomically) is written beside,
/// one written into (a checkpoint's) inside.
std::string checkOutputFolder(const std::string &flag, const std::string &path,
                              bool replaced);

/// Writes every byte to `fd` (again after a short write or EINTR); false
/// with errno set on failure.
bool writeAll(int fd, const std::string &bytes);
bool writeAll(int fd, const char *bytes, size_t size);

/// Reads `size` bytes at `offset` of `fd` whole (again after a short read
/// or EINTR); false on failure, with errno set (0: the file ended first).
bool preadAll(int fd, char *out, size_t size, uint64_t offset);

/// `path` through its symbolic links: the file they name, which may not
/// exist yet where the last link dangles (a shell redirection makes it).
std::string followLinks(const std::string &path);

/// Whether two paths name one file: the same file where both exist (hard
/// links included), else the same place once links and `..` are resolved
/// (two outputs that neither exists yet).
bool samePath(const std::string &a, const std::string &b);

/// The first two outputs, of (flag, path), that would write one file (a
/// device or FIFO such as /dev/stdout may take several): "FLAG1 and FLAG2
/// both write PATH; give each its own file", or "" when none do.
std::string checkDistinctOutputs(
    const std::vector<std::pair<std::string, std::string>> &outputs);

/// Replaces `path` with `bytes` all at once: written to a fresh temporary
/// file beside it, flushed to disk, then renamed over it, so a crash or a
/// full disk mid-write leaves the previous file (or none) whole, never a
/// half-written one. On failure returns false, removes the temporary file
/// and says why in `error`. A symbolic link is followed (the file it names
/// is replaced); a device or FIFO (/dev/null, a pipe) is written in place.
bool writeFileAtomically(const std::string &path, const std::string &bytes,
                         std::string &error);

/// Writes a file's bytes to `fd`; false with errno set on failure.
using FileWriter = std::function<bool(int fd)>;

/// The same, the bytes written by `write` as it goes (a file too large to
/// hold in memory twice).
bool writeFileAtomically(const std::string &path, const FileWriter &write,
                         std::string &error);

/// Replaces the folder `dir` with one holding exactly `files` (name,
/// bytes), all at once: the set is written into `.NAME.partial-PID` beside
/// it, then swapped in with one rename, and the previous set removed. A
/// killed run leaves the previous folder whole; its partial folder is
/// removed by the next write beside it. False with `error` on failure.
bool writeFolderAtomically(
    const std::string &dir,
    const std::vector<std::pair<std::string, std::string>> &files,
    std::string &error);
/// The same, each file written by its FileWriter (a set of large tensors is
/// then never in memory as bytes).
bool writeFolderAtomically(
    const std::string &dir,
    const std::vector<std::pair<std::string, FileWriter>> &files,
    std::string &error);

/// Empty when `dir` may be replaced by writeFolderAtomically: absent, or
/// holding only files whose names `ours` accepts; else one line naming
/// the first other file.
std::string
checkReplaceableFolder(const std::string &flag, const std::string &dir,
                       const std::function<bool(const std::string &)> &ours);

} // namespace cdp

#endif // CDP_PLAN_PATHS_H
