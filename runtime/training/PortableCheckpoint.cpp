//===- PortableCheckpoint.cpp - training state by name, for any layout ----===//
//
// A portable checkpoint (--portable-checkpoint DIR) holds the trained state
// as PyTorch's state_dict()s do: each parameter and buffer, and each
// parameter's optimizer state, whole and by name, as .npy files, with
// DIR/checkpoint.json naming them (docs/design/runtime.md, "Portable
// checkpoints"). It is written by the root after the run's last step and
// the flush, when nothing is in flight: every update applied, every tensor
// read where it lies (fetchTrained, readStatePiece). --resume DIR puts the
// values wherever the new plan keeps them -- whole, in ZeRO shards, on a
// pipeline stage -- and starts that plan's schedule afresh at the step
// that has consumed the same samples (Executor::setStepOrigin).
//
//===----------------------------------------------------------------------===//

#include "Run.h"

#include "cdp/Plan/Paths.h"
#include "cdp/Plan/ShardGroups.h"
#include "cdp/Runtime/Json.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

namespace cdp::runtime::training {

namespace {

constexpr const char *kFormat = "cdp portable checkpoint";
constexpr int kVersion = 1;
constexpr const char *kIndex = "checkpoint.json";

/// Whether a plan tensor is saved: parameters (trainable or frozen) and
/// buffers, each name once (2bw's second weight version is its weight's).
bool saved(const plan::Tensor &t) {
  return (t.kind() == plan::PARAM || t.kind() == plan::BUFFER) &&
         !t.has_previous_version_of();
}

/// The name a held tensor's value is saved under: its own, a weight
/// version's weight's, a laysa mirror's parameter's; empty for others.
std::string savedName(const plan::Plan &plan, const plan::Tensor &t) {
  if (t.kind() == plan::PARAM && t.has_previous_version_of())
    return plan.tensors(t.previous_version_of()).name();
  if (t.kind() == plan::SPARSE_STATE && t.has_mirror_of())
    return plan.tensors(t.mirror_of()).name();
  return saved(t) ? t.name() : "";
}

std::string hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(value));
  return text;
}

uint64_t checksumOf(const TensorView &view) {
  return plan::checksum(view.data, view.numel() * plan::dtypeSize(view.dtype));
}

/// Every device's optimizer state records, and for each parameter and
/// state name the records that together hold it once (replicas' copies
/// left out; shards' pieces side by side).
struct StateMap {
  std::map<int, int64_t> updates; ///< by parameter: updates applied
  std::map<std::pair<int, int64_t>, std::vector<StateRecord>> parts;
};

bool overlaps(const std::vector<StateRecord> &parts, const StateRecord &r) {
  return std::any_of(parts.begin(), parts.end(), [&](const StateRecord &p) {
    return p.paramOffset < r.paramOffset + r.length &&
           r.paramOffset < p.paramOffset + p.length;
  });
}

StateMap mapState(Run &run) {
  StateMap map;
  for (int d = 0; d < run.deviceCount; ++d)
    for (const StateRecord &r : stateRecords(run, d)) {
      map.updates.emplace(r.param, r.counter);
      if (r.name < 0)
        continue;
      std::vector<StateRecord> &parts = map.parts[{r.param, r.name}];
      if (!overlaps(parts, r))
        parts.push_back(r);
    }
  for (const auto &[key, parts] : map.parts) {
    int64_t covered = 0;
    for (const StateRecord &r : parts)
      covered += r.length;
    if (covered != run.plan.tensors(key.first).bytes() / 4)
      fail("the optimizer state '" + std::string(kStateNames[key.second]) +
           "' of '" + run.plan.tensors(key.first).name() +
           "' is not held whole by the devices");
  }
  return map;
}

/// One parameter's optimizer state, assembled from its parts.
TrainedValue fetchState(Run &run, const std::vector<StateRecord> &parts,
                        const plan::Tensor &param) {
  TrainedValue value;
  value.view = {nullptr,
                {param.shape().begin(), param.shape().end()},
                plan::F32,
                MemorySpace::Host};
  value.storage.resize(param.bytes());
  value.view.data = value.storage.data();
  for (const StateRecord &r : parts)
    readStatePiece(run, r, value.storage.data() + r.paramOffset * 4);
  return value;
}

