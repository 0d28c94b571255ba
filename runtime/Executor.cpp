//===- Executor.cpp - runs a plan's instruction streams -------------------===//

#include "cdp/Runtime/Executor.h"

#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/Residency.h"
#include "cdp/Plan/ShardGroups.h"
#include "cdp/Runtime/Json.h"
#include "cdp/Runtime/MessageTags.h"
#include "cdp/Runtime/Report.h"
#include "cdp/Runtime/Signatures.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace cdp::runtime {

Executor::Executor(const plan::Plan &plan, int threads, int deviceIndex,
                   Communicator *communicator, const plan::PlanWeights *weights)
    : planRef(plan), weights(weights), deviceIndex(deviceIndex),
      communicator(communicator) {
  if (deviceIndex < 0 || deviceIndex >= plan.devices_size())
    throw RuntimeError("plan has no device " + std::to_string(deviceIndex));
  const plan::Device &device = plan.devices(deviceIndex);
  backendDevice = createDevice(parseBackend(device.backend()), deviceIndex);
  arenaBytes = device.arena_bytes();
  arena = backendDevice->allocate(static_cast<size_t>(arenaBytes));
  views.resize(plan.tensors_size());
  persistent.assign(plan.tensors_size(), nullptr);
  gathered = plan::gatheredParameters(plan);
  persistentHere = plan::persistentOn(plan, deviceIndex, &gatheredLater);
  allocatePersistentBlock();
  for (int id = 0; id < plan.tensors_size(); ++id)
    placeTensor(id);
  fillParameterShards();
  train = bind(device.instructions(), threads);
  offerAdjacentLaunches();
  evalThreads = threads;
  // Device 0 of a pipeline evaluates the model gathered after training.
  evalBound = std::none_of(gatheredLater.begin(), gatheredLater.end(),
                           [](char later) { return later; });
  if (evalBound)
    eval = bind(device.eval_instructions(), threads);
}

/// The persistent tensors this device holds during training, in one
/// allocation (one cudaMalloc on a GPU), each at a 64-byte aligned offset
/// in plan order: parameters lie together, so a whole-model kernel or copy
/// can cover them at once.
void Executor::allocatePersistentBlock() {
  int64_t total = 0;
  persistentOffset = plan::persistentOffsets(planRef, persistentHere, total);
  if (total > 0)
    persistentBlock = backendDevice->allocate(static_cast<size_t>(total));
}

/// Tensor t's view: in the arena (activations, inputs) or in persistent
/// memory of its own, filled with its initial value.
void Executor::placeTensor(int id) {
  const plan::Tensor &t = planRef.tensors(id);
  if (t.id() != id)
    throw RuntimeError("plan tensor " + std::to_string(id) + " has id " +
                       std::to_string(t.id()));
  TensorView &v = views[id];
  v.shape.assign(t.shape().begin(), t.shape().end());
  v.dtype = t.dtype();
  v.space = backendDevice->space();
  int64_t bytes = v.numel() * plan::dtypeSize(t.dtype());
  if (bytes != t.bytes())
    throw RuntimeError("plan tensor '" + t.name() + "' declares " +
                       std::to_string(t.bytes()) + " bytes, its shape needs " +
                       std::to_string(bytes));
  // ZeRO stage 3's parameters live in the arena's gather region: their
  // values are in the device's shard (fillParameterShards).
  bool inArena =
      t.kind() == plan::ACTIVATION || t.kind() == plan::INPUT || gathered[id];
  if (inArena && t.has_device() &&
      t.device() != plan::arenaHome(planRef, deviceIndex))
    return; // another pipeline stage's stash copy
  if (inArena) {
    if (t.offset() < 0 || t.offset() + bytes > arenaBytes)
      throw RuntimeError("plan tensor '" + t.name() +
                         "' lies outside the arena");
    v.data = static_cast<char *>(arena) + t.offset();
    return;
  }
  if (!persistentHere[id])
    return; // CDP-ZeRO's master copy, or a pipeline stage held elsewhere
  v.data = static_cast<char *>(persistentBlock) + persistentOffset[id];
  // laysa's mirror starts as its parameter's value (the plan holds it once);
  // a tensor without data (a residual, a reduced buffer) starts at 0, as
  // every device's allocate leaves it.
  const plan::Tensor &source =
      t.has_mirror_of() ? planRef.tensors(t.mirror_of()) : t;
  if (!plan::hasInitialValue(source))
    return;
  if (v.space == MemorySpace::Host) {
    readInitial(source, static_cast<char *>(v.data));
    return;
  }
  std::vector<char> host(bytes);
  readInitial(source, host.data());
  backendDevice->upload(v.data, host.data(), bytes);
}

/// Tensor `t`'s initial value into `out` (its bytes); false when it has
/// none. Throws RuntimeError when it cannot be read.
bool Executor::readInitial(const plan::Tensor &t, char *out) const {
  if (!plan::hasInitialValue(t))
    return false;
  std::string problem = weights ? weights->read(t, out)
                        : t.has_initial()
                            ? "the initial value of plan tensor '" + t.name() +
                                  "' is in the plan's weights file, which "
                                  "was not opened"
                            : plan::PlanWeights::readInline(t, out);
  if (!problem.empty())
    throw RuntimeError(problem);
  if (weights && t.has_initial())
    weightsRead += t.initial().size();
  return true;
}

