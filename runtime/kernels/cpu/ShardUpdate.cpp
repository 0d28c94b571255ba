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
// `shard_reduce` (ZeRO stage 2) replaces the stage's all-reduce: the
// stage's gradients, concatenated and padded, are reduce-scattered, and the
// device keeps the mean of its own shard.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "ParameterUpdate.h"

#include "cdp/Runtime/Communicator.h"

#include <cstring>

namespace cdp::runtime::cpu {

namespace {

/// The all-gather of stage `stage`'s updated shards at step `step` and the
/// reduce-scatter of its gradients: apart from the reductions' tags (step ·
/// 4096 + stage) by bits 55 and 54.
int64_t gatherTag(int64_t step, int64_t stage) {
  return (int64_t(1) << 55) | (step * 4096 + stage);
}
int64_t scatterTag(int64_t step, int64_t stage) {
  return (int64_t(1) << 54) | (step * 4096 + stage);
}

/// How many of a shard_update's inputs are parameters.
size_t parameterCount(const KernelArgs &args) {
  return args.i("zero", 1) == 2 ? args.inputs.size() - 1
                                : args.inputs.size() / 2;
}

std::vector<int64_t> sizesOf(const std::vector<TensorView> &views) {
  std::vector<int64_t> sizes;
  for (const TensorView &v : views)
    sizes.push_back(v.numel());
  return sizes;
}

std::vector<UpdateRule> rulesOf(const KernelArgs &args, size_t tensors) {
  std::vector<double> decays = args.floats("weight_decays");
  if (decays.size() != tensors)
    args.fail("needs one weight decay per parameter (weight_decays), got " +
              std::to_string(decays.size()) + " for " +
              std::to_string(tensors));
  std::vector<UpdateRule> rules(tensors, UpdateRule(args));
  for (size_t t = 0; t < tensors; ++t)
    rules[t].weightDecay = static_cast<float>(decays[t]);
  return rules;
}

class ShardUpdateKernel : public Kernel {
public:
  explicit ShardUpdateKernel(const KernelArgs &args)
      : params(args.inputs.begin(), args.inputs.begin() + parameterCount(args)),
        grads(args.inputs.begin() + parameterCount(args), args.inputs.end()),
        layout(sizesOf(params), args.communicator->size()),
        update(rulesOf(args, params.size()), layout, args.communicator->rank()),
        pieces(layout.pieces(args.communicator->rank())),
        own(layout.shardSize(), 0.0f), gathered(layout.paddedSize()),
        comm(args.communicator), stage(args.i("stage", 0)),
        timeStep(args.instruction->time_step()), cycle(args.i("cycle", 1)),
        device(args.device), adam(UpdateRule(args).adam),
        onShard(args.i("zero", 1) == 2) {
    if (onShard && grads.front().numel() != layout.shardSize())
      args.fail("its gradient shard holds " +
                std::to_string(grads.front().numel()) +
                " elements, the stage's shards " +
                std::to_string(layout.shardSize()));
  }

  void run(const StepContext &context) override {
    std::vector<float *> p;
    std::vector<const float *> g;
    for (const TensorView &param : params)
      p.push_back(param.f32());
    for (const TensorView &grad : grads)
      g.push_back(grad.f32());
    if (onShard) // ZeRO stage 2: the device's shard of the mean gradients
      update.runOnShard(p, g.front());
    else
      update.run(p, g);
    for (const ShardLayout::Piece &piece : pieces)
      std::memcpy(own.data() + piece.shardOffset,
                  p[piece.tensor] + piece.offset, piece.length * sizeof(float));
    if (!comm->allGather(gatherTag(context.step, stage),
                         {plan::F32, own.data(), layout.shardSize()},
                         {plan::F32, gathered.data(), layout.paddedSize()},
                         timeStep + cycle * context.step))
      throw RuntimeError("device " + std::to_string(device) +
                         ": stopped while gathering a stage's parameters "
                         "(another device failed)");
    // Shards are consecutive pieces of the concatenation, in device order.
    unpack(gathered.data(), params);
  }

  KernelState state() override {
    KernelState result;
    result.counter = update.stepCounter();
    auto add = [&](const char *name, std::vector<float> &values) {
      if (!values.empty())
        result.tensors.emplace_back(
            name, TensorView{values.data(), {layout.shardSize()}, plan::F32});
    };
    add(adam ? "exp_avg" : "momentum_buffer", update.first);
    add("exp_avg_sq", update.second);
    return result;
  }

  /// The shard being sent and the gathered stage.
  int64_t workspaceBytes() const override {
    return static_cast<int64_t>((own.size() + gathered.size()) * sizeof(float));
  }

private:
  std::vector<TensorView> params, grads;
  ShardLayout layout;
  ShardedUpdate update;
  std::vector<ShardLayout::Piece> pieces;
  std::vector<float> own, gathered;
  Communicator *comm;
  int64_t stage, timeStep, cycle;
  int device;
  bool adam, onShard;
};

/// ZeRO stage 2's reduction of a stage: its gradients, concatenated and
/// padded, reduce-scattered; the device keeps the mean of its shard.
class ShardReduceKernel : public Kernel {
public:
  explicit ShardReduceKernel(const KernelArgs &args)
      : grads(args.inputs), shard(args.outputs[0]),
        layout(sizesOf(grads), args.communicator->size()),
        staging(layout.paddedSize(), 0.0f), comm(args.communicator),
        stage(args.i("stage", 0)), cycle(args.i("cycle", 1)),
        timeStep(args.instruction->time_step()), device(args.device) {
    if (shard.numel() != layout.shardSize())
      args.fail("its shard holds " + std::to_string(shard.numel()) +
                " elements, the stage's shards " +
                std::to_string(layout.shardSize()));
  }

  void run(const StepContext &context) override {
    pack(grads, staging.data()); // the padding stays 0
    if (!comm->reduceScatter(scatterTag(context.step, stage),
                             {plan::F32, staging.data(), layout.paddedSize()},
                             {plan::F32, shard.data, layout.shardSize()},
                             ReduceOp::Mean, timeStep + cycle * context.step))
      throw RuntimeError("device " + std::to_string(device) +
                         ": stopped while reducing a stage's gradients "
                         "(another device failed)");
  }

  /// The stage's gradients, concatenated and padded.
  int64_t workspaceBytes() const override {
    return static_cast<int64_t>(staging.size() * sizeof(float));
  }

private:
  std::vector<TensorView> grads;
  TensorView shard;
  ShardLayout layout;
  std::vector<float> staging;
  Communicator *comm;
  int64_t stage, cycle, timeStep;
  int device;
};

} // namespace

void registerShardUpdate(KernelRegistry &registry) {
  registry.add("shard_update", Backend::CPU,
               [](const KernelArgs &args) -> std::unique_ptr<Kernel> {
                 if (!args.communicator)
                   args.fail("needs a communicator (a multi-device plan)");
                 return std::make_unique<ShardUpdateKernel>(args);
               });
  registry.add("shard_reduce", Backend::CPU,
               [](const KernelArgs &args) -> std::unique_ptr<Kernel> {
                 if (!args.communicator)
                   args.fail("needs a communicator (a multi-device plan)");
                 return std::make_unique<ShardReduceKernel>(args);
               });
}

} // namespace cdp::runtime::cpu