/// A file of the checkpoint: its writer fetches the value, notes its
/// checksum under the file's name and writes it as .npy.
FileWriter savedFile(std::function<TrainedValue()> fetch,
                     std::map<std::string, std::string> &checksums,
                     const std::string &file) {
  return [fetch = std::move(fetch), &checksums, file](int fd) {
    TrainedValue value = fetch();
    checksums[file] = hex(checksumOf(value.view));
    return npyWriter(value.view)(fd);
  };
}

/// What checkpoint.json says of one saved tensor: its fields, and its
/// optimizer states' names and files.
struct SavedTensor {
  Json fields;
  std::vector<std::pair<std::string, std::string>> states;
};

Json fingerprints(const RunIdentity &identity) {
  Json files = Json::array();
  for (const FileFingerprint &file : identity.files)
    files.push_back({{"path", file.path},
                     {"size", file.size},
                     {"modified_ns", file.modified},
                     {"hash", hex(file.hash)}});
  return files;
}

/// What checkpoint.json says of one tensor.
struct PortableTensor {
  std::string kind, file, checksum;
  std::vector<int64_t> shape;
  int64_t updates = 0;
  std::map<std::string, std::pair<std::string, std::string>> states;
};

struct Portable {
  std::string path; ///< DIR/checkpoint.json, for messages
  int64_t step = 0, samples = 0;
  RunIdentity taken;
  std::string optimizer, strategy;
  std::vector<std::pair<std::string, PortableTensor>> tensors;
  const PortableTensor *find(const std::string &name) const {
    for (const auto &[n, t] : tensors)
      if (n == name)
        return &t;
    return nullptr;
  }
};

/// A file the index names: a plain .npy name beside it, never a path.
std::string checkedFile(const Json &value) {
  std::string file = value.get<std::string>();
  if (file.empty() || file[0] == '.' || file.find('/') != std::string::npos ||
      file.size() < 5 || file.compare(file.size() - 4, 4, ".npy") != 0)
    throw std::invalid_argument("file '" + file + "' is not a .npy beside it");
  return file;
}

PortableTensor parseTensor(const Json &j) {
  PortableTensor t;
  t.kind = j.at("kind").get<std::string>();
  t.file = checkedFile(j.at("file"));
  t.checksum = j.at("checksum").get<std::string>();
  t.shape = j.at("shape").get<std::vector<int64_t>>();
  if (t.kind == "parameter") {
    t.updates = j.at("updates").get<int64_t>();
    for (const auto &[name, state] : j.at("state").items())
      t.states[name] = {checkedFile(state.at("file")),
                        state.at("checksum").get<std::string>()};
  } else if (t.kind != "buffer") {
    throw std::invalid_argument("kind '" + t.kind + "' is unknown");
  }
  if (t.updates < 0)
    throw std::invalid_argument("negative updates");
  return t;
}

Portable parsePortable(const std::string &path, const Json &j) {
  Portable c;
  c.path = path;
  if (j.at("version").get<int>() != kVersion)
    fail(path + ": a portable checkpoint of version " +
         std::to_string(j.at("version").get<int>()) +
         ", this cdp-run reads version " + std::to_string(kVersion));
  c.step = j.at("step").get<int64_t>();
  c.samples = j.at("samples").get<int64_t>();
  if (c.step < 0 || c.samples < 0)
    throw std::invalid_argument("negative step or samples");
  c.taken.seed = j.at("seed").get<uint64_t>();
  c.taken.data = j.at("data").get<std::string>();
  for (const Json &file : j.at("data_files")) {
    FileFingerprint f;
    f.path = file.at("path").get<std::string>();
    f.size = file.at("size").get<uint64_t>();
    f.modified = file.at("modified_ns").get<int64_t>();
    f.hash = std::stoull(file.at("hash").get<std::string>(), nullptr, 16);
    c.taken.files.push_back(f);
  }
  c.optimizer = j.at("optimizer").get<std::string>();
  c.strategy = j.at("strategy").get<std::string>();
  for (const Json &tensor : j.at("tensors"))
    c.tensors.emplace_back(tensor.at("name").get<std::string>(),
                           parseTensor(tensor));
  return c;
}

