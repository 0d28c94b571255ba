//===- ShardOperands.h - what sharded updates read from a plan -*- C++ -*-===//
//
// ZeRO's `shard_update` and `replica_shard_update` as the plan spells them,
// for the CPU kernels and the CUDA ones alike: their parameters and
// gradients (the loss-scale buffer last in fp16 plans), the devices the
// stage is cut over and this device's shard (a pipeline's replicas:
// `peers` and `replica`), the stage's tensors' sizes (checked against the
// shard) and each tensor's rule (its weight decay).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_SHARDOPERANDS_H
#define CDP_RUNTIME_KERNELS_SHARDOPERANDS_H

#include "LearningRate.h"
#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Kernel.h"

#include <string>
#include <vector>

namespace cdp::runtime {

/// A sharded update's parameters and gradients: its inputs but the
/// loss-scale buffer, which fp16 plans pass last (`loss_scale` 1).
inline std::vector<TensorView> updateOperands(const KernelArgs &args) {
  std::vector<TensorView> operands = args.inputs;
  if (args.i("loss_scale", 0) != 0 && !operands.empty())
    operands.pop_back();
  return operands;
}

/// The loss-scale buffer (empty where the plan does not scale).
inline TensorView lossScaleOf(const KernelArgs &args) {
  return args.i("loss_scale", 0) != 0 ? args.inputs.back() : TensorView();
}

inline std::vector<int64_t> sizesOf(const std::vector<TensorView> &views) {
  std::vector<int64_t> sizes;
  for (const TensorView &v : views)
    sizes.push_back(v.numel());
  return sizes;
}

/// Devices a stage is cut over: the run's, or one where the stage has an
/// owner (CDP-ZeRO: the owner updates the whole stage).
inline int shardDevices(const KernelArgs &args) {
  return args.i("owner", -1) >= 0 ? 1 : args.communicator->size();
}
/// This device's shard of the stage.
inline int shardIndex(const KernelArgs &args) {
  return args.i("owner", -1) >= 0 ? 0 : args.communicator->rank();
}

/// The stage's tensors' elements: the parameters' own, or (stage 3, which
/// holds their shard only) the `sizes` attribute.
inline std::vector<int64_t> stageSizes(const KernelArgs &args,
                                       const std::vector<TensorView> &params) {
  if (args.i("zero", 1) != 3)
    return sizesOf(params);
  // Checked before anything is sized by them: an edited plan's sizes must
  // cut into the parameter shard it gives, one per device.
  std::vector<int64_t> sizes = args.ints("sizes");
  int64_t total = 0, shard = params.front().numel(),
          devices = shardDevices(args);
  for (int64_t size : sizes) {
    if (size <= 0 || size > shard * devices - total)
      args.fail("has 'sizes' that do not fill " + std::to_string(devices) +
                " shards of " + std::to_string(shard) + " elements");
    total += size;
  }
  if (sizes.empty() || (total + devices - 1) / devices != shard)
    args.fail("has 'sizes' that do not fill " + std::to_string(devices) +
              " shards of " + std::to_string(shard) + " elements");
  return sizes;
}

/// Each of the stage's tensors' rule: the update's, with that tensor's
/// weight decay (`weight_decays`: parameter groups without decay).
inline std::vector<UpdateRule> rulesOf(const KernelArgs &args, size_t tensors) {
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

/// The devices of a replica_sum's or replica_shard_update's stage
/// (`peers`, two or more, this device at peers[replica]), each checked
/// against the run.
inline std::vector<int64_t> replicaPeers(const KernelArgs &args,
                                         int64_t replica) {
  std::vector<int64_t> peers = args.ints("peers");
  if (peers.size() < 2 || replica < 0 ||
      replica >= static_cast<int64_t>(peers.size()) ||
      peers[replica] != args.device)
    args.fail("needs two or more peers with this device at peers[replica]");
  for (int64_t peer : peers)
    if (peer < 0 || peer >= args.communicator->size())
      args.fail("names device " + std::to_string(peer) +
                ", which the run lacks");
  return peers;
}

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_SHARDOPERANDS_H
