//===- SchedOps.td - the schedule level of cdp -------------*- tablegen -*-===//
//
// Per-device instruction streams over time steps: which micro-batch runs
// which stage with which weight version, when gradients are reduced and
// stages updated. Every op carries its time step `at`.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_DIALECT_SCHED_SCHEDOPS_TD
#define CDP_DIALECT_SCHED_SCHEDOPS_TD

include "mlir/IR/OpBase.td"

def Sched_Dialect : Dialect {
  let name = "sched";
  let summary = "Schedules: per-device streams of stage runs, reductions and updates";
  let description = [{
    The schedule level of cdp (architecture.md): a `sched.program` holds one
    `sched.device` per device, each an ordered stream of ops tagged with the
    time step `at` of the time-step model (docs/design/schedule.md): `sched.run`
    (forward or backward of one stage for one micro-batch with a weight
    version), `sched.reduce_start` (a stage's gradients handed to the
    reduction; `ready_at` is tau*_l, when the last contribution is in),
    `sched.reduce_wait` and `sched.update` (the stage advances to a new
    version), `sched.load` (a micro-batch's data). Start offsets are the
    `offset` of each device: nothing on it runs before.
  }];
  let cppNamespace = "::cdp::sched";
  let usePropertiesForAttributes = 0;
}

class Sched_Op<string mnemonic, list<Trait> traits = []>
    : Op<Sched_Dialect, mnemonic, traits> {
  let assemblyFormat = "attr-dict";
}

def Sched_ProgramOp : Sched_Op<"program", [NoTerminator, SingleBlock]> {
  let summary = "a whole schedule: one sched.device per device";
  let arguments = (ins StrAttr:$strategy, I64Attr:$devices, I64Attr:$stages,
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

#endif // CDP_DIALECT_SCHED_SCHEDOPS_TD