/// ZeRO stage 3: each shard starts as the device's part of its stage's
/// initial parameters (the padding 0).
void Executor::fillParameterShards() {
  int rank = communicator ? communicator->rank() : 0;
  for (const plan::ShardGroup &group : planRef.schedule().shard_groups()) {
    if (group.has_owner() && group.owner() != deviceIndex)
      continue; // CDP-ZeRO: the owner holds the whole stage
    ShardLayout layout = plan::layoutOf(planRef, group);
    int shard = group.has_owner() ? 0 : rank;
    stageIn(group.shard(), [&](const TensorView &host) {
      std::fill(host.f32(), host.f32() + host.numel(), 0.0f);
      std::vector<float> whole;
      for (const ShardLayout::Piece &piece : layout.pieces(shard)) {
        const plan::Tensor &param = planRef.tensors(group.params(piece.tensor));
        whole.resize(param.bytes() / sizeof(float));
        // A parameter without a value starts at 0.
        if (readInitial(param, reinterpret_cast<char *>(whole.data())))
          std::copy_n(whole.data() + piece.offset, piece.length,
                      host.f32() + piece.shardOffset);
      }
    });
  }
}

static ConstBuffer hostBuffer(const TensorView &host) {
  return {host.dtype, host.data, host.numel()};
}

/// ZeRO stage 3 and CDP-ZeRO, after training: device 0 takes every stage's
/// parameters into memory of its own that stays, so the trained model can
/// be read (written out, checked, evaluated) like any plan's. Only device 0
/// assembles them: the others hand over their shards and keep nothing new
/// (a copy on every device was the model's bytes on each, past what the
/// report predicts). Device 0's evaluation kernels are bound again.
void Executor::gatherShardedParameters() {
  if (planRef.schedule().shard_groups().empty())
    return;
  for (const plan::ShardGroup &group : planRef.schedule().shard_groups())
    if (deviceIndex == 0)
      takeShardGroup(group);
    else
      handOverShard(group);
  // Device 0's evaluation kernels held the gather region's views.
  if (evalBound && deviceIndex == 0)
    eval = bind(planRef.devices(deviceIndex).eval_instructions(), evalThreads);
}

/// A device other than 0: its shard of `group` (CDP-ZeRO: the owner its
/// whole stage) to device 0 on device 0's go-ahead.
void Executor::handOverShard(const plan::ShardGroup &group) {
  if (group.has_owner() && group.owner() != deviceIndex)
    return;
  float ready = 0;
  if (!communicator->recv(0, tags::shardReady(group.shard()),
                          {plan::F32, &ready, 1}))
    throw RuntimeError("device " + std::to_string(deviceIndex) +
                       ": stopped while handing the trained parameters to "
                       "device 0 (another device failed)");
  HostTensor shard = stageOut(group.shard());
  communicator->send(0, tags::shardGather(group.shard()),
                     hostBuffer(shard.view()), -1);
}

/// Device 0: `group`'s parameters whole, from each device's shard (or the
/// owner's stage), into memory of their own.
void Executor::takeShardGroup(const plan::ShardGroup &group) {
  ShardLayout layout = plan::layoutOf(planRef, group);
  int first = group.params(0);
  persistent[first] = backendDevice->allocate(
      static_cast<size_t>(layout.paddedSize() * sizeof(float)));
  char *at = static_cast<char *>(persistent[first]);
  for (int id : group.params()) {
    views[id].data = at;
    at += planRef.tensors(id).bytes();
  }
  std::vector<float> whole(layout.paddedSize());
  std::vector<int> senders;
  if (group.has_owner())
    senders.push_back(group.owner());
  else
    for (int d = 0; d < communicator->size(); ++d)
      senders.push_back(d);
  int64_t piece = layout.paddedSize() / static_cast<int64_t>(senders.size());
  for (size_t i = 0; i < senders.size(); ++i) {
    float *into = whole.data() + i * piece;
    if (senders[i] == 0) {
      download(views[group.shard()], into);
      continue;
    }
    float ready = 1;
    communicator->send(senders[i], tags::shardReady(group.shard()),
                       {plan::F32, &ready, 1}, -1);
    if (!communicator->recv(senders[i], tags::shardGather(group.shard()),
                            {plan::F32, into, piece}))
      throw RuntimeError("device 0: stopped while gathering the trained "
                         "parameters (another device failed)");
  }
  upload(
      {views[first].data, {layout.totalSize()}, plan::F32, views[first].space},
      whole.data());
}

Executor::~Executor() {
  // Recordings replay the kernels' launches, and kernels may hold device
  // resources tied to the memory: they go first.
  replay.reset();
  train.clear();
  eval.clear();
  backendDevice->synchronize(); // no staged upload still reads its memory
  for (auto &[id, input] : stagedInputs) {
    backendDevice->releaseHost(input.host[0]);
    backendDevice->releaseHost(input.host[1]);
    backendDevice->release(input.staging);
  }
  for (void *memory : persistent)
    if (memory)
      backendDevice->release(memory);
  if (persistentBlock)
    backendDevice->release(persistentBlock);
  backendDevice->release(arena);
}

