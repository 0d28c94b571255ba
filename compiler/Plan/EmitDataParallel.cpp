//===- EmitDataParallel.cpp - dp, cdp and laysa's programs ----------------===//
//
// The data-parallel strategies (dp, cdp, laysa): every slot's program
// over the reduced buffers, ZeRO's shard groups, the chain, clipping and
// the sparse exchange.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"
#include <set>

namespace cdp::emit {

/// dp and cdp lower cdp-schedule-slots' sched.step_program: one program
/// per device (slot), every stage of its own micro-batch; each stage's
/// gradients go to the communicator after its backward and come back
/// reduced just before the forward that needs the next version.
LogicalResult Emitter::emitDataParallel(int64_t arenaBytes) {
  sched::StepProgramOp program;
  for (Operation &op : func->getParentOfType<ModuleOp>().getOps())
    if (auto found = dyn_cast<sched::StepProgramOp>(op))
      program = found;
  if (!program || !program.getReduceAt() || !program.getVersionDelay() ||
      !program.getLiveVersions() || !program.getReduction())
    return func.emitError("no data-parallel step program; run "
                          "cdp-schedule-slots first");
  DataParallelTables tables;
  tables.N = program.getMicroBatches();
  tables.L = program.getStages();
  tables.chain = *program.getReduction() == sched::Reduction::Chain;
  plan.set_strategy(strategyName(program.getStrategy()));
  plan.set_micro_batches(tables.N);
  plan::Schedule *out = plan.mutable_schedule();
  out->set_stages(tables.L);
  out->set_cycle(program.getCycle());
  for (auto device : program.getBody().getOps<sched::SlotDeviceOp>())
    out->add_offsets(device.getOffset());
  for (Attribute row : program.getVersionDelayAttr()) {
    plan::Ints *ints = out->add_version_delay();
    for (int64_t d : cast<DenseI64ArrayAttr>(row).asArrayRef())
      ints->add_values(d);
  }
  for (int64_t t : program.getReduceAtAttr().asArrayRef())
    out->add_reduce_at(t);
  for (int64_t v : program.getLiveVersionsAttr().asArrayRef())
    out->add_live_versions(v);
  if (!program.getRule().empty())
    out->set_rule(program.getRule().str());
  out->set_reduce(tables.chain ? "chain" : "allreduce");
  program.walk([&](sched::WaitReductionOp wait) {
    tables.zero = std::max(tables.zero, wait.getZero());
  });
  program.walk([&](sched::ClipMeansOp clip) {
    tables.zero = std::max(tables.zero, clip.getZero());
  });
  // CDP-ZeRO: every use of a stage arrives point to point (`from`).
  program.walk([&](sched::GatherParamsOp gather) {
    tables.cdpZero |= gather.getFrom() >= 0;
  });
  if (tables.cdpZero)
    tables.zero = 3;
  out->set_zero(tables.zero);
  // cdp with loss scaling: each slot's overflow flag rides as one more
  // float in its reductions (the chain's buffers hold it too).
  func.walk([&](UnscaleGradsOp unscale) { tables.unscale = unscale; });
  program.walk(
      [&](sched::ClipOwnOp) { tables.flagsRide = bool(tables.unscale); });
  program.walk([&](sched::SparseSendOp send) {
    tables.sparse = true;
    tables.exchange.residual = send.getResidual();
  });
  if (failed(addReducedTensors(tables)))
    return failure();
  if (tables.sparse) {
    if (failed(prepareExchange(tables)))
      return failure();
    arenaBytes = sparse::addTensors(plan, tables.exchange, arenaBytes);
  }
  if (tables.zero == 3)
    arenaBytes = addShardGroups(program, tables, arenaBytes);
  func.walk([&](ClipGradNormOp clip) { tables.clip = clip; });
  if (tables.unscale && tables.sparse)
    return func.emitError("dynamic loss scaling under laysa is not built: "
                          "its updates read sparse gradients");
  // ZeRO stages 2 and 3: each device's share of the norm and of the
  // overflow flags, summed over the devices.
  auto addShare = [&](const char *name) {
    plan::Tensor *share = plan.add_tensors();
    share->set_id(plan.tensors_size() - 1);
    share->set_name(name);
    share->set_dtype(plan::F32);
    share->set_kind(plan::REDUCED);
    share->add_shape(1);
    share->set_bytes(4);
    return share->id();
  };
  if (tables.clip && tables.zero >= 2)
    tables.normShare = addShare("zero@norm_share");
  if (tables.unscale && tables.zero >= 2)
    tables.overflowShare = addShare("zero@overflow_share");
  // cdp: each slot unscales its own gradients after its last backward
  // (sched.clip_own); its overflow flag rides in every stage's reduction,
  // so that every stage's mean says whether any device overflowed.
  if (tables.flagsRide) {
    if (tables.cdpZero)
      return func.emitError("dynamic loss scaling under cdp is not built for "
                            "CDP-ZeRO: its owners' means carry no flag");
    std::set<int64_t> delays;
    program.walk(
        [&](sched::WaitReductionOp wait) { delays.insert(wait.getDelay()); });
    tables.marksStages = delays.size() > 1;
    tables.ownOverflow = addShare("cdp@overflow_own");
    tables.stageOverflow.assign(tables.L + 1, -1);
    for (int64_t l = tables.L; l >= 1; --l)
      if (!tables.byStage[l].empty()) {
        std::string name = "stage" + std::to_string(l) + "@overflow_mean";
        tables.stageOverflow[l] = addShare(name.c_str());
        tables.firstTrained = l;
      }
  }
  plan.clear_devices();
  // A device's program is cut at its schedule ops, each op's instructions a
  // template shared by every device whose op reads alike (times relative to
  // the offset, the instructions relative to the device's micro-batch):
  // CDP's slots differ only in a few waits of their version tables, so at
  // 1024 devices the plan holds one copy of each stage's work instead of
  // one per distinct program. Where the devices run few distinct programs
  // (dp, laysa), joinSlotPieces makes each program one template again.
  std::map<std::vector<int64_t>, int> pieces;
  int firstPiece = plan.templates_size();
  for (auto device : program.getBody().getOps<sched::SlotDeviceOp>()) {
    int64_t d = device.getIndex(), offset = device.getOffset();
    plan::Device *out = plan.add_devices();
    out->set_index(d);
    out->set_arena_bytes(arenaBytes);
    for (Operation &step : device.getBody().front()) {
      auto [it, added] =
          pieces.try_emplace(slotStepKey(device, step, tables), -1);
      if (added) {
        ScratchDevice scratch(plan);
        if (failed(lowerSlotStep(device, step, *scratch, tables)))
          return failure();
        if (scratch->instructions_size() > 0)
          it->second = addTemplate(*scratch, offset, d, 0, 0);
      }
      if (it->second < 0)
        continue;
      plan::Run *run = out->add_runs();
      run->set_template_(it->second);
      run->set_time_step(offset);
      run->set_micro_batch(d);
    }
  }
  joinSlotPieces(firstPiece);
  return success();
}

/// Makes each distinct program of the devices (its pieces in order) one
/// template run once per device, where that writes fewer bytes than the
/// pieces and a run per piece on every device: a whole program costs its
/// bytes once per distinct program, the pieces a run each per device.
void Emitter::joinSlotPieces(int firstPiece) {
  int pieceCount = plan.templates_size() - firstPiece;
  std::vector<size_t> pieceBytes(pieceCount);
  size_t piecesBytes = 0, wholeBytes = 0;
  for (int p = 0; p < pieceCount; ++p)
    piecesBytes += pieceBytes[p] =
        plan.templates(firstPiece + p).ByteSizeLong();
  std::map<std::vector<int>, int> programs; // pieces in order -> program
  std::vector<int> programOf;
  for (const plan::Device &device : plan.devices()) {
    std::vector<int> key;
    for (const plan::Run &run : device.runs()) {
      key.push_back(run.template_());
      piecesBytes += run.ByteSizeLong() + 2;
    }
    auto [it, added] = programs.try_emplace(key, programs.size());
    programOf.push_back(it->second);
    if (added)
      for (int t : key)
        wholeBytes += pieceBytes[t - firstPiece];
    if (!device.runs().empty())
      wholeBytes += device.runs(0).ByteSizeLong() + 2;
  }
  if (wholeBytes >= piecesBytes)
    return;
  // A piece of one program alone (CDP-ZeRO's, which name their devices)
  // moves into it; shared ones are copied.
  std::vector<int> uses(pieceCount, 0);
  for (const auto &[key, program] : programs)
    for (int t : key)
      ++uses[t - firstPiece];
  int joinedFirst = plan.templates_size();
  for (size_t p = 0; p < programs.size(); ++p)
    plan.add_templates();
  for (const auto &[key, program] : programs) {
    plan::Template &whole = *plan.mutable_templates(joinedFirst + program);
    for (int t : key) {
      auto &from = *plan.mutable_templates(t)->mutable_instructions();
      if (uses[t - firstPiece] > 1) {
        whole.mutable_instructions()->MergeFrom(from);
        continue;
      }
      // Both templates live where the plan does (its arena, or the heap):
      // the instructions change hands without a copy.
      std::vector<plan::Instruction *> moved(from.size());
      from.UnsafeArenaExtractSubrange(0, from.size(), moved.data());
      for (plan::Instruction *instruction : moved)
        whole.mutable_instructions()->UnsafeArenaAddAllocated(instruction);
    }
  }
  plan.mutable_templates()->DeleteSubrange(firstPiece, pieceCount);
  for (int d = 0; d < plan.devices_size(); ++d) {
    plan::Device &device = *plan.mutable_devices(d);
    if (device.runs().empty())
      continue;
    plan::Run run = device.runs(0);
    run.set_template_(firstPiece + programOf[d]);
    device.clear_runs();
    *device.add_runs() = run;
  }
}

/// What sets one schedule op's instructions apart from another's besides
/// the device's offset and micro-batch: the op and its attributes (times
/// relative to the offset; MLIR uniques both, so their addresses compare)
/// and, for the chain, whether the device is the last (its reduce_start
/// writes the means); CDP-ZeRO's messages and updates name their devices,
/// so no two slots share there.
std::vector<int64_t> Emitter::slotStepKey(sched::SlotDeviceOp op,
                                          Operation &step,
                                          const DataParallelTables &tables) {
  return {
      reinterpret_cast<intptr_t>(step.getName().getAsOpaquePointer()),
      reinterpret_cast<intptr_t>(step.getAttrDictionary().getAsOpaquePointer()),
      tables.chain && op.getIndex() == tables.N - 1,
      tables.cdpZero ? op.getIndex() : -1};
}

/// Per stage: the parameters, their gradients, the reduced buffers their
/// updates read, and (--cdp-reduce chain) the chain buffers.
LogicalResult Emitter::addReducedTensors(DataParallelTables &tables) {
  int64_t L = tables.L;
  Block &body = func.getBody().front();
  auto &byStage = tables.byStage;
  byStage.assign(L + 1, {});
  llvm::StringMap<UpdateOp> updates;
  body.walk([&](UpdateOp update) { updates[update.getName()] = update; });
  llvm::StringMap<int> paramIds;
  for (const plan::Tensor &t : plan.tensors())
    if (t.kind() == plan::PARAM)
      paramIds[t.name()] = t.id();
  // Gradients by name, once (a walk of the body per gradient was
  // quadratic: 52 s for 10k MatMuls).
  llvm::StringMap<GradientOp> gradients;
  body.walk([&](GradientOp g) { gradients[g.getName()] = g; });
  plan.clear_applied_gradients();
  std::vector<int64_t> stageBytes(L, 0);
  for (int i = 0; i < plan.gradients_size(); ++i) {
    const std::string &name = plan.gradients(i);
    GradientOp gradient = gradients.lookup(name);
    if (!gradient)
      return func.emitOpError("has no gradient op for '" + name + "'");
    auto stage = gradient->getAttrOfType<IntegerAttr>("cdp.stage");
    UpdateOp update = updates.lookup(name);
    if (!stage || !update)
      return gradient.emitOpError("has no stage or no update");
    int paramId = paramIds.lookup(name);
    plan::Tensor reduced = plan.tensors(paramId);
    stageBytes[stage.getInt() - 1] += reduced.bytes();
    // ZeRO stages 2 and 3 reduce into shards (or, CDP-ZeRO, the owner's
    // buffer): a whole mean per parameter would be memory nothing reads.
    if (tables.zero >= 2 || tables.sparse) { // laysa: no mean either
      byStage[stage.getInt()].push_back(
          {paramId, ids.lookup(gradient.getGrad()), -1, update});
      continue;
    }
    reduced.set_id(plan.tensors_size());
    reduced.set_kind(plan::REDUCED);
    reduced.clear_data();
    reduced.set_trainable(false);
    *plan.add_tensors() = reduced;
    plan.add_applied_gradients(reduced.id());
    byStage[stage.getInt()].push_back(
        {paramId, ids.lookup(gradient.getGrad()), reduced.id(), update});
  }
  for (int64_t b : stageBytes)
    plan.mutable_schedule()->add_stage_param_bytes(b);
  // ZeRO stages 2 and 3: per stage one shard of the mean gradients per
  // device; no device holds a whole mean gradient to report as applied.
  tables.gradShards.assign(L + 1, -1);
  for (int64_t l = 1; tables.zero >= 2 && !tables.cdpZero && l <= L; ++l) {
    if (byStage[l].empty())
      continue;
    int64_t shard = ShardLayout({stageBytes[l - 1] / 4}, tables.N).shardSize();
    plan::Tensor buffer;
    buffer.set_id(plan.tensors_size());
    buffer.set_name("stage" + std::to_string(l) + "@gradient_shard");
    buffer.set_dtype(plan::F32);
    buffer.set_kind(plan::REDUCED);
    buffer.add_shape(shard);
    buffer.set_bytes(4 * shard);
    *plan.add_tensors() = buffer;
    tables.gradShards[l] = buffer.id();
  }
  if (tables.zero >= 2 || tables.sparse)
    plan.clear_applied_gradients();
  // --cdp-reduce chain: per stage two buffers, by step parity, that hold a
  // step's mean from its arrival to the wait that applies it (a delayed
  // stage's next mean arrives before the wait: CDP's second version).
  tables.chainBuffers.assign(L + 1, {-1, -1});
  for (int64_t l = 1; tables.chain && !tables.cdpZero && l <= L; ++l) {
    if (byStage[l].empty())
      continue;
    for (int parity = 0; parity < 2; ++parity) {
      plan::Tensor buffer;
      buffer.set_id(plan.tensors_size());
      buffer.set_name("stage" + std::to_string(l) + "@chain" +
                      std::to_string(parity));
      buffer.set_dtype(plan::F32);
      buffer.set_kind(plan::REDUCED);
      int64_t flag = tables.flagsRide ? 1 : 0; // the mean overflow flag
      buffer.add_shape(stageBytes[l - 1] / 4 + flag);
      buffer.set_bytes(stageBytes[l - 1] + 4 * flag);
      *plan.add_tensors() = buffer;
      tables.chainBuffers[l][parity] = buffer.id();
    }
  }
  return success();
}

/// laysa: each stage's trained parameters with their gradients, the
/// entries cdp-sparsify-gradients chose to send and their update's rule.
LogicalResult Emitter::prepareExchange(DataParallelTables &tables) {
  sparse::Exchange &exchange = tables.exchange;
  exchange.devices = tables.N;
  exchange.cycle = 2 * tables.L + 2;
  exchange.stages.assign(tables.L + 1, {});
  plan::Device scratch;
  for (int64_t l = 1; l <= tables.L; ++l)
    for (auto t : tables.byStage[l]) {
      auto count = t.update->getAttrOfType<IntegerAttr>("cdp.sparse_count");
      if (!count)
        return t.update.emitOpError("has no cdp.sparse_count; run "
                                    "cdp-sparsify-gradients first");
      if (failed(addInstruction(t.update, scratch, false)))
        return failure();
      sparse::Param param;
      param.param = t.param;
      param.grad = t.grad;
      param.count = count.getInt();
      param.update = scratch.instructions(scratch.instructions_size() - 1);
      exchange.stages[l].params.push_back(std::move(param));
    }
  return success();
}

/// ZeRO stage 3: per stage, the device's SHARD of its parameters, and the
/// parameters themselves moved into the gather region after the arena (at
/// the offset cdp-place-gathered-params chose), one after another with the
/// padding behind them, so that the all-gather writes them in place.
/// CDP-ZeRO: a stage's shard is its whole master copy, on its owner only,
/// beside the owner's buffer for the mean gradients; the stage travels
/// point to point in one arena tensor over its parameters (the region).
/// Returns the device's arena with the region.
int64_t Emitter::addShardGroups(sched::StepProgramOp program,
                                DataParallelTables &tables,
                                int64_t arenaBytes) {
  std::map<int64_t, int64_t> offsets;
  program.walk([&](sched::GatherParamsOp gather) {
    offsets[gather.getStage()] = gather.getOffset();
  });
  tables.owners.assign(tables.L + 1, -1);
  tables.regions.assign(tables.L + 1, -1);
  tables.means.assign(tables.L + 1, -1);
  for (auto device : program.getBody().getOps<sched::SlotDeviceOp>())
    device.walk([&](sched::OwnerUpdateOp update) {
      tables.owners[update.getStage()] = device.getIndex();
    });
  int64_t base = (arenaBytes + 63) / 64 * 64, end = arenaBytes;
  tables.paramShards.assign(tables.L + 1, -1);
  tables.gathered.assign(tables.L + 1, {});
  auto addTensor = [&](const std::string &name, plan::TensorKind kind,
                       int64_t elements, int64_t offset) {
    plan::Tensor *t = plan.add_tensors();
    t->set_id(plan.tensors_size() - 1);
    t->set_name(name);
    t->set_dtype(plan::F32);
    t->set_kind(kind);
    t->add_shape(elements);
    t->set_bytes(4 * elements);
    t->set_offset(offset);
    return t->id();
  };
  for (auto [l, offset] : offsets) {
    std::vector<int64_t> sizes;
    plan::ShardGroup *group = plan.mutable_schedule()->add_shard_groups();
    group->set_stage(l);
    int64_t at = base + offset;
    for (const auto &t : tables.byStage[l]) {
      plan::Tensor *param = plan.mutable_tensors(t.param);
      param->set_offset(at);
      at += param->bytes();
      sizes.push_back(param->bytes() / 4);
      group->add_params(t.param);
      tables.gathered[l].push_back(t.param);
    }
    ShardLayout layout(sizes, tables.cdpZero ? 1 : tables.N);
    std::string stage = "stage" + std::to_string(l);
    group->set_padding(-1);
    if (tables.cdpZero) {
      int64_t owner = tables.owners[l];
      group->set_owner(static_cast<int32_t>(owner));
      group->set_region(addTensor(stage + "@params", plan::ACTIVATION,
                                  layout.totalSize(), base + offset));
      tables.regions[l] = group->region();
      group->set_shard(
          addTensor(stage + "@master", plan::SHARD, layout.totalSize(), 0));
      tables.means[l] = addTensor(stage + "@mean_gradient", plan::REDUCED,
                                  layout.totalSize(), 0);
      group->set_mean(tables.means[l]);
      for (int id : {group->shard(), tables.means[l]})
        plan.mutable_tensors(id)->set_device(static_cast<int32_t>(owner));
      tables.paramShards[l] = group->shard();
      end = std::max(end, base + offset + 4 * layout.totalSize());
      continue;
    }
    if (layout.padding() > 0) {
      group->set_padding(addTensor(stage + "@gather_padding", plan::ACTIVATION,
                                   layout.padding(), at));
      tables.gathered[l].push_back(group->padding());
    }
    group->set_shard(
        addTensor(stage + "@param_shard", plan::SHARD, layout.shardSize(), 0));
    tables.paramShards[l] = group->shard();
    end = std::max(end, base + offset + 4 * layout.paddedSize());
  }
  return end;
}

/// The lowering of one slot device's program: what every instruction of
/// it shares (the device, its slot d, its offset s), and a method per kind
/// of sched op.
class SlotLowering {
public:
  SlotLowering(Emitter &emitter, sched::SlotDeviceOp op, plan::Device &out,
               const DataParallelTables &tables)
      : emitter(emitter), tables(tables), device(&out), d(op.getIndex()),
        s(op.getOffset()), L(tables.L) {}
  LogicalResult lower(Operation &step);

private:
  plan::Instruction *stamp(plan::Instruction *instruction, int64_t stage,
                           int64_t time);
  plan::Instruction *stageInstruction(const char *opName, int64_t l,
                                      int64_t time, const char *phase);
  void sumOverDevices(const char *opName, ArrayRef<int> shards, int share,
                      int64_t part, int64_t time, int64_t minStep);
  void waitForMeans(int64_t l, int64_t time, int64_t minStep, int64_t delay);
  LogicalResult adjustLossScale(sched::WaitReductionOp wait);
  bool marksOwnStep(int64_t l) const;
  LogicalResult unscaleByFlag(sched::WaitReductionOp wait, int64_t flagStage,
                              int64_t adjust);
  LogicalResult applyUpdates(int64_t l, int64_t time, int64_t minStep);
  LogicalResult shardUpdate(int64_t l, int64_t time, int64_t minStep,
                            int64_t zero);
  LogicalResult updateStage(int64_t l, int64_t time, int64_t minStep,
                            int64_t zero);
  plan::Instruction *paramMessage(const char *opName, int64_t l, int64_t time,
                                  int64_t peer, int64_t use,
                                  int64_t stepOffset);
  sparse::MakeInstruction exchangeStep(int64_t l, int64_t time);
  LogicalResult clipMeans(sched::ClipMeansOp clip);
  LogicalResult clipOwn(sched::ClipOwnOp clip);
  void startReduction(sched::StartReductionOp start);
  void takeFromOwner(sched::GatherParamsOp gather);
  void sendParams(sched::SendParamsOp send);
  LogicalResult updateOwned(sched::OwnerUpdateOp update);
  void gatherShards(sched::GatherParamsOp gather);
  void releaseParams(sched::ReleaseParamsOp release);
  void relayChain(sched::ChainRelayOp relay);

