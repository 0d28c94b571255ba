//===- PlanWeights.cpp - the initial values beside a plan -----------------===//
//
// The file: a 64-byte header (magic "CDPWGHT\n", version 1, reserved, the
// stamp), then each distinct initial value at a 64-byte aligned offset.
// The stamp is the FNV-1a checksum of every (offset, size, checksum) in
// tensor order: the same model compiled the same way gives the same bytes.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/PlanWeights.h"

#include "cdp/Plan/Paths.h"
#include "cdp/Plan/PlanIO.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace cdp::plan {

namespace {

constexpr char kMagic[8] = {'C', 'D', 'P', 'W', 'G', 'H', 'T', '\n'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kAlign = 64, kHeaderBytes = 64;

uint64_t alignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string header(uint64_t stamp) {
  std::string bytes(kHeaderBytes, '\0');
  std::memcpy(bytes.data(), kMagic, sizeof(kMagic));
  std::memcpy(bytes.data() + 8, &kVersion, sizeof(kVersion));
  std::memcpy(bytes.data() + 16, &stamp, sizeof(stamp));
  return bytes;
}

/// Lays out the distinct values of `plan`'s tensors (equal bytes share an
/// offset) and records each tensor's `initial`; returns the first tensor
/// id of each distinct value, in file order.
std::vector<int> layOut(Plan &plan, uint64_t &end) {
  std::map<std::pair<uint64_t, uint64_t>, std::vector<int>> seen;
  std::vector<int> distinct;
  end = kHeaderBytes;
  for (Tensor &t : *plan.mutable_tensors()) {
    if (t.data().empty())
      continue;
    uint64_t sum = checksum(t.data().data(), t.data().size());
    std::vector<int> &same = seen[{t.data().size(), sum}];
    const Tensor *twin = nullptr;
    for (int id : same)
      if (plan.tensors(id).data() == t.data())
        twin = &plan.tensors(id);
    DataRef *ref = t.mutable_initial();
    if (twin) {
      *ref = twin->initial();
      continue;
    }
    same.push_back(t.id());
    distinct.push_back(t.id());
    ref->set_offset(end);
    ref->set_size(t.data().size());
    ref->set_checksum(sum);
    end = alignUp(end + t.data().size());
  }
  return distinct;
}

uint64_t stampOf(const Plan &plan) {
  std::vector<uint64_t> fields;
  for (const Tensor &t : plan.tensors())
    if (t.has_initial())
      fields.insert(fields.end(), {t.initial().offset(), t.initial().size(),
                                   t.initial().checksum()});
  return checksum(fields.data(), fields.size() * sizeof(uint64_t));
}

} // namespace

std::string weightsFileName(const std::string &planPath) {
  return std::filesystem::path(planPath).filename().string() + ".weights";
}

std::string weightsPathFor(const std::string &planPath) {
  std::string target = followLinks(planPath);
  return (std::filesystem::path(target).parent_path() / weightsFileName(target))
      .string();
}

std::string weightsPathOf(const Plan &plan, const std::string &planPath) {
  if (plan.weights_file().empty())
    return "";
  return (std::filesystem::path(followLinks(planPath)).parent_path() /
          plan.weights_file())
      .string();
}

bool writeWeights(Plan &plan, const std::string &planPath, std::string &error) {
  // Values already moved out are not in memory to copy: done, where they
  // went to this plan's weights file.
  auto moved = [](const Tensor &t) {
    return t.has_initial() && t.data().empty();
  };
  if (std::any_of(plan.tensors().begin(), plan.tensors().end(), moved)) {
    if (plan.weights_file() == weightsFileName(followLinks(planPath)))
      return true;
    error = "the plan's values are in " + plan.weights_file() +
            " already, not in memory to write beside " + planPath;
    return false;
  }
  uint64_t end = 0;
  std::vector<int> distinct = layOut(plan, end);
  if (distinct.empty())
    return true;
  uint64_t stamp = stampOf(plan);
  std::string path = weightsPathFor(planPath);
  std::string name = weightsFileName(followLinks(planPath));
  auto write = [&](int fd) {
    std::string padding(kAlign, '\0');
    if (!writeAll(fd, header(stamp)))
      return false;
    for (int id : distinct) {
      const std::string &data = plan.tensors(id).data();
      uint64_t gap = alignUp(data.size()) - data.size();
      if (!writeAll(fd, data) || !writeAll(fd, padding.data(), gap))
        return false;
    }
    return true;
  };
  if (!writeFileAtomically(path, write, error)) {
    error = path + ": " + error;
    return false;
  }
  for (Tensor &t : *plan.mutable_tensors())
    std::string().swap(*t.mutable_data()); // frees it (clear keeps it)
  plan.set_weights_file(name);
  plan.set_weights_bytes(end);
  plan.set_weights_stamp(stamp);
  return true;
}

std::unique_ptr<PlanWeights> PlanWeights::open(const std::string &planPath,
                                               const Plan &plan,
                                               std::string &error,
                                               const std::string &givenPath) {
  if (plan.weights_file().empty()) {
    if (!givenPath.empty()) {
      error = "--weights " + givenPath +
              ": the plan keeps its values inline and reads no weights file";
      return nullptr;
    }
    return std::unique_ptr<PlanWeights>(new PlanWeights(-1, ""));
  }
  std::string path =
      givenPath.empty() ? weightsPathOf(plan, planPath) : givenPath;
  std::string advice =
      givenPath.empty()
          ? "; it is written beside the plan by cdp-compile: copy the two "
            "together, give its path with --weights, or compile again"
          : "; --weights names the file cdp-compile wrote beside this plan "
            "(" +
                plan.weights_file() + ")";
  if (std::string problem = checkInputFile(path); !problem.empty()) {
    error = path + ": " + problem;
    return nullptr;
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = path + ": cannot open the plan's weights: " + std::strerror(errno) +
            advice;
    return nullptr;
  }
  std::unique_ptr<PlanWeights> weights(new PlanWeights(fd, path));
  struct stat info;
  std::string head(kHeaderBytes, '\0');
  if (::fstat(fd, &info) != 0 ||
      static_cast<uint64_t>(info.st_size) != plan.weights_bytes()) {
    error = path + ": has " + std::to_string(info.st_size) +
            " bytes, the plan's weights file has " +
            std::to_string(plan.weights_bytes()) + advice;
    return nullptr;
  }
  if (!preadAll(fd, head.data(), head.size(), 0) ||
      head != header(plan.weights_stamp())) {
    error = path +
            ": is not the weights file of this plan (its header or "
            "stamp differs)" +
            advice;
    return nullptr;
  }
  return weights;
}

PlanWeights::~PlanWeights() {
  if (fd >= 0)
    ::close(fd);
}

std::string PlanWeights::read(const Tensor &tensor, char *out) const {
  std::string name = "plan tensor '" + tensor.name() + "'";
  if (!tensor.has_initial())
    return readInline(tensor, out);
  const DataRef &ref = tensor.initial();
  if (fd < 0)
    return "the initial value of " + name +
           " is in a weights file, and the plan names none";
  if (!preadAll(fd, out, ref.size(), ref.offset()))
    return path + ": cannot read " + name + ": " +
           (errno ? std::strerror(errno) : "the file got shorter");
  readSoFar += ref.size();
  if (checksum(out, ref.size()) != ref.checksum())
    return path + ": the initial value of " + name +
           " is corrupt (checksum mismatch); compile again";
  return "";
}

std::string PlanWeights::readInline(const Tensor &tensor, char *out) {
  if (static_cast<int64_t>(tensor.data().size()) != tensor.bytes())
    return "plan tensor '" + tensor.name() + "' has no initial value";
  std::memcpy(out, tensor.data().data(), tensor.data().size());
  return "";
}

uint64_t PlanWeights::bytesRead() const { return readSoFar; }

bool hasInitialValue(const Tensor &tensor) {
  return tensor.has_initial() || !tensor.data().empty();
}

} // namespace cdp::plan
