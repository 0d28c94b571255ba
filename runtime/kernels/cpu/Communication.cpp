//===- Communication.cpp - gradient reductions as instructions ------------===//
//
// Pipelines' `send`, `recv` and `load` move one micro-batch's tensors
// between stages and from the data source; `replica_sum` adds a stage's
// step gradients over its replicas.
//
// `reduce_start` hands a stage's gradients to the communicator when the
// device finishes the stage's backward; `reduce_wait` fetches the mean of an
// earlier step's reduction just before the update that needs it. The step
// a wait fetches is the current one minus 1 + its version delay, so one
// instruction serves dp (delay 0) and both cdp rules.
//
// The chain (`chain_reduce`, `chain_relay`, `chain_wait`) is point to point
// only: every hop, there and back, is an instruction of some device's
// stream, and the means wait in plan buffers, not in the communicator.
//
//===----------------------------------------------------------------------===//

#include "../ShardOperands.h"
#include "CpuKernels.h"

#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Device.h"
#include "cdp/Runtime/MessageTags.h"

#include <algorithm>

namespace cdp::runtime::cpu {

namespace {

/// A tensor as a message's typed buffer.
ConstBuffer sending(const TensorView &v, DeviceLink *link = nullptr) {
  return {v.dtype, v.data, v.numel(), link};
}
Buffer receiving(const TensorView &v, DeviceLink *link = nullptr) {
  return {v.dtype, v.data, v.numel(), link};
}

Buffer floats(float *data, int64_t count) { return {plan::F32, data, count}; }
ConstBuffer floats(const float *data, int64_t count) {
  return {plan::F32, data, count};
}

} // namespace

void registerChain(KernelRegistry &registry);

void registerPipeline(KernelRegistry &registry) {
  // Point to point between pipeline stages: a tensor of one micro-batch.
  // Tags name the micro-batch by its index over the whole run (step · M +
  // micro_batch, where micro_batch may reach into the step before) and
  // the value, so stages whose programs cut the run into steps at
  // different places still match.
  auto tagOf = [](const KernelArgs &args) {
    int64_t microBatch = args.i("micro_batch", 0),
            perStep = args.i("micro_batches", 1),
            stepOffset = args.i("step_offset", 0), value = args.i("value", 0);
    return [=](int64_t step) {
      int64_t absolute = (step + stepOffset) * perStep + microBatch;
      return tags::pipeline(absolute, value);
    };
  };
  addKernel(registry, "send", [tagOf](const KernelArgs &args) {
    if (!args.communicator)
      args.fail("needs a communicator (a multi-device plan)");
    ConstBuffer x = sending(args.inputs[0], messageLinkFor(args));
    int to = static_cast<int>(args.i("peer", 0));
    int64_t timeStep = args.instruction->time_step(),
            cycle = args.i("cycle", 1);
    auto tag = tagOf(args);
    Communicator *comm = args.communicator;
    return [=](const StepContext &context) {
      comm->send(to, tag(context.step), x, timeStep + cycle * context.step);
    };
  });
  addKernel(registry, "recv", [tagOf](const KernelArgs &args) {
    if (!args.communicator)
      args.fail("needs a communicator (a multi-device plan)");
    Buffer y = receiving(args.outputs[0], messageLinkFor(args));
    int device = args.device, from = static_cast<int>(args.i("peer", 0));
    auto tag = tagOf(args);
    Communicator *comm = args.communicator;
    return [=](const StepContext &context) {
      if (!comm->recv(from, tag(context.step), y))
        throw RuntimeError("device " + std::to_string(device) +
                           ": stopped while waiting for a tensor (another "
                           "device failed)");
    };
  });
  addKernel(registry, "load", [](const KernelArgs &args) {
    TensorView y = args.outputs[0];
    int input = static_cast<int>(args.i("input", 0));
    int64_t microBatch = args.i("micro_batch", 0);
    std::string location = args.instruction->location();
    return [=](const StepContext &context) {
      if (!context.loader)
        throw RuntimeError("load of '" + location + "': no data source");
      (*context.loader)(input, context.step, microBatch, y);
    };
  });
}

/// A pipeline stage's step gradients summed over its replicas: the
/// device's own to every other replica, then theirs added in replica
/// order, ((g_0 + g_1) + g_2) + ..., each arriving onto the sum (recvAdd:
/// sum += g_q, the same bits as sum + g_q), so every replica computes the
/// same bits and none holds an incoming buffer. Tagged by step and the
/// gradient's tensor id, which every replica's plan shares.
void registerReplicaSum(KernelRegistry &registry) {
  addKernel(registry, "replica_sum", [](const KernelArgs &args) {
    if (!args.communicator)
      args.fail("needs a communicator (a multi-device plan)");
    int64_t replica = args.i("replica", -1), cycle = args.i("cycle", 1),
            timeStep = args.instruction->time_step(),
            value = args.instruction->inputs(0);
    std::vector<int64_t> peers = replicaPeers(args, replica);
    TensorView own = args.inputs[0], sum = args.outputs[0];
    Communicator *comm = args.communicator;
    int device = args.device;
    // A GPU's gradients stay on it: the messages through its link, its own
    // gradient copied or added on its stream (the same bits as the host's).
    DeviceLink *link = messageLinkFor(args);
    ConstBuffer ownBuffer = sending(own, link);
    Buffer sumBuffer = receiving(sum, link);
    return [=](const StepContext &context) {
      int64_t tag = tags::replicaSum(context.step, value);
      for (size_t q = 0; q < peers.size(); ++q)
        if (static_cast<int64_t>(q) != replica)
          comm->send(static_cast<int>(peers[q]), tag, ownBuffer,
                     timeStep + cycle * context.step);
      auto failed = [&] {
        throw RuntimeError("device " + std::to_string(device) +
                           ": stopped while summing a gradient over the "
                           "replicas (another device failed)");
      };
      float *out = sum.f32();
      const float *mine = own.f32();
      if (replica == 0) {
        if (link)
          link->copyOut(*link->stash({ownBuffer}), {sumBuffer});
        else
          std::copy(mine, mine + own.numel(), out);
      } else if (!comm->recv(static_cast<int>(peers[0]), tag, sumBuffer)) {
        failed();
      }
      for (size_t q = 1; q < peers.size(); ++q) {
        if (static_cast<int64_t>(q) != replica) {
          if (!comm->recvAdd(static_cast<int>(peers[q]), tag, {sumBuffer}))
            failed();
        } else if (link) {
          link->addOut(*link->stash({ownBuffer}), {sumBuffer});
        } else {
          for (int64_t i = 0; i < own.numel(); ++i)
            out[i] += mine[i];
        }
      }
    };
  });
}

void registerCommunication(KernelRegistry &registry) {
  registerChain(registry);
  registerPipeline(registry);
  registerReplicaSum(registry);
  // The communicator copies the stage's gradients where they lie and
  // writes the means where the update reads them: no staging copy here.
  addKernel(registry, "reduce_start", [](const KernelArgs &args) {
    if (!args.communicator)
      args.fail("needs a communicator (a multi-device plan)");
    std::vector<ConstBuffer> grads =
        readBuffers(args.inputs, reductionLinkFor(args));
    int64_t stage = args.i("stage", 0);
    Communicator *comm = args.communicator;
    int64_t timeStep = args.instruction->time_step(),
            cycle = args.i("cycle", 1);
    return [=](const StepContext &context) {
      comm->reduceStart(tags::reduction(context.step, stage), grads,
                        timeStep + cycle * context.step);
    };
  });

  // The mean of the stage's gradients of step t - 1 - delay, into the
  // reduced gradients.
  addKernel(registry, "reduce_wait", [](const KernelArgs &args) {
    if (!args.communicator)
      args.fail("needs a communicator (a multi-device plan)");
    std::vector<Buffer> reduced =
        writtenBuffers(args.outputs, reductionLinkFor(args));
    int64_t stage = args.i("stage", 0), delay = args.i("delay", 0);
    Communicator *comm = args.communicator;
    int device = args.device;
    return [=](const StepContext &context) {
      int64_t step = context.step - 1 - delay;
      if (!comm->reduceWait(tags::reduction(step, stage), reduced))
        throw RuntimeError("device " + std::to_string(device) +
                           ": stopped while waiting for a reduction "
                           "(another device failed)");
    };
  });
}

/// Slot 0's gradients as the chain's first partial sum: the all-reduce
/// adds contributions from +0, which turns a -0 into +0; so does this.
void startFromZero(const std::vector<TensorView> &grads) {
  for (const TensorView &g : grads)
    for (int64_t i = 0; i < g.numel(); ++i)
      if (g.f32()[i] == 0.0f)
        g.f32()[i] = 0.0f;
}

/// The chain buffer (one of the instruction's two, by step parity) that
/// holds the mean of step `step`'s reduction until the wait that uses it.
float *chainBuffer(const std::vector<TensorView> &buffers, int64_t step) {
  return buffers[static_cast<size_t>(step % 2)].f32();
}

void registerChain(KernelRegistry &registry) {
  // Slot i adds its contribution to the partial sum of slots 0..i-1 and
  // sends it on when it finishes B_l; the last slot holds the sum, takes
  // the mean (summed in slot order, as the all-reduce does), keeps it in
  // its chain buffer and sends it back to slot N - 2; each chain_relay
  // passes it one hop further a time step later (outputs: the two chain
  // buffers, on the last slot).
  // The partial sum arrives into the slot's own gradients, which are dead
  // after this hand-off (g += partial, the same bits as partial + g), so
  // the kernel keeps no buffer of a stage's size.
  addKernel(registry, "chain_reduce", [](const KernelArgs &args) {
    if (!args.communicator)
      args.fail("needs a communicator (a multi-device plan)");
    std::vector<TensorView> grads = args.inputs, buffers = args.outputs;
    std::vector<ConstBuffer> partial = readBuffers(grads);
    std::vector<Buffer> arriving = writtenBuffers(grads);
    int64_t stage = args.i("stage", 0), cycle = args.i("cycle", 1);
    int64_t timeStep = args.instruction->time_step();
    int64_t count = totalCount(grads);
    Communicator *comm = args.communicator;
    int device = comm->rank(), devices = comm->size();
    bool last = device + 1 == devices;
    // CDP-ZeRO: the last slot hands the mean to the stage's owner instead.
    int owner = static_cast<int>(args.i("owner", -1));
    if (last && owner < 0 &&
        (buffers.size() != 2 || totalCount({buffers[0]}) != count))
      args.fail("the last slot's chain_reduce needs its two chain buffers");
    float scale = 1.0f / static_cast<float>(devices);
    return [=](const StepContext &context) {
      int64_t tau = timeStep + cycle * context.step;
      if (device == 0)
        startFromZero(grads);
      else if (!comm->recvAdd(device - 1,
                              tags::chainPartial(context.step, stage),
                              arriving))
        throw RuntimeError("device " + std::to_string(device) +
                           ": stopped while waiting for a partial sum");
      if (!last) {
        comm->send(device + 1, tags::chainPartial(context.step, stage), partial,
                   tau);
        return;
      }
      if (owner >= 0) {
        for (const TensorView &g : grads)
          for (int64_t i = 0; i < g.numel(); ++i)
            g.f32()[i] *= scale;
        comm->send(owner, tags::chainMean(context.step, stage), partial, tau);
        return;
      }
      float *mean = chainBuffer(buffers, context.step), *at = mean;
      for (const TensorView &g : grads)
        for (int64_t i = 0; i < g.numel(); ++i)
          *at++ = g.f32()[i] * scale;
      if (device > 0)
        comm->send(device - 1, tags::chainMean(context.step, stage),
                   floats(mean, count), tau);
    };
  });

  // Slot j < N - 1 takes the mean of step t - step_offset from slot j + 1
  // into its chain buffer and passes it to slot j - 1.
  addKernel(registry, "chain_relay", [](const KernelArgs &args) {
    if (!args.communicator)
      args.fail("needs a communicator (a multi-device plan)");
    std::vector<TensorView> buffers = args.outputs;
    if (buffers.size() != 2)
      args.fail("chain_relay writes two chain buffers");
    int64_t stage = args.i("stage", 0), cycle = args.i("cycle", 1),
            offset = args.i("step_offset", 0);
    int64_t timeStep = args.instruction->time_step();
    int64_t count = buffers[0].numel();
    Communicator *comm = args.communicator;
    int device = comm->rank();
    DeviceLink *link = messageLinkFor(args); // a GPU's chain buffers stay on it
    return [=](const StepContext &context) {
      int64_t step = context.step - offset;
      float *mean = chainBuffer(buffers, step);
      if (!comm->recv(device + 1, tags::chainMean(step, stage),
                      {plan::F32, mean, count, link}))
        throw RuntimeError("device " + std::to_string(device) +
                           ": stopped while waiting for a reduced gradient");
      if (device > 0)
        comm->send(device - 1, tags::chainMean(step, stage),
                   ConstBuffer(plan::F32, mean, count, link),
                   timeStep + cycle * context.step);
    };
  });

  // The mean of step t - 1 - delay is in a chain buffer already: unpack it
  // into the reduced gradients (inputs: the two buffers).
  addKernel(
      registry, "chain_wait",
      [](const KernelArgs &args) -> std::function<void(const StepContext &)> {
        std::vector<TensorView> buffers = args.inputs, reduced = args.outputs;
        int from = static_cast<int>(args.i("from", -1));
        if (from >= 0) { // CDP-ZeRO's owner: the mean from the chain's last
          if (!args.communicator)
            args.fail("needs a communicator (a multi-device plan)");
          Communicator *comm = args.communicator;
          int64_t stage = args.i("stage", 0), delay = args.i("delay", 0);
          int device = args.device;
          TensorView mean = reduced.front();
          return [=](const StepContext &context) {
            if (!comm->recv(from,
                            tags::chainMean(context.step - 1 - delay, stage),
                            receiving(mean)))
              throw RuntimeError(
                  "device " + std::to_string(device) +
                  ": stopped while waiting for a reduced gradient");
          };
        }
        if (buffers.size() != 2 || buffers[0].numel() != totalCount(reduced))
          args.fail("chain_wait reads two chain buffers of its stage's size");
        int64_t delay = args.i("delay", 0);
        return [=](const StepContext &context) {
          unpack(chainBuffer(buffers, context.step - 1 - delay), reduced);
        };
      });
}

} // namespace cdp::runtime::cpu
