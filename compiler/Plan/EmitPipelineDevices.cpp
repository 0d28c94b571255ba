//===- EmitPipelineDevices.cpp - a pipeline device's instructions ---------===//
//
// One pipeline device's programs lowered into templates and runs: its
// computes in their stash slots, messages, updates (replicas' sharded
// ones included), laysa's exchange and gradient clipping.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

namespace cdp::emit {

namespace {

/// Adds micro-batch `k`'s `input` into a step accumulator (1/`share`
/// each: gradients average over all replicas' micro-batches, the loss over
/// the replica's own).
void accumulate(plan::Instruction *instruction, int input, int output,
                const std::string &phase, const std::string &location,
                int64_t k, int64_t share) {
  instruction->set_op("accumulate");
  instruction->set_phase(phase);
  instruction->set_location(location);
  instruction->add_inputs(input);
  instruction->add_outputs(output);
  plan::setIntAttribute(instruction, "slots", share);
  plan::setIntAttribute(instruction, "reset", k == 0);
}

/// The step the work of a program op belongs to: the previous step's runs
/// from step 1 on, and once more after the last step.
template <typename StepOp>
plan::Instruction *stamp(plan::Instruction *instruction, int64_t stage,
                         StepOp op) {
  instruction->set_stage(stage);
  instruction->set_micro_batch(op.getMicroBatch());
  instruction->set_time_step(op.getTimeStep());
  if (op.getStep() < 0) {
    instruction->set_min_step(1);
    instruction->set_drain(true);
  }
  return instruction;
}

} // namespace

/// A send or recv of tensor `id` with device `peer`; the tag names the
/// value and the micro-batch relative to the running step.
plan::Instruction *Emitter::message(plan::Instruction *instruction, bool isSend,
                                    int id, int64_t peer, int value,
                                    int64_t microBatch,
                                    const std::string &location,
                                    const PipelineTables &tables) {
  instruction->set_op(isSend ? "send" : "recv");
  instruction->set_phase("comm");
  instruction->set_location(location);
  if (isSend)
    instruction->add_inputs(id);
  else
    instruction->add_outputs(id);
  plan::setIntAttribute(instruction, "peer", peer);
  plan::setIntAttribute(instruction, "value", value);
  plan::setIntAttribute(instruction, "micro_batch", microBatch);
  plan::setIntAttribute(instruction, "micro_batches", tables.MB);
  if (isSend)
    plan::setIntAttribute(instruction, "cycle", tables.cycle);
  return instruction;
}

LogicalResult Emitter::lowerStageDevice(sched::StageDeviceOp op,
                                        const PipelineTables &tables) {
  DeviceLowering lowering;
  lowering.op = op;
  lowering.self = op.getIndex();
  lowering.s = op.getStage();
  lowering.peerOffset = op.getReplica() * replicaDevices;
  lowering.home = lowering.self - lowering.peerOffset;
  lowering.shared = &sharedStageDevices[{lowering.s, lowering.home}];
  lowering.mine = op.getMicroBatches();
  // zb-h1: the stage's backward runs as an I and a later W.
  bool split = false;
  op.getBody().walk([&](sched::ComputeOp compute) {
    split |= compute.getKind() == sched::WorkKind::InputGrad;
  });
  lowering.layout = layoutStash(lowering.s, op.getSlots(), split, tables);
  bool another = plan.devices_size() > lowering.self;
  plan::Device *device = lowering.device =
      another ? plan.mutable_devices(lowering.self) : plan.add_devices();
  device->set_index(lowering.self);
  lowering.base = another ? device->arena_bytes() : 0;
  // Forwards and backwards of one stage never overlap: the transient
  // tensors share one region after the slots.
  device->set_arena_bytes(lowering.base + lowering.layout.transientBase +
                          lowering.layout.transientBytes);
  for (Operation &step : op.getBody().front()) {
    LogicalResult lowered =
        llvm::TypeSwitch<Operation *, LogicalResult>(&step)
            .Case([&](sched::ComputeOp compute) {
              return addComputeRun(lowering, compute, tables);
            })
            .Case([&](sched::ParamRefreshOp refresh) {
              return addBlockRun(lowering, [&] {
                int id = tables.paramId.lookup(refresh.getParam());
                plan::Instruction *recv = message(
                    lowering.device->add_instructions(), false, id,
                    refresh.getFrom(), id, 0, plan.tensors(id).name(), tables);
                recv->set_stage(lowering.s);
                recv->set_min_step(1);
                plan::setIntAttribute(recv, "step_offset", -1);
                return success();
              });
            })
            .Default([&](Operation *update) {
              return addBlockRun(lowering, [&] {
                return lowerUpdateStep(lowering, update, tables);
              });
            });
    if (failed(lowered))
      return failure();
  }
  lowering.device = device;
  markStashSlots(lowering);
  return success();
}

/// Moves the instructions built in `scratch` into a new template, relative
/// to the run that built them (its time step, micro-batch, message and
/// dropout batch, and its replica's peers), and returns its index.
int Emitter::addTemplate(plan::Device &scratch, int64_t timeStep,
                         int64_t microBatch, int64_t messageBatch,
                         int64_t stepMicroBatch, int64_t peerOffset) {
  plan::Run built;
  built.set_peer_offset(peerOffset);
  built.set_time_step(timeStep);
  built.set_micro_batch(microBatch);
  built.set_message_batch(messageBatch);
  built.set_step_micro_batch(stepMicroBatch);
  for (plan::Instruction &instruction : *scratch.mutable_instructions())
    plan::shiftByRun(instruction, built, -1);
  plan::Template *added = plan.add_templates();
  added->mutable_instructions()->Swap(scratch.mutable_instructions());
  return plan.templates_size() - 1;
}

/// Runs `lower` with the device's instructions going to `scratch`.
LogicalResult Emitter::lowerInto(DeviceLowering &lowering,
                                 plan::Device &scratch,
                                 llvm::function_ref<LogicalResult()> lower) {
  plan::Device *device = lowering.device;
  lowering.device = &scratch;
  LogicalResult lowered = lower();
  lowering.device = device;
  return lowered;
}

/// An update-time op of a stage device's program (or a weight refresh) as
/// a template run once: its instructions share one time step.
LogicalResult Emitter::addBlockRun(DeviceLowering &lowering,
                                   llvm::function_ref<LogicalResult()> lower) {
  ScratchDevice scratch(plan);
  if (failed(lowerInto(lowering, *scratch, lower)))
    return failure();
  if (scratch->instructions().empty())
    return success();
  int64_t timeStep = scratch->instructions(0).time_step();
  plan::Run *run = lowering.device->add_runs();
  run->set_template_(addTemplate(*scratch, timeStep, 0, 0, 0));
  run->set_time_step(timeStep);
  blockTemplates.insert(run->template_());
  return success();
}

/// A sched.compute as a run of the device's template for its kind of work:
/// runs differ in time step, micro-batch, stash slot and the batch their
/// messages and dropout masks name; a template is built (in slot 0) for
/// each combination of what else changes the instructions: the kind, the
/// weight version read, the previous step's work (min_step, drain), the
/// step's first micro-batch (its accumulations reset), the tied weights
/// read at their previous version and the devices the micro-batch's other
/// stages run on.
LogicalResult Emitter::addComputeRun(DeviceLowering &lowering,
                                     sched::ComputeOp compute,
                                     const PipelineTables &tables) {
  int64_t k = compute.getMicroBatch(), j = lowering.mine[k];
  int64_t tagBatch = j + compute.getStep() * tables.MB;
  std::vector<int64_t> key = {
      static_cast<int64_t>(compute.getKind()),
      static_cast<int64_t>(compute.getVersion()), compute.getStep() < 0, k == 0,
      reinterpret_cast<intptr_t>(
          compute.getTiedPreviousAttr().getAsOpaquePointer())};
  for (int64_t s = 1; s <= tables.S; ++s)
    key.push_back(tables.runs[s][j] - lowering.peerOffset);
  auto [it, added] = lowering.shared->computeTemplates.try_emplace(key, -1);
  if (added) {
    ScratchDevice scratch(plan);
    lowering.slot = 0;
    if (failed(lowerInto(lowering, *scratch, [&] {
          return lowerCompute(lowering, compute, tables);
        })))
      return failure();
    it->second = addTemplate(*scratch, compute.getTimeStep(), k, tagBatch, j,
                             lowering.peerOffset);
  }
  plan::Run *run = lowering.device->add_runs();
  run->set_template_(it->second);
  run->set_time_step(compute.getTimeStep());
  run->set_micro_batch(k);
  run->set_slot(compute.getSlot());
  run->set_message_batch(tagBatch);
  run->set_step_micro_batch(j);
  run->set_peer_offset(lowering.peerOffset);
  return success();
}

/// The stash copies the templates name are slot 0's: each gets the stage's
/// slot count and stride (one stash's bytes), for cdp-run to instantiate.
void Emitter::markStashSlots(DeviceLowering &lowering) {
  int64_t slots = lowering.op.getSlots();
  if (slots <= 1)
    return;
  for (const auto &[key, copyId] : lowering.shared->copies) {
    if ((key >> 32) == 0)
      continue; // not a slot's copy
    plan::Tensor &copy = *plan.mutable_tensors(copyId);
    copy.set_slots(slots);
    copy.set_slot_stride(lowering.layout.stashBytes);
  }
}

/// The update-time ops of a device's program: versions kept, tied weights
/// received and sent, replicas' gradients exchanged, updates applied.
LogicalResult Emitter::lowerUpdateStep(DeviceLowering &lowering, Operation *op,
                                       const PipelineTables &tables) {
  plan::Device *device = lowering.device;
  int64_t s = lowering.s;
  auto add = [&](auto stepOp) {
    return stamp(device->add_instructions(), s, stepOp);
  };
  auto relative = [&](auto stepOp) { return stepOp.getStep() * tables.MB; };
  if (auto keep = dyn_cast<sched::KeepPreviousOp>(op)) {
    int param = tables.paramId.lookup(keep.getParam());
    plan::Instruction *assign = add(keep);
    assign->set_op("assign");
    assign->set_phase("update");
    assign->set_location(keep.getParam().str());
    assign->add_inputs(tables.previousVersion.lookup(param));
    assign->add_inputs(param);
    return success();
  }
  if (auto recv = dyn_cast<sched::ParamRecvOp>(op)) {
    int param = tables.paramId.lookup(recv.getParam());
    message(add(recv), false, param, recv.getFrom(), param, relative(recv),
            recv.getParam().str(), tables);
    return success();
  }
  if (auto send = dyn_cast<sched::ParamSendOp>(op)) {
    int param = tables.paramId.lookup(send.getParam());
    plan::Instruction *instruction =
        message(add(send), true, param, send.getTo(), param, relative(send),
                send.getParam().str(), tables);
    instruction->set_next_step_only(send.getNextStepOnly());
    return success();
  }
  if (auto exchange = dyn_cast<sched::ExchangeGradientsOp>(op)) {
    lowerExchange(lowering, exchange, tables);
    return success();
  }
  if (auto clip = dyn_cast<sched::ClipStagesOp>(op))
    return lowerClipStages(lowering, clip, tables);
  if (auto unscale = dyn_cast<sched::UnscaleStagesOp>(op))
    return lowerUnscaleStages(lowering, unscale, tables);
  if (auto shard = dyn_cast<sched::ApplyShardUpdateOp>(op))
    return lowerReplicaShardUpdate(lowering, shard, tables);
  auto apply = dyn_cast<sched::ApplyUpdateOp>(op);
  if (!apply)
    return op->emitOpError("has no lowering to a pipeline plan");
  UpdateOp update = tables.updateOf.lookup(apply.getParam());
  if (!update)
    return apply.emitOpError("names a parameter no cdp.update updates");
  if (failed(addInstruction(update, *device, false)))
    return failure();
  plan::Instruction *instruction = stamp(
      device->mutable_instructions(device->instructions_size() - 1), s, apply);
  instruction->set_inputs(1, lowering.exchanged.contains(apply.getParam())
                                 ? tables.replicaSum.lookup(apply.getParam())
                                 : tables.accumulator.lookup(apply.getParam()));
  instruction->set_phase("update");
  return success();
}

/// fp16: the loss-scale buffer a stage's `update` instructions name (their
/// third input), as the last input of the sharded update that replaces
/// them (`loss_scale` 1), so it skips an overflowed step as they would.
void addLossScale(const std::vector<plan::Instruction> &updates,
                  plan::Instruction &out) {
  if (updates.empty() || updates.front().inputs_size() < 3)
    return;
  out.add_inputs(updates.front().inputs(2));
  plan::setIntAttribute(&out, "loss_scale", 1);
}

/// The rule of a stage's `update` instructions onto the instruction that
/// replaces them: their attributes, with each one's weight decay in
/// `weight_decays` (parameter groups without decay).
void copyUpdateRule(const std::vector<plan::Instruction> &updates,
                    plan::Instruction &out) {
  for (const plan::Attribute &a : updates.front().attributes())
    if (a.name() != "weight_decay" && a.name() != "name")
      *out.add_attributes() = a;
  plan::Attribute *decays = out.add_attributes();
  decays->set_name("weight_decays");
  for (const plan::Instruction &update : updates) {
    double decay = 0;
    for (const plan::Attribute &a : update.attributes())
      if (a.name() == "weight_decay")
        decay = a.f();
    decays->mutable_floats()->add_values(decay);
  }
}

/// What an instruction over a stage's replicas names: their devices in
/// replica order (`peers`), this device's place in them and the cycle.
static void addReplicaAttributes(plan::Instruction &instruction,
                                 ArrayRef<int64_t> devices, int64_t replica,
                                 int64_t cycle) {
  plan::Attribute *peers = instruction.add_attributes();
  peers->set_name("peers");
  for (int64_t peer : devices)
    peers->mutable_ints()->add_values(peer);
  plan::setIntAttribute(&instruction, "replica", replica);
  plan::setIntAttribute(&instruction, "cycle", cycle);
}

/// ZeRO stage 1 over the stage's replicas: one replica_shard_update of the
/// stage's parameters, then their replica sums; the updates' rule with
/// each parameter's weight decay in `weight_decays`, the replicas' devices
/// in `peers`.
LogicalResult Emitter::lowerReplicaShardUpdate(DeviceLowering &lowering,
                                               sched::ApplyShardUpdateOp shard,
                                               const PipelineTables &tables) {
  plan::Device *device = lowering.device;
  std::vector<plan::Instruction> updates;
  for (Attribute name : shard.getParams()) {
    UpdateOp update = tables.updateOf.lookup(cast<StringAttr>(name).getValue());
    if (!update)
      return shard.emitOpError("names a parameter no cdp.update updates");
    if (failed(addInstruction(update, *device, false)))
      return failure();
    updates.push_back(device->instructions(device->instructions_size() - 1));
    device->mutable_instructions()->RemoveLast();
  }
  plan::Instruction *instruction =
      stamp(device->add_instructions(), lowering.s, shard);
  instruction->set_op("replica_shard_update");
  instruction->set_phase("update");
  instruction->set_location("stage " + std::to_string(lowering.s));
  for (const plan::Instruction &update : updates)
    instruction->add_inputs(update.inputs(0));
  for (Attribute name : shard.getParams())
    instruction->add_inputs(
        tables.replicaSum.lookup(cast<StringAttr>(name).getValue()));
  addLossScale(updates, *instruction);
  plan::setIntAttribute(instruction, "stage", lowering.s);
  copyUpdateRule(updates, *instruction);
  addReplicaAttributes(*instruction, shard.getPeers(), shard.getReplica(),
                       tables.cycle);
  return success();
}

/// The stage's gradient sums over its replicas, as one `replica_sum`: the
/// kernel sends the device's sum to every other replica and adds theirs in
/// replica order, ((g_0 + g_1) + g_2) + ..., each arriving onto the sum, so
/// every replica computes the same bits. One instruction per parameter and
/// device: as sends, receives and adds, the exchange was 3 (R - 1) of them
/// (R x 3 (R - 1) per parameter over a stage's R devices).
void Emitter::lowerExchange(DeviceLowering &lowering,
                            sched::ExchangeGradientsOp exchange,
                            const PipelineTables &tables) {
  std::string name = exchange.getParam().str();
  plan::Instruction *instruction =
      stamp(lowering.device->add_instructions(), lowering.s, exchange);
  instruction->set_op("replica_sum");
  instruction->set_phase("update");
  instruction->set_location(name);
  instruction->add_inputs(tables.accumulator.lookup(name));
  instruction->add_outputs(tables.replicaSum.lookup(name));
  plan::setIntAttribute(instruction, "stage", lowering.s);
  addReplicaAttributes(*instruction, exchange.getPeers(), exchange.getReplica(),
                       tables.cycle);
  lowering.exchanged.insert(name);
}

/// The stage's gradients of the step as its updates read them: the
/// replicas' sums where they were exchanged, else the accumulators.
std::vector<int> Emitter::stageGradients(const DeviceLowering &lowering,
                                         const PipelineTables &tables) {
  std::vector<int> grads;
  for (const std::string &name : plan.gradients()) {
    UpdateOp update = tables.updateOf.lookup(name);
    if (update && stageOf(update, tables.S) == lowering.s)
      grads.push_back(lowering.exchanged.contains(name)
                          ? tables.replicaSum.lookup(name)
                          : tables.accumulator.lookup(name));
  }
  return grads;
}

/// The stage's `opName` (squared_norm, found_inf) of its gradients into its
/// scalar `shareOf[s]`, sent to every other stage of `op`, theirs received
/// into their own: every stage's scalar, in stage order. Messages name the
/// gradients' step (step_offset), so a stage updating in the next step's
/// program meets one updating in its own.
template <typename StagesOp>
std::vector<int>
Emitter::shareAmongStages(DeviceLowering &lowering, StagesOp op,
                          const char *opName, ArrayRef<int> grads,
                          ArrayRef<int> shareOf, StringRef what,
                          const PipelineTables &tables) {
  int64_t s = lowering.s;
  std::string location = "stage " + std::to_string(s);
  plan::Instruction *local = stamp(lowering.device->add_instructions(), s, op);
  local->set_op(opName);
  local->set_phase("update");
  local->set_location(location);
  for (int id : grads)
    local->add_inputs(id);
  local->add_outputs(shareOf[s]);
  for (bool isSend : {true, false})
    for (auto [q, peer] : llvm::zip(op.getStages(), op.getDevices())) {
      if (q == s)
        continue;
      int share = shareOf[isSend ? s : q];
      plan::Instruction *message = this->message(
          stamp(lowering.device->add_instructions(), s, op), isSend, share,
          peer, share, 0, location + " " + what.str(), tables);
      plan::setIntAttribute(message, "step_offset", op.getStep());
    }
  std::vector<int> shares;
  for (int64_t q : op.getStages())
    shares.push_back(shareOf[q]);
  return shares;
}

/// The stage's share of the step gradients' squared norm to every other
/// stage of the replica, theirs back, and the stage's gradients clipped by
/// the sum of all shares in stage order: every stage scales by the same
/// factor.
LogicalResult Emitter::lowerClipStages(DeviceLowering &lowering,
                                       sched::ClipStagesOp clip,
                                       const PipelineTables &tables) {
  std::vector<int> grads = stageGradients(lowering, tables);
  std::vector<int> shares = shareAmongStages(
      lowering, clip, "squared_norm", grads, tables.normShare, "norm", tables);
  plan::Instruction *scale =
      lowerClip(*lowering.device, tables.clip, grads, shares);
  if (!scale)
    return failure();
  stamp(scale, lowering.s, clip);
  return success();
}

/// Whether the stage's gradients of the step overflowed, to every other
/// stage of the replica, theirs back; then the stage's gradients unscaled
/// and its copy of the loss-scale buffer adjusted by all the flags in
/// stage order: every stage skips alike and keeps the same scale.
LogicalResult Emitter::lowerUnscaleStages(DeviceLowering &lowering,
                                          sched::UnscaleStagesOp unscale,
                                          const PipelineTables &tables) {
  std::vector<int> grads = stageGradients(lowering, tables);
  std::vector<int> flags =
      shareAmongStages(lowering, unscale, "found_inf", grads,
                       tables.overflowFlag, "overflow", tables);
  plan::Instruction *instruction =
      lowerUnscale(*lowering.device, tables.unscale, grads, flags);
  if (!instruction)
    return failure();
  stamp(instruction, lowering.s, unscale);
  return success();
}

/// A stage's forward or backward for one micro-batch: every op of the
/// stage, each preceded by the loads and receives of what it reads from
/// elsewhere and followed by the sends other stages read and the
/// accumulation of gradients and loss.
LogicalResult Emitter::lowerCompute(DeviceLowering &lowering,
                                    sched::ComputeOp compute,
                                    const PipelineTables &tables) {
  plan::Device *device = lowering.device;
  int64_t s = lowering.s, k = compute.getMicroBatch(), slot = lowering.slot,
          j = lowering.mine[k];
  // Over the step's micro-batches of all replicas, relative to the running
  // step, as the send/recv tags and the loader count.
  int64_t tagBatch = j + compute.getStep() * tables.MB;
  auto add = [&]() { return stamp(device->add_instructions(), s, compute); };
  auto copyOf = [&](int id) { return mapped(lowering, slot, id, tables); };
  // A tied weight reads what tied_previous says, when it is given; every
  // other parameter the run's version.
  std::optional<ArrayAttr> tiedPrevious = compute.getTiedPrevious();
  bool previous = compute.getVersion() == sched::Version::Previous;
  auto version = [&](int id) {
    auto it = tables.previousVersion.find(id);
    if (it == tables.previousVersion.end())
      return id;
    bool readsPrevious = previous;
    if (tiedPrevious && tables.tied.contains(id))
      readsPrevious = llvm::is_contained(
          tiedPrevious->getAsValueRange<StringAttr>(), plan.tensors(id).name());
    return readsPrevious ? it->second : id;
  };
  sched::WorkKind kind = compute.getKind();
  bool forward = kind == sched::WorkKind::Forward;
  const std::vector<Operation *> &ops =
      forward                               ? tables.forwardOps[s]
      : kind == sched::WorkKind::InputGrad  ? tables.inputGradOps[s]
      : kind == sched::WorkKind::WeightGrad ? tables.weightGradOps[s]
                                            : tables.backwardOps[s];
  // What an earlier half of this micro-batch's work brought in stays.
  const StashLayout &layout = lowering.layout;
  auto broughtEarlier = [&](int id) {
    return (!forward && layout.broughtByForward.count(id)) ||
           (kind == sched::WorkKind::WeightGrad &&
            layout.broughtByInputGrad.count(id));
  };
  std::set<int> arrived, sent;
  for (Operation *op : ops) {
    // Bring in what this micro-batch's op reads from elsewhere.
    for (Value operand : op->getOperands()) {
      int id = ids.lookup(operand);
      if (arrived.count(id) || broughtEarlier(id))
        continue;
      if (isa<BlockArgument>(operand)) {
        plan::Instruction *load = add();
        load->set_op("load");
        load->set_phase(forward ? "forward" : "backward");
        load->set_location(plan.tensors(id).name());
        load->add_outputs(copyOf(id));
        plan::setIntAttribute(load, "input", id);
        plan::setIntAttribute(load, "micro_batch", tagBatch);
        arrived.insert(id);
        continue;
      }
      Operation *producer = operand.getDefiningOp();
      if (!producer || isa<ParamOp, ConstantOp>(producer) ||
          stageOf(producer, tables.S) == s)
        continue;
      message(add(), false, copyOf(id),
              tables.runs[stageOf(producer, tables.S)][j], id, tagBatch,
              locationOf(producer), tables);
      arrived.insert(id);
    }
    if (failed(addInstruction(op, *device, false)))
      return failure();
    plan::Instruction *instruction =
        stamp(device->mutable_instructions(device->instructions_size() - 1), s,
              compute);
    for (int &input : *instruction->mutable_inputs())
      input = version(copyOf(input));
    for (int &output : *instruction->mutable_outputs())
      output = copyOf(output);
    // Dropout draws its mask from the micro-batch's index in the step, as
    // under single and dp, not from the device's own count.
    if (isa<DropoutOp>(op))
      plan::setIntAttribute(instruction, "step_micro_batch", j);
    if (auto gradient = dyn_cast<GradientOp>(op))
      accumulate(add(), copyOf(ids.lookup(gradient.getGrad())),
                 tables.accumulator.lookup(gradient.getName()), "backward",
                 gradient.getName().str(), k, tables.MB);
    if (failed(sendResults(lowering, compute, op, tagBatch, sent, tables)))
      return failure();
  }
  return success();
}

/// After `op` ran for a micro-batch: the loss into its accumulator, and a
/// send of every result another stage reads, once per reading stage.
LogicalResult Emitter::sendResults(DeviceLowering &lowering,
                                   sched::ComputeOp compute, Operation *op,
                                   int64_t tagBatch, std::set<int> &sent,
                                   const PipelineTables &tables) {
  int64_t s = lowering.s, k = compute.getMicroBatch();
  auto add = [&]() {
    return stamp(lowering.device->add_instructions(), s, compute);
  };
  auto copyOf = [&](int id) {
    return mapped(lowering, lowering.slot, id, tables);
  };
  for (Value result : op->getResults()) {
    int id = ids.lookup(result);
    if (tables.lossAccumulator >= 0 && id == tables.lossResult)
      accumulate(add(), copyOf(id), tables.lossAccumulator, "forward", "loss",
                 k, lowering.mine.size());
    std::set<int64_t> readers;
    for (Operation *user : result.getUsers())
      if (!isa<func::ReturnOp>(user) && stageOf(user, tables.S) != s)
        readers.insert(stageOf(user, tables.S));
    if (!readers.empty() && plan.tensors(id).dtype() == plan::BOOL)
      return op->emitOpError("sends a boolean tensor across a stage cut, "
                             "which pipelines do not support yet "
                             "(cut elsewhere with --stage-boundaries)");
    for (int64_t q : readers) {
      if (!sent.insert(q * (1 << 24) + id).second)
        continue;
      message(add(), true, copyOf(id), tables.runs[q][lowering.mine[k]], id,
              tagBatch, locationOf(op), tables);
    }
  }
  return success();
}

} // namespace cdp::emit