const TensorView &Executor::held(int id) const {
  const TensorView &view = views.at(id);
  if (!view.present())
    throw RuntimeError("plan tensor '" + planRef.tensors(id).name() + "' (" +
                       std::to_string(id) + ") is not on device " +
                       std::to_string(deviceIndex));
  return view;
}

void Executor::stageIn(int id,
                       const std::function<void(const TensorView &)> &fill) {
  const TensorView &view = held(id);
  if (view.space == MemorySpace::Host) {
    fill(view);
    return;
  }
  HostTensor staged = stageOut(view);
  fill(staged.view());
  upload(view, staged.view().data);
}

void Executor::stageInWhole(
    int id, const std::function<void(const TensorView &)> &fill) {
  const TensorView &view = held(id);
  if (view.space == MemorySpace::Host) {
    fill(view);
    return;
  }
  size_t bytes = view.numel() * plan::dtypeSize(view.dtype);
  StagedInput &input = stagedInputs[id];
  if (!input.staging) {
    input.host[0] = backendDevice->allocateHost(bytes);
    input.host[1] = backendDevice->allocateHost(bytes);
    input.staging = backendDevice->allocate(bytes);
    input.bytes = static_cast<int64_t>(bytes);
  }
  // The other buffer may still be read by the upload of the step that runs
  // now; this one's upload was taken by a step that has ended.
  void *host = input.host[input.nextHost];
  input.nextHost ^= 1;
  TensorView staged = view;
  staged.data = host;
  staged.space = MemorySpace::Host;
  fill(staged);
  backendDevice->uploadAhead(input.staging, host, bytes);
  input.pending = true;
}

bool Executor::stagesAhead() const {
  return backendDevice->space() != MemorySpace::Host;
}

void Executor::takeStagedInputs() {
  for (auto &[id, input] : stagedInputs) {
    if (!input.pending)
      continue;
    const TensorView &view = views[id];
    backendDevice->takeUploaded(view.data, input.staging,
                                view.numel() * plan::dtypeSize(view.dtype));
    input.pending = false;
  }
}

HostTensor Executor::stageOut(const TensorView &view) const {
  if (view.space != MemorySpace::Host)
    return hostCopy(view);
  HostTensor host;
  host.hostView = view;
  return host;
}

HostTensor Executor::hostCopy(const TensorView &view) const {
  HostTensor host;
  host.hostView = view;
  int64_t bytes = view.numel() * plan::dtypeSize(view.dtype);
  host.storage.assign((bytes + 7) / 8, 0);
  host.hostView.data = host.storage.data();
  host.hostView.space = MemorySpace::Host;
  download(view, host.storage.data());
  return host;
}

void Executor::keepOutputsOfStep(int64_t step, const std::vector<int> &ids) {
  keptStep = step;
  kept.clear();
  for (int id : ids)
    kept[id];
}

const std::map<int64_t, HostTensor> &Executor::keptOutputs(int id) const {
  static const std::map<int64_t, HostTensor> none;
  auto it = kept.find(id);
  return it == kept.end() ? none : it->second;
}

void Executor::keepOutputsOf(const plan::Instruction &instruction,
                             int64_t slot) {
  for (int id : instruction.outputs()) {
    auto it = kept.find(id);
    // A copy even on the CPU, where stageOut would hand out the arena.
    if (it != kept.end())
      it->second[slot] = hostCopy(held(id));
  }
}

void Executor::download(const TensorView &view, void *host) const {
  size_t bytes = view.numel() * plan::dtypeSize(view.dtype);
  if (view.space == MemorySpace::Host)
    std::memcpy(host, view.data, bytes);
  else
    backendDevice->download(host, view.data, bytes);
}

void Executor::upload(const TensorView &view, const void *host) {
  size_t bytes = view.numel() * plan::dtypeSize(view.dtype);
  if (view.space == MemorySpace::Host)
    std::memcpy(view.data, host, bytes);
  else
    backendDevice->upload(view.data, host, bytes);
}

TensorView Executor::arenaView() const {
  return TensorView{arena, {arenaBytes}, plan::BOOL, backendDevice->space()};
}