Portable readPortable(const std::string &dir) {
  std::string path = dir + "/" + kIndex;
  Json j =
      Json::parse(readFileBytes(path), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("format") ||
      j["format"] != kFormat)
    fail(path + ": not a cdp portable checkpoint");
  try {
    return parsePortable(path, j);
  } catch (const std::exception &e) { // a missing or mistyped field
    if (dynamic_cast<const RuntimeError *>(&e))
      throw;
    fail(path + ": malformed portable checkpoint (" + e.what() + ")");
  }
}

/// The new plan's start: the step after which it has seen the samples
/// the checkpoint's run had.
int64_t resumedStep(const Run &run, const Portable &c) {
  int64_t taken = c.step > 0 ? c.samples / c.step : run.perStep;
  bool epochs = !run.options.data.empty() || run.options.partialBatch == "drop";
  if (c.samples % run.perStep != 0 || (epochs && taken != run.perStep))
    fail(c.path + ": the checkpoint's run consumed " +
         std::to_string(c.samples) + " samples (" + std::to_string(taken) +
         " a step); this plan takes " + std::to_string(run.perStep) +
         " a step, which " +
         (epochs ? std::string("must be as many with --data or "
                               "--partial-batch drop (epochs of whole steps)")
                 : "does not divide them") +
         "; resume with a plan whose micro-batches x batch make a step of " +
         std::to_string(taken));
  return c.samples / run.perStep;
}

/// Every parameter and buffer of the plan in the checkpoint, each of the
/// checkpoint's in the plan, with the same shapes.
void checkSameModel(const Run &run, const Portable &c) {
  std::map<std::string, bool> inPlan;
  for (const plan::Tensor &t : run.plan.tensors()) {
    if (!saved(t))
      continue;
    inPlan[t.name()] = true;
    const PortableTensor *p = c.find(t.name());
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    if (!p)
      fail(c.path + ": the checkpoint holds no '" + t.name() +
           "', which this plan trains; resume a plan of the model it was "
           "taken from");
    if (p->shape != shape ||
        (p->kind == "parameter") != (t.kind() == plan::PARAM))
      fail(c.path + ": '" + t.name() +
           "' differs in shape or kind from "
           "this plan's; resume a plan of the model it was taken from");
  }
  for (const auto &[name, tensor] : c.tensors)
    if (!inPlan.count(name))
      fail(c.path + ": the checkpoint holds '" + name +
           "', which this plan does not; resume a plan of the model it was "
           "taken from");
  if (c.optimizer != run.plan.optimizer())
    fail(c.path + ": the checkpoint was taken with the " + c.optimizer +
         " optimizer, this plan runs " + run.plan.optimizer() +
         " (whose state differs); compile with --optimizer " + c.optimizer +
         " (its settings, learning rate and schedule may change)");
}

/// A value the index names, checked against its size and checksum.
Array readValue(const std::string &dir, const std::string &file,
                const std::string &checksum, const plan::Tensor &like) {
  std::string path = dir + "/" + file;
  Array value = parseNpy(readFileBytes(path), path);
  if (value.dtype != like.dtype() ||
      value.numel() * plan::dtypeSize(value.dtype) != like.bytes())
    fail(path + ": holds " + std::to_string(value.numel()) + " elements, '" +
         like.name() + "' has " +
         std::to_string(like.bytes() / plan::dtypeSize(like.dtype())));
  if (hex(plan::checksum(value.bytes.data(), value.bytes.size())) != checksum)
    fail(path + ": corrupt (its values do not match the checksum in " + kIndex +
         ")");
  return value;
}

/// Where this process keeps the state it loads: host memory for each
/// shard of parameters and each optimizer state tensor, uploaded at the
/// end (on the CPU the tensor itself).
struct Staging {
  Executor *executor;
  TensorView view;
  std::vector<char> host;
  char *data() {
    return view.space == MemorySpace::Host ? static_cast<char *>(view.data)
                                           : host.data();
  }
};

/// A shard group's shard a device of this process holds.
struct ShardTarget {
  Staging staging;
  const plan::ShardGroup *group;
  std::vector<ShardLayout::Piece> pieces; ///< the parameters' parts in it
};

