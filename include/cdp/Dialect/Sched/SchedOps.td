//===- SchedOps.td - the schedule level of cdp -------------*- tablegen -*-===//
//
// Per-device instruction streams over time steps: which micro-batch runs
// which stage with which weight version, when gradients are reduced and
// stages updated. Every op carries its time step `at`.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_DIALECT_SCHED_SCHEDOPS_TD
#define CDP_DIALECT_SCHED_SCHEDOPS_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpBase.td"

def Sched_Dialect : Dialect {
  let name = "sched";
  let summary = "Schedules: per-device streams of stage runs, reductions and updates";
  let description = [{
    The schedule level of cdp (docs/design/sched-dialect.md), at two
    levels. A `sched.step_program` is what the plan runs: per device
    (`sched.stage_device` for the pipelines, `sched.slot_device` for dp and
    cdp) the ordered program one training step repeats; the plan emitter
    lowers it op by op. A `sched.program` is the time-step timeline over
    several steps, for reading, for the papers' tables and for the deadlock
    check: one `sched.device` per device, each an ordered stream of ops
    tagged with their time step `at` (docs/design/schedule.md): `sched.run`
    (forward or backward of one stage for one micro-batch with a weight
    version), `sched.reduce_start` (a stage's gradients handed to the
    reduction; `ready_at` is tau*_l, when the last contribution is in),
    `sched.reduce_wait` and `sched.update` (the stage advances to a new
    version), `sched.load` (a micro-batch's data). Start offsets are the
    `offset` of each device: nothing on it runs before.
  }];
  let cppNamespace = "::cdp::sched";
  let usePropertiesForAttributes = 0;
  let useDefaultAttributePrinterParser = 1;
}

//===----------------------------------------------------------------------===//
// Kinds, as enums: a misspelt kind is a parse error, not a silent no-op.
//===----------------------------------------------------------------------===//

def Sched_StrategyAttr : AttrDef<Sched_Dialect, "Strategy"> {
  let mnemonic = "strategy";
  let summary = "a training strategy of the registry";
  let description = [{
    One of the strategies `cdp-compile --strategy` names (the registry of
    include/cdp/Schedule/Strategies.def), as the enum the passes branch on:
    `#sched.strategy<"1f1b">`. An unknown name is a parse error. The module
    carries the run's as `sched.strategy` (cdp-set-strategy writes it); the
    schedule passes read it there, never from an option of their own.
  }];
  let parameters = (ins "::cdp::Strategy":$value);
  let hasCustomAssemblyFormat = 1;
  // As an op's argument: the accessor returns the enum.
  let returnType = "::cdp::Strategy";
  let convertFromStorage = "$_self.getValue()";
  let constBuilderCall =
      "::cdp::sched::StrategyAttr::get($_builder.getContext(), $0)";
  let extraClassDeclaration = [{
    /// The module's `sched.strategy`, or null (an error at `module`).
    static StrategyAttr ofModule(::mlir::ModuleOp module);
  }];
}

def Sched_WorkKind : I32EnumAttr<"WorkKind", "what a stage runs for a micro-batch", [
    I32EnumAttrCase<"Forward", 0, "forward">,
    I32EnumAttrCase<"Backward", 1, "backward">,
    // zb-h1's split backward: the gradient sent to the previous stage
    // (input_grad), then the parameter gradients (weight_grad).
    I32EnumAttrCase<"InputGrad", 2, "input_grad">,
    I32EnumAttrCase<"WeightGrad", 3, "weight_grad">]> {
  let cppNamespace = "::cdp::sched";
  let genSpecializedAttr = 0;
}
def Sched_WorkKindAttr : EnumAttr<Sched_Dialect, Sched_WorkKind, "work"> {
  let assemblyFormat = "`<` $value `>`";
}

def Sched_Version : I32EnumAttr<"Version", "which weight version a run reads", [
    I32EnumAttrCase<"Latest", 0, "latest">,
    I32EnumAttrCase<"Previous", 1, "previous">]> {
  let cppNamespace = "::cdp::sched";
  let genSpecializedAttr = 0;
}
def Sched_VersionAttr : EnumAttr<Sched_Dialect, Sched_Version, "version"> {
  let assemblyFormat = "`<` $value `>`";
}

def Sched_Reduction : I32EnumAttr<"Reduction", "how a stage's gradients are reduced over devices", [
    I32EnumAttrCase<"AllReduce", 0, "all_reduce">,
    I32EnumAttrCase<"Chain", 1, "chain">]> {
  let cppNamespace = "::cdp::sched";
  let genSpecializedAttr = 0;
}
def Sched_ReductionAttr : EnumAttr<Sched_Dialect, Sched_Reduction, "reduction"> {
  let assemblyFormat = "`<` $value `>`";
}

class Sched_Op<string mnemonic, list<Trait> traits = []>
    : Op<Sched_Dialect, mnemonic, traits> {
  let assemblyFormat = "attr-dict";
}

def Sched_ProgramOp : Sched_Op<"program", [NoTerminator, SingleBlock]> {
  let summary = "a whole schedule: one sched.device per device";
  let arguments = (ins Sched_StrategyAttr:$strategy, I64Attr:$devices, I64Attr:$stages,
                       I64Attr:$steps, StrAttr:$rule,
                       OptionalAttr<I64Attr>:$makespan,
                       OptionalAttr<DenseI64ArrayAttr>:$stash_peak,
                       OptionalAttr<DenseI64ArrayAttr>:$live_versions);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
}

def Sched_DeviceOp : Sched_Op<"device", [NoTerminator, SingleBlock,
                                         HasParent<"ProgramOp">]> {
  let summary = "one device's ordered stream";
  let arguments = (ins I64Attr:$index, I64Attr:$offset, I64Attr:$idle);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
}

def Sched_LoadOp : Sched_Op<"load", [HasParent<"DeviceOp">]> {
  let summary = "micro-batch (slot, step) is loaded";
  let arguments = (ins I64Attr:$slot, I64Attr:$step, I64Attr:$at);
}

def Sched_RunOp : Sched_Op<"run", [HasParent<"DeviceOp">]> {
  let summary = "forward (F) or backward (B) of one stage for one micro-batch";
  let arguments = (ins StrAttr:$kind, I64Attr:$stage, I64Attr:$slot,
                       I64Attr:$step, I64Attr:$version, I64Attr:$at);
}

def Sched_ReduceStartOp : Sched_Op<"reduce_start", [HasParent<"DeviceOp">]> {
  let summary = "a stage's gradients of a step go to the reduction";
  let arguments = (ins I64Attr:$stage, I64Attr:$step, I64Attr:$at,
                       I64Attr:$ready_at);
}

def Sched_ReduceWaitOp : Sched_Op<"reduce_wait", [HasParent<"DeviceOp">]> {
  let summary = "the device takes a stage's reduced gradients of a step";
  let arguments = (ins I64Attr:$stage, I64Attr:$step, I64Attr:$at);
}

def Sched_UpdateOp : Sched_Op<"update", [HasParent<"DeviceOp">]> {
  let summary = "the stage advances to `version`";
  let arguments = (ins I64Attr:$stage, I64Attr:$version, I64Attr:$at);
}

def Sched_SendOp : Sched_Op<"send", [HasParent<"DeviceOp">]> {
  let summary = "send an activation (forward) or gradient (backward) to a device";
  let description = [{
    Matched with the `sched.recv` on device `to` with the same kind, slot
    and step. The deadlock check treats both as blocking.
  }];
  let arguments = (ins I64Attr:$to, StrAttr:$kind, I64Attr:$slot,
                       I64Attr:$step, I64Attr:$at);
}

def Sched_RecvOp : Sched_Op<"recv", [HasParent<"DeviceOp">]> {
  let summary = "receive an activation or gradient from a device";
  let arguments = (ins I64Attr:$from, StrAttr:$kind, I64Attr:$slot,
                       I64Attr:$step, I64Attr:$at);
}

// Counts and indices, read as int64_t (ODS's I64Attr reads uint64_t, which
// turns a step of -1 into a huge number).
def Sched_Int : SignlessIntegerAttrBase<I64, "64-bit integer attribute"> {
  let returnType = "int64_t";
  let convertFromStorage = "$_self.getValue().getSExtValue()";
}

//===----------------------------------------------------------------------===//
// The step program: what every device runs in each training step of a
// pipeline (gpipe, 1f1b, 2bw, cdp-mp), the form the plan emitter lowers.
//===----------------------------------------------------------------------===//

def Sched_StepProgramOp : Sched_Op<"step_program", [NoTerminator, SingleBlock]> {
  let summary = "the per-step programs of a pipeline, one sched.stage_device per device";
  let description = [{
    Holds every decision of a pipeline schedule: parameter placement
    (`sched.place_param`), which device runs which stage and micro-batches
    (`sched.stage_device`) and, per device, the ordered program one training
    step repeats. `micro_batches` counts a step's micro-batches over all
    replicas; `cycle` is the step's length in time steps; `weight_versions`
    is 2 where runs may read the previous version (2bw, cdp-mp);
    `version_delay` (cdp, cdp-mp) gives, per micro-batch and stage, how
    many versions behind it reads; `live_versions` the versions each stage
    holds. dp and cdp (`sched.slot_device`s) also give each stage's
    `reduce_at` (tau*_l of step 0) and the `reduction`.

    `replicas` (R > 1) says the body spells the first of R alike pipelines
    only: its D devices are 0 .. D-1, and replica r runs each of them on
    device `index` + r·D, for its `micro_batches` plus r times their count,
    with `replica` r in its exchanges and every device it names (a tied
    weight's peer, a clip's devices) r·D further; `peers` lists, which
    name every replica's device, stay as written. The emitter spells the
    other replicas out, so a plan at many replicas costs the passes one
    replica's ops.
  }];
  let arguments = (ins Sched_StrategyAttr:$strategy, Sched_Int:$stages,
                       Sched_Int:$micro_batches, Sched_Int:$cycle,
                       Sched_Int:$weight_versions, StrAttr:$rule,
                       OptionalAttr<ArrayAttr>:$version_delay,
                       OptionalAttr<DenseI64ArrayAttr>:$live_versions,
                       OptionalAttr<DenseI64ArrayAttr>:$reduce_at,
                       OptionalAttr<Sched_ReductionAttr>:$reduction,
                       OptionalAttr<Sched_Int>:$replicas);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The alike pipelines the body stands for (1 when it spells every
    /// device).
    int64_t getReplicaCount() { return getReplicas().value_or(1); }
  }];
}