  Emitter &emitter;
  const DataParallelTables &tables;
  plan::Device *device;
  int64_t d, s, L;
};

plan::Instruction *SlotLowering::stamp(plan::Instruction *instruction,
                                       int64_t stage, int64_t time) {
  instruction->set_stage(stage);
  instruction->set_micro_batch(d);
  instruction->set_time_step(s + time);
  return instruction;
}

/// A reduction instruction of stage l: waits, starts and relays.
plan::Instruction *SlotLowering::stageInstruction(const char *opName, int64_t l,
                                                  int64_t time,
                                                  const char *phase) {
  plan::Instruction *instruction = stamp(device->add_instructions(), l, time);
  instruction->set_op(opName);
  instruction->set_location("stage " + std::to_string(l));
  instruction->set_phase(phase);
  plan::setIntAttribute(instruction, "stage", l);
  return instruction;
}

/// A stage's mean gradients of step t - 1 - delay, into its reduced
/// buffers (from the chain's buffers with --cdp-reduce chain).
void SlotLowering::waitForMeans(int64_t l, int64_t time, int64_t minStep,
                                int64_t delay) {
  plan::Instruction *instruction = stageInstruction(
      tables.chain ? "chain_wait" : "reduce_wait", l, time, "update");
  instruction->set_min_step(minStep);
  if (tables.chain)
    for (int buffer : tables.chainBuffers[l])
      instruction->add_inputs(buffer);
  for (const auto &t : tables.byStage[l])
    instruction->add_outputs(t.reduced);
  if (tables.ownOverflow >= 0)
    instruction->add_outputs(tables.stageOverflow[l]);
  plan::setIntAttribute(instruction, "delay", delay);
}

/// cdp with loss scaling: the first trained stage's mean of step t says
/// whether any device overflowed in it; the scale is adjusted there, once a
/// step on each device (the step 1 + D after t, D that wait's delay),
/// before the updates of those means and before that step's seed; the
/// updates read whether to skip from the buffer.
LogicalResult SlotLowering::adjustLossScale(sched::WaitReductionOp wait) {
  if (tables.ownOverflow < 0 || wait.getStage() != tables.firstTrained)
    return success();
  return unscaleByFlag(wait, tables.firstTrained, /*adjust=*/1);
}

/// Where a slot applies stages' means of different steps (v2: fresh stages
/// a step sooner), another stage's updates are framed by marks (`adjust`
/// 2): the buffer's flag set from that stage's mean, so they skip on their
/// own step's flag, then set back from the first trained stage's, the
/// step's adjustment (what the step log reads).
bool SlotLowering::marksOwnStep(int64_t l) const {
  return tables.marksStages && tables.ownOverflow >= 0 &&
         l != tables.firstTrained && tables.stageOverflow[l] >= 0;
}

/// The wait's block's unscale_grads on stage `flagStage`'s mean flag and
/// no gradients: `adjust` 1 adjusts the scale, 2 marks the skip flag only.
LogicalResult SlotLowering::unscaleByFlag(sched::WaitReductionOp wait,
                                          int64_t flagStage, int64_t adjust) {
  plan::Instruction *instruction = emitter.lowerUnscale(
      *device, tables.unscale, {}, {tables.stageOverflow[flagStage]});
  if (!instruction)
    return failure();
  if (adjust != 1)
    plan::setIntAttribute(instruction, "adjust", adjust);
  stamp(instruction, wait.getStage(), wait.getTimeStep())
      ->set_min_step(wait.getMinStep());
  instruction->set_phase("update");
  return success();
}

/// A stage's updates from its reduced buffers.
LogicalResult SlotLowering::applyUpdates(int64_t l, int64_t time,
                                         int64_t minStep) {
  for (const auto &t : tables.byStage[l]) {
    if (failed(emitter.addInstruction(t.update, *device, false)))
      return failure();
    plan::Instruction *update =
        device->mutable_instructions(device->instructions_size() - 1);
    update->set_inputs(1, t.reduced);
    update->set_phase("update");
    update->set_min_step(minStep);
    stamp(update, l, time);
  }
  return success();
}

/// ZeRO: one shard_update of the stage instead of its updates: the
/// parameters (stage 3: their shard, with each one's `sizes`), then their
/// mean gradients (stages 2 and 3: the device's shard of them); the
/// updates' rule, with each parameter's weight decay in `weight_decays`.
LogicalResult SlotLowering::shardUpdate(int64_t l, int64_t time,
                                        int64_t minStep, int64_t zero) {
  const auto &tensors = tables.byStage[l];
  if (tensors.empty())
    return success();
  std::vector<plan::Instruction> updates;
  for (const auto &t : tensors) {
    if (failed(emitter.addInstruction(t.update, *device, false)))
      return failure();
    updates.push_back(device->instructions(device->instructions_size() - 1));
    device->mutable_instructions()->RemoveLast();
  }
  plan::Instruction *shard =
      stageInstruction("shard_update", l, time, "update");
  shard->set_min_step(minStep);
  if (zero == 3) { // the parameters' shard; the sizes give each its rule
    shard->add_inputs(tables.paramShards[l]);
    plan::Attribute *sizes = shard->add_attributes();
    sizes->set_name("sizes");
    for (const plan::Instruction &update : updates)
      sizes->mutable_ints()->add_values(
          emitter.plan.tensors(update.inputs(0)).bytes() / 4);
  } else {
    for (const plan::Instruction &update : updates)
      shard->add_inputs(update.inputs(0));
  }
  if (tables.cdpZero) // the owner's whole stage from the chain's mean
    shard->add_inputs(tables.means[l]);
  else if (zero >= 2)
    shard->add_inputs(tables.gradShards[l]);
  else
    for (const auto &t : tensors)
      shard->add_inputs(t.reduced);
  addLossScale(updates, *shard);
  copyUpdateRule(updates, *shard);
  plan::setIntAttribute(shard, "cycle", 2 * L);
  plan::setIntAttribute(shard, "zero", zero);
  if (tables.cdpZero)
    plan::setIntAttribute(shard, "owner", d);
  return success();
}

/// A stage's update: sharded under ZeRO, else one per parameter.
LogicalResult SlotLowering::updateStage(int64_t l, int64_t time,
                                        int64_t minStep, int64_t zero) {
  return zero > 0 ? shardUpdate(l, time, minStep, zero)
                  : applyUpdates(l, time, minStep);
}

/// CDP-ZeRO's messages of a stage's parameters: the value names the
/// stage and the receiver's cycle time, the step the tag carries.
plan::Instruction *SlotLowering::paramMessage(const char *opName, int64_t l,
                                              int64_t time, int64_t peer,
                                              int64_t use, int64_t stepOffset) {
  plan::Instruction *instruction = stageInstruction(opName, l, time, "comm");
  plan::setIntAttribute(instruction, "peer", peer);
  plan::setIntAttribute(instruction, "value", use * 4096 + l);
  plan::setIntAttribute(instruction, "micro_batch", 0);
  plan::setIntAttribute(instruction, "micro_batches", 1);
  plan::setIntAttribute(instruction, "cycle", 2 * L);
  if (stepOffset != 0)
    plan::setIntAttribute(instruction, "step_offset", stepOffset);
  return instruction;
}

/// laysa: the exchange's instructions of stage l at `time`.
sparse::MakeInstruction SlotLowering::exchangeStep(int64_t l, int64_t time) {
  return [this, l, time](const char *opName, const char *phase) {
    return stageInstruction(opName, l, time, phase);
  };
}

/// ZeRO stages 2 and 3: `opName` (squared_norm, found_inf) of the device's
/// shards of the means into the scalar `share`, then summed over the
/// devices in place (norm_all_reduce; `part` 1 for the overflow flags,
/// which travel under a tag of their own).
void SlotLowering::sumOverDevices(const char *opName, ArrayRef<int> shards,
                                  int share, int64_t part, int64_t time,
                                  int64_t minStep) {
  plan::Instruction *local = stageInstruction(opName, 1, time, "update");
  local->set_min_step(minStep);
  for (int id : shards)
    local->add_inputs(id);
  local->add_outputs(share);
  plan::Instruction *sum =
      stageInstruction("norm_all_reduce", 1, time, "update");
  sum->set_min_step(minStep);
  sum->add_inputs(share);
  plan::setIntAttribute(sum, "cycle", 2 * L);
  if (part != 0)
    plan::setIntAttribute(sum, "part", part);
}

/// dp with clipping or loss scaling: every stage's mean, then the
/// unscaling and one clip of them all, then the updates. With ZeRO stage 2
/// or 3 each device holds its shard of the means only: the overflow flag
/// and the squared norm are its shards' shares, summed over the devices
/// (norm_all_reduce), and each device unscales and clips its own shards.
LogicalResult SlotLowering::clipMeans(sched::ClipMeansOp clip) {
  int64_t time = clip.getTimeStep(), minStep = clip.getMinStep();
  std::vector<int> means;
  bool sharded = tables.zero >= 2;
  for (int64_t l = 1; l <= L; ++l) {
    if (tables.byStage[l].empty())
      continue;
    if (sharded) {
      means.push_back(tables.gradShards[l]);
      continue;
    }
    waitForMeans(l, time, minStep, 0);
    for (const auto &t : tables.byStage[l])
      means.push_back(t.reduced);
  }
  // Dynamic loss scaling: the means unscaled first (the clip reads true
  // gradients); every device sees the same means (or, sharded, the same
  // sum of flags), so all skip alike.
  if (tables.unscale) {
    std::vector<int> flags;
    if (sharded) {
      sumOverDevices("found_inf", means, tables.overflowShare, 1, time,
                     minStep);
      flags.push_back(tables.overflowShare);
    }
    plan::Instruction *unscale =
        emitter.lowerUnscale(*device, tables.unscale, means, flags);
    if (!unscale)
      return failure();
    stamp(unscale, 1, time)->set_min_step(minStep);
  }
  if (tables.clip) {
    std::vector<int> partials;
    if (sharded) {
      sumOverDevices("squared_norm", means, tables.normShare, 0, time, minStep);
      partials.push_back(tables.normShare);
    }
    plan::Instruction *instruction =
        emitter.lowerClip(*device, tables.clip, means, partials);
    if (!instruction)
      return failure();
    stamp(instruction, 1, time)->set_min_step(minStep);
  }
  for (int64_t l = 1; l <= L; ++l)
    if (failed(updateStage(l, time, minStep, tables.zero)))
      return failure();
  return success();
}

/// cdp's unscaling and clip of each device's own gradients, before the
/// reductions (not an update block's: they run in the step). Unscaled by
/// 1 / S before they are summed: S a power of two, the same bits as the
/// mean unscaled; the flag says whether they overflowed, and the scale is
/// adjusted where the means arrive.
LogicalResult SlotLowering::clipOwn(sched::ClipOwnOp clip) {
  std::vector<int> own;
  for (int64_t l = 1; l <= L; ++l)
    for (const auto &t : tables.byStage[l])
      own.push_back(t.grad);
  int64_t time = clip.getTimeStep();
  if (tables.ownOverflow >= 0) {
    plan::Instruction *found =
        stageInstruction("found_inf", 1, time, "backward");
    for (int id : own)
      found->add_inputs(id);
    found->add_outputs(tables.ownOverflow);
    plan::Instruction *unscale =
        emitter.lowerUnscale(*device, tables.unscale, own, {});
    if (!unscale)
      return failure();
    plan::setIntAttribute(unscale, "adjust", 0);
    stamp(unscale, 1, time)->set_phase("backward");
  }
  if (!tables.clip)
    return success();
  plan::Instruction *instruction = emitter.lowerClip(*device, tables.clip, own);
  if (!instruction)
    return failure();
  stamp(instruction, 1, time)->set_phase("backward");
  return success();
}

/// A stage's reduction started: an all-reduce, ZeRO's reduce-scatter, or
/// the chain's first hop (CDP-ZeRO: towards the stage's owner).
void SlotLowering::startReduction(sched::StartReductionOp start) {
  int64_t l = start.getStage();
  const char *opName = start.getOwner() >= 0  ? "chain_reduce"
                       : start.getZero() >= 2 ? "shard_reduce"
                       : tables.chain         ? "chain_reduce"
                                              : "reduce_start";
  plan::Instruction *instruction =
      stageInstruction(opName, l, start.getTimeStep(), "comm");
  for (const auto &t : tables.byStage[l])
    instruction->add_inputs(t.grad);
  if (tables.ownOverflow >= 0)
    instruction->add_inputs(tables.ownOverflow);
  if (start.getZero() >= 2 && !tables.cdpZero)
    instruction->add_outputs(tables.gradShards[l]);
  if (tables.chain && d == tables.N - 1 && !tables.cdpZero)
    for (int buffer : tables.chainBuffers[l])
      instruction->add_outputs(buffer);
  plan::setIntAttribute(instruction, "cycle", 2 * L);
  if (start.getOwner() >= 0) // CDP-ZeRO: the last slot's mean goes there
    plan::setIntAttribute(instruction, "owner", start.getOwner());
}

/// CDP-ZeRO: a stage's parameters from its owner (the owner copies its
/// own master copy).
void SlotLowering::takeFromOwner(sched::GatherParamsOp gather) {
  int64_t l = gather.getStage(), time = gather.getTimeStep();
  if (gather.getFrom() == d) {
    plan::Instruction *copy = stageInstruction("master_copy", l, time, "comm");
    copy->add_inputs(tables.paramShards[l]);
    copy->add_outputs(tables.regions[l]);
    return;
  }
  paramMessage("recv", l, time, gather.getFrom(), time, 0)
      ->add_outputs(tables.regions[l]);
}

void SlotLowering::sendParams(sched::SendParamsOp send) {
  int64_t l = send.getStage();
  plan::Instruction *instruction =
      paramMessage("send", l, send.getTimeStep(), send.getTo(), send.getUse(),
                   send.getStepOffset());
  instruction->add_inputs(send.getMaster() ? tables.paramShards[l]
                                           : tables.regions[l]);
  instruction->set_ahead(send.getStepOffset() == 1);
}

/// CDP-ZeRO's owner: the mean of step t - 1 from the chain's last slot,
/// then the update of the master copy.
LogicalResult SlotLowering::updateOwned(sched::OwnerUpdateOp update) {
  int64_t l = update.getStage(), time = update.getTimeStep();
  plan::Instruction *wait = stageInstruction("chain_wait", l, time, "update");
  wait->set_min_step(1);
  wait->add_outputs(tables.means[l]);
  plan::setIntAttribute(wait, "delay", 0);
  plan::setIntAttribute(wait, "from", update.getFrom());
  return shardUpdate(l, time, 1, 3);
}

/// ZeRO stage 3: the stage's parameters all-gathered from the shards.
void SlotLowering::gatherShards(sched::GatherParamsOp gather) {
  int64_t l = gather.getStage();
  plan::Instruction *instruction =
      stageInstruction("shard_gather", l, gather.getTimeStep(), "comm");
  instruction->add_inputs(tables.paramShards[l]);
  for (int id : tables.gathered[l])
    instruction->add_outputs(id);
  plan::setIntAttribute(instruction, "cycle", 2 * L);
}

void SlotLowering::releaseParams(sched::ReleaseParamsOp release) {
  int64_t l = release.getStage();
  plan::Instruction *instruction =
      stageInstruction("shard_release", l, release.getTimeStep(), "comm");
  if (tables.cdpZero)
    instruction->add_inputs(tables.regions[l]);
  else
    for (int id : tables.gathered[l])
      instruction->add_inputs(id);
}

void SlotLowering::relayChain(sched::ChainRelayOp relay) {
  int64_t l = relay.getStage();
  plan::Instruction *instruction =
      stageInstruction("chain_relay", l, relay.getTimeStep(), "comm");
  instruction->set_min_step(relay.getStepOffset());
  for (int buffer : tables.chainBuffers[l])
    instruction->add_outputs(buffer);
  plan::setIntAttribute(instruction, "cycle", 2 * L);
  plan::setIntAttribute(instruction, "step_offset", relay.getStepOffset());
}

LogicalResult SlotLowering::lower(Operation &step) {
  if (auto compute = dyn_cast<sched::SlotComputeOp>(step))
    return emitter.lowerSlotCompute(*device, compute, s, d, L);
  if (auto wait = dyn_cast<sched::WaitReductionOp>(step)) {
    int64_t l = wait.getStage(), zero = wait.getZero();
    if (zero < 2) // stage 2's and 3's shard came with the reduce-scatter
      waitForMeans(l, wait.getTimeStep(), wait.getMinStep(), wait.getDelay());
    if (failed(adjustLossScale(wait)))
      return failure();
    bool marks = marksOwnStep(l);
    if (marks && failed(unscaleByFlag(wait, l, /*adjust=*/2)))
      return failure();
    if (failed(updateStage(l, wait.getTimeStep(), wait.getMinStep(), zero)))
      return failure();
    return marks ? unscaleByFlag(wait, tables.firstTrained, /*adjust=*/2)
                 : success();
  }
  if (auto clip = dyn_cast<sched::ClipMeansOp>(step))
    return clipMeans(clip);
  if (auto clip = dyn_cast<sched::ClipOwnOp>(step))
    return clipOwn(clip);
  if (auto update = dyn_cast<sched::OwnerUpdateOp>(step))
    return updateOwned(update);
  if (auto start = dyn_cast<sched::StartReductionOp>(step))
    startReduction(start);
  else if (auto gather = dyn_cast<sched::GatherParamsOp>(step))
    gather.getFrom() >= 0 ? takeFromOwner(gather) : gatherShards(gather);
  else if (auto send = dyn_cast<sched::SendParamsOp>(step))
    sendParams(send);
  else if (auto release = dyn_cast<sched::ReleaseParamsOp>(step))
    releaseParams(release);
  else if (auto absorb = dyn_cast<sched::AbsorbGradientsOp>(step))
    sparse::lowerAbsorb(tables.exchange, absorb.getStage(),
                        exchangeStep(absorb.getStage(), absorb.getTimeStep()));
  else if (auto send = dyn_cast<sched::SparseSendOp>(step))
    sparse::lowerSend(tables.exchange, send.getStage(),
                      exchangeStep(send.getStage(), send.getTimeStep()));
  else if (auto apply = dyn_cast<sched::SparseApplyOp>(step))
    sparse::lowerApply(tables.exchange, apply.getStage(),
                       exchangeStep(apply.getStage(), apply.getTimeStep()));
  else if (auto relay = dyn_cast<sched::ChainRelayOp>(step))
    relayChain(relay);
  else
    return step.emitOpError("has no lowering to a data-parallel plan");
  return success();
}

/// One op of slot d's program: a stage's forward or backward ops in the
/// order of @main; the wait for a stage's reduced gradients with its
/// updates; the start of a stage's reduction; the chain's relays.
LogicalResult Emitter::lowerSlotStep(sched::SlotDeviceOp op, Operation &step,
                                     plan::Device &out,
                                     const DataParallelTables &tables) {
  return SlotLowering(*this, op, out, tables).lower(step);
}

/// The graph's clip_grad_norm, scaling `grads` (the plan's tensors the
/// step's updates read) in place; with `partials`, the squared norm is
/// their sum (every stage's share) instead of the gradients' own. Null
/// after reporting an error.
plan::Instruction *Emitter::lowerClip(plan::Device &device, ClipGradNormOp clip,
                                      ArrayRef<int> grads,
                                      ArrayRef<int> partials) {
  if (!clip) {
    func.emitError("a clip step without a cdp.clip_grad_norm");
    return nullptr;
  }
  if (failed(addInstruction(clip, device, false)))
    return nullptr;
  plan::Instruction *instruction =
      device.mutable_instructions(device.instructions_size() - 1);
  instruction->clear_inputs();
  for (int id : partials)
    instruction->add_inputs(id);
  for (int id : grads)
    instruction->add_inputs(id);
  if (!partials.empty())
    plan::setIntAttribute(instruction, "partials", partials.size());
  return instruction;
}

/// The graph's unscale_grads on `grads` (the step's mean gradients) with
/// its loss-scale buffer and, where the step's gradients lie on several
/// stages, every stage's overflow flag (`flags`, in stage order). Null
/// after reporting an error.
plan::Instruction *Emitter::lowerUnscale(plan::Device &device,
                                         UnscaleGradsOp unscale,
                                         ArrayRef<int> grads,
                                         ArrayRef<int> flags) {
  if (failed(addInstruction(unscale, device, false)))
    return nullptr;
  plan::Instruction *instruction =
      device.mutable_instructions(device.instructions_size() - 1);
  int state = instruction->inputs(0);
  instruction->clear_inputs();
  instruction->add_inputs(state);
  for (int id : flags)
    instruction->add_inputs(id);
  for (int id : grads)
    instruction->add_inputs(id);
  if (!flags.empty())
    plan::setIntAttribute(instruction, "flags", flags.size());
  return instruction;
}

/// A stage's forward (ops without a phase, buffer writes included) or
/// backward ops, in the order of @main. Ops without a time of their own
/// (buffer writes after a forward) run in the time step of the instruction
/// before them, so that a device's times never decrease along its stream.
ArrayRef<Operation *> Emitter::slotStageOpsOf(int64_t stage, bool backward,
                                              int64_t L) {
  if (slotStageOps.empty())
    for (Operation &op : func.getBody().front().without_terminator()) {
      if (isa<ParamOp, ConstantOp, UpdateOp, ClipGradNormOp, UnscaleGradsOp>(
              op))
        continue;
      auto phase = op.getAttrOfType<StringAttr>("cdp.phase");
      auto opStage = op.getAttrOfType<IntegerAttr>("cdp.stage");
      slotStageOps[{opStage ? opStage.getInt() : L,
                    phase && phase.getValue() == "backward"}]
          .push_back(&op);
    }
  auto it = slotStageOps.find({stage, backward});
  if (it == slotStageOps.end())
    return {};
  return it->second;
}

LogicalResult Emitter::lowerSlotCompute(plan::Device &device,
                                        sched::SlotComputeOp compute,
                                        int64_t offset, int64_t d, int64_t L) {
  bool backward = compute.getKind() == sched::WorkKind::Backward;
  for (Operation *op : slotStageOpsOf(compute.getStage(), backward, L)) {
    if (failed(addInstruction(op, device, false)))
      return failure();
    plan::Instruction *instruction =
        device.mutable_instructions(device.instructions_size() - 1);
    auto time = op->getAttrOfType<IntegerAttr>("cdp.time");
    int64_t previous =
        device.instructions_size() > 1
            ? device.instructions(device.instructions_size() - 2).time_step() -
                  offset
            : 0;
    instruction->set_stage(compute.getStage());
    instruction->set_micro_batch(d);
    instruction->set_time_step(offset + (time ? time.getInt() : previous));
  }
  return success();
}

} // namespace cdp::emit
