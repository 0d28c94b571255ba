//===- ReplicaSymmetry.cpp - replicas that run what the first one runs ----===//
//
// See ReplicaSymmetry.h.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/ReplicaSymmetry.h"

#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/SpelledPlan.h"

#include <algorithm>

namespace cdp::plan {

namespace {

/// Whether two attributes hold the same value (one of Attribute's cases).
bool sameValue(const Attribute &a, const Attribute &b) {
  if (a.value_case() != b.value_case())
    return false;
  if (a.value_case() == Attribute::kI)
    return a.i() == b.i();
  return a.SerializeAsString() == b.SerializeAsString();
}

/// Whether instruction `y`, run at peer offset `yOffset`, does what `x`
/// does at `xOffset` on the devices `shift` further: alike but for its
/// replica and its peer. Field by field, without copies (copying and
/// serializing both was a tenth of a 1,008-device report);
/// ReplicaSymmetry's unit test counts Instruction's fields, so that a new
/// one is compared here too.
bool sameUpToReplica(const Instruction &x, int64_t xOffset,
                     const Instruction &y, int64_t yOffset, int64_t shift) {
  if (x.op() != y.op() || x.location() != y.location() ||
      x.phase() != y.phase() || x.time_step() != y.time_step() ||
      x.stage() != y.stage() || x.micro_batch() != y.micro_batch() ||
      x.min_step() != y.min_step() || x.last_slot() != y.last_slot() ||
      x.drain() != y.drain() || x.ahead() != y.ahead() ||
      x.next_step_only() != y.next_step_only() ||
      !std::equal(x.inputs().begin(), x.inputs().end(), y.inputs().begin(),
                  y.inputs().end()) ||
      !std::equal(x.outputs().begin(), x.outputs().end(), y.outputs().begin(),
                  y.outputs().end()) ||
      x.attributes_size() != y.attributes_size())
    return false;
  bool messages = carriesPeer(y);
  for (int k = 0; k < x.attributes_size(); ++k) {
    const Attribute &a = x.attributes(k), &b = y.attributes(k);
    if (a.name() != b.name())
      return false;
    bool peer = messages && a.name() == "peer";
    if (peer && a.value_case() == Attribute::kI &&
        b.value_case() == Attribute::kI) {
      if (b.i() + yOffset - shift != a.i() + xOffset)
        return false;
      continue;
    }
    if (a.name() != "replica" && !sameValue(a, b))
      return false;
  }
  return true;
}

/// Whether device `b` runs what device `a` runs, `shift` devices further
/// (a later replica of a pipeline whose replicas share the first one's
/// compute templates): runs alike but for their micro-batches and message
/// batches, the same template at a peer offset `shift` further or (the
/// update-time work, per device) templates alike up to the replica;
/// instructions alike up to the replica.
bool sameUpToReplica(const Plan &plan, const Device &a, const Device &b,
                     int64_t shift) {
  if (a.runs_size() != b.runs_size() ||
      a.instructions_size() != b.instructions_size())
    return false;
  for (int i = 0; i < a.runs_size(); ++i) {
    const Run &x = a.runs(i), &y = b.runs(i);
    if (x.time_step() != y.time_step() || x.slot() != y.slot())
      return false;
    if (x.template_() == y.template_()) {
      if (y.peer_offset() != x.peer_offset() + shift)
        return false;
      continue;
    }
    const Template &tx = plan.templates(x.template_()),
                   &ty = plan.templates(y.template_());
    if (tx.instructions_size() != ty.instructions_size())
      return false;
    for (int k = 0; k < tx.instructions_size(); ++k)
      if (!sameUpToReplica(tx.instructions(k), x.peer_offset(),
                           ty.instructions(k), y.peer_offset(), shift))
        return false;
  }
  for (int i = 0; i < a.instructions_size(); ++i)
    if (!sameUpToReplica(a.instructions(i), 0, b.instructions(i), 0, shift))
      return false;
  return true;
}

/// Whether the first replica's messages (its P devices' sends and
/// receives) name only its own devices.
bool messagesStayIn(const Plan &plan, int P) {
  auto inside = [&](const Instruction &instruction, int64_t offset) {
    return !carriesPeer(instruction) ||
           intAttribute(instruction, "peer", -1) + offset < P;
  };
  for (int d = 0; d < P; ++d) {
    const Device &device = plan.devices(d);
    for (const Instruction &instruction : device.instructions())
      if (!inside(instruction, 0))
        return false;
    for (const Run &run : device.runs())
      for (const Instruction &instruction :
           plan.templates(run.template_()).instructions())
        if (!inside(instruction, run.peer_offset()))
          return false;
  }
  return true;
}

} // namespace

int alikeReplicaDevices(const Plan &plan) {
  int P = plan.replica_devices(), devices = plan.devices_size();
  if (P <= 0 || P >= devices || devices % P != 0 || !messagesStayIn(plan, P))
    return 0;
  for (int d = P; d < devices; ++d)
    if (!sameUpToReplica(plan, plan.devices(d % P), plan.devices(d), d - d % P))
      return 0;
  return P;
}

} // namespace cdp::plan
