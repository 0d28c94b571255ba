//===- Checkpoint.cpp - saving and resuming training state ----------------===//
//
// DIR/manifest.bin: "CDPCKPT5", then (host byte order, strings and blobs
// length-prefixed) the plan checksum, seed, data, the data files'
// fingerprints (count; per file its path, size, modification time and
// hash), next step, the step the schedule started at (0, or a portable
// checkpoint's resume: Executor::setStepOrigin), device and
// process counts, per process its shard's file name, size and FNV-1a
// checksum, and the checksum of everything before it.
//
// A shard, DIR/step-<next step>.process-<r>.<unique>.bin: "CDPSHRD3", the
// process, the next step, its records (name, bytes) and the fabric's state
// in flight, closed by a checksum. Records are named "device <d> tensor
// <id>", "device <d> kernel <i> <location> <state>" and "device <d> arena".
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Checkpoint.h"

#include "cdp/Plan/Paths.h"
#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Bytes.h"
#include "cdp/Runtime/Data.h"

#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>

namespace cdp::runtime {

namespace {

constexpr char kManifestMagic[8] = {'C', 'D', 'P', 'C', 'K', 'P', 'T', '5'};
constexpr char kShardMagic[8] = {'C', 'D', 'P', 'S', 'H', 'R', 'D', '3'};

/// Whether the arena holds live activations at the checkpoint before step
/// `nextStep`: where micro-batches cross the step boundary (2bw, cdp-mp:
/// the drain finishes the last ones) or a device stops inside a step
/// (checkpointCut). Elsewhere the arena is dead there and not saved.
bool arenaLive(const plan::Plan &plan, int64_t nextStep) {
  for (const plan::Device &device : plan.devices())
    for (const plan::Instruction &instruction : device.instructions())
      if (instruction.drain())
        return true;
  std::string error;
  std::vector<int> cut = plan::checkpointCut(plan, nextStep, error);
  for (size_t d = 0; d < cut.size(); ++d)
    if (cut[d] < plan.devices(d).instructions_size())
      return true;
  return false;
}

/// Every piece of one device's mutable state, by a stable name (the arena
/// with `withArena`).
std::map<std::string, TensorView> piecesOf(Executor &executor, bool withArena) {
  std::map<std::string, TensorView> pieces;
  std::string device = "device " + std::to_string(executor.device()) + " ";
  const plan::Plan &plan = executor.plan();
  for (const plan::Tensor &t : plan.tensors())
    if (t.kind() == plan::PARAM || t.kind() == plan::BUFFER ||
        t.kind() == plan::REDUCED || t.kind() == plan::SHARD ||
        t.kind() == plan::SPARSE_STATE)
      if (executor.view(t.id()).data) // another pipeline stage's: not held
        pieces[device + "tensor " + std::to_string(t.id())] =
            executor.view(t.id());
  int index = 0;
  for (auto &[instruction, kernel] : executor.statefulKernels()) {
    KernelState s = kernel->state();
    std::string prefix = device + "kernel " + std::to_string(index++) + " " +
                         instruction->location() + " ";
    for (auto &[name, view] : s.tensors)
      pieces[prefix + name] = view;
    if (s.counter)
      pieces[prefix + "steps"] = TensorView{s.counter, {1}, plan::I64};
    if (s.scheduleCounter)
      pieces[prefix + "scheduled"] =
          TensorView{s.scheduleCounter, {1}, plan::I64};
  }
  if (withArena)
    pieces[device + "arena"] = executor.arenaView();
  return pieces;
}

/// The pieces of every device of this process at the checkpoint before
/// step `nextStep`.
std::map<std::string, TensorView> piecesOf(const CheckpointScope &scope,
                                           int64_t nextStep) {
  bool withArena = arenaLive(scope.devices[0]->plan(), nextStep);
  std::map<std::string, TensorView> pieces;
  for (Executor *executor : scope.devices)
    pieces.merge(piecesOf(*executor, withArena));
  return pieces;
}

int64_t bytesOf(const TensorView &view) {
  return view.numel() * plan::dtypeSize(view.dtype);
}

/// The bytes with their checksum appended, and the check of it.
std::string sealed(std::string bytes) {
  uint64_t sum = plan::checksum(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char *>(&sum), sizeof(sum));
  return bytes;
}
bool sealIntact(const std::string &bytes) {
  if (bytes.size() < sizeof(uint64_t))
    return false;
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  return plan::checksum(bytes.data(), bytes.size() - 8) == stored;
}

int processRank(const CheckpointScope &scope) {
  return scope.fabric ? scope.fabric->processRank() : 0;
}
int processCount(const CheckpointScope &scope) {
  return scope.fabric ? scope.fabric->processCount() : 1;
}

std::string buildShard(const CheckpointScope &scope, int64_t nextStep) {
  ByteWriter out;
  out.bytes().assign(kShardMagic, sizeof(kShardMagic));
  out.put<int32_t>(processRank(scope));
  out.put<int64_t>(nextStep);
  std::map<std::string, TensorView> pieces = piecesOf(scope, nextStep);
  out.put<uint64_t>(pieces.size());
  std::string host;
  for (auto &[name, view] : pieces) {
    out.putString(name);
    host.resize(bytesOf(view));
    scope.devices[0]->download(view, host.data());
    out.putString(host);
  }
  out.putString(scope.fabric ? scope.fabric->saveInFlight() : "");
  return sealed(std::move(out.bytes()));
}

/// A file name no other process or run uses.
std::string shardName(int process, int64_t nextStep) {
  auto now = std::chrono::steady_clock::now().time_since_epoch();
  return "step-" + std::to_string(nextStep) + ".process-" +
         std::to_string(process) + "." + std::to_string(getpid()) + "-" +
         std::to_string(
             std::chrono::duration_cast<std::chrono::nanoseconds>(now)
                 .count()) +
         ".bin";
}

/// Removes this process's shards other than `keep` (older checkpoints'),
/// once the manifest no longer names them.
void removeOtherShards(const std::string &dir, int process,
                       const std::string &keep) {
  DIR *folder = opendir(dir.c_str());
  if (!folder)
    return;
  std::string mine = ".process-" + std::to_string(process) + ".";
  while (dirent *entry = readdir(folder)) {
    std::string name = entry->d_name;
    if (name != keep && name.rfind("step-", 0) == 0 &&
        name.find(mine) != std::string::npos && name.size() > 4 &&
        name.compare(name.size() - 4, 4, ".bin") == 0)
      unlink((dir + "/" + name).c_str());
  }
  closedir(folder);
}

void writeOrThrow(const std::string &path, const std::string &bytes) {
  std::string error;
  if (!writeFileAtomically(path, bytes, error))
    throw RuntimeError(path + ": " + error);
}

std::string buildManifest(const CheckpointScope &scope,
                          const RunIdentity &identity, int64_t nextStep,
                          const std::vector<std::string> &entries) {
  ByteWriter out;
  out.bytes().assign(kManifestMagic, sizeof(kManifestMagic));
  out.put<uint64_t>(identity.planChecksum);
  out.put<uint64_t>(identity.seed);
  out.putString(identity.data);
  out.put<uint64_t>(identity.files.size());
  for (const FileFingerprint &file : identity.files) {
    out.putString(file.path);
    out.put<uint64_t>(file.size);
    out.put<int64_t>(file.modified);
    out.put<uint64_t>(file.hash);
  }
  out.put<int64_t>(nextStep);
  out.put<int64_t>(scope.devices[0]->stepOrigin());
  out.put<int32_t>(scope.devices[0]->plan().devices_size());
  out.put<int32_t>(processCount(scope));
  for (const std::string &entry : entries)
    out.bytes() += entry;
  return sealed(std::move(out.bytes()));
}

/// What the manifest says of the run and of one process's shard.
struct Manifest {
  RunIdentity taken; ///< the plan, seed and data it was taken with
  int64_t nextStep, stepOrigin;
  int32_t devices, processes;
  struct Shard {
    std::string file;
    uint64_t bytes, checksum;
  };
  std::vector<Shard> shards;
};

Manifest readManifest(const std::string &dir) {
  std::string path = dir + "/manifest.bin";
  struct stat info;
  if (stat(path.c_str(), &info) != 0 &&
      stat((dir + "/checkpoint.bin").c_str(), &info) == 0)
    throw RuntimeError(dir + ": a checkpoint of an earlier cdp "
                             "(checkpoint.bin); resume with the cdp that "
                             "wrote it");
  std::string bytes = readFileBytes(path);
  if (bytes.size() < sizeof(kManifestMagic) ||
      std::memcmp(bytes.data(), kManifestMagic, sizeof(kManifestMagic) - 1))
    throw RuntimeError(path + ": not a cdp checkpoint");
  if (bytes[sizeof(kManifestMagic) - 1] != kManifestMagic[7])
    throw RuntimeError(path + ": a checkpoint of another cdp version; "
                              "resume with the cdp that wrote it");
  if (!sealIntact(bytes))
    throw RuntimeError(path + ": corrupt checkpoint (checksum mismatch)");
  bytes.resize(bytes.size() - 8);
  ByteReader in(bytes, path, sizeof(kManifestMagic));
  Manifest m;
  m.taken.planChecksum = in.get<uint64_t>();
  m.taken.seed = in.get<uint64_t>();
  m.taken.data = in.getString();
  for (uint64_t n = in.get<uint64_t>(); n > 0; --n) {
    FileFingerprint file;
    file.path = in.getString();
    file.size = in.get<uint64_t>();
    file.modified = in.get<int64_t>();
    file.hash = in.get<uint64_t>();
    m.taken.files.push_back(file);
  }
  m.nextStep = in.get<int64_t>();
  m.stepOrigin = in.get<int64_t>();
  m.devices = in.get<int32_t>();
  m.processes = in.get<int32_t>();
  if (m.processes < 1 || m.processes > m.devices)
    in.fail();
  if (m.nextStep < 0)
    throw RuntimeError(path + ": the checkpoint is before step " +
                       std::to_string(m.nextStep) + ", which no run reaches");
  if (m.stepOrigin < 0 || m.stepOrigin > m.nextStep)
    throw RuntimeError(path + ": the checkpoint's schedule starts at step " +
                       std::to_string(m.stepOrigin) + ", outside steps 0 to " +
                       std::to_string(m.nextStep));
  for (int r = 0; r < m.processes; ++r) {
    Manifest::Shard shard;
    shard.file = in.getString();
    shard.bytes = in.get<uint64_t>();
    shard.checksum = in.get<uint64_t>();
    // Only a file beside the manifest: a checkpoint cannot make a resume
    // read elsewhere.
    if (shard.file.empty() || shard.file.find('/') != std::string::npos ||
        shard.file[0] == '.')
      in.fail();
    m.shards.push_back(shard);
  }
  if (!in.atEnd())
    in.fail();
  return m;
}

/// The one-line refusals of a checkpoint another run wrote.
void checkSameRun(const std::string &path, const Manifest &m,
                  const CheckpointScope &scope, const RunIdentity &identity) {
  int devices = scope.devices[0]->plan().devices_size();
  if (m.devices != devices)
    throw RuntimeError(path + ": the checkpoint holds " +
                       std::to_string(m.devices) + " devices, this plan runs " +
                       "on " + std::to_string(devices) +
                       "; resume with the plan that wrote it");
  if (m.taken.planChecksum != identity.planChecksum)
    throw RuntimeError(path + ": the checkpoint was taken from another plan; "
                              "resume with the plan that wrote it");
  checkSameData(path, m.taken, identity);
  if (m.processes != processCount(scope))
    throw RuntimeError(path + ": the checkpoint was written by " +
                       std::to_string(m.processes) + " process" +
                       (m.processes == 1 ? "" : "es") + ", this run has " +
                       std::to_string(processCount(scope)) +
                       "; resume with as many (mpirun -np " +
                       std::to_string(m.processes) + ", or without mpirun " +
                       "for 1)");
}

/// Checks a shard's size and checksum against the manifest; returns its
/// records' bytes (without the seal).
std::string readShard(const std::string &dir, const Manifest::Shard &shard) {
  std::string path = dir + "/" + shard.file;
  std::string bytes = readFileBytes(path);
  if (bytes.size() != shard.bytes)
    throw RuntimeError(path + ": truncated checkpoint shard (" +
                       std::to_string(bytes.size()) + " of " +
                       std::to_string(shard.bytes) + " bytes)");
  if (plan::checksum(bytes.data(), bytes.size()) != shard.checksum ||
      !sealIntact(bytes) ||
      std::memcmp(bytes.data(), kShardMagic, sizeof(kShardMagic)) != 0)
    throw RuntimeError(path + ": corrupt checkpoint shard (checksum "
                              "mismatch)");
  bytes.resize(bytes.size() - 8);
  return bytes;
}

void restoreShard(const std::string &path, const std::string &bytes,
                  const CheckpointScope &scope, int64_t nextStep) {
  ByteReader in(bytes, path, sizeof(kShardMagic));
  if (in.get<int32_t>() != processRank(scope) || in.get<int64_t>() != nextStep)
    throw RuntimeError(path + ": a shard of another process or step");
  std::map<std::string, TensorView> pieces = piecesOf(scope, nextStep);
  uint64_t count = in.get<uint64_t>();
  if (count != pieces.size())
    throw RuntimeError(path + ": the shard holds " + std::to_string(count) +
                       " pieces of state, this process's devices have " +
                       std::to_string(pieces.size()));
  for (uint64_t i = 0; i < count; ++i) {
    std::string name = in.getString(), data = in.getString();
    auto it = pieces.find(name);
    if (it == pieces.end() ||
        static_cast<int64_t>(data.size()) != bytesOf(it->second))
      throw RuntimeError(path + ": checkpoint entry '" + name +
                         "' does not fit the plan");
    scope.devices[0]->upload(it->second, data.data());
  }
  std::string inFlight = in.getString();
  if (scope.fabric)
    scope.fabric->restoreInFlight(inFlight);
  else if (!inFlight.empty())
    in.fail();
  if (!in.atEnd())
    in.fail();
}

} // namespace

void checkSameData(const std::string &path, const RunIdentity &taken,
                   const RunIdentity &identity) {
  if (taken.seed != identity.seed)
    throw RuntimeError(path + ": the checkpoint was taken with --seed " +
                       std::to_string(taken.seed) + ", not " +
                       std::to_string(identity.seed) +
                       "; resume with the same seed");
  if (taken.data != identity.data)
    throw RuntimeError(path + ": the checkpoint was taken training on " +
                       taken.data + "; resume on the same data");
  for (size_t i = 0; i < taken.files.size() && i < identity.files.size(); ++i)
    if (!(taken.files[i] == identity.files[i]))
      throw RuntimeError(path + ": " + identity.files[i].path +
                         " changed since the checkpoint (its size, "
                         "modification time or contents); resume on the "
                         "data it was taken on");
}

/// A folder of shards (--feed NAME=DIR): its .npy files' fingerprints,
/// in name order, combined.
static FileFingerprint fingerprintFolder(const std::string &dir) {
  FileFingerprint folder;
  folder.path = dir;
  std::vector<uint64_t> parts;
  for (const std::string &name : shardFiles(dir)) {
    FileFingerprint shard = fingerprintFile(name);
    folder.size += shard.size;
    folder.modified = std::max(folder.modified, shard.modified);
    parts.insert(parts.end(), {plan::checksum(name.data(), name.size()),
                               shard.size, shard.hash});
  }
  folder.hash = plan::checksum(parts.data(), parts.size() * sizeof(uint64_t));
  return folder;
}

FileFingerprint fingerprintFile(const std::string &path) {
  if (std::filesystem::is_directory(path))
    return fingerprintFolder(path);
  constexpr uint64_t kEnds = uint64_t(1) << 20;
  FileFingerprint file;
  file.path = path;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat info;
  if (fd < 0 || fstat(fd, &info) != 0) {
    std::string why = std::strerror(errno);
    if (fd >= 0)
      close(fd);
    throw RuntimeError(path + ": cannot read: " + why);
  }
  file.size = info.st_size;
  file.modified =
      int64_t(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
  // The first MiB and the last (overlapping in a small file).
  std::string ends(std::min(file.size, kEnds) * 2, '\0');
  size_t half = ends.size() / 2;
  bool read = preadAll(fd, ends.data(), half, 0) &&
              preadAll(fd, ends.data() + half, half, file.size - half);
  close(fd);
  if (!read)
    throw RuntimeError(path + ": cannot read: " + std::strerror(errno));
  file.hash = plan::checksum(ends.data(), ends.size());
  return file;
}

void lockCheckpointFolder(const std::string &dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw RuntimeError("--checkpoint " + dir +
                       ": cannot create: " + std::strerror(errno));
  std::string path = dir + "/.lock";
  // Held until the process ends: the descriptor is never closed.
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw RuntimeError("--checkpoint " + dir +
                       ": cannot write: " + std::strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    bool held = errno == EWOULDBLOCK;
    std::string why = std::strerror(errno);
    close(fd);
    throw RuntimeError("--checkpoint " + dir +
                       (held ? " is in use by another run (it holds " + path +
                                   "); give each run its own folder"
                             : ": cannot lock " + path + ": " + why));
  }
}

void saveCheckpoint(const std::string &dir, const CheckpointScope &scope,
                    const RunIdentity &identity, int64_t nextStep) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw RuntimeError(dir + ": cannot create: " + std::strerror(errno));
  int process = processRank(scope);
  std::string shard = buildShard(scope, nextStep);
  std::string name = shardName(process, nextStep);
  writeOrThrow(dir + "/" + name, shard);
  ByteWriter entry;
  entry.putString(name);
  entry.put<uint64_t>(shard.size());
  entry.put<uint64_t>(plan::checksum(shard.data(), shard.size()));
  std::vector<std::string> entries =
      scope.fabric ? scope.fabric->gatherOntoRoot(entry.bytes())
                   : std::vector<std::string>{entry.bytes()};
  // The manifest goes last and at once: until it is renamed into place,
  // the previous one names the previous shards, which are still there.
  if (process == 0)
    writeOrThrow(dir + "/manifest.bin",
                 buildManifest(scope, identity, nextStep, entries));
  if (scope.fabric)
    scope.fabric->barrier();
  removeOtherShards(dir, process, name);
}

ResumePoint loadCheckpoint(const std::string &dir, const CheckpointScope &scope,
                           const RunIdentity &identity) {
  std::string path = dir + "/manifest.bin";
  Manifest manifest = readManifest(dir);
  checkSameRun(path, manifest, scope, identity);
  const Manifest::Shard &mine = manifest.shards[processRank(scope)];
  restoreShard(dir + "/" + mine.file, readShard(dir, mine), scope,
               manifest.nextStep);
  return {manifest.nextStep, manifest.stepOrigin};
}

} // namespace cdp::runtime
