//===- ShardUpdate.cpp - ZeRO's sharded optimizer step of one stage -------===//
//
// `shard_update` replaces a stage's per-parameter `update` instructions on a
// data-parallel device when the optimizer state is sharded (ZeRO stages 1
// and 2):
// the stage's tensors are cut into equal shards (ShardLayout), the device
// updates the elements of its own shard from the stage's mean gradients,
// keeping the optimizer moments of that shard only, and an all-gather of
// the updated shards gives every device the whole stage's new parameters.
// Each tensor's part follows that tensor's rule (`weight_decays`, one per
// tensor: parameter groups without decay).
//
// Inputs: the stage's parameters, then their mean gradients in the same
// order (`zero` = 1) or the device's shard of the stage's mean gradients
// (`zero` = 2, from `shard_reduce`); the parameters are written in place.
//
// `shard_reduce` (ZeRO stages 2 and 3) replaces the stage's all-reduce:
// the stage's gradients, read where they lie and padded with zeros, are
// reduce-scattered, and the device keeps the mean of its own shard. No
// kernel packs the stage: the communicator takes lists of buffers.
//
// ZeRO stage 3 keeps only the device's shard of the parameters (a SHARD
// tensor): `shard_update` (`zero` = 3; `sizes`, the stage's tensors'
// elements) updates it from the gradient shard and gathers nothing;
// `shard_gather` all-gathers the stage into its parameters, which lie one
// after another in the arena with the padding behind them, so the shards
// land in place; `shard_release` marks them dead (it runs nothing).
//
// CDP-ZeRO (`owner`): the owner's shard is the whole stage (its master
// copy), updated from the chain's mean gradients; `master_copy` puts it
// in the region the stage travels in, for the owner's own use.
//
// fp16 (`loss_scale` 1): the last input of `shard_update` and
// `replica_shard_update` is the loss-scale buffer; a step whose gradients
// overflowed changes nothing (and gathers nothing: every device skips it
// alike), but the learning-rate schedule's count.
//
//===----------------------------------------------------------------------===//

#include "../LossScale.h"
#include "../ShardOperands.h"
#include "CpuKernels.h"
#include "ParameterUpdate.h"
#include "cdp/Runtime/MessageTags.h"

#include "cdp/Runtime/Communicator.h"

#include <cstring>

namespace cdp::runtime::cpu {

namespace {

/// Whether the last unscaling saw an overflow, so the update skips.
bool overflowed(const TensorView &lossScale) {
  return lossScale.data && lossScale.f32()[kOverflow] != 0.0f;
}

/// How many of a shard_update's operands are parameters (stage 3: the
/// shard).
size_t parameterCount(const KernelArgs &args) {
  int64_t zero = args.i("zero", 1);
  size_t operands = updateOperands(args).size();
  return zero == 3 ? 1 : zero == 2 ? operands - 1 : operands / 2;
}

/// The first `count` operands (the parameters) or the rest (gradients).
std::vector<TensorView> firstOperands(const KernelArgs &args, size_t count) {
  std::vector<TensorView> operands = updateOperands(args);
  return {operands.begin(), operands.begin() + count};
}
std::vector<TensorView> operandsFrom(const KernelArgs &args, size_t first) {
  std::vector<TensorView> operands = updateOperands(args);
  return {operands.begin() + first, operands.end()};
}

/// A sharded update of a loss-scaled plan counts its schedule apart.
ShardedUpdate scheduledApart(ShardedUpdate update, const KernelArgs &args) {
  if (lossScaleOf(args).data)
    update.countScheduleApart();
  return update;
}

/// A sharded update's state for checkpoints: its step count and the
/// moments of its shard, named as PyTorch names them.
KernelState shardState(ShardedUpdate &update, const ShardLayout &layout,
                       int shard, bool adam) {
  KernelState result;
  result.counter = update.stepCounter();
  result.scheduleCounter = update.scheduleCounter();
  for (const ShardLayout::Piece &piece : layout.pieces(shard))
    result.spans.push_back(
        {piece.tensor, piece.offset, piece.shardOffset, piece.length});
  auto add = [&](const char *name, std::vector<float> &values) {
    if (!values.empty())
      result.tensors.emplace_back(
          name, TensorView{values.data(), {layout.shardSize()}, plan::F32});
  };
  add(adam ? "exp_avg" : "momentum_buffer", update.first);
  add("exp_avg_sq", update.second);
  return result;
}

class ShardUpdateKernel : public Kernel {
public:
  explicit ShardUpdateKernel(const KernelArgs &args)
      : params(firstOperands(args, parameterCount(args))),
        grads(operandsFrom(args, parameterCount(args))),
        lossScale(lossScaleOf(args)),
        layout(stageSizes(args, params), shardDevices(args)),
        update(scheduledApart(ShardedUpdate(rulesOf(args, layout.tensors()),
                                            layout, shardIndex(args)),
                              args)),
        pieces(layout.pieces(shardIndex(args))), comm(args.communicator),
        stage(args.i("stage", 0)), timeStep(args.instruction->time_step()),
        cycle(args.i("cycle", 1)), device(args.device), shard(shardIndex(args)),
        adam(UpdateRule(args).adam), zero(args.i("zero", 1)) {
    if (zero >= 2 && grads.front().numel() != layout.shardSize())
      args.fail("its gradient shard holds " +
                std::to_string(grads.front().numel()) +
                " elements, the stage's shards " +
                std::to_string(layout.shardSize()));
    if (zero == 3 && params.front().numel() != layout.shardSize())
      args.fail("its parameter shard holds " +
                std::to_string(params.front().numel()) +
                " elements, the stage's shards " +
                std::to_string(layout.shardSize()));
    if (zero < 3) // the shard sent; the stage is gathered into place
      own.assign(layout.shardSize(), 0.0f);
  }

