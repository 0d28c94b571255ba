//===- EmitPipeline.cpp - a pipeline's tables and stash -------------------===//
//
// The pipelines (gpipe, 1f1b, 2bw, cdp-mp) before their devices are
// lowered: the tables read from sched.step_program, the split backward,
// the accumulators, and the stash layout of each stage's slots.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

namespace cdp::emit {

namespace {

/// The weights, and the values computed from weights and constants alone
/// (the transpose torch exports for a Linear weight), in one walk over
/// @main's block (operands come before their users).
llvm::DenseSet<Value> weightDerivedValues(Block &body) {
  llvm::DenseSet<Value> derived;
  for (Operation &op : body.without_terminator()) {
    if (auto param = dyn_cast<ParamOp>(op)) {
      if (!param.getBuffer())
        derived.insert(param);
      continue;
    }
    if (isa<ConstantOp>(op) || op.getNumOperands() == 0)
      continue;
    if (llvm::all_of(op.getOperands(), [&](Value operand) {
          return isa_and_nonnull<ConstantOp>(operand.getDefiningOp()) ||
                 derived.contains(operand);
        }))
      derived.insert(op.result_begin(), op.result_end());
  }
  return derived;
}

} // namespace

/// The devices sched.stage_device ops spell (one replica's where the
/// program stands for several).
static int64_t spelledDevices(sched::StepProgramOp program) {
  int64_t devices = 0;
  for (auto device : program.getBody().getOps<sched::StageDeviceOp>())
    devices = std::max<int64_t>(devices, device.getIndex() + 1);
  return devices;
}

LogicalResult Emitter::emitPipeline(const EmitOptions &options) {
  sched::StepProgramOp program;
  for (Operation &op : func->getParentOfType<ModuleOp>().getOps())
    if (auto found = dyn_cast<sched::StepProgramOp>(op))
      program = found;
  if (!program)
    return func.emitError("no step program; run cdp-schedule-pipeline first");
  PipelineTables tables;
  preparePipeline(program, tables);
  plan.clear_devices();
  replicaDevices = sharedReplicaDevices(program);
  plan.set_replica_devices(replicaDevices);
  std::set<int> merged;
  std::vector<LoweredStageDevice> lowered;
  for (Operation &op : program.getBody().front())
    if (auto device = dyn_cast<sched::StageDeviceOp>(op)) {
      int64_t index = device.getIndex();
      bool another = plan.devices_size() > index;
      if (another)
        merged.insert(index);
      int64_t runsBefore = another ? plan.devices(index).runs_size() : 0;
      if (failed(lowerStageDevice(device, tables)))
        return failure();
      lowered.push_back(
          {index, runsBefore, plan.devices(index).runs_size() - runsBefore,
           static_cast<int64_t>(device.getMicroBatches().size())});
    }
  spellReplicas(lowered, program.getReplicaCount(), merged);
  // A device running several stages runs their programs merged by time
  // step (stable: within a time step, in stage order).
  for (int index : merged) {
    auto *runs = plan.mutable_devices(index)->mutable_runs();
    std::stable_sort(runs->begin(), runs->end(),
                     [](const plan::Run &a, const plan::Run &b) {
                       return a.time_step() < b.time_step();
                     });
  }
  // The training programs name copies only. The one-micro-batch tensors
  // themselves serve device 0's evaluation stream (after training), packed
  // again by that stream's lifetimes into its arena (emit, once the
  // originals nothing names are gone).
  for (int id = 0; id < tables.originalTensors; ++id) {
    plan::Tensor &t = *plan.mutable_tensors(id);
    if ((t.kind() == plan::ACTIVATION || t.kind() == plan::INPUT) &&
        !t.has_device())
      t.set_device(0);
  }
  return success();
}

/// The replicas a program leaves unspelled (sched.step_program's
/// `replicas`), in the order lowering them would take: replica r's device
/// runs the first replica's runs r replicas' devices further, for
/// micro-batches r replicas' worth later. Compute templates are shared
/// already; an update-time template names devices as they are (a tied
/// weight's peer, the replica's place), so each replica gets its copy.
void Emitter::spellReplicas(ArrayRef<LoweredStageDevice> lowered,
                            int64_t replicas, std::set<int> &merged) {
  for (int64_t r = 1; r < replicas; ++r)
    for (const LoweredStageDevice &first : lowered) {
      int64_t index = first.index + r * replicaDevices;
      bool another = plan.devices_size() > index;
      if (another)
        merged.insert(index);
      plan::Device *device =
          another ? plan.mutable_devices(index) : plan.add_devices();
      const plan::Device &spelled = plan.devices(first.index);
      device->set_index(index);
      device->set_arena_bytes(spelled.arena_bytes());
      for (int64_t i = first.firstRun; i < first.firstRun + first.runCount;
           ++i) {
        plan::Run run = spelled.runs(i);
        if (blockTemplates.count(run.template_())) {
          run.set_template_(replicaTemplate(run.template_(), r));
        } else {
          int64_t later = r * first.microBatches;
          run.set_peer_offset(r * replicaDevices);
          run.set_message_batch(run.message_batch() + later);
          run.set_step_micro_batch(run.step_micro_batch() + later);
        }
        *device->add_runs() = run;
      }
    }
}

/// Replica r's copy of the first replica's update-time template `first`:
/// its messages' peers r replicas' devices further, its replica r.
int Emitter::replicaTemplate(int first, int64_t r) {
  plan::Template copy = plan.templates(first);
  for (plan::Instruction &instruction : *copy.mutable_instructions())
    for (plan::Attribute &attribute : *instruction.mutable_attributes()) {
      if (attribute.name() == "peer")
        attribute.set_i(attribute.i() + r * replicaDevices);
      else if (attribute.name() == "replica")
        attribute.set_i(r);
    }
  *plan.add_templates() = std::move(copy);
  return plan.templates_size() - 1;
}

/// Devices per replica when the replicas' devices can run the first
/// replica's templates: replica r's device for a stage is the first
/// replica's plus r times the devices of a replica, with as many stash
/// slots and the same micro-batches r replicas' worth later, for every
/// stage device (0 without replicas, or where the layout is not that
/// regular: cdp-mp's slots share devices unevenly).
int64_t Emitter::sharedReplicaDevices(sched::StepProgramOp program) {
  std::map<int64_t, sched::StageDeviceOp> firstReplica; // by stage
  int64_t perReplica = 0, replicas = 0;
  auto devices = program.getBody().getOps<sched::StageDeviceOp>();
  if (program.getReplicaCount() > 1)
    return spelledDevices(program);
  for (sched::StageDeviceOp device : devices) {
    replicas = std::max<int64_t>(replicas, device.getReplica() + 1);
    if (device.getReplica() != 0)
      continue;
    if (!firstReplica.try_emplace(device.getStage(), device).second)
      return 0; // a stage with two devices in one replica
    perReplica = std::max<int64_t>(perReplica, device.getIndex() + 1);
  }
  if (replicas <= 1)
    return 0;
  for (sched::StageDeviceOp device : devices) {
    auto it = firstReplica.find(device.getStage());
    if (it == firstReplica.end())
      return 0;
    sched::StageDeviceOp first = it->second;
    int64_t r = device.getReplica();
    ArrayRef<int64_t> mine = device.getMicroBatches(),
                      theirs = first.getMicroBatches();
    if (device.getIndex() != first.getIndex() + r * perReplica ||
        device.getSlots() != first.getSlots() || mine.size() != theirs.size())
      return 0;
    for (size_t i = 0; i < mine.size(); ++i)
      if (mine[i] != theirs[i] + r * static_cast<int64_t>(mine.size()))
        return 0;
  }
  return perReplica;
}

/// The graph side (each stage's forward and backward ops), the placement
/// tables and the tensors every device shares: accumulators, previous
/// versions, replicas' gradient sums.
void Emitter::preparePipeline(sched::StepProgramOp program,
                              PipelineTables &tables) {
  int64_t S = tables.S = program.getStages();
  tables.MB = program.getMicroBatches();
  tables.cycle = program.getCycle();
  Block &body = func.getBody().front();
  tables.forwardOps.resize(S + 1);
  tables.backwardOps.resize(S + 1);
  for (Operation &op : body.without_terminator()) {
    if (isa<ParamOp, ConstantOp>(op))
      continue;
    if (auto update = dyn_cast<UpdateOp>(op)) {
      tables.updateOf[update.getName()] = update;
      continue;
    }
    if (auto clip = dyn_cast<ClipGradNormOp>(op)) {
      tables.clip = clip;
      continue;
    }
    if (auto unscale = dyn_cast<UnscaleGradsOp>(op)) {
      tables.unscale = unscale;
      continue;
    }
    auto phase = op.getAttrOfType<StringAttr>("cdp.phase");
    bool backward = phase && phase.getValue() == "backward";
    (backward ? tables.backwardOps : tables.forwardOps)[stageOf(&op, S)]
        .push_back(&op);
  }
  llvm::DenseSet<Value> weights = weightDerivedValues(body);
  splitBackwards(tables, weights);
  llvm::StringMap<int> &paramId = tables.paramId;
  body.walk(
      [&](ParamOp param) { paramId[param.getName()] = ids.lookup(param); });
  tables.runs.assign(S + 1, std::vector<int64_t>(tables.MB, -1));
  tables.stageDevice.assign(S + 1, 0);
  // Unspelled replicas (sched.step_program's `replicas`) run their first
  // replica's micro-batches r replicas' worth later, D·r devices further.
  int64_t spelled = spelledDevices(program),
          unspelled = program.getReplicaCount();
  int64_t deviceCount = spelled * unspelled, mostReplicas = unspelled;
  for (Operation &op : program.getBody().front())
    if (auto device = dyn_cast<sched::StageDeviceOp>(op)) {
      ArrayRef<int64_t> mine = device.getMicroBatches();
      for (int64_t r = 0; r < unspelled; ++r)
        for (int64_t j : mine)
          tables.runs[device.getStage()][j + r * mine.size()] =
              device.getIndex() + r * spelled;
      if (device.getReplica() == 0)
        tables.stageDevice[device.getStage()] = device.getIndex();
      mostReplicas = std::max<int64_t>(mostReplicas, device.getReplica() + 1);
    }

  plan.set_strategy(strategyName(program.getStrategy()));
  plan.set_micro_batches(tables.MB);
  plan::Schedule *schedule = plan.mutable_schedule();
  schedule->set_stages(S);
  schedule->set_cycle(tables.cycle);
  schedule->set_rule(program.getRule().str());
  std::vector<int64_t> stageBytes(S, 0);
  for (auto place : program.getBody().getOps<sched::PlaceParamOp>()) {
    int id = paramId.lookup(place.getParam());
    plan::Tensor &t = *plan.mutable_tensors(id);
    t.set_device(tables.stageDevice[place.getStage()]);
    if (t.kind() == plan::PARAM && t.trainable())
      stageBytes[place.getStage() - 1] += t.bytes();
    if (!place.getReplicas().empty())
      tables.tied.insert(id);
  }
  for (int64_t bytes : stageBytes)
    schedule->add_stage_param_bytes(bytes);
  for (int64_t d = 0; d < deviceCount; ++d)
    schedule->add_offsets(0);
  if (std::optional<ArrayAttr> delays = program.getVersionDelay())
    for (Attribute row : *delays) {
      plan::Ints *out = schedule->add_version_delay();
      for (int64_t delay : cast<DenseI64ArrayAttr>(row).asArrayRef())
        out->add_values(delay);
    }
  if (std::optional<ArrayRef<int64_t>> live = program.getLiveVersions())
    for (int64_t versions : *live)
      schedule->add_live_versions(versions);
  addAccumulators(S, tables);
  // Per stage, a scalar every device of the exchange holds: its share of
  // the squared norm (clipping), whether its gradients overflowed (loss
  // scaling).
  auto addStageScalars = [&](const char *suffix, std::vector<int> &ids) {
    for (int64_t s = 0; s <= S; ++s) {
      plan::Tensor share;
      share.set_id(plan.tensors_size());
      share.set_name("stage" + std::to_string(s) + suffix);
      share.set_dtype(plan::F32);
      share.set_kind(plan::REDUCED);
      share.set_bytes(4);
      *plan.add_tensors() = share;
      ids.push_back(share.id());
    }
  };
  if (tables.unscale)
    addStageScalars("@overflow", tables.overflowFlag);
  if (tables.clip)
    addStageScalars("@norm2", tables.normShare);
  // 2bw and cdp-mp keep two versions of every trained parameter: the plan's
  // tensor (the latest, updated in place) and its previous value, copied
  // just before each update.
  if (program.getWeightVersions() == 2)
    for (auto place : program.getBody().getOps<sched::PlaceParamOp>()) {
      int id = paramId.lookup(place.getParam());
      if (plan.tensors(id).kind() != plan::PARAM)
        continue;
      plan::Tensor copy = plan.tensors(id);
      copy.set_id(plan.tensors_size());
      copy.set_name(copy.name() + "@previous");
      copy.set_trainable(false);
      copy.set_previous_version_of(id);
      *plan.add_tensors() = copy;
      tables.previousVersion[id] = copy.id();
    }
  tables.originalTensors = plan.tensors_size();
  if (program.getWeightVersions() == 1)
    for (Value value : weights)
      tables.weightDerived.insert(ids.lookup(value));
  // Replicas: every stage's gradient sums arrive from the other replicas
  // one after another and are added onto one sum in replica order, so
  // every replica applies the same update (a buffer per replica held R
  // copies of the stage's gradients on every device).
  if (mostReplicas > 1)
    for (const std::string &name : plan.gradients()) {
      plan::Tensor sum = plan.tensors(tables.accumulator.lookup(name));
      sum.set_id(plan.tensors_size());
      sum.set_name(name + "@replicas");
      *plan.add_tensors() = sum;
      tables.replicaSum[name] = sum.id();
    }
  if (auto index = func->getAttrOfType<IntegerAttr>("cdp.loss_index"))
    tables.lossResult = ids.lookup(
        cast<func::ReturnOp>(body.getTerminator()).getOperand(index.getInt()));
}

/// Splits each stage's backward in two (zb-h1's I and W, after Qi et al.:
/// B the gradients of the layers' inputs, W those of their weights).
/// Walking it backwards, an op is in I when another stage reads a result,
/// when it reads a weight (an input gradient: dY·Wᵀ, a convolution's
/// backward data, a norm's input gradient), or when an I op needs a
/// result; the rest, which only the parameter gradients need, is W. Both
/// keep @main's order. `weights`: weightDerivedValues of @main.
void Emitter::splitBackwards(PipelineTables &tables,
                             const llvm::DenseSet<Value> &weights) {
  int64_t S = tables.S;
  tables.inputGradOps.assign(S + 1, {});
  tables.weightGradOps.assign(S + 1, {});
  for (int64_t s = 1; s <= S; ++s) {
    const std::vector<Operation *> &ops = tables.backwardOps[s];
    llvm::DenseSet<Value> needed;
    std::vector<bool> input(ops.size(), false);
    for (size_t i = ops.size(); i-- > 0;) {
      if (isa<GradientOp>(ops[i]))
        continue;
      for (Value operand : ops[i]->getOperands())
        input[i] = input[i] || weights.contains(operand);
      for (Value result : ops[i]->getResults())
        for (Operation *user : result.getUsers())
          if (needed.contains(result) ||
              (!isa<func::ReturnOp>(user) && stageOf(user, S) != s))
            input[i] = true;
      if (input[i])
        for (Value operand : ops[i]->getOperands())
          needed.insert(operand);
    }
    for (size_t i = 0; i < ops.size(); ++i)
      (input[i] ? tables.inputGradOps : tables.weightGradOps)[s].push_back(
          ops[i]);
  }
}

/// Persistent accumulators: one per trained parameter (on its stage's
/// device), one for the loss (on the last stage's).
void Emitter::addAccumulators(int64_t S, PipelineTables &tables) {
  auto addAccumulator = [&](int like, const std::string &name, int device) {
    plan::Tensor t = plan.tensors(like);
    t.set_id(plan.tensors_size());
    t.set_kind(plan::REDUCED);
    t.set_name(name);
    t.clear_data();
    t.set_trainable(false);
    t.set_device(device);
    *plan.add_tensors() = t;
    return t.id();
  };
  llvm::StringMap<int64_t> gradientStage;
  func.getBody().walk([&](GradientOp gradient) {
    gradientStage[gradient.getName()] = stageOf(gradient, S);
  });
  plan.clear_applied_gradients();
  for (const std::string &name : plan.gradients()) {
    // By name through preparePipeline's map (a scan of every tensor per
    // gradient was quadratic).
    auto found = tables.paramId.find(name);
    int param = found == tables.paramId.end() ? -1 : found->second;
    tables.accumulator[name] = addAccumulator(
        param, name, tables.stageDevice[gradientStage.lookup(name)]);
    plan.add_applied_gradients(tables.accumulator[name]);
  }
  if (plan.loss() >= 0) {
    tables.lossAccumulator =
        addAccumulator(plan.loss(), "loss", tables.stageDevice[S]);
    plan.set_loss(tables.lossAccumulator);
    plan.set_loss_device(tables.stageDevice[S]);
  }
}

/// Which transient of stage `s` takes which one's block (packArenaShared's
/// `shares`): a result with `cdp.in_place` over an operand made in this
/// stage, read by no other stage (so never sent), not stashed, whose last
/// read in the stage's order is that op.
std::vector<std::pair<size_t, size_t>> Emitter::sharedTransients(
    int64_t s, ArrayRef<std::pair<Operation *, int64_t>> inPlace,
    const llvm::DenseMap<int, size_t> &rangeOf,
    const std::vector<LiveRange> &ranges, int64_t lastStage) {
  std::vector<std::pair<size_t, size_t>> shares;
  for (auto [op, position] : inPlace) {
    Value operand =
        op->getOperand(op->getAttrOfType<IntegerAttr>("cdp.in_place").getInt());
    Operation *producer = operand.getDefiningOp();
    auto from = rangeOf.find(ids.lookup(operand));
    auto to = rangeOf.find(ids.lookup(op->getResult(0)));
    bool local = producer && stageOf(producer, lastStage) == s &&
                 llvm::all_of(operand.getUsers(), [&](Operation *user) {
                   return stageOf(user, lastStage) == s;
                 });
    if (local && from != rangeOf.end() && to != rangeOf.end() &&
        ranges[from->second].end == position && from->second < to->second)
      shares.push_back({to->second, from->second});
  }
  return shares;
}

/// Stage s's stash layout with `slots` slots (see StashLayout): the
/// transient tensors are packed after the slots by their live ranges over
/// the stage's ops (forward then backward; values brought in live from
/// their first reader), as cdp-plan-memory packs the one-micro-batch arena.
/// A split backward (`split`: I, then W later) also stashes what I makes or
/// brings in and W reads.
StashLayout Emitter::layoutStash(int64_t s, int64_t slots, bool split,
                                 const PipelineTables &tables) {
  StashLayout layout;
  const std::vector<Operation *> &forward = tables.forwardOps[s],
                                 &backward = tables.backwardOps[s];
  auto broughtIn = [&](Value operand) {
    Operation *producer = operand.getDefiningOp();
    return isa<BlockArgument>(operand) ||
           (producer && !isa<ParamOp, ConstantOp>(producer) &&
            stageOf(producer, tables.S) != s);
  };
  for (Operation *op : forward)
    for (Value operand : op->getOperands())
      if (broughtIn(operand))
        layout.broughtByForward.insert(ids.lookup(operand));
  std::set<int> madeByInputGrad;
  if (split) {
    llvm::DenseSet<int> readByWeightGrad;
    for (Operation *op : tables.weightGradOps[s])
      for (Value operand : op->getOperands())
        readByWeightGrad.insert(ids.lookup(operand));
    for (Operation *op : tables.inputGradOps[s]) {
      for (Value operand : op->getOperands()) {
        int id = ids.lookup(operand);
        if (broughtIn(operand) && !layout.broughtByForward.count(id) &&
            readByWeightGrad.contains(id))
          layout.broughtByInputGrad.insert(id);
      }
      for (Value result : op->getResults())
        if (readByWeightGrad.contains(ids.lookup(result)))
          madeByInputGrad.insert(ids.lookup(result));
    }
  }
  llvm::DenseSet<int> readByBackward;
  for (Operation *op : backward)
    for (Value operand : op->getOperands())
      readByBackward.insert(ids.lookup(operand));
  auto isActivation = [&](int id) {
    plan::TensorKind kind = plan.tensors(id).kind();
    return kind == plan::ACTIVATION || kind == plan::INPUT;
  };
  auto stash = [&](int id) {
    if (!readByBackward.contains(id) || !isActivation(id))
      return;
    if (tables.weightDerived.contains(id)) {
      if (layout.sharedOffset.try_emplace(id, layout.sharedBytes).second)
        layout.sharedBytes += alignToArena(plan.tensors(id).bytes());
      return;
    }
    if (layout.stashOffset.try_emplace(id, layout.stashBytes).second)
      layout.stashBytes += alignToArena(plan.tensors(id).bytes());
  };
  for (Operation *op : forward)
    for (Value result : op->getResults())
      stash(ids.lookup(result));
  for (int id : layout.broughtByForward)
    stash(id);
  for (const std::set<int> *ids :
       {&madeByInputGrad, &layout.broughtByInputGrad})
    for (int id : *ids)
      stash(id);
  llvm::DenseMap<int, size_t> rangeOf;
  std::vector<int> rangeIds;
  std::vector<LiveRange> ranges;
  int64_t position = 0;
  std::vector<const std::vector<Operation *> *> order = {&forward, &backward};
  if (split)
    order = {&forward, &tables.inputGradOps[s], &tables.weightGradOps[s]};
  std::vector<std::pair<Operation *, int64_t>> inPlace; // op, its position
  for (const std::vector<Operation *> *ops : order)
    for (Operation *op : *ops) {
      if (op->hasAttr("cdp.in_place"))
        inPlace.push_back({op, position});
      for (auto values :
           {ValueRange(op->getOperands()), ValueRange(op->getResults())})
        for (Value value : values) {
          int id = ids.lookup(value);
          if (!isActivation(id) || layout.stashOffset.count(id) ||
              layout.sharedOffset.count(id))
            continue;
          auto [it, added] = rangeOf.try_emplace(id, ranges.size());
          if (added) {
            rangeIds.push_back(id);
            ranges.push_back({position, position, plan.tensors(id).bytes()});
          }
          ranges[it->second].end = position;
        }
      ++position;
    }
  std::vector<int64_t> packed = packArenaShared(
      ranges, sharedTransients(s, inPlace, rangeOf, ranges, tables.S),
      layout.transientBytes);
  for (size_t i = 0; i < ranges.size(); ++i)
    layout.transientOffset[rangeIds[i]] = packed[i];
  layout.sharedBase = slots * layout.stashBytes;
  layout.transientBase = layout.sharedBase + layout.sharedBytes;
  return layout;
}

/// The copy of tensor `id` micro-batch slot `slot` uses on the device.
int Emitter::mapped(DeviceLowering &lowering, int64_t slot, int id,
                    const PipelineTables &tables) {
  if (id < 0 || id >= tables.originalTensors)
    return id;
  const plan::Tensor &t = plan.tensors(id);
  if (t.kind() != plan::ACTIVATION && t.kind() != plan::INPUT)
    return id;
  const StashLayout &layout = lowering.layout;
  auto stashed = layout.stashOffset.find(id);
  auto shared = layout.sharedOffset.find(id);
  if (stashed == layout.stashOffset.end())
    slot = -1;
  int64_t key = ((slot + 1) << 32) | static_cast<uint32_t>(id);
  auto it = lowering.shared->copies.find(key);
  if (it != lowering.shared->copies.end())
    return it->second;
  // Elements of a repeated field keep their address when it grows.
  int copyId = plan.tensors_size();
  plan::Tensor &copy = *plan.add_tensors();
  copy = t;
  copy.set_id(copyId);
  copy.set_kind(plan::ACTIVATION);
  copy.set_offset(
      lowering.base +
      (shared != layout.sharedOffset.end() ? layout.sharedBase + shared->second
       : slot < 0 ? layout.transientBase + layout.transientOffset.lookup(id)
                  : slot * layout.stashBytes + stashed->second));
  copy.set_device(lowering.home);
  lowering.shared->copies.emplace(key, copyId);
  return copyId;
}

} // namespace cdp::emit