std::vector<std::unique_ptr<Kernel>> Executor::bind(
    const google::protobuf::RepeatedPtrField<plan::Instruction> &stream,
    int threads) {
  std::vector<std::unique_ptr<Kernel>> kernels;
  KernelRegistry &registry = KernelRegistry::instance();
  for (const plan::Instruction &instruction : stream) {
    Backend backend = backendDevice->backend();
    const KernelFactory *factory = registry.lookup(instruction.op(), backend);
    if (!factory)
      throw RuntimeError("the plan uses op '" + instruction.op() +
                         "', which this cdp-run has no " +
                         (backend == Backend::CPU ? "CPU" : "CUDA") +
                         " kernel for");
    KernelArgs args;
    args.instruction = &instruction;
    args.threads = threads;
    args.communicator = communicator;
    args.device = deviceIndex;
    args.runsOn = backendDevice.get();
    auto resolve = [&](int id) {
      if (id < 0)
        return TensorView();
      if (id >= static_cast<int>(views.size()))
        throw RuntimeError("instruction '" + instruction.op() + "' at '" +
                           instruction.location() + "' names tensor " +
                           std::to_string(id) + ", which the plan lacks");
      if (!views[id].data)
        throw RuntimeError("instruction '" + instruction.op() + "' at '" +
                           instruction.location() + "' on device " +
                           std::to_string(deviceIndex) + " names tensor '" +
                           planRef.tensors(id).name() + "', which device " +
                           std::to_string(planRef.tensors(id).device()) +
                           " holds");
      return views[id];
    };
    for (int id : instruction.inputs())
      args.inputs.push_back(resolve(id));
    for (int id : instruction.outputs())
      args.outputs.push_back(resolve(id));
    checkSignature(args);
    kernels.push_back((*factory)(args));
  }
  return kernels;
}

namespace {

/// Whether two instructions of one op run at the same points of every step
/// (what runInstructions skips on is the same for both).
bool runAlongside(const plan::Instruction &a, const plan::Instruction &b) {
  return a.op() == b.op() && a.phase() == b.phase() &&
         a.min_step() == b.min_step() && a.last_slot() == b.last_slot() &&
         a.drain() == b.drain() && a.ahead() == b.ahead() &&
         a.next_step_only() == b.next_step_only();
}

} // namespace

/// Offers each run of adjacent instructions that run alongside (a stage's
/// updates) to its first kernel, which may take over the launches of the
/// others; where it takes some, the rest start a run of their own. Checkpoint
/// cuts fall before receives only, so no part of a step splits such a run.
void Executor::offerAdjacentLaunches() {
  const auto &stream = planRef.devices(deviceIndex).instructions();
  int n = stream.size();
  std::vector<Kernel *> kernels;
  for (const std::unique_ptr<Kernel> &kernel : train)
    kernels.push_back(kernel.get());
  // Each run's end found once: offering costs no copy, so a long run of
  // kernels that decline stays linear.
  for (int runBegin = 0, runEnd = 0; runBegin < n; runBegin = runEnd) {
    for (runEnd = runBegin + 1;
         runEnd < n && runAlongside(stream.Get(runBegin), stream.Get(runEnd));
         ++runEnd)
      ;
    for (int begin = runBegin; begin + 1 < runEnd;) {
      auto count = static_cast<size_t>(runEnd - begin - 1);
      size_t taken =
          std::min(kernels[begin]->takeOver(&kernels[begin + 1], count), count);
      takenOver += static_cast<int64_t>(taken);
      begin += 1 + static_cast<int>(taken);
    }
  }
}

void Executor::enableReplay() {
  replay = std::make_unique<StepReplay>(*backendDevice, train);
}

void Executor::runStep(const StepContext &step, InstructionRange range,
                       const std::function<void()> &whileRunning) {
  StepContext context = step;
  context.queue = backendDevice->queue();
  try {
    takeStagedInputs();
    runInstructions(context, range);
    if (whileRunning)
      whileRunning();
    backendDevice->finishStep(context.step);
  } catch (const RuntimeError &) {
    throw;
  } catch (const std::exception &e) {
    // A library failure (oneDNN, allocation) becomes one line too.
    throw RuntimeError("device " + std::to_string(deviceIndex) + ", step " +
                       std::to_string(context.step) + ": " + e.what());
  }
}

void Executor::runInstructions(const StepContext &context,
                               InstructionRange range) {
  const plan::Device &device = planRef.devices(deviceIndex);
  size_t begin = static_cast<size_t>(range.begin),
         end = range.end < 0 ? train.size() : static_cast<size_t>(range.end);
  if (begin == 0 && steps == 0 && !draining)
    runAhead(context);
  if (begin == 0)
    ++steps;
  int64_t lastSlot = std::max(planRef.micro_batches(), 1) - 1;
  auto skipped = [&](const plan::Instruction &instruction) {
    return instruction.min_step() > context.step - scheduleOrigin ||
           (instruction.last_slot() && context.slot != lastSlot) ||
           (draining && !instruction.drain()) ||
           ((instruction.ahead() ||
             (instruction.next_step_only() && !sendsAfterLastStep)) &&
            context.step + 1 >= totalSteps);
  };
  bool keeping = context.step == keptStep && !draining;
  if (!report && profile.empty() && !trace && !keeping) {
    if (replay)
      return replay->run(context, begin, end, [&](size_t i) {
        return skipped(device.instructions(static_cast<int>(i)));
      });
    for (size_t i = begin; i < end; ++i)
      if (!skipped(device.instructions(i)))
        train[i]->run(context);
    return;
  }
  if (report && begin == 0)
    report->startStep(deviceIndex, context.step);
  StepContext watched = context; // each instruction timed or watched alone
  watched.oneByOne = true;
  for (size_t i = begin; i < end; ++i) {
    const plan::Instruction &instruction = device.instructions(i);
    if (skipped(instruction))
      continue;
    auto start = std::chrono::steady_clock::now();
    train[i]->run(watched);
    backendDevice->synchronize(); // a GPU's kernel is timed, not its launch
    auto end = std::chrono::steady_clock::now();
    if (!profile.empty())
      (steps == 1 ? firstStepProfile : profile)[i] +=
          std::chrono::duration<double>(end - start).count();
    if (trace)
      trace->record(deviceIndex, instruction, context.step, start, end);
    if (keeping)
      keepOutputsOf(instruction, context.slot);
    if (!report)
      continue;
    // The measured side of the report: tensors born when written, freed
    // when their last use of the step has run; the bytes actually handed
    // over come from the communicator's own log (cdp-run).
    report->ran(deviceIndex, context.step, static_cast<int>(i),
                /*countSent=*/false);
  }
}