  void run(const StepContext &context) override {
    if (overflowed(lossScale)) {
      update.skip();
      return;
    }
    if (zero == 3) { // the shards alone: gathered where they are read
      update.runOnShard(params.front().f32(), grads.front().f32());
      return;
    }
    std::vector<float *> p;
    std::vector<const float *> g;
    for (const TensorView &param : params)
      p.push_back(param.f32());
    for (const TensorView &grad : grads)
      g.push_back(grad.f32());
    if (zero == 2) // the device's shard of the mean gradients
      update.runOnShard(p, g.front());
    else
      update.run(p, g);
    for (const ShardLayout::Piece &piece : pieces)
      std::memcpy(own.data() + piece.shardOffset,
                  p[piece.tensor] + piece.offset, piece.length * sizeof(float));
    // Shards are consecutive pieces of the concatenation, in device order:
    // gathered straight into the parameters, the padding dropped.
    if (!comm->allGather(tags::collectives::shardGather(context.step, stage),
                         {plan::F32, own.data(), layout.shardSize()},
                         writtenBuffers(params),
                         timeStep + cycle * context.step))
      throw RuntimeError("device " + std::to_string(device) +
                         ": stopped while gathering a stage's parameters "
                         "(another device failed)");
  }

  KernelState state() override {
    return shardState(update, layout, shard, adam);
  }

  /// The shard being sent.
  int64_t workspaceBytes() const override {
    return static_cast<int64_t>(own.size() * sizeof(float));
  }

private:
  std::vector<TensorView> params, grads;
  TensorView lossScale;
  ShardLayout layout;
  ShardedUpdate update;
  std::vector<ShardLayout::Piece> pieces;
  std::vector<float> own;
  Communicator *comm;
  int64_t stage, timeStep, cycle;
  int device;
  int shard; ///< this device's shard of the stage
  bool adam;
  int64_t zero;
};

/// ZeRO stage 2's reduction of a stage: its gradients, read where they lie
/// and padded with zeros, reduce-scattered; the device keeps the mean of
/// its shard.
class ShardReduceKernel : public Kernel {
public:
  explicit ShardReduceKernel(const KernelArgs &args)
      : grads(readBuffers(args.inputs, collectiveLinkFor(args))),
        shard(args.outputs[0]), link(collectiveLinkFor(args)),
        layout(sizesOf(args.inputs), args.communicator->size()),
        comm(args.communicator), stage(args.i("stage", 0)),
        cycle(args.i("cycle", 1)), timeStep(args.instruction->time_step()),
        device(args.device) {
    if (shard.numel() != layout.shardSize())
      args.fail("its shard holds " + std::to_string(shard.numel()) +
                " elements, the stage's shards " +
                std::to_string(layout.shardSize()));
  }

