//===- Report.cpp - memory and communication per time step ----------------===//
//
// Conventions (docs/strategies/cdp.md, "Reading the report"):
//  - "during": a tensor counts at every time step from the one whose
//    instruction writes it to the one whose instruction reads it last,
//    both included; a unit of activations from the time step of its stage's
//    first forward instruction to that of its last backward one.
//  - Activations are the tensors forward instructions write and a backward
//    instruction reads (what a micro-batch keeps between F_l and B_l);
//    gradients are the tensors the reductions or updates read.
//  - Weights, reduced gradients and optimizer state are resident for the
//    whole run; workspace is what kernels sized at load.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Report.h"

#include "cdp/Runtime/Json.h"

#include "cdp/Plan/InPlaceViews.h"
#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/ReplicaSymmetry.h"
#include "cdp/Plan/Residency.h"
#include "cdp/Plan/ShardGroups.h"
#include "cdp/Plan/ShardLayout.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>
#include <unordered_map>

namespace cdp::runtime {

namespace {
/// Byte series per device (kByteSeries of them).
enum Slot {
  kActivation = 0,
  kGradient = 1,
  kReduction = 2,
  kGathered = 3,
  kComm = 4,
  kMessage = 5
};

bool isGradientReader(std::string_view op) {
  return op == "reduce_start" || op == "chain_reduce" || op == "gradient" ||
         op == "update" || op == "shard_update" || op == "shard_reduce" ||
         op == "replica_shard_update" || op == "sparse_absorb";
}

/// The optimizer's moments per parameter element (Adam 2, momentum 1).
int momentCopies(const plan::Instruction &update) {
  double momentum = 0;
  std::string optimizer;
  for (const plan::Attribute &a : update.attributes()) {
    if (a.name() == "momentum")
      momentum = a.f();
    if (a.name() == "optimizer")
      optimizer = a.s();
  }
  return optimizer == "adam" || optimizer == "adamw" ? 2
         : momentum != 0.0                           ? 1
                                                     : 0;
}

/// The shards of a stage over the plan's devices from its first `tensors`
/// inputs (shard_update: the parameters; shard_reduce: the gradients).
ShardLayout shardsOf(const std::vector<int64_t> &bytes, plan::IdRange inputs,
                     int tensors, int devices) {
  std::vector<int64_t> sizes;
  for (int k = 0; k < tensors; ++k)
    sizes.push_back(bytes[inputs[k]] / 4);
  return ShardLayout(sizes, devices);
}

/// The devices a replica_shard_update's stage has (its `peers`).
int replicasOf(const plan::Instruction &update) {
  return static_cast<int>(plan::listSize(update, "peers", 1));
}

/// Bytes of one device's shard of a shard_update's or shard_reduce's
/// stage: the parameter shard itself (ZeRO stage 3), or of the stage's
/// parameters (all its inputs but the gradient shard with stage 2, half
/// with stage 1) or gradients (shard_reduce: all its inputs).
int64_t shardBytes(const plan::Instruction &instruction, plan::IdRange inputs,
                   const std::vector<int64_t> &bytes, int devices) {
  int tensors = static_cast<int>(inputs.size());
  if (instruction.op() == "replica_shard_update") // over the stage's replicas
    return shardsOf(bytes, inputs, tensors / 2, replicasOf(instruction))
               .shardSize() *
           4;
  if (instruction.op() == "shard_update") {
    int64_t zero = plan::intAttribute(instruction, "zero", 1);
    if (zero == 3)
      return bytes[inputs[0]];
    tensors = zero == 2 ? tensors - 1 : tensors / 2;
  }
  return shardsOf(bytes, inputs, tensors, devices).shardSize() * 4;
}
} // namespace

/// What one pass over the programs learns of each tensor (by id), beside
/// the resident bytes it counts.
struct PlanFacts::TensorRoles {
  explicit TensorRoles(int tensors)
      : resident(tensors, 0), countedOn(tensors, -1), commBuffer(tensors, 0),
        gatheredOutput(tensors, 0), isFed(tensors, 0),
        writtenForward(tensors, false), readBackward(tensors, false),
        readByGradient(tensors, false) {}
  std::vector<char> resident;
  std::vector<int> countedOn; ///< the device that last counted it
  std::vector<char> commBuffer;
  std::vector<char> gatheredOutput; ///< written by a shard_gather
  std::vector<char> isFed;          ///< uses are counted for these only
  std::vector<bool> writtenForward, readBackward, readByGradient;
};

PlanFacts::PlanFacts(const plan::SpelledPlan &spelled) {
  const plan::Plan &plan = spelled.plan();
  int tensors = spelled.tensors(), devices = plan.devices_size();
  category.assign(tensors, Category::None);
  bytes.assign(tensors, 0);
  weightBytes.assign(devices, 0);
  weightVersionBytes.assign(devices, 0);
  reducedBytes.assign(devices, 0);
  optimizerBytes.assign(devices, 0);
  feedbackBytes.assign(devices, 0);
  for (int id = 0; id < tensors; ++id)
    bytes[id] = spelled.tensor(id).bytes();
  storageOf.resize(tensors);
  std::iota(storageOf.begin(), storageOf.end(), 0);
  TensorRoles roles(tensors);
  // Weights, buffers, their second versions and gradient accumulators are
  // resident on the devices whose training program uses them: every device
  // for dp and cdp, the stage's devices (and replicas) for pipelines.
  // ZeRO stage 3's parameters are not: their shards are, and the
  // parameters count while gathered.
  std::vector<char> gathered = plan::gatheredParameters(plan);
  for (int id = 0; id < tensors; ++id) {
    plan::TensorKind kind = spelled.tensor(id).kind();
    bool isGathered = id < static_cast<int>(gathered.size()) && gathered[id];
    roles.resident[id] = (kind == plan::PARAM && !isGathered) ||
                         kind == plan::BUFFER || kind == plan::REDUCED ||
                         kind == plan::SHARD || kind == plan::SPARSE_STATE;
  }
  cycle = plan.has_schedule() && plan.schedule().cycle() > 0
              ? plan.schedule().cycle()
              : 2;
  unitBegins.assign(devices, {});
  unitEnds.assign(devices, {});
  uses.assign(devices, {});
  readsOfWrite.assign(devices, {});
  outputStart.assign(devices, {});
  for (int id : plan.inputs())
    if (id >= 0 && id < tensors)
      roles.isFed[id] = 1;
  scanPrograms(spelled, roles);
  categorize(spelled, roles);
  countReadsOfWrites(spelled);
  matchMessages(spelled);
}

namespace {
/// A receive as matching sees it: where it runs and what it takes.
struct PostedReceive {
  int64_t timeStep, microBatch, perStep, stepOffset;
};
/// The micro-batch over the run a send or receive carries in step 0, less
/// its step offset (PlanCheck's Message::overRun).
int64_t messageBatchOf(const plan::SpelledInstruction &instruction) {
  return plan::intAttribute(*instruction, "micro_batch", 0) +
         instruction.messageBatch;
}
} // namespace

/// Each send to another device is taken by one receive: the one on its
/// peer from this device with its value whose micro-batch over the run
/// matches, some steps later (step_offset and the micro-batches per step
/// say how many). Every device's receives are looked at, as a process's
/// report spells its own devices only.
void PlanFacts::matchMessages(const plan::SpelledPlan &spelled) {
  const plan::Plan &plan = spelled.plan();
  int devices = plan.devices_size();
  receiptOf.assign(devices, {});
  matchChainMessages(spelled);
  auto isSend = [](const plan::Instruction &i) { return i.op() == "send"; };
  bool sends = false;
  for (int d = 0; d < spelled.devices() && !sends; ++d)
    for (const plan::SpelledInstruction &instruction : spelled.program(d))
      sends = sends || isSend(*instruction);
  if (!sends)
    return;
  plan::SpelledPlan receives(plan, nullptr, [](const plan::Instruction &i) {
    return i.op() == "recv";
  });
  // (sender, receiver, value) -> its receives
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<PostedReceive>>
      posted;
  for (int p = 0; p < receives.devices(); ++p)
    for (const plan::SpelledInstruction &r : receives.program(p))
      posted[{plan::intAttribute(*r, "peer") + r.peerOffset, p,
              plan::intAttribute(*r, "value")}]
          .push_back(
              {r.timeStep, messageBatchOf(r),
               std::max<int64_t>(plan::intAttribute(*r, "micro_batches", 1), 1),
               plan::intAttribute(*r, "step_offset", 0)});
  for (int d = 0; d < spelled.devices(); ++d)
    for (int i = 0; i < spelled.size(d); ++i) {
      const plan::SpelledInstruction &s = spelled.at(d, i);
      int64_t to = plan::intAttribute(*s, "peer") + s.peerOffset;
      if (!isSend(*s) || to == d)
        continue;
      auto it = posted.find({d, to, plan::intAttribute(*s, "value")});
      if (it == posted.end())
        continue;
      int64_t batch = messageBatchOf(s),
              offset = plan::intAttribute(*s, "step_offset", 0);
      for (const PostedReceive &r : it->second) {
        int64_t apart = batch - r.microBatch;
        if (apart % r.perStep != 0)
          continue;
        receiptOf[d][i] = {r.timeStep,
                           offset - r.stepOffset + apart / r.perStep,
                           bytes[spelled.inputs(d, s)[0]]};
        break;
      }
    }
}

/// The chain's hops (cdp's `--cdp-reduce chain`, CDP-ZeRO's gradients):
/// slot j's chain_reduce sends its partial sum to slot j + 1's of the same
/// stage and step; the last slot sends the mean to the owner's chain_wait
/// {from} (CDP-ZeRO: taken 1 + delay steps later) or to slot N - 2's
/// chain_relay, and each relay passes it to the slot before (a relay takes
/// the mean of step_offset steps before).
void PlanFacts::matchChainMessages(const plan::SpelledPlan &spelled) {
  const plan::Plan &plan = spelled.plan();
  auto isChain = [](const plan::Instruction &i) {
    return i.op() == "chain_reduce" || i.op() == "chain_relay" ||
           i.op() == "chain_wait";
  };
  plan::SpelledPlan chains(plan, nullptr, isChain);
  // (device, op, stage) -> its first instruction
  std::map<std::tuple<int, std::string, int64_t>,
           const plan::SpelledInstruction *>
      first;
  for (int d = 0; d < chains.devices(); ++d)
    for (const plan::SpelledInstruction &c : chains.program(d))
      first.emplace(
          std::make_tuple(d, c->op(), plan::intAttribute(*c, "stage", 0)), &c);
  int last = plan.devices_size() - 1;
  for (int d = 0; d < spelled.devices(); ++d)
    for (int i = 0; i < spelled.size(d); ++i) {
      const plan::SpelledInstruction &s = spelled.at(d, i);
      if (!isChain(*s) || s->op() == "chain_wait")
        continue;
      int64_t stage = plan::intAttribute(*s, "stage", 0);
      auto find = [&](int device, const char *op) {
        auto it = first.find({device, op, stage});
        return it == first.end() ? nullptr : it->second;
      };
      auto offset = [](const plan::SpelledInstruction *r) {
        return plan::intAttribute(**r, "step_offset", 0);
      };
      int64_t sent = 0;
      for (int id : spelled.inputs(d, s))
        sent += id >= 0 ? bytes[id] : 0;
      if (s->op() == "chain_relay") {
        if (const auto *r = d > 0 ? find(d - 1, "chain_relay") : nullptr)
          receiptOf[d][i] = {r->timeStep, offset(r) - offset(&s),
                             bytes[spelled.outputs(d, s)[0]]};
        continue;
      }
      int64_t owner = plan::intAttribute(*s, "owner", -1);
      if (d < last) {
        if (const auto *r = find(d + 1, "chain_reduce"))
          receiptOf[d][i] = {r->timeStep, 0, sent};
      } else if (owner >= 0 && owner != d) {
        const auto *r = find(static_cast<int>(owner), "chain_wait");
        if (r && plan::intAttribute(**r, "from", -1) == d)
          receiptOf[d][i] = {r->timeStep,
                             1 + plan::intAttribute(**r, "delay", 0), sent};
      } else if (owner < 0 && d > 0) {
        if (const auto *r = find(d - 1, "chain_relay"))
          receiptOf[d][i] = {r->timeStep, offset(r), sent};
      }
    }
}

/// One pass over every device's instructions (plans may hold hundreds of
/// thousands): resident bytes, how tensors are written and read, units.
void PlanFacts::noteView(const plan::SpelledPlan &spelled,
                         const plan::Instruction &instruction,
                         plan::IdRange inputs, plan::IdRange outputs) {
  if (plan::isInPlaceView(
          instruction.op(), inputs, outputs,
          [&](int id) -> const plan::Tensor & { return spelled.tensor(id); }))
    storageOf[outputs[0]] = storageOf[inputs[0]];
}

void PlanFacts::scanPrograms(const plan::SpelledPlan &spelled,
                             TensorRoles &roles) {
  int devices = spelled.plan().devices_size();
  for (int d = 0; d < devices; ++d) {
    int n = spelled.size(d);
    unitBegins[d].assign(n, 0);
    unitEnds[d].assign(n, 0);
    // A unit is one micro-batch's activations on one stage: from its first
    // forward instruction to its last backward one. (2bw runs a step's
    // last backwards in the next step's program, marked `drain`.)
    // (stage, micro-batch, drain) packed -> instruction index
    std::unordered_map<uint64_t, int> first, last;
    for (int i = 0; i < n; ++i) {
      const plan::SpelledInstruction &spelledInstruction = spelled.at(d, i);
      const plan::Instruction &instruction = *spelledInstruction;
      plan::IdRange inputs = spelled.inputs(d, spelledInstruction);
      plan::IdRange outputs = spelled.outputs(d, spelledInstruction);
      for (plan::IdRange ids : {inputs, outputs})
        for (int id : ids) {
          if (id < 0 || !roles.resident[id] || roles.countedOn[id] == d)
            continue;
          roles.countedOn[id] = d;
          const plan::Tensor &t = spelled.tensor(id);
          if (t.has_previous_version_of())
            weightVersionBytes[d] += t.bytes();
          else if (t.kind() == plan::PARAM || t.kind() == plan::BUFFER ||
                   t.kind() == plan::SHARD)
            weightBytes[d] += t.bytes();
          else if (t.kind() == plan::REDUCED)
            reducedBytes[d] += t.bytes();
          else if (t.kind() == plan::SPARSE_STATE)
            feedbackBytes[d] += t.bytes();
        }
      // string_view: compares lengths first.
      std::string_view phase = instruction.phase(), op = instruction.op();
      bool forward = phase == "forward";
      bool backward = phase == "backward";
      bool gradientReader = isGradientReader(op);
      noteView(spelled, instruction, inputs, outputs);
      for (int id : outputs)
        if (id >= 0 && forward)
          roles.writtenForward[id] = true;
      for (int id : inputs) {
        if (id < 0)
          continue;
        // A view's reads are its storage's.
        if (backward)
          roles.readBackward[id] = roles.readBackward[storageOf[id]] = true;
        if (gradientReader)
          roles.readByGradient[id] = roles.readByGradient[storageOf[id]] = true;
        if (roles.isFed[id])
          ++uses[d][id];
      }
      if (op == "update" || op == "sparse_absorb")
        optimizerBytes[d] += momentCopies(instruction) * bytes[inputs[0]];
      // laysa: what a selection writes and an apply reads (every device's
      // selections, gathered).
      if (op == "sparse_select")
        for (int id : outputs)
          if (id >= 0)
            roles.commBuffer[id] = 1;
      if (op == "sparse_apply")
        for (int id : inputs)
          if (id >= 0 && spelled.tensor(id).kind() == plan::ACTIVATION)
            roles.commBuffer[id] = 1;
      // ZeRO: the moments of the device's shard only.
      if (op == "shard_update" || op == "replica_shard_update")
        optimizerBytes[d] += momentCopies(instruction) *
                             shardBytes(instruction, inputs, bytes, devices);
      if (op == "shard_gather")
        for (int id : outputs)
          if (id >= 0)
            roles.gatheredOutput[id] = 1;
      uint64_t key = (static_cast<uint64_t>(instruction.stage()) << 33) |
                     (static_cast<uint64_t>(
                          static_cast<uint32_t>(spelledInstruction.microBatch))
                      << 1) |
                     (instruction.drain() ? 1 : 0);
      if (forward)
        first.try_emplace(key, i);
      else if (backward)
        last[key] = i;
    }
    for (auto &[key, i] : first)
      unitBegins[d][i] = 1;
    for (auto &[key, i] : last)
      unitEnds[d][i] = 1;
  }
}

/// Activations, gradients, gathered parameters and laysa's exchange
/// buffers, by how the programs write and read them.
void PlanFacts::categorize(const plan::SpelledPlan &spelled,
                           TensorRoles &roles) {
  const plan::Plan &plan = spelled.plan();
  int tensors = spelled.tensors();
  for (int id = 0; id < tensors; ++id) {
    const plan::Tensor &t = spelled.tensor(id);
    if ((t.kind() != plan::ACTIVATION && t.kind() != plan::INPUT) ||
        storageOf[id] != id)
      continue; // a view counts as its storage
    if (roles.readByGradient[id] && !roles.writtenForward[id])
      category[id] = Category::Gradient;
    else if ((roles.writtenForward[id] || t.kind() == plan::INPUT) &&
             roles.readBackward[id])
      category[id] = Category::Activation;
  }
  // CDP-ZeRO's stages arrive whole in their region (recv, master_copy).
  for (const plan::ShardGroup &group : plan.schedule().shard_groups())
    if (group.has_owner() && group.region() >= 0 && group.region() < tensors)
      roles.gatheredOutput[group.region()] = 1;
  for (int id = 0; id < tensors; ++id)
    if (roles.gatheredOutput[id])
      category[id] = Category::Gathered;
    else if (roles.commBuffer[id])
      category[id] = Category::Comm;
}

/// Per device, the reads of each write up to the next write of the tensor.
void PlanFacts::countReadsOfWrites(const plan::SpelledPlan &spelled) {
  int tensors = spelled.tensors(), devices = spelled.plan().devices_size();
  std::vector<int> lastWrite(tensors, -1);
  for (int d = 0; d < devices; ++d) {
    // Writes and reads over two passes of the program: a write's reads
    // run until the next write, possibly in the next step.
    int n = spelled.size(d);
    std::vector<int> &start = outputStart[d];
    start.assign(n + 1, 0);
    for (int i = 0; i < n; ++i)
      start[i + 1] = start[i] + spelled.at(d, i).outputs;
    readsOfWrite[d].assign(start[n], 0);
    // tensor -> the slot of its latest write in readsOfWrite[d] (-1: none;
    // one table for all devices, reset after each). Only counted tensors
    // (activations, gradients) are tracked.
    for (int p = 0; p < 2 * n; ++p) {
      const plan::SpelledInstruction &instruction = spelled.at(d, p % n);
      plan::IdRange outputs = spelled.outputs(d, instruction);
      if (p < n)
        for (int j = 0; j < outputs.size(); ++j) {
          int id = outputs[j];
          if (id >= 0 && category[id] != Category::None)
            lastWrite[id] = start[p] + j;
        }
      for (int id : spelled.inputs(d, instruction))
        if (id >= 0 && lastWrite[storageOf[id]] >= 0)
          ++readsOfWrite[d][lastWrite[storageOf[id]]];
      if (p >= n)
        for (int id : outputs)
          if (id >= 0)
            lastWrite[id] = -1; // the next step's write: its reads are its own
    }
    for (const plan::SpelledInstruction &instruction : spelled.program(d))
      for (int id : spelled.outputs(d, instruction))
        if (id >= 0)
          lastWrite[id] = -1;
  }
}

int64_t PlanFacts::lastTime(int64_t steps) const {
  return steps > 0 ? cycle * steps - 1 : 0;
}

ReportBuilder::ReportBuilder(const plan::Plan &plan, int64_t steps)
    : ReportBuilder(plan, steps, nullptr) {}

ReportBuilder::ReportBuilder(const plan::Plan &plan, int64_t steps,
                             const std::function<bool(int)> &keep)
    : plan(plan), spelled(plan, keep), planFacts(spelled), steps(steps) {
  int64_t last = 0;
  for (int d = 0; d < spelled.devices(); ++d)
    for (const plan::SpelledInstruction &i : spelled.program(d))
      last =
          std::max(last, planFacts.timeOf(i, std::max<int64_t>(steps - 1, 0)));
  horizon = last + 1;
  devices.resize(plan.devices_size());
  for (Series &s : devices) {
    s.units.assign(horizon + 1, 0);
    s.unitEnds.assign(horizon + 1, 0);
    for (int c = 0; c < kByteSeries; ++c) {
      s.bornBytes[c].assign(horizon + 1, 0);
      s.diedBytes[c].assign(horizon + 1, 0);
    }
    s.sent.assign(horizon + 1, 0);
    s.sentCollective.assign(horizon + 1, 0);
    s.ready.assign(horizon + 1, 0);
  }
  remaining.assign(plan.devices_size(), {});
  workspace.assign(plan.devices_size(), 0);
  optimizer = planFacts.optimizerBytes;
  streamOf.resize(plan.devices_size());
  for (int d = 0; d < plan.devices_size(); ++d)
    streamOf[d] = d;
}

void ReportBuilder::copyDevice(int from, int to) {
  devices[to] = devices[from];
  workspace[to] = workspace[from];
  optimizer[to] = optimizer[from];
  planFacts.weightBytes[to] = planFacts.weightBytes[from];
  planFacts.weightVersionBytes[to] = planFacts.weightVersionBytes[from];
  planFacts.reducedBytes[to] = planFacts.reducedBytes[from];
  planFacts.optimizerBytes[to] = planFacts.optimizerBytes[from];
  planFacts.feedbackBytes[to] = planFacts.feedbackBytes[from];
  streamOf[to] = streamOf[from];
}

void ReportBuilder::startStep(int device, int64_t t) {
  // Written tensors count their reads from their write (born); the
  // step's inputs from here.
  for (int id : plan.inputs())
    remaining[device][id] = planFacts.uses[device][id];
  int64_t offset =
      plan.has_schedule() && plan.schedule().offsets_size() > device
          ? plan.schedule().offsets(device)
          : 0;
  for (int id : plan.inputs())
    born(device, offset + planFacts.cycle * t, id);
}

static int slotOf(Category c) {
  return c == Category::Gradient   ? kGradient
         : c == Category::Gathered ? kGathered
         : c == Category::Comm     ? kComm
                                   : kActivation;
}

void ReportBuilder::born(int device, int64_t tau, int tensor, int instruction) {
  Category c = planFacts.category[tensor];
  if (c == Category::None)
    return; // not counted: its reads need no tracking
  if (instruction >= 0) {
    plan::IdRange outputs =
        spelled.outputs(device, spelled.at(device, instruction));
    int reads = 0;
    for (int j = 0; j < outputs.size(); ++j)
      if (outputs[j] == tensor)
        reads =
            planFacts
                .readsOfWrite[device]
                             [planFacts.outputStart[device][instruction] + j];
    remaining[device][tensor] = reads;
  }
  if (tau > horizon)
    return;
  devices[device].bornBytes[slotOf(c)][tau] += planFacts.bytes[tensor];
  // A write nothing reads before the next one (a value every micro-batch
  // writes alike, in one place, and only a later backward reads) is dead
  // once written.
  if (instruction >= 0 && remaining[device][tensor] == 0)
    devices[device].diedBytes[slotOf(c)][tau] += planFacts.bytes[tensor];
}

void ReportBuilder::used(int device, int64_t tau, int tensor) {
  tensor = planFacts.storageOf[tensor];
  Category c = planFacts.category[tensor];
  if (c == Category::None || --remaining[device][tensor] != 0 || tau > horizon)
    return;
  devices[device].diedBytes[slotOf(c)][tau] += planFacts.bytes[tensor];
}

void ReportBuilder::unitBegins(int device, int64_t tau) {
  if (tau <= horizon)
    ++devices[device].units[tau];
}

void ReportBuilder::unitEnds(int device, int64_t tau) {
  if (tau <= horizon)
    ++devices[device].unitEnds[tau];
}

void ReportBuilder::sent(int device, int64_t tau, int64_t bytes,
                         bool collective) {
  if (tau > horizon)
    return;
  devices[device].sent[tau] += bytes;
  if (collective)
    devices[device].sentCollective[tau] += bytes;
}

void ReportBuilder::gradientReady(int device, int64_t tau, int64_t bytes) {
  if (tau <= horizon)
    devices[device].ready[tau] += bytes;
}

void ReportBuilder::ran(int device, int64_t t, int index, bool countSent) {
  const plan::SpelledInstruction &instruction = spelled.at(device, index);
  plan::IdRange inputs = spelled.inputs(device, instruction);
  plan::IdRange outputs = spelled.outputs(device, instruction);
  int64_t tau = planFacts.timeOf(instruction, t);
  if (tau < 0)
    return; // an edited plan's `ahead` work before the time axis starts
  if (planFacts.unitBegins[device][index])
    unitBegins(device, tau);
  if (planFacts.unitEnds[device][index])
    unitEnds(device, tau);
  for (int id : outputs)
    if (id >= 0)
      born(device, tau, id, index);
  for (int id : inputs)
    if (id >= 0)
      used(device, tau, id);
  std::string_view op = instruction->op();
  auto total = [&](const auto &ids) {
    int64_t bytes = 0;
    for (int id : ids)
      bytes += id >= 0 ? planFacts.bytes[id] : 0;
    return bytes;
  };
  if (op == "reduce_wait") {
    // The device's reduction is back: its buffer in flight is free.
    if (tau <= horizon)
      devices[device].diedBytes[kReduction][tau] += total(outputs);
    return;
  }
  // A message's copy lives on its sender until its receipt (the in-process
  // mailbox's, or the MPI fabric's while the receiver has not taken it):
  // from the end of the sending time step (a send follows the work that
  // made its value) up to the receiving one, whose receive comes first.
  if (auto receipt = planFacts.receiptOf[device].find(index);
      receipt != planFacts.receiptOf[device].end()) {
    int64_t bytes = receipt->second.bytes;
    int64_t taken = receipt->second.timeStep +
                    planFacts.cycle * (t + receipt->second.stepDelta);
    int64_t last = std::max(tau, taken - 1);
    if (tau <= horizon)
      devices[device].bornBytes[kMessage][tau] += bytes;
    if (last <= horizon)
      devices[device].diedBytes[kMessage][last] += bytes;
  }
  // Pipelines, point to point; a send to the device itself (interleaved
  // stages on one device) moves nothing between devices, as the runtime's
  // log counts it.
  if (countSent && op == "send" &&
      plan::intAttribute(*instruction, "peer", -1) + instruction.peerOffset !=
          device)
    sent(device, tau, planFacts.bytes[inputs[0]]);
  if (countSent && op == "chain_relay" && device > 0)
    sent(device, tau, total(outputs) / 2);       // one of 2 buffers
  if (op == "replica_shard_update" && countSent) // to the other replicas
    sent(device, tau,
         (replicasOf(*instruction) - 1) *
             shardBytes(*instruction, inputs, planFacts.bytes, 0));
  if (op == "replica_sum" && countSent) // the gradient to the other replicas
    sent(device, tau, (replicasOf(*instruction) - 1) * total(inputs));
  if (op == "sparse_gather" && countSent) // the selection to every other one
    sent(device, tau, (plan.devices_size() - 1) * total(inputs),
         /*collective=*/true);
  if (op == "norm_all_reduce" && countSent) // a share to every other device
    sent(device, tau, (plan.devices_size() - 1) * planFacts.bytes[inputs[0]],
         /*collective=*/true);
  if (op == "shard_update" || op == "shard_reduce" || op == "shard_gather") {
    // An all-gather sends the device's shard to every other device; the
    // reduce-scatter every other device's shard of its gradients. Stage
    // 3's shard_update gathers nothing (shard_gather does, where needed).
    int N = plan.devices_size();
    int64_t shard = op == "shard_gather"
                        ? planFacts.bytes[inputs[0]]
                        : shardBytes(*instruction, inputs, planFacts.bytes, N);
    if (op == "shard_reduce") // the stage's gradients are complete
      gradientReady(device, tau, total(inputs));
    if (countSent && !(op == "shard_update" &&
                       plan::intAttribute(*instruction, "zero", 1) == 3))
      sent(device, tau, (N - 1) * shard, /*collective=*/true);
  }
  if (op != "reduce_start" && op != "chain_reduce")
    return;
  // Stage gradients become complete where they are handed over. An
  // all-reduce keeps them in flight (the device's contribution, then its
  // result) until the device's wait: under CDP a delayed stage has two
  // steps' in flight. The chain holds its means in plan buffers instead.
  int64_t bytes = total(inputs);
  gradientReady(device, tau, bytes);
  if (op == "reduce_start" && tau <= horizon)
    devices[device].bornBytes[kReduction][tau] += bytes;
  if (!countSent)
    return;
  // The contribution, the partial sum on, or the mean back (the last
  // slot; CDP-ZeRO: to the stage's owner, unless it is the owner).
  int64_t owner = plan::intAttribute(*instruction, "owner");
  bool last = device + 1 == plan.devices_size();
  if (op == "reduce_start" || !last ||
      (owner >= 0 ? owner != device : device > 0))
    sent(device, tau, bytes, /*collective=*/op == "reduce_start");
}

void ReportBuilder::setWorkspace(int device, int64_t bytes) {
  workspace[device] = bytes;
}
void ReportBuilder::setOptimizer(int device, int64_t bytes) {
  optimizer[device] = bytes;
}
void ReportBuilder::setWeightsRead(int device, int64_t bytes) {
  weightsRead.resize(devices.size(), 0);
  weightsRead[device] = bytes;
}

/// The share of a step's time steps in which `stream` does no forward or
/// backward work.
double ReportBuilder::bubbleFraction(int stream) const {
  std::set<int64_t> busy;
  for (const plan::SpelledInstruction &instruction : spelled.program(stream))
    if (std::string_view phase = instruction->phase();
        phase == "forward" || phase == "backward")
      busy.insert(((instruction.timeStep % planFacts.cycle) + planFacts.cycle) %
                  planFacts.cycle);
  return 1.0 - static_cast<double>(busy.size()) / planFacts.cycle;
}

/// Appends `name` and the number `value` (to_chars: an ostream's number
/// formatting was a third of the report's time at 1024 devices).
static void appendField(std::string &out, const char *name, int64_t value) {
  out += name;
  char digits[24];
  out.append(digits, std::to_chars(digits, digits + sizeof(digits), value).ptr);
}

std::string ReportBuilder::json() const {
  int N = devices.size();
  // The run's description through nlohmann-json; the per-time-step rows
  // (numbers only, devices x time steps of them) are written directly below:
  // building them as JSON values cost more than the whole prediction of a
  // 2bw plan (docs/strategies/cdp.md, "Reading the report").
  Json head = {{"schema", "cdp-report/2"},
               {"strategy", plan.strategy()},
               {"devices", N},
               {"stages", plan.has_schedule() ? plan.schedule().stages() : 1},
               {"slots_per_step", std::max(plan.micro_batches(), 1)},
               {"steps", steps}};
  Json stageParams = Json::array();
  if (plan.has_schedule() && plan.schedule().stage_param_bytes_size())
    for (int64_t bytes : plan.schedule().stage_param_bytes())
      stageParams.push_back(bytes);
  else
    stageParams.push_back(planFacts.weightBytes[0]);
  head["stage_param_bytes"] = std::move(stageParams);
  // What each device allocates for its tensors: the memory plan's arena
  // (pipelines: the stash slots, then one micro-batch's other tensors).
  head["arena_bytes"] = Json::array();
  for (int d = 0; d < N; ++d)
    head["arena_bytes"].push_back(plan.devices(d).arena_bytes());
  // And with the persistent tensors it holds during training: what cdp-run
  // allocates per device at load (kernels' workspace aside).
  head["allocated_bytes"] = Json::array();
  for (int64_t bytes : plan::allocatedBytesPerDevice(plan))
    head["allocated_bytes"].push_back(bytes);
  if (!weightsRead.empty())
    head["weights_read_bytes"] = weightsRead;
  if (threads > 0)
    head["threads_per_device"] = threads;
  if (plan::isPipeline(plan)) {
    // Which stage each device runs (cdp-mp gives some stages more devices
    // than others).
    head["device_stages"] = Json::array();
    for (int d = 0; d < N; ++d) {
      int64_t stage = 0;
      for (const plan::SpelledInstruction &instruction :
           spelled.program(streamOf[d]))
        if (instruction->stage() > 0) {
          stage = instruction->stage();
          break;
        }
      head["device_stages"].push_back(stage);
    }
  }
  // Busy time steps per device in one step of the schedule (forward and
  // backward work), and the rest of the cycle as the bubble; once per
  // stream (a copied device runs the stream it copies).
  head["step_time_steps"] = planFacts.cycle;
  head["bubble_fraction"] = Json::array();
  std::unordered_map<int, double> bubbleOfStream;
  for (int d = 0; d < N; ++d) {
    auto [it, added] = bubbleOfStream.try_emplace(streamOf[d], 0.0);
    if (added)
      it->second = bubbleFraction(streamOf[d]);
    head["bubble_fraction"].push_back(it->second);
  }
  if (plan.has_schedule()) {
    // The decisions the run follows, printed with it (docs/strategies/cdp.md:
    // the freshness table is part of the report).
    const plan::Schedule &schedule = plan.schedule();
    auto list = [](const auto &field) {
      return std::vector<int64_t>(field.begin(), field.end());
    };
    Json delays = Json::array();
    for (const plan::Ints &perStage : schedule.version_delay())
      delays.push_back(list(perStage.values()));
    head["schedule"] = {{"rule", schedule.rule()},
                        {"reduce", schedule.reduce()},
                        {"offsets", list(schedule.offsets())},
                        {"version_delay", std::move(delays)},
                        {"live_versions", list(schedule.live_versions())}};
  }
  SeriesRows rows = seriesRows();
  if (static_cast<int>(rows.devices.size()) < N)
    head["series_of"] = rows.seriesOf;
  // Appended with to_chars: an ostream's number formatting was a third of
  // the report's time at 1024 devices (the same text).
  std::string os = "{";
  size_t rowBytes = 0;
  for (int d : rows.devices)
    rowBytes += rows.text[d].size();
  os.reserve(rowBytes + rows.devices.size() * horizon * 2 + horizon * 64 +
             65536);
  bool first = true;
  for (const auto &[key, value] : head.items()) {
    os += first ? "\n" : ",\n";
    os += jsonText(key);
    os += ": ";
    os += jsonText(value);
    first = false;
  }
  os += ",\n\"time_steps\": [\n";
  for (int64_t tau = 0; tau < horizon; ++tau) {
    appendField(os, "{\"t\": ", tau);
    os += ", \"devices\": [";
    for (size_t row = 0; row < rows.devices.size(); ++row) {
      int d = rows.devices[row];
      size_t begin = tau ? rows.ends[d][tau - 1] : 0;
      if (row)
        os += ", ";
      os.append(rows.text[d], begin, rows.ends[d][tau] - begin);
    }
    appendField(os, "], \"grad_ready_bytes\": ", rows.ready[tau]);
    os += tau + 1 < horizon ? "},\n" : "}\n";
  }
  std::vector<int64_t> peakDevice(N), peakHeld(N);
  for (int d = 0; d < N; ++d) {
    peakDevice[d] = rows.peakDevice[streamOf[d]];
    peakHeld[d] = rows.peakHeld[streamOf[d]];
  }
  Json peak = {{"activation_units", rows.peakUnits},
               {"activation_bytes", rows.peakActivation},
               {"device_bytes", peakDevice},
               {"resident_bytes", residentBytes(peakDevice, peakHeld)}};
  os += "],\n\"peak\": ";
  os += jsonText(peak);
  os += "\n}\n";
  return os;
}

/// Per device whose series was recorded (not copied), its row of every
/// time step; the devices with distinct series (the report's rows, in
/// device order), each device's row (`series_of`), and the totals over all
/// devices, a copied device counted with the one it copies.
ReportBuilder::SeriesRows ReportBuilder::seriesRows() const {
  int N = devices.size();
  SeriesRows rows;
  std::vector<int> recorded = recordedDevices(), copies(N, 0);
  for (int d = 0; d < N; ++d)
    ++copies[streamOf[d]];
  rows.text.resize(N);
  rows.ends.resize(N);
  rows.peakDevice.assign(N, 0);
  rows.peakHeld.assign(N, 0);
  rows.ready.assign(horizon, 0);
  int64_t totalUnits = 0, totalActivation = 0;
  forEachSample(recorded, [&](int64_t tau, int d, const Sample &sample) {
    std::string &text = rows.text[d];
    appendField(text, "{\"activation_units\": ", sample.units);
    appendField(text, ", \"activation_bytes\": ", sample.activation);
    appendField(text, ", \"weight_bytes\": ", planFacts.weightBytes[d]);
    appendField(
        text, ", \"weight_version_bytes\": ", planFacts.weightVersionBytes[d]);
    appendField(text, ", \"gathered_weight_bytes\": ", sample.gathered);
    appendField(text, ", \"gradient_bytes\": ", sample.gradient);
    appendField(text, ", \"reduction_bytes\": ", sample.reduction);
    appendField(text, ", \"optimizer_bytes\": ", optimizer[d]);
    appendField(text,
                ", \"error_feedback_bytes\": ", planFacts.feedbackBytes[d]);
    appendField(text, ", \"comm_buffer_bytes\": ", sample.comm);
    appendField(text, ", \"message_bytes\": ", sample.messages);
    appendField(text, ", \"workspace_bytes\": ", workspace[d]);
    appendField(text, ", \"sent_bytes\": ", sample.sent);
    appendField(text, ", \"sent_collective_bytes\": ", sample.sentCollective);
    text += "}";
    rows.ends[d].push_back(text.size());
    totalUnits += copies[d] * sample.units;
    totalActivation += copies[d] * sample.activation;
    rows.ready[tau] += copies[d] * sample.ready;
    rows.peakDevice[d] = std::max(rows.peakDevice[d], sample.deviceBytes);
    rows.peakHeld[d] = std::max(rows.peakHeld[d], sample.communicatorBytes());
    if (d != recorded.back())
      return;
    rows.peakUnits = std::max(rows.peakUnits, totalUnits);
    rows.peakActivation = std::max(rows.peakActivation, totalActivation);
    totalUnits = totalActivation = 0;
  });
  // Devices alike in every number share a row (a pipeline's replicas, data
  // parallelism's middle devices), in predicted and measured reports alike.
  std::unordered_map<std::string_view, int> rowOfText;
  std::vector<int> rowOf(N, -1);
  for (int d : recorded) {
    auto [it, added] = rowOfText.try_emplace(rows.text[d], rows.devices.size());
    if (added)
      rows.devices.push_back(d);
    rowOf[d] = it->second;
  }
  rows.seriesOf.resize(N);
  for (int d = 0; d < N; ++d)
    rows.seriesOf[d] = rowOf[streamOf[d]];
  return rows;
}

void ReportBuilder::forEachSample(
    const std::vector<int> &visited,
    const std::function<void(int64_t, int, const Sample &)> &visit) const {
  int N = devices.size();
  std::vector<int64_t> units(N, 0), live[kByteSeries];
  for (std::vector<int64_t> &bytes : live)
    bytes.assign(N, 0);
  for (int64_t tau = 0; tau < horizon; ++tau)
    for (int d : visited) {
      const Series &s = devices[d];
      Sample sample;
      // During: what is live at the end of tau - 1 plus what tau creates.
      units[d] += s.units[tau];
      sample.units = units[d];
      sample.activation = live[kActivation][d] + s.bornBytes[kActivation][tau];
      sample.gradient = live[kGradient][d] + s.bornBytes[kGradient][tau] +
                        planFacts.reducedBytes[d];
      sample.reduction = live[kReduction][d] + s.bornBytes[kReduction][tau];
      sample.gathered = live[kGathered][d] + s.bornBytes[kGathered][tau];
      sample.comm = live[kComm][d] + s.bornBytes[kComm][tau];
      sample.messages = live[kMessage][d] + s.bornBytes[kMessage][tau];
      sample.deviceBytes =
          sample.activation + sample.gradient + sample.reduction +
          sample.gathered + sample.comm + sample.messages +
          planFacts.weightBytes[d] + planFacts.weightVersionBytes[d] +
          planFacts.feedbackBytes[d] + optimizer[d] + workspace[d];
      sample.sent = s.sent[tau];
      sample.sentCollective = s.sentCollective[tau];
      sample.ready = s.ready[tau];
      visit(tau, d, sample);
      units[d] -= s.unitEnds[tau];
      for (int c = 0; c < kByteSeries; ++c)
        live[c][d] += s.bornBytes[c][tau] - s.diedBytes[c][tau];
    }
}

/// The devices whose series were recorded, not copied from another's.
std::vector<int> ReportBuilder::recordedDevices() const {
  std::vector<int> recorded;
  for (int d = 0; d < static_cast<int>(streamOf.size()); ++d)
    if (streamOf[d] == d)
      recorded.push_back(d);
  return recorded;
}

std::vector<int64_t> ReportBuilder::devicePeaks() const {
  int N = devices.size();
  std::vector<int64_t> peaks(N, 0);
  forEachSample(recordedDevices(), [&](int64_t, int d, const Sample &sample) {
    peaks[d] = std::max(peaks[d], sample.deviceBytes);
  });
  for (int d = 0; d < N; ++d)
    peaks[d] = peaks[streamOf[d]];
  return peaks;
}

std::vector<int64_t> ReportBuilder::residentBytes() const {
  int N = devices.size();
  std::vector<int64_t> peaks(N, 0), held(N, 0);
  forEachSample(recordedDevices(), [&](int64_t, int d, const Sample &sample) {
    peaks[d] = std::max(peaks[d], sample.deviceBytes);
    held[d] = std::max(held[d], sample.communicatorBytes());
  });
  for (int d = 0; d < N; ++d) {
    peaks[d] = peaks[streamOf[d]];
    held[d] = held[streamOf[d]];
  }
  return residentBytes(peaks, held);
}

/// cdp-run allocates a device's arena and persistent tensors once, at
/// load; its optimizer state, workspace and the messages' copies lie
/// outside them.
std::vector<int64_t>
ReportBuilder::residentBytes(const std::vector<int64_t> &peaks,
                             const std::vector<int64_t> &messages) const {
  std::vector<int64_t> resident = plan::allocatedBytesPerDevice(plan);
  for (size_t d = 0; d < resident.size(); ++d)
    resident[d] = std::max(peaks[d], resident[d] + optimizer[d] + workspace[d] +
                                         messages[d]);
  return resident;
}

namespace {

/// Feeds `report` the events its plan implies (on the devices `predicted`
/// accepts, all without it).
void predict(int64_t steps, ReportBuilder &report,
             const std::function<bool(int)> &predicted = nullptr) {
  const plan::SpelledPlan &spelled = report.spelledPlan();
  for (int d = 0; d < spelled.devices(); ++d) {
    if (predicted && !predicted(d))
      continue;
    // 2bw and cdp-mp end with a drain: one more step of the instructions
    // marked `drain` (the last backwards and update).
    bool drains = false;
    for (const plan::SpelledInstruction &instruction : spelled.program(d))
      drains |= instruction->drain();
    // CDP-ZeRO's owners run the next step's sends (`ahead`) once before
    // step 0, as step -1's program would, and not in the last step.
    for (int i = 0; i < spelled.size(d); ++i)
      if (spelled.at(d, i)->ahead())
        report.ran(d, -1, i, /*countSent=*/true);
    for (int64_t t = 0; t < steps + (drains ? 1 : 0); ++t) {
      bool draining = t == steps;
      report.startStep(d, t);
      for (int i = 0; i < spelled.size(d); ++i) {
        const plan::Instruction &instruction = *spelled.at(d, i);
        // A run without a checkpoint at its end: `next_step_only` sends
        // are skipped in its last step too.
        if (instruction.min_step() > t || (draining && !instruction.drain()) ||
            ((instruction.ahead() || instruction.next_step_only()) &&
             t + 1 >= steps))
          continue;
        report.ran(d, t, i, /*countSent=*/true);
      }
    }
    // After training cdp-run's flush relays the last steps' chain means
    // (Executor::flush); their sends count where they fall in the report.
    plan::forEachRelayAfterTraining(
        spelled, d, steps, [&](int index, int64_t t) {
          report.ran(d, t, index, /*countSent=*/true);
        });
  }
}

/// A pipeline's replicas (alikeReplicaDevices P): device d copies device
/// d mod P. False where a replica runs otherwise than the first.
bool representReplicas(const plan::Plan &plan,
                       std::vector<int> &representative) {
  int P = plan::alikeReplicaDevices(plan);
  if (P == 0)
    return false;
  representative.resize(plan.devices_size());
  for (int d = 0; d < plan.devices_size(); ++d)
    representative[d] = d % P;
  return true;
}

/// For a format-4 data-parallel plan: per device, the one whose series it
/// copies. Devices that run the same templates at the same time steps (the
/// same offset), and stand alike in a chain (first, last or between),
/// record the same series. Pipelines: their replicas (representReplicas).
/// False for other plans.
bool representDevices(const plan::Plan &plan,
                      std::vector<int> &representative) {
  if (plan::isPipeline(plan))
    return representReplicas(plan, representative);
  int devices = plan.devices_size();
  std::map<std::vector<int64_t>, int> classes;
  representative.assign(devices, -1);
  for (int d = 0; d < devices; ++d) {
    const plan::Device &device = plan.devices(d);
    if (device.runs_size() == 0 || device.instructions_size() > 0)
      return false;
    std::vector<int64_t> key = {d == 0, d + 1 == devices};
    for (const plan::Run &run : device.runs()) {
      if (run.micro_batch() != d || run.message_batch() != 0 ||
          run.step_micro_batch() != 0 || run.peer_offset() != 0)
        return false;
      key.insert(key.end(), {run.template_(), run.time_step(), run.slot()});
    }
    representative[d] = classes.try_emplace(key, d).first->second;
  }
  return true;
}

/// The report's `result` for `steps` steps of `plan`: data-parallel
/// format-4 plans predicted once per class of devices, the others device
/// by device (format 4's runs read in place).
template <typename Result>
Result predictPlan(const plan::Plan &plan, int64_t steps,
                   Result (ReportBuilder::*result)() const) {
  std::vector<int> representative;
  if (!representDevices(plan, representative)) {
    ReportBuilder report(plan, steps);
    predict(steps, report);
    return (report.*result)();
  }
  auto isRepresentative = [&](int d) { return representative[d] == d; };
  ReportBuilder report(plan, steps, isRepresentative);
  predict(steps, report, isRepresentative);
  for (int d = 0; d < plan.devices_size(); ++d)
    if (!isRepresentative(d))
      report.copyDevice(representative[d], d);
  return (report.*result)();
}

} // namespace

std::string predictReport(const plan::Plan &plan, int64_t steps) {
  return predictPlan<std::string>(plan, steps, &ReportBuilder::json);
}

std::vector<int64_t> predictDevicePeaks(const plan::Plan &plan, int64_t steps) {
  return predictPlan<std::vector<int64_t>>(plan, steps,
                                           &ReportBuilder::devicePeaks);
}

std::vector<int64_t> predictDeviceNeeds(const plan::Plan &plan, int64_t steps) {
  return predictPlan<std::vector<int64_t>>(plan, steps,
                                           &ReportBuilder::residentBytes);
}

namespace {

/// Every series of a device, in one fixed order.
template <typename SeriesT, typename Visit>
void forEachVector(SeriesT &s, Visit visit) {
  visit(s.units);
  visit(s.unitEnds);
  for (int c = 0; c < kByteSeries; ++c) {
    visit(s.bornBytes[c]);
    visit(s.diedBytes[c]);
  }
  visit(s.sent);
  visit(s.sentCollective);
  visit(s.ready);
}

} // namespace

std::vector<double> ReportBuilder::exportSeries() const {
  std::vector<double> values;
  for (const Series &s : devices)
    forEachVector(s, [&](const std::vector<int64_t> &v) {
      values.insert(values.end(), v.begin(), v.end());
    });
  return values;
}

void ReportBuilder::importSeries(const std::vector<double> &values) {
  size_t at = 0;
  for (Series &s : devices)
    forEachVector(s, [&](std::vector<int64_t> &v) {
      for (int64_t &x : v)
        x = static_cast<int64_t>(values.at(at++));
    });
}

} // namespace cdp::runtime