def Sched_PlaceParamOp : Sched_Op<"place_param", [HasParent<"StepProgramOp">]> {
  let summary = "a parameter lives on `stage`; tied copies on `replicas`";
  let description = [{
    The owner stage updates the parameter. A trained parameter that other
    stages read too (a tied weight) has a replica on each of `replicas`:
    their gradient contributions travel to the owner like any value across
    a cut, and the owner sends the updated value back (`sched.param_send`).
  }];
  let arguments = (ins StrAttr:$param, Sched_Int:$stage,
                       DenseI64ArrayAttr:$replicas);
}

def Sched_StageDeviceOp : Sched_Op<"stage_device", [NoTerminator, SingleBlock,
                                                   HasParent<"StepProgramOp">]> {
  let summary = "one device: its stage, replica, micro-batches, stash slots and program";
  let description = [{
    Device `index` runs stage `stage` for the micro-batches `micro_batches`
    of each step (numbered over all replicas; the device's k-th is
    `micro_batches[k]`), keeping `slots` micro-batches' stashed activations.
    Its body is the step's program in order. A device that runs several
    stages (interleaved-1f1b) has one `sched.stage_device` per stage, next
    to each other; it runs their programs merged by time step.
  }];
  let arguments = (ins Sched_Int:$index, Sched_Int:$stage, Sched_Int:$replica,
                       DenseI64ArrayAttr:$micro_batches, Sched_Int:$slots);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

class Sched_StepOp<string mnemonic, list<Trait> traits = []>
    : Sched_Op<mnemonic, !listconcat(traits, [HasParent<"StageDeviceOp">])> {
  // `step` is 0 for the running step's work and -1 for the previous
  // step's (skipped in step 0, run once more after the last step);
  // `time_step` is the time step within the step's program; `micro_batch`
  // the device's micro-batch (k) the op runs for or, at an update, follows.
}

def Sched_ComputeOp : Sched_StepOp<"compute"> {
  let summary = "the stage's forward, backward or half backward for the device's k-th micro-batch";
  let description = [{
    Runs every op of the stage's forward (or backward) for micro-batch
    `micro_batch` (k, into the device's `micro_batches`) in stash slot
    `slot`, reading weight version `version`; a tied weight named in
    `tied_previous` is read at its previous version. Values read across a
    cut arrive from the device that runs the producer's stage for the same
    micro-batch; graph inputs are loaded.
  }];
  let arguments = (ins Sched_WorkKindAttr:$kind, Sched_Int:$micro_batch,
                       Sched_Int:$slot, Sched_Int:$time_step, Sched_Int:$step,
                       Sched_VersionAttr:$version,
                       OptionalAttr<StrArrayAttr>:$tied_previous);
  let hasVerifier = 1;
}

def Sched_KeepPreviousOp : Sched_StepOp<"keep_previous"> {
  let summary = "copy the latest version of `param` into its previous version";
  let arguments = (ins StrAttr:$param, Sched_Int:$micro_batch,
                       Sched_Int:$time_step, Sched_Int:$step);
  let hasVerifier = 1;
}

def Sched_ExchangeGradientsOp : Sched_StepOp<"exchange_gradients"> {
  let summary = "sum `param`'s step gradient over the stage's replicas";
  let description = [{
    Sends this device's gradient sum to every other device of `peers` (the
    stage's devices by replica; this one is `peers[replica]`), receives
    theirs, and adds all of them in replica order, so every replica applies
    the same update.
  }];
  let arguments = (ins StrAttr:$param, DenseI64ArrayAttr:$peers,
                       Sched_Int:$replica, Sched_Int:$micro_batch,
                       Sched_Int:$time_step, Sched_Int:$step);
  let hasVerifier = 1;
}

def Sched_ApplyUpdateOp : Sched_StepOp<"apply_update"> {
  let summary = "the optimizer update of `param` from the step's gradient";
  let arguments = (ins StrAttr:$param, Sched_Int:$micro_batch,
                       Sched_Int:$time_step, Sched_Int:$step);
  let hasVerifier = 1;
}

def Sched_ApplyShardUpdateOp : Sched_StepOp<"apply_shard_update"> {
  let summary = "ZeRO stage 1 over a stage's replicas: update the device's shard and exchange the shards";
  let description = [{
    Replaces the `sched.apply_update`s of `params` (the stage's trained
    parameters, in plan order) after their `sched.exchange_gradients`: the
    parameters, concatenated, are cut into one equal shard per replica
    (`peers`, the stage's devices by replica; this one is
    `peers[replica]`); the device updates its own shard from the summed
    gradients, keeping the optimizer state of that shard only, sends it
    to every other replica and writes theirs into place, so every replica
    ends with the whole stage updated.
  }];
  let arguments = (ins StrArrayAttr:$params, DenseI64ArrayAttr:$peers,
                       Sched_Int:$replica, Sched_Int:$micro_batch,
                       Sched_Int:$time_step, Sched_Int:$step);
  let hasVerifier = 1;
}

def Sched_UnscaleStagesOp : Sched_StepOp<"unscale_stages"> {
  let summary = "dynamic loss scaling over the pipeline's stages: unscale, and skip alike";
  let description = [{
    fp16 (before the stage's updates, after any replica exchange and
    before `sched.clip_stages`): whether the stage's gradients of the step
    hold a value that is not finite goes to every other stage of the
    replica that has updates (`stages`, run by `devices`, one each), theirs
    come back; the stage's gradients are multiplied by 1 / scale and the
    stage's own copy of the loss-scale buffer is adjusted by whether any
    stage overflowed. Every stage thus skips the same steps and keeps the
    same scale, the one the loss's stage seeds the next backward with.
  }];
  let arguments = (ins DenseI64ArrayAttr:$stages, DenseI64ArrayAttr:$devices,
                       Sched_Int:$micro_batch, Sched_Int:$time_step,
                       Sched_Int:$step);
  let hasVerifier = 1;
}

def Sched_ClipStagesOp : Sched_StepOp<"clip_stages"> {
  let summary = "clip the step's gradients by their global norm over the pipeline's stages";
  let description = [{
    Before the stage's updates (after any replica exchange): this stage's
    share of the squared norm of the step's gradients goes to every other
    stage of the replica that has updates (`stages`, run by `devices`, one
    each), theirs come back, and the stage's gradients are scaled by the
    clip coefficient of their sum in stage order, so every stage applies
    the same factor.
  }];
  let arguments = (ins DenseI64ArrayAttr:$stages, DenseI64ArrayAttr:$devices,
                       Sched_Int:$micro_batch, Sched_Int:$time_step,
                       Sched_Int:$step);
  let hasVerifier = 1;
}

def Sched_ParamSendOp : Sched_StepOp<"param_send"> {
  let summary = "send `param`'s new value to the device `to` holding a replica";
  let description = [{
    `next_step_only`: the replica takes the value at the start of the next
    step (a `param_refresh`), so a run's last step need not send it unless
    a checkpoint written after it carries the message to a resumed run.
  }];
  let arguments = (ins StrAttr:$param, Sched_Int:$to, Sched_Int:$micro_batch,
                       Sched_Int:$time_step, Sched_Int:$step,
                       UnitAttr:$next_step_only);
  let hasVerifier = 1;
}

def Sched_ParamRecvOp : Sched_StepOp<"param_recv"> {
  let summary = "take a tied weight's new value from its owner device `from`";
  let arguments = (ins StrAttr:$param, Sched_Int:$from, Sched_Int:$micro_batch,
                       Sched_Int:$time_step, Sched_Int:$step);
  let hasVerifier = 1;
}

def Sched_ParamRefreshOp : Sched_Op<"param_refresh",
                                    [HasParent<"StageDeviceOp">]> {
  let summary = "at the start of step t > 0, a tied weight's value from step t - 1";
  let description = [{
    With one weight version, a replica starts every step after the first
    with the value its owner made at the end of the previous step.
  }];
  let arguments = (ins StrAttr:$param, Sched_Int:$from);
}

//===----------------------------------------------------------------------===//
// dp and cdp: every device runs every stage of its own micro-batch (slot).
//===----------------------------------------------------------------------===//

def Sched_SlotDeviceOp : Sched_Op<"slot_device", [NoTerminator, SingleBlock,
                                                 HasParent<"StepProgramOp">]> {
  let summary = "a data-parallel device: every stage of micro-batch `index`";
  let description = [{
    Device `index` runs micro-batch (slot) `index` of each step through all
    stages, its time steps shifted by `offset` (CDP's start delay, plus any
    wait the version table asks for). Its body is the step's program.
  }];
  let arguments = (ins Sched_Int:$index, Sched_Int:$offset);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
}

def Sched_SlotComputeOp : Sched_Op<"slot_compute", [HasParent<"SlotDeviceOp">]> {
  let summary = "the forward or backward of one stage for the device's micro-batch";
  let description = [{
    Runs the ops of stage `stage`'s forward (with the buffer writes after
    it) or backward, in the order of `@main`, at `time_step` of the cycle.
  }];
  let arguments = (ins Sched_WorkKindAttr:$kind, Sched_Int:$stage,
                       Sched_Int:$time_step);
  let hasVerifier = 1;
}

def Sched_WaitReductionOp : Sched_Op<"wait_reduction",
                                     [HasParent<"SlotDeviceOp">]> {
  let summary = "take a stage's reduced gradients and update its parameters";
  let description = [{
    Before the stage's forward: waits for the mean gradients of step
    t - 1 - `delay` and applies the stage's updates with them, from step
    `min_step` = 1 + `delay` on (the version table's delay). `zero` is the
    ZeRO stage of the update: 0, every parameter's own update on every
    device; 1, the optimizer state is sharded: the device updates its shard
    of the stage (the stage's parameters concatenated and cut into one
    equal shard per device) and an all-gather of the updated shards gives
    every device the whole stage; 2, the gradients too: the device's
    shard of the mean gradients comes from the stage's reduce-scatter
    (`sched.start_reduction` with `zero` = 2) and no device holds the
    stage's whole mean gradient; 3, the parameters too: the device updates
    its shard of the parameters (a SHARD tensor) and nothing is gathered
    here (`sched.gather_params` gathers the stage where it is read).
  }];
  let arguments = (ins Sched_Int:$stage, Sched_Int:$delay,
                       Sched_Int:$min_step, Sched_Int:$time_step,
                       DefaultValuedAttr<Sched_Int, "0">:$zero);
  let hasVerifier = 1;
}

def Sched_ClipMeansOp : Sched_Op<"clip_means", [HasParent<"SlotDeviceOp">]> {
  let summary = "dp: take every stage's reduced gradients, clip them together and update";
  let description = [{
    With gradient clipping, dp's step starts here instead of at the stages'
    `sched.wait_reduction`s: from step `min_step` on, it waits for every
    stage's mean gradients of step t - 1, scales them by the clip
    coefficient of their global norm and applies every stage's update.
    `zero` is the ZeRO stage of the updates (see `sched.wait_reduction`);
    with 2 or 3 a device holds its shard of each mean only, and the norm
    is the sum of the devices' shares.
  }];
  let arguments = (ins Sched_Int:$min_step, Sched_Int:$time_step,
                       DefaultValuedAttr<Sched_Int, "0">:$zero);
}

def Sched_ClipOwnOp : Sched_Op<"clip_own", [HasParent<"SlotDeviceOp">]> {
  let summary = "cdp: clip the device's own gradients of the step before they are reduced";
  let description = [{
    After the device's last backward: scales its own gradients of the step
    (every stage's) by the clip coefficient of their global norm; the
    stages' reductions start after it.
  }];
  let arguments = (ins Sched_Int:$time_step);
}

def Sched_StartReductionOp : Sched_Op<"start_reduction",
                                      [HasParent<"SlotDeviceOp">]> {
  let summary = "hand a stage's gradients of the step to the reduction";
  let description = [{
    With `zero` = 2 or 3 the reduction is a reduce-scatter: the device keeps
    the mean of its shard of the stage's gradients only (see
    `sched.wait_reduction`). CDP-ZeRO (`owner` >= 0): the chain's partial
    sums go from slot to slot as with --cdp-reduce chain, and the last slot
    hands the mean to device `owner`, which alone updates the stage
    (`sched.owner_update`); nothing travels back.
  }];
  let arguments = (ins Sched_Int:$stage, Sched_Int:$time_step,
                       DefaultValuedAttr<Sched_Int, "0">:$zero,
                       DefaultValuedAttr<Sched_Int, "-1">:$owner);
}

def Sched_GatherParamsOp : Sched_Op<"gather_params",
                                    [HasParent<"SlotDeviceOp">]> {
  let summary = "ZeRO stage 3: gather a stage's parameters from every device's shard";
  let description = [{
    Before work that reads stage `stage`'s parameters (the stage's forward
    or backward, or another stage's that shares a tied weight): an
    all-gather of the devices' shards puts the whole stage, padded to equal
    shards, at byte `offset` of the device's gather region, where it stays
    until the matching `sched.release_params`. Every device gathers at the
    same point of its program (a collective). `cdp-place-gathered-params`
    chooses the offsets: stages gathered at the same time never overlap.

    CDP-ZeRO (`from` >= 0): the stage arrives point to point instead, from
    device `from` (the slot before, which just used it, or the stage's
    owner), or, where `from` is the device itself, from its own master
    copy (it owns the stage). Nothing is padded.
  }];
  let arguments = (ins Sched_Int:$stage, Sched_Int:$time_step,
                       DefaultValuedAttr<Sched_Int, "0">:$offset,
                       DefaultValuedAttr<Sched_Int, "-1">:$from);
}

def Sched_SendParamsOp : Sched_Op<"send_params", [HasParent<"SlotDeviceOp">]> {
  let summary = "CDP-ZeRO: pass a stage's parameters on to the next device";
  let description = [{
    Sends stage `stage`'s whole parameters to device `to` for its work at
    cycle time `use` (the `sched.gather_params` with that time step and
    `from` = this device receives them): the copy this device gathered and
    has just used, or, with `master`, the owner's master copy. The message
    is for the receiver's step t + `step_offset` (1: the owner sends the
    next step's parameters after its update, before that step starts
    here; such sends run once before the first step and not in the last).
  }];
  let arguments = (ins Sched_Int:$stage, Sched_Int:$use, Sched_Int:$to,
                       Sched_Int:$time_step,
                       DefaultValuedAttr<Sched_Int, "0">:$step_offset,
                       DefaultValuedAttr<BoolAttr, "false">:$master);
}

def Sched_OwnerUpdateOp : Sched_Op<"owner_update",
                                   [HasParent<"SlotDeviceOp">]> {
  let summary = "CDP-ZeRO: the stage's owner applies the step's mean gradients";
  let description = [{
    On the owner of stage `stage`, after its own last use of the stage in
    step t: takes the mean gradients of step t - 1 from device `from` (the
    chain's last slot) and updates its master copy of the stage's
    parameters and their optimizer state, from step 1 on. Under CDP rule v1
    every device's step t + 1 reads the result.
  }];
  let arguments = (ins Sched_Int:$stage, Sched_Int:$from,
                       Sched_Int:$time_step);
}

def Sched_ReleaseParamsOp : Sched_Op<"release_params",
                                     [HasParent<"SlotDeviceOp">]> {
  let summary = "ZeRO stage 3: free a gathered stage after the work that read it";
  let description = [{
    The device's whole copy of stage `stage`'s parameters is dead from
    here; its part of the gather region may hold another stage.
  }];
  let arguments = (ins Sched_Int:$stage, Sched_Int:$time_step);
}

def Sched_ChainRelayOp : Sched_Op<"chain_relay", [HasParent<"SlotDeviceOp">]> {
  let summary = "pass a stage's chain-reduced mean one hop back";
  let description = [{
    The chain reduction's return trip: the mean of step t's stage reduction
    passes this device in its step t + `step_offset`, at `time_step`.
  }];
  let arguments = (ins Sched_Int:$stage, Sched_Int:$step_offset,
                       Sched_Int:$time_step);
}

//===----------------------------------------------------------------------===//
// laysa: synchronous dp whose gradients travel as top-k selections with
// error feedback (a mirror of the weights per device).
//===----------------------------------------------------------------------===//

def Sched_AbsorbGradientsOp : Sched_Op<"absorb_gradients",
                                       [HasParent<"SlotDeviceOp">]> {
  let summary = "laysa: fold a stage's gradients into the device's mirror weights";
  let description = [{
    Right after the stage's backward: each trained parameter's gradient
    (with its weight decay, through its momentum where the optimizer has
    one) is subtracted, times the learning rate, from the device's mirror
    M of the parameter. The gradient is dead from here. The naive baseline
    (`sched.sparse_send` with `residual`) has no such op: its gradients
    wait for the selection.
  }];
  let arguments = (ins Sched_Int:$stage, Sched_Int:$time_step);
}

def Sched_SparseSendOp : Sched_Op<"sparse_send", [HasParent<"SlotDeviceOp">]> {
  let summary = "laysa: select a stage's top-k updates and send them to every other device";
  let description = [{
    For each trained parameter of the stage, the `cdp.sparse_count` entries
    of largest magnitude of W - M (with `residual`: of the residual r after
    adding the learning rate times the gradient; r keeps what is not sent)
    go, as float32 values and int32 indices, to every other device; a
    parameter whose count is its size goes whole, as values only. The
    stage's values and indices wait in the device's communication buffers
    until its `sched.sparse_apply`, which comes before the next stage's
    selection: one stage's buffers are in use at a time.
  }];
  let arguments = (ins Sched_Int:$stage, Sched_Int:$time_step,
                       DefaultValuedAttr<BoolAttr, "false">:$residual);
}

def Sched_SparseApplyOp : Sched_Op<"sparse_apply",
                                   [HasParent<"SlotDeviceOp">]> {
  let summary = "laysa: receive every device's selection of a stage and apply their mean";
  let description = [{
    Receives the other devices' values and indices of the stage (into the
    receive buffers, one selection per other device) and applies
    S, their sum over the devices (in device order) divided by N: W <- W - S,
    and, for the mirror, M <- M - S + this device's own values at its own
    indices. Every device ends with the same W.
  }];
  let arguments = (ins Sched_Int:$stage, Sched_Int:$time_step,
                       DefaultValuedAttr<BoolAttr, "false">:$residual);
}

#endif // CDP_DIALECT_SCHED_SCHEDOPS_TD