  void run(const StepContext &context) override {
    if (!comm->reduceScatter(
            tags::collectives::gradientScatter(context.step, stage), grads,
            {plan::F32, shard.data, layout.shardSize(), link}, ReduceOp::Mean,
            timeStep + cycle * context.step))
      throw RuntimeError("device " + std::to_string(device) +
                         ": stopped while reducing a stage's gradients "
                         "(another device failed)");
  }

private:
  std::vector<ConstBuffer> grads;
  TensorView shard;
  DeviceLink *link; ///< a GPU's, where the communicator takes its memory
  ShardLayout layout;
  Communicator *comm;
  int64_t stage, cycle, timeStep;
  int device;
};

/// ZeRO stage 3: the stage's parameters gathered from every device's
/// shard, straight into place (no staging copy).
class ShardGatherKernel : public Kernel {
public:
  explicit ShardGatherKernel(const KernelArgs &args)
      : shard(args.inputs[0]), target(args.outputs[0]),
        link(collectiveLinkFor(args)), comm(args.communicator),
        stage(args.i("stage", 0)), cycle(args.i("cycle", 1)),
        timeStep(args.instruction->time_step()), device(args.device) {
    // The outputs must be one run of memory, the shards' concatenation.
    char *next = static_cast<char *>(target.data);
    int64_t elements = 0;
    for (const TensorView &out : args.outputs) {
      if (out.data != next)
        args.fail("its parameters do not lie one after another");
      next += out.numel() * 4;
      elements += out.numel();
    }
    if (elements != shard.numel() * comm->size())
      args.fail("gathers " + std::to_string(elements) + " elements from " +
                std::to_string(comm->size()) + " shards of " +
                std::to_string(shard.numel()));
    target.shape = {elements};
  }

  void run(const StepContext &context) override {
    if (!comm->allGather(tags::collectives::parameterGather(
                             context.step, timeStep % cycle, stage),
                         {plan::F32, shard.data, shard.numel(), link},
                         {plan::F32, target.data, target.numel(), link},
                         timeStep + cycle * context.step))
      throw RuntimeError("device " + std::to_string(device) +
                         ": stopped while gathering a stage's parameters "
                         "(another device failed)");
  }

private:
  TensorView shard, target;
  DeviceLink *link; ///< a GPU's, where the communicator takes its memory
  Communicator *comm;
  int64_t stage, cycle, timeStep;
  int device;
};

/// ZeRO stage 1 over a pipeline stage's replicas (`peers`, the stage's
/// devices by replica; this one `replica`): the device updates its shard
/// of the stage from the replica sums, sends it to every other replica
/// and writes theirs into place. Point to point within the group (the
/// run's other devices hold other stages).
class ReplicaShardUpdateKernel : public Kernel {
public:
  explicit ReplicaShardUpdateKernel(const KernelArgs &args)
      : params(firstOperands(args, updateOperands(args).size() / 2)),
        grads(operandsFrom(args, updateOperands(args).size() / 2)),
        lossScale(lossScaleOf(args)), peers(args.ints("peers")),
        replica(args.i("replica", 0)),
        layout(sizesOf(params), static_cast<int>(peers.size())),
        update(scheduledApart(ShardedUpdate(rulesOf(args, params.size()),
                                            layout, static_cast<int>(replica)),
                              args)),
        own(layout.shardSize()), received(layout.shardSize()),
        comm(args.communicator), stage(args.i("stage", 0)),
        timeStep(args.instruction->time_step()), cycle(args.i("cycle", 1)),
        device(args.device), adam(UpdateRule(args).adam) {
    if (updateOperands(args).size() % 2 != 0)
      args.fail("needs each parameter and its gradient sum");
    replicaPeers(args, replica);
  }

  void run(const StepContext &context) override {
    if (overflowed(lossScale)) {
      update.skip();
      return;
    }
    std::vector<float *> p;
    std::vector<const float *> g;
    for (const TensorView &param : params)
      p.push_back(param.f32());
    for (const TensorView &grad : grads)
      g.push_back(grad.f32());
    update.run(p, g);
    int64_t tag = tags::replicaShard(context.step, stage);
    for (const ShardLayout::Piece &piece : layout.pieces(replica))
      std::memcpy(own.data() + piece.shardOffset,
                  p[piece.tensor] + piece.offset, piece.length * sizeof(float));
    int64_t tau = timeStep + cycle * context.step;
    for (size_t q = 0; q < peers.size(); ++q)
      if (static_cast<int64_t>(q) != replica)
        comm->send(peers[q], tag, {plan::F32, own.data(), layout.shardSize()},
                   tau);
    for (size_t q = 0; q < peers.size(); ++q) {
      if (static_cast<int64_t>(q) == replica)
        continue;
      if (!comm->recv(peers[q], tag,
                      {plan::F32, received.data(), layout.shardSize()}))
        throw RuntimeError("device " + std::to_string(device) +
                           ": stopped while taking a replica's updated "
                           "shard (another device failed)");
      for (const ShardLayout::Piece &piece : layout.pieces(static_cast<int>(q)))
        std::memcpy(p[piece.tensor] + piece.offset,
                    received.data() + piece.shardOffset,
                    piece.length * sizeof(float));
    }
  }

