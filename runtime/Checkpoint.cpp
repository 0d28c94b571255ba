//===- Checkpoint.cpp - saving and resuming training state ----------------===//
//
// Format: "CDPCKPT1", then little-endian: plan checksum (u64), next step
// (i64), record count (u64), records (name length u32, name, byte length
// u64, bytes), and the FNV-1a checksum (u64) of everything before it.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Checkpoint.h"

#include "cdp/Plan/Paths.h"

#include "cdp/Plan/PlanIO.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/stat.h>

namespace cdp::runtime {

namespace {

constexpr char kMagic[8] = {'C', 'D', 'P', 'C', 'K', 'P', 'T', '2'};

template <typename T> void put(std::string &out, T value) {
  out.append(reinterpret_cast<const char *>(&value), sizeof(T));
}

/// Every piece of mutable state, by a stable name.
std::map<std::string, std::pair<void *, size_t>> stateOf(Executor &executor) {
  std::map<std::string, std::pair<void *, size_t>> state;
  const plan::Plan &plan = executor.plan();
  for (const plan::Tensor &t : plan.tensors())
    if (t.kind() == plan::PARAM || t.kind() == plan::BUFFER)
      state["tensor:" + std::to_string(t.id())] = {
          executor.view(t.id()).data, static_cast<size_t>(t.bytes())};
  int index = 0;
  for (auto &[instruction, kernel] : executor.statefulKernels()) {
    KernelState s = kernel->state();
    std::string prefix = "kernel:" + std::to_string(index++) + ":" +
                         instruction->location() + ":";
    for (auto &[name, view] : s.tensors)
      state[prefix + name] = {view.data, static_cast<size_t>(view.numel()) *
                                             plan::dtypeSize(view.dtype)};
    if (s.counter)
      state[prefix + "steps"] = {s.counter, sizeof(int64_t)};
  }
  return state;
}

} // namespace

void saveCheckpoint(const std::string &dir, Executor &executor,
                    const RunIdentity &identity, int64_t nextStep) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw RuntimeError(dir + ": cannot create: " + std::strerror(errno));
  std::string out(kMagic, sizeof(kMagic));
  put<uint64_t>(out, identity.planChecksum);
  put<uint64_t>(out, identity.seed);
  put<uint32_t>(out, identity.data.size());
  out += identity.data;
  put<int64_t>(out, nextStep);
  auto state = stateOf(executor);
  put<uint64_t>(out, state.size());
  for (auto &[name, storage] : state) {
    put<uint32_t>(out, name.size());
    out += name;
    put<uint64_t>(out, storage.second);
    out.append(static_cast<const char *>(storage.first), storage.second);
  }
  put<uint64_t>(out, plan::checksum(out.data(), out.size()));
  // All at once: a crash mid-write leaves the previous checkpoint whole.
  std::string path = dir + "/checkpoint.bin", error;
  if (!writeFileAtomically(path, out, error))
    throw RuntimeError(path + ": " + error);
}

int64_t loadCheckpoint(const std::string &dir, Executor &executor,
                       const RunIdentity &identity) {
  std::string path = dir + "/checkpoint.bin";
  std::ifstream file(path, std::ios::binary);
  if (!file)
    throw RuntimeError(path + ": cannot open: " + std::strerror(errno));
  std::stringstream buffer;
  buffer << file.rdbuf();
  std::string data = buffer.str();
  size_t at = 0;
  auto need = [&](size_t bytes) {
    if (data.size() < at + bytes + sizeof(uint64_t))
      throw RuntimeError(path + ": truncated checkpoint");
  };
  auto get = [&](auto &value) {
    need(sizeof(value));
    std::memcpy(&value, data.data() + at, sizeof(value));
    at += sizeof(value);
  };
  if (data.size() < sizeof(kMagic) + 8 ||
      std::memcmp(data.data(), kMagic, sizeof(kMagic) - 1) != 0)
    throw RuntimeError(path + ": not a cdp checkpoint");
  if (data[sizeof(kMagic) - 1] != kMagic[sizeof(kMagic) - 1])
    throw RuntimeError(path + ": a checkpoint of another cdp version (format " +
                       std::string(1, data[sizeof(kMagic) - 1]) +
                       "); resume with the cdp that wrote it");
  uint64_t stored;
  std::memcpy(&stored, data.data() + data.size() - 8, 8);
  if (plan::checksum(data.data(), data.size() - 8) != stored)
    throw RuntimeError(path + ": corrupt checkpoint (checksum mismatch)");
  at = sizeof(kMagic);
  uint64_t planSum, seed, count;
  uint32_t dataLength;
  int64_t nextStep;
  get(planSum);
  get(seed);
  get(dataLength);
  need(dataLength);
  std::string trainedOn = data.substr(at, dataLength);
  at += dataLength;
  get(nextStep);
  get(count);
  if (planSum != identity.planChecksum)
    throw RuntimeError(path + ": the checkpoint was taken from another plan; "
                              "resume with the plan that wrote it");
  if (seed != identity.seed)
    throw RuntimeError(path + ": the checkpoint was taken with --seed " +
                       std::to_string(seed) + ", not " +
                       std::to_string(identity.seed) +
                       "; resume with the same seed");
  if (trainedOn != identity.data)
    throw RuntimeError(path + ": the checkpoint was taken training on " +
                       trainedOn + "; resume on the same data");
  auto state = stateOf(executor);
  if (count != state.size())
    throw RuntimeError(path + ": checkpoint holds " + std::to_string(count) +
                       " pieces of state, the plan has " +
                       std::to_string(state.size()));
  for (uint64_t i = 0; i < count; ++i) {
    uint32_t length;
    get(length);
    need(length);
    std::string name = data.substr(at, length);
    at += length;
    uint64_t bytes;
    get(bytes);
    need(bytes);
    auto it = state.find(name);
    if (it == state.end() || it->second.second != bytes)
      throw RuntimeError(path + ": checkpoint entry '" + name +
                         "' does not fit the plan");
    std::memcpy(it->second.first, data.data() + at, bytes);
    at += bytes;
  }
  return nextStep;
}

} // namespace cdp::runtime