/// Before the first step this executor runs: the instructions that do
/// the next step's work in each step's program (`ahead`), as the program
/// of the step before would have run them.
void Executor::runAhead(const StepContext &context) {
  const plan::Device &device = planRef.devices(deviceIndex);
  StepContext before = context;
  before.step = context.step - 1;
  for (size_t i = 0; i < train.size(); ++i) {
    if (!device.instructions(i).ahead())
      continue;
    auto start = std::chrono::steady_clock::now();
    train[i]->run(before);
    if (trace)
      trace->record(deviceIndex, device.instructions(i), before.step, start,
                    std::chrono::steady_clock::now());
    if (report)
      report->ran(deviceIndex, before.step, static_cast<int>(i),
                  /*countSent=*/false);
  }
}

/// CDP-ZeRO's gradient messages as flows: chain_reduce {owner} receives
/// the partial sum from the device before and passes it on, the last
/// device's mean to the owner; the owner's chain_wait {from} receives it
/// (the mean of step t - 1 - delay). The flush after training is not
/// traced: the last step's mean shows its send only.
void TraceRecorder::recordChainFlows(int device,
                                     const plan::Instruction &instruction,
                                     int64_t step, double from, double to) {
  int64_t owner = plan::intAttribute(instruction, "owner"),
          source = plan::intAttribute(instruction, "from"),
          delay = plan::intAttribute(instruction, "delay", 0);
  std::string stage = std::to_string(instruction.stage());
  auto flow = [&](int64_t sender, int64_t receiver, int64_t ofStep,
                  const std::string &what) {
    bool isSend = sender == device;
    flows[device].push_back({std::to_string(sender) + ">" +
                                 std::to_string(receiver) + ":" +
                                 std::to_string(ofStep) + ":" + what + stage,
                             isSend, isSend ? from : to});
  };
  int last = static_cast<int>(spans.size()) - 1;
  if (instruction.op() == "chain_reduce" && owner >= 0) {
    if (device > 0)
      flow(device - 1, device, step, "g");
    if (device < last)
      flow(device, device + 1, step, "g");
    else if (owner != device)
      flow(device, owner, step, "m");
  } else if (instruction.op() == "chain_wait" && source >= 0 &&
             source != device) {
    flow(source, device, step - 1 - delay, "m");
  }
}

TraceRecorder::TraceRecorder(int devices)
    : origin(std::chrono::steady_clock::now()), spans(devices), flows(devices) {
}

void TraceRecorder::record(int device, const plan::Instruction &instruction,
                           int64_t step,
                           std::chrono::steady_clock::time_point start,
                           std::chrono::steady_clock::time_point end) {
  // Consecutive instructions of one stage and phase form one span.
  std::string phase = instruction.phase();
  std::string name =
      phase == "forward"    ? "F" + std::to_string(instruction.stage())
      : phase == "backward" ? "B" + std::to_string(instruction.stage())
      : phase == "update"
          ? "update " + std::to_string(instruction.stage())
          : instruction.op() + " " + std::to_string(instruction.stage());
  double from =
      std::chrono::duration<double, std::micro>(start - origin).count();
  double to = std::chrono::duration<double, std::micro>(end - origin).count();
  if (instruction.op() == "send" || instruction.op() == "recv") {
    // The arrow from a send to its recv (Chrome flow events).
    auto attribute = [&](const char *key, int64_t fallback) {
      return plan::intAttribute(instruction, key, fallback);
    };
    bool isSend = instruction.op() == "send";
    int64_t peer = attribute("peer", 0);
    int64_t microBatch =
        (step + attribute("step_offset", 0)) * attribute("micro_batches", 1) +
        attribute("micro_batch", 0);
    std::string id = std::to_string(isSend ? device : peer) + ">" +
                     std::to_string(isSend ? peer : device) + ":" +
                     std::to_string(microBatch) + ":" +
                     std::to_string(attribute("value", 0));
    flows[device].push_back({id, isSend, isSend ? from : to});
  }
  recordChainFlows(device, instruction, step, from, to);
  std::vector<Span> &list = spans[device];
  if (!list.empty() && list.back().name == name && list.back().step == step &&
      list.back().microBatch == instruction.micro_batch()) {
    list.back().end = to;
    return;
  }
  const char *category = phase == "comm"     ? "communication"
                         : phase == "update" ? "update"
                                             : "compute";
  list.push_back({name, category, step, instruction.micro_batch(),
                  instruction.time_step(), from, to});
}

