//===- Paths.cpp - output paths checked before any work -------------------===//

#include "cdp/Plan/Paths.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <signal.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace cdp {

std::string checkInputFile(const std::string &path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status) || fs::is_regular_file(status))
    return "";
  return "not a regular file (a FIFO, device or folder)";
}

bool writeAll(int fd, const std::string &bytes) {
  return writeAll(fd, bytes.data(), bytes.size());
}

bool preadAll(int fd, char *out, size_t size, uint64_t offset) {
  while (size > 0) {
    ssize_t got = pread(fd, out, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      if (got == 0)
        errno = 0;
      return false;
    }
    out += got;
    size -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

bool writeAll(int fd, const char *bytes, size_t size) {
  for (size_t done = 0; done < size;) {
    ssize_t wrote = write(fd, bytes + done, size - done);
    if (wrote < 0 && errno == EINTR)
      continue;
    if (wrote <= 0)
      return false;
    done += static_cast<size_t>(wrote);
  }
  return true;
}

namespace {

/// `path` as a folder names it: normalized, without a trailing slash.
std::filesystem::path folderPath(const std::string &path) {
  std::filesystem::path normal = std::filesystem::path(path).lexically_normal();
  return normal.has_filename() ? normal : normal.parent_path();
}

/// Empty when a new file can be made in `folder` (a temporary one is made
/// and removed: a read-only file system, a full quota or a folder the user
/// may not write to are found before any work); else why not.
std::string probeWritable(const std::string &flag, const std::string &path,
                          const std::string &folder) {
  std::string probe = (folder.empty() ? "." : folder) + "/.cdp-probe-XXXXXX";
  std::vector<char> name(probe.begin(), probe.end());
  name.push_back('\0');
  int fd = mkstemp(name.data());
  if (fd < 0)
    return flag + " " + path + ": cannot write in " +
           (folder.empty() ? "." : folder) + ": " + std::strerror(errno);
  close(fd);
  unlink(name.data());
  return "";
}

} // namespace

std::string checkOutputFolder(const std::string &flag, const std::string &path,
                              bool replaced) {
  namespace fs = std::filesystem;
  if (path.empty())
    return "";
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (!ec && fs::exists(status) && !fs::is_directory(status))
    return flag + " " + path + " is a file; give a folder path";
  if (fs::is_directory(status) && !replaced)
    return probeWritable(flag, path, path);
  std::string parent = folderPath(path).parent_path().string();
  if (!parent.empty() && !fs::is_directory(parent, ec))
    return flag + " " + path + ": the folder " + parent + " does not exist";
  return probeWritable(flag, path, parent);
}

std::string checkOutputPath(const std::string &flag, const std::string &path,
                            const std::vector<std::string> &inputs,
                            bool replaced) {
  namespace fs = std::filesystem;
  if (path.empty() || path == "-")
    return "";
  std::error_code ec;
  fs::path target(path);
  for (const std::string &input : inputs)
    if (!input.empty() && fs::equivalent(target, fs::path(input), ec))
      return flag + " " + path + " is an input of this run; give another path";
  if (fs::is_directory(target, ec))
    return flag + " " + path + " is a folder; give a file path";
  fs::file_status status = fs::status(target, ec);
  if (replaced && !ec && fs::exists(status) && !fs::is_regular_file(status))
    return flag + " " + path +
           " is a device or FIFO, which an output would replace; give a file "
           "path";
  fs::path folder = target.parent_path();
  if (!folder.empty() && !fs::is_directory(folder, ec))
    return flag + " " + path + ": the folder " + folder.string() +
           " does not exist";
  if (!ec && fs::exists(status) && !fs::is_regular_file(status))
    return ""; // a device or stream, written in place
  return probeWritable(flag, path, folder.string());
}

namespace {

/// A device or FIFO (-o /dev/null, /dev/stdout, a pipe) is written in
/// place: replacing it by a file would destroy it.
bool writeInPlace(const std::string &path, const FileWriter &write,
                  std::string &error) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || !write(fd)) {
    error = std::string(fd < 0 ? "cannot write: " : "write failed: ") +
            std::strerror(errno);
    if (fd >= 0)
      close(fd);
    return false;
  }
  if (close(fd) != 0) {
    error = std::string("write failed: ") + std::strerror(errno);
    return false;
  }
  return true;
}

/// Makes a rename in `folder` reach the disk (best effort).
void syncFolder(const std::string &folder) {
  int fd = open(folder.empty() ? "." : folder.c_str(),
                O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

} // namespace

std::string followLinks(const std::string &given) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path link = given;
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(link, ec));
       ++hops) {
    fs::path target = fs::read_symlink(link, ec);
    if (ec)
      break;
    link = target.is_absolute() ? target : link.parent_path() / target;
  }
  return link.string();
}

bool samePath(const std::string &a, const std::string &b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (a.empty() || b.empty() || a == "-" || b == "-")
    return false;
  if (fs::exists(a, ec) && fs::exists(b, ec))
    return fs::equivalent(a, b, ec);
  auto resolved = [](const std::string &path) {
    std::error_code ignored;
    return fs::weakly_canonical(fs::absolute(followLinks(path)), ignored);
  };
  return resolved(a) == resolved(b);
}

std::string checkDistinctOutputs(
    const std::vector<std::pair<std::string, std::string>> &outputs) {
  namespace fs = std::filesystem;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto &[flag, path] = outputs[i];
    std::error_code ec;
    fs::file_status status = fs::status(path, ec);
    if (!ec && fs::exists(status) && !fs::is_regular_file(status))
      continue; // written in place, as a stream
    for (size_t j = i + 1; j < outputs.size(); ++j)
      if (samePath(path, outputs[j].second))
        return flag + " and " + outputs[j].first + " both write " + path +
               "; give each its own file";
  }
  return "";
}

