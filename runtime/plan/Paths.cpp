//===- Paths.cpp - output paths checked before any work -------------------===//

#include "cdp/Plan/Paths.h"

#include <filesystem>
#include <system_error>

namespace cdp {

std::string checkInputFile(const std::string &path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status) || fs::is_regular_file(status))
    return "";
  return "not a regular file (a FIFO, device or folder)";
}

std::string checkOutputPath(const std::string &flag, const std::string &path,
                            const std::vector<std::string> &inputs) {
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
  fs::path folder = target.parent_path();
  if (!folder.empty() && !fs::is_directory(folder, ec))
    return flag + " " + path + ": the folder " + folder.string() +
           " does not exist";
  return "";
}

} // namespace cdp