namespace {

/// Length-prefixed fields of an exported trace.
void putString(std::string &out, const std::string &text) {
  uint64_t size = text.size();
  out.append(reinterpret_cast<const char *>(&size), sizeof(size));
  out += text;
}
template <typename T> void putValue(std::string &out, T value) {
  out.append(reinterpret_cast<const char *>(&value), sizeof(value));
}
struct TraceReader {
  const std::string &bytes;
  size_t at = 0;
  template <typename T> T value() {
    if (at + sizeof(T) > bytes.size())
      throw RuntimeError("a process's trace arrived truncated");
    T v;
    std::memcpy(&v, bytes.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string text() {
    uint64_t size = value<uint64_t>();
    if (at + size > bytes.size())
      throw RuntimeError("a process's trace arrived truncated");
    std::string t = bytes.substr(at, size);
    at += size;
    return t;
  }
};

/// The categories spans use (exported by name, imported as these).
const char *categoryNamed(const std::string &name) {
  for (const char *known : {"communication", "update", "compute"})
    if (name == known)
      return known;
  return "compute";
}

} // namespace

std::string TraceRecorder::exportDevices() const {
  std::string out;
  for (size_t d = 0; d < spans.size(); ++d) {
    if (spans[d].empty() && flows[d].empty())
      continue;
    putValue<int64_t>(out, static_cast<int64_t>(d));
    putValue<uint64_t>(out, spans[d].size());
    for (const Span &span : spans[d]) {
      putString(out, span.name);
      putString(out, span.category);
      putValue(out, span.step);
      putValue(out, span.microBatch);
      putValue(out, span.timeStep);
      putValue(out, span.begin);
      putValue(out, span.end);
    }
    putValue<uint64_t>(out, flows[d].size());
    for (const FlowEnd &flow : flows[d]) {
      putString(out, flow.id);
      putValue<int8_t>(out, flow.isSend);
      putValue(out, flow.at);
    }
  }
  return out;
}

void TraceRecorder::importDevices(const std::string &bytes) {
  TraceReader in{bytes};
  while (in.at < bytes.size()) {
    int64_t d = in.value<int64_t>();
    if (d < 0 || d >= static_cast<int64_t>(spans.size()))
      throw RuntimeError("a process's trace names device " + std::to_string(d));
    uint64_t count = in.value<uint64_t>();
    for (uint64_t i = 0; i < count; ++i) {
      Span span;
      span.name = in.text();
      span.category = categoryNamed(in.text());
      span.step = in.value<int64_t>();
      span.microBatch = in.value<int>();
      span.timeStep = in.value<int64_t>();
      span.begin = in.value<double>();
      span.end = in.value<double>();
      spans[d].push_back(std::move(span));
    }
    count = in.value<uint64_t>();
    for (uint64_t i = 0; i < count; ++i) {
      FlowEnd flow;
      flow.id = in.text();
      flow.isSend = in.value<int8_t>() != 0;
      flow.at = in.value<double>();
      flows[d].push_back(std::move(flow));
    }
  }
}

std::string TraceRecorder::json(int64_t cycle) const {
  // One event per line (a trace may hold many thousands).
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto add = [&](const Json &event) {
    out += (first ? "" : ",\n") + jsonText(event);
    first = false;
  };
  for (size_t d = 0; d < spans.size(); ++d) {
    add({{"name", "thread_name"},
         {"ph", "M"},
         {"pid", 0},
         {"tid", d},
         {"args", {{"name", "device " + std::to_string(d)}}}});
    for (const Span &span : spans[d])
      add({{"name", span.name},
           {"cat", span.category},
           {"ph", "X"},
           {"pid", 0},
           {"tid", d},
           {"ts", span.begin},
           {"dur", std::max(span.end - span.begin, 0.001)},
           {"args",
            {{"step", span.step},
             {"micro_batch", span.microBatch},
             {"time_step", span.timeStep + cycle * span.step}}}});
  }
  for (size_t d = 0; d < flows.size(); ++d)
    for (const FlowEnd &flow : flows[d]) {
      Json event = {{"name", "message"},
                    {"cat", "flow"},
                    {"ph", flow.isSend ? "s" : "f"}};
      if (!flow.isSend)
        event["bp"] = "e"; // binds to the enclosing slice
      event["id"] = flow.id;
      event["pid"] = 0;
      event["tid"] = d;
      event["ts"] = flow.at;
      add(event);
    }
  return out + "\n]}\n";
}

std::vector<double> Executor::profileSeconds() const {
  if (steps <= 1)
    return firstStepProfile;
  std::vector<double> mean = profile;
  for (double &seconds : mean)
    seconds /= static_cast<double>(steps - 1);
  return mean;
}

int64_t Executor::workspaceBytes() const {
  int64_t total = backendDevice->workspaceBytes();
  // A device's input buffers the next step's rows are uploaded into.
  for (const auto &[id, input] : stagedInputs)
    if (input.staging)
      total += input.bytes;
  for (const auto &kernel : train)
    total += kernel->workspaceBytes();
  return total;
}

int64_t Executor::optimizerBytes() {
  int64_t total = 0;
  for (auto &[instruction, kernel] : statefulKernels())
    for (auto &[name, view] : kernel->state().tensors)
      total += view.numel() * plan::dtypeSize(view.dtype);
  return total;
}

void Executor::flush(int64_t totalSteps, const Loader *loader,
                     InstructionRange range,
                     const std::function<void(int64_t)> &afterStep) {
  const plan::Device &device = planRef.devices(deviceIndex);
  int n = device.instructions_size();
  if (std::any_of(device.instructions().begin(), device.instructions().end(),
                  [](const plan::Instruction &i) { return i.drain(); })) {
    // The drain: step totalSteps's backwards of the last micro-batches and
    // the last update, without new forwards.
    draining = true;
    try {
      runStep(StepContext{totalSteps, 0, 0, loader}, range);
    } catch (...) {
      draining = false;
      throw;
    }
    draining = false;
    if (range.begin == 0)
      --steps; // not a training step
    return;
  }
  if (range.begin > 0)
    return; // a checkpoint cuts nothing else
  // --cdp-reduce chain: the relays of the last steps' means run k steps
  // after their reduction (k: their min_step), past the end of training;
  // the report counts their messages where they fall, as predicted.
  plan::forEachRelayAfterTraining(
      device, totalSteps, scheduleOrigin, [&](int index, int64_t step) {
        train[index]->run(
            StepContext{step, deviceIndex, 0, nullptr, backendDevice->queue()});
        if (report)
          report->ran(deviceIndex, step, index, /*countSent=*/false);
      });
  // The update blocks with a tail: instructions [begin, end), run at
  // steps [first, last].
  struct Tail {
    int begin, end;
    int64_t first, last;
  };
  std::vector<Tail> tails;
  for (int begin = 0; begin < n;) {
    if (device.instructions(begin).phase() != "update") {
      ++begin;
      continue;
    }
    // A block: one stage's reduce_wait and updates. Run at step st it
    // applies the reduction of step st - 1 - delay; training ran it for
    // st < totalSteps, the flush runs the rest up to step totalSteps - 1's.
    int end = begin;
    int64_t delay = 0;
    while (end < n && device.instructions(end).phase() == "update") {
      for (const plan::Attribute &a : device.instructions(end).attributes())
        if ((device.instructions(end).op() == "reduce_wait" ||
             device.instructions(end).op() == "chain_wait") &&
            a.name() == "delay")
          delay = a.i();
      ++end;
    }
    // Blocks without a reduction wait (pipeline updates) are complete
    // after the last step; only delayed reductions have a tail to run
    // (ZeRO stage 2's shard_update takes its reduce-scatter's shard).
    // dp's clip of sharded means starts with the shards' squared norm, its
    // loss scaling (fp16) with their overflow flag.
    const std::string &head = device.instructions(begin).op();
    bool shardedClip = (head == "squared_norm" || head == "found_inf") &&
                       plan::isReplicated(planRef);
    if (head != "reduce_wait" && head != "chain_wait" &&
        head != "shard_update" && !shardedClip) {
      begin = end;
      continue;
    }
    int64_t first = std::max<int64_t>(totalSteps, scheduleOrigin + 1 + delay);
    tails.push_back({begin, end, first, totalSteps + delay});
    begin = end;
  }
  // Step by step, each block in program order, as training runs them: cdp
  // under fp16 adjusts the scale in its first stage's block for every
  // stage's updates of that step.
  int64_t last = -1;
  for (const Tail &tail : tails)
    last = std::max(last, tail.last);
  for (int64_t st = totalSteps; st <= last; ++st) {
    for (const Tail &tail : tails) {
      if (st < tail.first || st > tail.last)
        continue;
      StepContext context{st, deviceIndex, 0, nullptr, backendDevice->queue()};
      for (int i = tail.begin; i < tail.end; ++i)
        train[i]->run(context);
    }
    if (afterStep)
      afterStep(st);
  }
}

void Executor::runEval(const StepContext &context) {
  if (!evalBound)
    throw RuntimeError("device 0 evaluates a pipeline's model once it is "
                       "gathered, after training");
  StepContext queued = context;
  queued.queue = backendDevice->queue();
  takeStagedInputs();
  for (auto &kernel : eval)
    kernel->run(queued);
  backendDevice->finishStep(context.step);
}

int Executor::firstNonFinite(int &instruction) const {
  const plan::Device &device = planRef.devices(deviceIndex);
  for (int i = 0; i < device.instructions_size(); ++i)
    for (int id : device.instructions(i).outputs())
      if (id >= 0 && firstNonFiniteElement(id) >= 0) {
        instruction = i;
        return id;
      }
  return -1;
}

int64_t Executor::firstNonFiniteElement(int id) const {
  if (views.at(id).dtype != plan::F32 || !views[id].data)
    return -1;
  HostTensor host = stageOut(id);
  const float *values = host.view().f32();
  for (int64_t k = 0; k < host.view().numel(); ++k)
    if (!std::isfinite(values[k]))
      return k;
  return -1;
}

std::vector<std::pair<const plan::Instruction *, Kernel *>>
Executor::statefulKernels() {
  std::vector<std::pair<const plan::Instruction *, Kernel *>> result;
  const plan::Device &device = planRef.devices(deviceIndex);
  for (int i = 0; i < device.instructions_size(); ++i)
    if (train[i]->state().counter || !train[i]->state().tensors.empty())
      result.emplace_back(&device.instructions(i), train[i].get());
  return result;
}

std::vector<std::pair<std::string, int>> Executor::gradients() const {
  std::vector<std::pair<std::string, int>> result;
  if (planRef.applied_gradients_size() == planRef.gradients_size() &&
      planRef.applied_gradients_size() > 0) {
    for (int i = 0; i < planRef.gradients_size(); ++i)
      result.emplace_back(planRef.gradients(i), planRef.applied_gradients(i));
    return result;
  }
  for (const plan::Instruction &instruction : planRef.devices(0).instructions())
    if (instruction.op() == "gradient")
      for (const plan::Attribute &a : instruction.attributes())
        if (a.name() == "name")
          result.emplace_back(a.s(), instruction.inputs(0));
  return result;
}

void Executor::gatherOnDeviceZero(bool wholeModel) {
  if (!communicator)
    return;
  if (wholeModel) {
    gatherShardedParameters();
    gatherStageTensors();
  }
  averageBuffersOntoDeviceZero();
  if (wholeModel && !evalBound) { // the other stages' tensors have arrived
    eval = bind(planRef.devices(deviceIndex).eval_instructions(), evalThreads);
    evalBound = true;
  }
}

/// A pipeline's parameters and buffers, from the stages that own them to
/// device 0, one at a time on device 0's go-ahead (sent at once, every
/// stage's parameters were in flight together: a copy of the model's).
/// Communicators carry host memory: each tensor is staged out and in.
void Executor::gatherStageTensors() {
  const plan::Plan &plan = planRef;
  if (!plan::isPipeline(plan))
    return;
  for (const plan::Tensor &t : plan.tensors()) {
    bool owned = t.kind() == plan::PARAM || t.kind() == plan::BUFFER;
    if (!owned || !t.has_device() || t.device() == 0)
      continue;
    const TensorView &v = views[t.id()];
    float ready = 0;
    if (deviceIndex == t.device()) {
      if (!communicator->recv(0, tags::gatherReady(t.id()),
                              {plan::F32, &ready, 1}))
        throw RuntimeError("device " + std::to_string(deviceIndex) +
                           ": stopped while handing '" + t.name() +
                           "' to device 0 (another device failed)");
      HostTensor mine = stageOut(v);
      communicator->send(0, tags::gather(t.id()), hostBuffer(mine.view()), -1);
    } else if (deviceIndex == 0) {
      if (!views[t.id()].data) { // held by its stage until now
        persistent[t.id()] = backendDevice->allocate(t.bytes());
        views[t.id()].data = persistent[t.id()];
      }
      communicator->send(t.device(), tags::gatherReady(t.id()),
                         {plan::F32, &ready, 1}, -1);
      stageIn(t.id(), [&](const TensorView &host) {
        if (!communicator->recv(t.device(), tags::gather(t.id()),
                                {host.dtype, host.data, host.numel()}))
          throw RuntimeError("device 0: stopped while gathering '" + t.name() +
                             "' (another device failed)");
      });
    }
  }
}

/// dp's and cdp's float32 buffers (BatchNorm statistics): the devices'
/// mean onto device 0, summed in double in device order.
void Executor::averageBuffersOntoDeviceZero() {
  const plan::Plan &plan = planRef;
  bool pipeline = plan::isPipeline(plan);
  int devices = communicator->size();
  for (const plan::Tensor &t : plan.tensors()) {
    if (pipeline || t.kind() != plan::BUFFER || t.dtype() != plan::F32 ||
        devices < 2)
      continue;
    int64_t n = views[t.id()].numel();
    HostTensor mine = stageOut(t.id());
    if (deviceIndex != 0) {
      communicator->send(0, tags::gather(t.id()), hostBuffer(mine.view()), -1);
      continue;
    }
    std::vector<double> sum(mine.view().f32(), mine.view().f32() + n);
    std::vector<float> part(n);
    for (int d = 1; d < devices; ++d) {
      if (!communicator->recv(d, tags::gather(t.id()),
                              {plan::F32, part.data(), n}))
        throw RuntimeError("device 0: stopped while averaging '" + t.name() +
                           "' (another device failed)");
      for (int64_t i = 0; i < n; ++i)
        sum[i] += part[i];
    }
    stageIn(t.id(), [&](const TensorView &host) {
      for (int64_t i = 0; i < n; ++i)
        host.f32()[i] = static_cast<float>(sum[i] / devices);
    });
  }
}

} // namespace cdp::runtime