bool writeFileAtomically(const std::string &path, const std::string &bytes,
                         std::string &error) {
  return writeFileAtomically(
      path, [&](int fd) { return writeAll(fd, bytes); }, error);
}

bool writeFileAtomically(const std::string &given, const FileWriter &write,
                         std::string &error) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // The file a symbolic link names is replaced, not the link.
  std::string path = followLinks(given);
  fs::file_status status = fs::status(path, ec);
  if (!ec && fs::exists(status) && !fs::is_regular_file(status) &&
      !fs::is_directory(status))
    return writeInPlace(path, write, error);
  std::string pattern = path + ".tmp-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  int fd = mkstemp(name.data());
  if (fd < 0) {
    error = std::string("cannot write: ") + std::strerror(errno);
    return false;
  }
  std::string temporary(name.data());
  auto fail = [&](const char *what) {
    error = std::string(what) + std::strerror(errno);
    close(fd);
    std::remove(temporary.c_str());
    return false;
  };
  if (!write(fd))
    return fail("write failed: ");
  // mkstemp makes the file private; give it the permissions a plain open
  // would (the umask read once: reading it means setting it).
  static const mode_t mask = [] {
    mode_t current = umask(0);
    umask(current);
    return current;
  }();
  if (fchmod(fd, 0666 & ~mask) != 0 || fsync(fd) != 0)
    return fail("write failed: ");
  if (close(fd) != 0) {
    error = std::string("write failed: ") + std::strerror(errno);
    std::remove(temporary.c_str());
    return false;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    error = std::string("cannot write: ") + std::strerror(errno);
    std::remove(temporary.c_str());
    return false;
  }
  syncFolder(std::filesystem::path(path).parent_path().string());
  return true;
}

namespace {

/// The folder and the name of `dir` (a trailing slash ignored), through a
/// symbolic link to the folder it names.
std::pair<std::string, std::string> splitFolder(const std::string &dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path path = folderPath(dir);
  if (fs::is_symlink(fs::symlink_status(path, ec)))
    path = fs::canonical(path, ec);
  std::string parent = path.parent_path().string();
  return {parent.empty() ? "." : parent, path.filename().string()};
}

/// Removes the partial folders beside `parent/name` that processes which
/// no longer run left (killed mid-write).
void removeDeadPartials(const std::string &parent, const std::string &name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string prefix = "." + name + ".partial-";
  for (const auto &entry : fs::directory_iterator(parent, ec)) {
    std::string file = entry.path().filename().string();
    if (file.rfind(prefix, 0) != 0)
      continue;
    long pid = std::strtol(file.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      fs::remove_all(entry.path(), ec);
  }
}

/// Puts the folder `staged` where `target` is, at once where the file
/// system can swap two names (the old set then lies at `staged`).
bool swapIn(const std::string &staged, const std::string &target,
            std::string &error) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(target, ec)) {
    if (std::rename(staged.c_str(), target.c_str()) == 0)
      return true;
  } else if (renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, target.c_str(),
                       RENAME_EXCHANGE) == 0) {
    return true;
  } else if (errno == EINVAL || errno == ENOSYS) {
    // No exchange here (some network file systems): the old set is moved
    // aside first, then the new one in.
    std::string aside = staged + ".old";
    if (std::rename(target.c_str(), aside.c_str()) == 0 &&
        std::rename(staged.c_str(), target.c_str()) == 0 &&
        std::rename(aside.c_str(), staged.c_str()) == 0)
      return true;
  }
  error = std::string("cannot write: ") + std::strerror(errno);
  return false;
}

} // namespace

bool writeFolderAtomically(
    const std::string &dir,
    const std::vector<std::pair<std::string, std::string>> &files,
    std::string &error) {
  std::vector<std::pair<std::string, FileWriter>> writers;
  for (const auto &[file, bytes] : files)
    writers.emplace_back(
        file, [&bytes = bytes](int fd) { return writeAll(fd, bytes); });
  return writeFolderAtomically(dir, writers, error);
}

bool writeFolderAtomically(
    const std::string &dir,
    const std::vector<std::pair<std::string, FileWriter>> &files,
    std::string &error) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto [parent, name] = splitFolder(dir);
  std::string target = parent + "/" + name;
  if (fs::exists(target, ec) && !fs::is_directory(target, ec)) {
    error = "is a file; give a folder path";
    return false;
  }
  removeDeadPartials(parent, name);
  std::string staged =
      parent + "/." + name + ".partial-" + std::to_string(getpid());
  fs::remove_all(staged, ec);
  if (!fs::create_directory(staged, ec)) {
    error = "cannot write: " + ec.message();
    return false;
  }
  for (const auto &[file, write] : files)
    if (!writeFileAtomically(staged + "/" + file, write, error)) {
      fs::remove_all(staged, ec);
      return false;
    }
  syncFolder(staged);
  bool swapped = swapIn(staged, target, error);
  fs::remove_all(staged, ec); // the previous set, or the failed new one
  syncFolder(parent);
  return swapped;
}

std::string
checkReplaceableFolder(const std::string &flag, const std::string &dir,
                       const std::function<bool(const std::string &)> &ours) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec))
    return "";
  for (const auto &entry : fs::directory_iterator(dir, ec)) {
    std::string file = entry.path().filename().string();
    if (!entry.is_regular_file(ec) || !ours(file))
      return flag + " " + dir + " holds " + file +
             ", which a dump does not write; give a new folder or one a "
             "dump wrote";
  }
  return "";
}

} // namespace cdp