struct LocalTargets {
  std::map<std::string, std::vector<std::pair<Executor *, int>>> whole;
  std::vector<ShardTarget> shards;
  std::vector<StateRecord> records;
  std::map<std::tuple<int, int64_t, int64_t>, Staging> states;
  /// Each local device's stateful kernels' state, by device.
  std::map<int, std::vector<KernelState>> kernels;
};

Staging stagingFor(Executor &executor, const TensorView &view) {
  Staging staging{&executor, view, {}};
  if (view.space != MemorySpace::Host)
    staging.host.assign(view.numel() * plan::dtypeSize(view.dtype), 0);
  return staging;
}

LocalTargets localTargets(Run &run) {
  LocalTargets targets;
  for (auto &owned : run.executors) {
    if (!owned)
      continue;
    Executor &executor = *owned;
    for (const plan::Tensor &t : run.plan.tensors()) {
      std::string name = savedName(run.plan, t);
      if (!name.empty() && executor.view(t.id()).present())
        targets.whole[name].emplace_back(&executor, t.id());
    }
    for (const plan::ShardGroup &group : run.plan.schedule().shard_groups()) {
      if (!executor.view(group.shard()).present())
        continue;
      std::vector<int> holders = plan::shardHolders(run.plan, group);
      auto index = std::find(holders.begin(), holders.end(), executor.device());
      if (index == holders.end())
        continue;
      targets.shards.push_back(
          {stagingFor(executor, executor.view(group.shard())), &group,
           plan::layoutOf(run.plan, group)
               .pieces(static_cast<int>(index - holders.begin()))});
    }
    std::vector<KernelState> &kernels = targets.kernels[executor.device()];
    for (auto &[instruction, kernel] : executor.statefulKernels())
      kernels.push_back(kernel->state());
    for (const StateRecord &r : localStateRecords(run, executor)) {
      targets.records.push_back(r);
      if (r.state >= 0)
        targets.states.try_emplace(
            {r.device, r.kernel, r.state},
            stagingFor(executor,
                       kernels.at(r.kernel).tensors.at(r.state).second));
    }
  }
  return targets;
}

/// Refuses, before anything is loaded, optimizer state the plan needs and
/// the checkpoint lacks (a parameter never updated starts from zeros).
void checkStatePresent(const Run &run, const Portable &c,
                       const LocalTargets &targets) {
  for (const StateRecord &r : targets.records) {
    if (r.name < 0)
      continue;
    const std::string &name = run.plan.tensors(r.param).name();
    const PortableTensor *p = c.find(name);
    if (p && p->updates > 0 && !p->states.count(kStateNames[r.name]))
      fail(c.path + ": the checkpoint holds no " + kStateNames[r.name] +
           " for '" + name + "'");
  }
}

/// Each local optimizer kernel's step count: its parameters' updates in
/// the checkpoint (learning-rate schedules, Adam's bias correction and
/// SGD's first momentum step go on from there); under fp16, whose skipped
/// steps advance the schedule but not the updates, the schedule goes on
/// from the checkpoint's step.
void setCounters(const Run &run, const Portable &c,
                 const LocalTargets &targets) {
  for (const StateRecord &r : targets.records) {
    const KernelState &state = targets.kernels.at(r.device).at(r.kernel);
    const PortableTensor *p = c.find(run.plan.tensors(r.param).name());
    if (state.counter && p)
      *state.counter = p->updates;
    if (state.scheduleCounter)
      *state.scheduleCounter = c.step;
  }
}

} // namespace

bool isPortableCheckpoint(const std::string &dir) {
  return std::filesystem::exists(dir + "/" + kIndex);
}