  KernelState state() override {
    return shardState(update, layout, static_cast<int>(replica), adam);
  }

  /// The shard sent and one received from another replica.
  int64_t workspaceBytes() const override {
    return static_cast<int64_t>((own.size() + received.size()) * sizeof(float));
  }

private:
  std::vector<TensorView> params, grads;
  TensorView lossScale;
  std::vector<int64_t> peers;
  int64_t replica;
  ShardLayout layout;
  ShardedUpdate update;
  std::vector<float> own, received; // the padding of `own` stays 0
  Communicator *comm;
  int64_t stage, timeStep, cycle;
  int device;
  bool adam;
};

/// dp's clipping and loss scaling of sharded means (ZeRO stages 2 and 3):
/// the devices' shares of the squared norm (`part` 0) or their overflow
/// flags (1), summed in device order into each device's share, so every
/// device clips by the same coefficient and skips the same steps. A GPU's
/// share stays on it where the communicator sums device memory.
class NormAllReduceKernel : public Kernel {
public:
  explicit NormAllReduceKernel(const KernelArgs &args)
      : share(args.inputs[0]), link(reductionLinkFor(args)),
        comm(args.communicator), timeStep(args.instruction->time_step()),
        cycle(args.i("cycle", 1)), part(args.i("part", 0)),
        device(args.device) {}

  void run(const StepContext &context) override {
    if (!comm->allReduce(tags::collectives::normSum(context.step, part),
                         {plan::F32, share.data, 1, link}, ReduceOp::Sum,
                         timeStep + cycle * context.step))
      throw RuntimeError("device " + std::to_string(device) +
                         ": stopped while summing the gradient norm or "
                         "overflow (another device failed)");
  }

private:
  TensorView share;
  DeviceLink *link;
  Communicator *comm;
  int64_t timeStep, cycle, part;
  int device;
};

/// The gathered stage is dead from here: what the report and the trace
/// see; the memory is the arena's, reused by the next gather.
class ShardReleaseKernel : public Kernel {
public:
  void run(const StepContext &) override {}
};

/// CDP-ZeRO: the owner's master copy of a stage into the region it
/// travels in (the owner's own use of the stage).
class MasterCopyKernel : public Kernel {
public:
  explicit MasterCopyKernel(const KernelArgs &args)
      : master(args.inputs[0]), region(args.outputs[0]) {}
  void run(const StepContext &) override {
    std::memcpy(region.data, master.data, master.numel() * sizeof(float));
  }

private:
  TensorView master, region;
};

} // namespace

/// A kernel that talks to the other devices: refused in a plan run
/// without a communicator (one device).
template <typename KernelType>
void addCommunicating(KernelRegistry &registry, const char *op) {
  registry.add(op, Backend::CPU,
               [](const KernelArgs &args) -> std::unique_ptr<Kernel> {
                 if (!args.communicator)
                   args.fail("needs a communicator (a multi-device plan)");
                 return std::make_unique<KernelType>(args);
               });
}

void registerShardUpdate(KernelRegistry &registry) {
  addCommunicating<ShardUpdateKernel>(registry, "shard_update");
  addCommunicating<ShardGatherKernel>(registry, "shard_gather");
  addCommunicating<ReplicaShardUpdateKernel>(registry, "replica_shard_update");
  addCommunicating<NormAllReduceKernel>(registry, "norm_all_reduce");
  addCommunicating<ShardReduceKernel>(registry, "shard_reduce");
  registry.add("master_copy", Backend::CPU,
               [](const KernelArgs &args) -> std::unique_ptr<Kernel> {
                 return std::make_unique<MasterCopyKernel>(args);
               });
  registry.add("shard_release", Backend::CPU,
               [](const KernelArgs &) -> std::unique_ptr<Kernel> {
                 return std::make_unique<ShardReleaseKernel>();
               });
}

} // namespace cdp::runtime::cpu