int64_t loadPortableCheckpoint(Run &run) {
  const std::string &dir = run.options.resume;
  Portable c = readPortable(dir);
  try {
    checkSameData(c.path, c.taken, run.identity);
  } catch (const RuntimeError &e) {
    fail(e.what());
  }
  checkSameModel(run, c);
  int64_t step = resumedStep(run, c);
  LocalTargets targets = localTargets(run);
  checkStatePresent(run, c, targets);
  std::map<std::string, int> ids;
  for (const plan::Tensor &t : run.plan.tensors())
    if (saved(t))
      ids.emplace(t.name(), t.id());
  for (const auto &[name, entry] : c.tensors) {
    const plan::Tensor &t = run.plan.tensors(ids.at(name));
    Array value = readValue(dir, entry.file, entry.checksum, t);
    for (auto [executor, id] : targets.whole[name])
      executor->upload(executor->view(id), value.bytes.data());
    for (ShardTarget &shard : targets.shards)
      for (const ShardLayout::Piece &piece : shard.pieces)
        if (shard.group->params(piece.tensor) == t.id())
          std::memcpy(shard.staging.data() + piece.shardOffset * 4,
                      value.bytes.data() + piece.offset * 4, piece.length * 4);
    for (const auto &[stateName, file] : entry.states) {
      Array state = readValue(dir, file.first, file.second, t);
      for (const StateRecord &r : targets.records)
        if (r.param == t.id() && r.name >= 0 &&
            stateName == kStateNames[r.name])
          std::memcpy(targets.states.at({r.device, r.kernel, r.state}).data() +
                          r.stateOffset * 4,
                      state.bytes.data() + r.paramOffset * 4, r.length * 4);
    }
  }
  for (ShardTarget &shard : targets.shards)
    if (!shard.staging.host.empty())
      shard.staging.executor->upload(shard.staging.view,
                                     shard.staging.host.data());
  for (auto &[key, staging] : targets.states)
    if (!staging.host.empty())
      staging.executor->upload(staging.view, staging.host.data());
  setCounters(run, c, targets);
  return step;
}

void writePortableCheckpoint(Run &run) {
  const std::string &dir = run.options.portableCheckpoint;
  StateMap state = mapState(run);
  std::vector<SavedTensor> saved;
  std::map<std::string, std::string> checksums; // by file, as written
  std::vector<std::pair<std::string, FileWriter>> files;
  FileNamer namer;
  std::map<std::string, bool> seen;
  for (const plan::Tensor &t : run.plan.tensors()) {
    if (!training::saved(t) || seen[t.name()])
      continue;
    seen[t.name()] = true;
    SavedTensor entry;
    std::string file = namer.name(t.name()) + ".npy";
    entry.fields = {
        {"name", t.name()},
        {"kind", t.kind() == plan::PARAM ? "parameter" : "buffer"},
        {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())},
        {"file", file}};
    int id = t.id();
    files.emplace_back(file,
                       savedFile([&run, id] { return fetchTrained(run, id); },
                                 checksums, file));
    if (t.kind() == plan::PARAM) {
      auto updates = state.updates.find(id);
      entry.fields["updates"] =
          updates == state.updates.end() ? 0 : updates->second;
    }
    for (int64_t code = 0; code < kStateNameCount; ++code) {
      auto parts = state.parts.find({id, code});
      if (parts == state.parts.end())
        continue;
      std::string stateFile =
          namer.name(t.name() + "." + kStateNames[code]) + ".npy";
      entry.states.emplace_back(kStateNames[code], stateFile);
      const std::vector<StateRecord> &pieces = parts->second;
      files.emplace_back(
          stateFile,
          savedFile([&run, &pieces, &t] { return fetchState(run, pieces, t); },
                    checksums, stateFile));
    }
    saved.push_back(std::move(entry));
  }
  files.emplace_back(kIndex, [&](int fd) {
    Json tensors = Json::array();
    for (const SavedTensor &entry : saved) {
      Json fields = entry.fields;
      fields["checksum"] = checksums[fields["file"].get<std::string>()];
      if (fields["kind"] == "parameter") {
        fields["state"] = Json::object();
        for (const auto &[name, file] : entry.states)
          fields["state"][name] = {{"file", file},
                                   {"checksum", checksums[file]}};
      }
      tensors.push_back(std::move(fields));
    }
    Json index = {{"format", kFormat},
                  {"version", kVersion},
                  {"step", run.total},
                  {"samples", run.total * run.perStep},
                  {"seed", run.options.seed},
                  {"data", run.identity.data},
                  {"data_files", fingerprints(run.identity)},
                  {"optimizer", run.plan.optimizer()},
                  {"strategy", run.plan.strategy()},
                  {"devices", run.deviceCount},
                  {"tensors", std::move(tensors)}};
    return writeAll(fd, jsonText(index, 1) + "\n");
  });
  std::string error;
  if (!writeFolderAtomically(dir, files, error))
    fail(dir + ": " + error);
}

} // namespace cdp::runtime::training
