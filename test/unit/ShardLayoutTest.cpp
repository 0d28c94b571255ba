//===- ShardLayoutTest.cpp - ZeRO shards and the sharded optimizer step ---===//
//
// ShardLayout: over a stage's tensors and N devices, every element lies in
// exactly one device's shard, shards are equal (ceil(total / N)), padding
// only at the end and never in a piece. ShardedUpdate: N devices each
// updating their shard (their 1/N of the moments) give the parameters the
// per-tensor `update` kernel gives, bit for bit, for SGD, momentum, Adam and
// AdamW with weight decay (one tensor without), over 3 steps. The
// `shard_update` kernel does the same on N devices of a LocalFabric, each
// holding 1/N of the moments, the all-gather giving every device the whole
// stage. Stage 3's shard_update refuses `sizes` that do not fill its shards
// before anything is sized by them.
//
//===----------------------------------------------------------------------===//

#include "kernels/cpu/ParameterUpdate.h"

#include "cdp/Plan/ShardLayout.h"
#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

namespace {

using cdp::ShardLayout;
namespace plan = cdp::plan;
using cdp::runtime::cpu::ShardedUpdate;
using namespace cdp::runtime;

TEST(ShardLayout, EveryElementInExactlyOneShardPaddingAtTheEnd) {
  for (std::vector<int64_t> sizes :
       {std::vector<int64_t>{10, 3, 7}, {1}, {5, 5}, {64, 1, 1, 33}, {}}) {
    for (int devices : {1, 2, 3, 4, 7, 64}) {
      ShardLayout layout(sizes, devices);
      int64_t total = 0;
      for (int64_t s : sizes)
        total += s;
      EXPECT_EQ(layout.totalSize(), total);
      EXPECT_EQ(layout.shardSize(), (total + devices - 1) / devices);
      EXPECT_EQ(layout.paddedSize(), layout.shardSize() * devices);
      EXPECT_LT(layout.padding(), std::max<int64_t>(devices, 1));
      std::vector<std::vector<int>> seen(sizes.size());
      for (size_t t = 0; t < sizes.size(); ++t)
        seen[t].assign(sizes[t], 0);
      int64_t owned = 0;
      for (int d = 0; d < devices; ++d) {
        int64_t inShard = 0, last = -1;
        for (const ShardLayout::Piece &p : layout.pieces(d)) {
          EXPECT_GT(p.length, 0);
          EXPECT_GT(p.shardOffset, last); // in shard order, no overlap
          last = p.shardOffset;
          EXPECT_LE(p.shardOffset + p.length, layout.shardSize());
          for (int64_t i = 0; i < p.length; ++i)
            ++seen[p.tensor][p.offset + i];
          inShard += p.length;
        }
        EXPECT_EQ(inShard, layout.ownedSize(d));
        // Only the last shards hold padding.
        if (d + 1 < devices && layout.ownedSize(d + 1) > 0)
          EXPECT_EQ(layout.ownedSize(d), layout.shardSize());
        owned += inShard;
      }
      EXPECT_EQ(owned, total);
      for (const auto &tensor : seen)
        for (int count : tensor)
          EXPECT_EQ(count, 1);
    }
  }
}

/// An update instruction of `optimizer` with the given weight decay.
plan::Instruction updateInstruction(const std::string &optimizer,
                                    double momentum, double decay) {
  plan::Instruction instruction;
  instruction.set_op("update");
  auto text = [&](const char *name, const std::string &value) {
    plan::Attribute *a = instruction.add_attributes();
    a->set_name(name);
    a->set_s(value);
  };
  auto real = [&](const char *name, double value) {
    plan::Attribute *a = instruction.add_attributes();
    a->set_name(name);
    a->set_f(value);
  };
  text("optimizer", optimizer);
  real("lr", 0.05);
  real("momentum", momentum);
  real("weight_decay", decay);
  return instruction;
}

/// A stage of 4 tensors (one in a group without weight decay), its start
/// values and 3 steps of gradients, drawn from `seed`.
struct Stage {
  std::vector<int64_t> sizes = {13, 4, 30, 1};
  std::vector<double> decays = {1e-2, 0.0, 1e-2, 1e-2};
  std::vector<std::vector<float>> start;
  std::vector<std::vector<std::vector<float>>> stepGrads;

  explicit Stage(unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    auto draw = [&] {
      std::vector<std::vector<float>> tensors;
      for (int64_t size : sizes) {
        tensors.emplace_back();
        for (int64_t i = 0; i < size; ++i)
          tensors.back().push_back(normal(rng));
      }
      return tensors;
    };
    start = draw();
    for (int step = 0; step < 3; ++step)
      stepGrads.push_back(draw());
  }
};

TensorView view(std::vector<float> &data) {
  TensorView v;
  v.data = data.data();
  v.shape = {static_cast<int64_t>(data.size())};
  v.dtype = plan::F32;
  return v;
}

/// The reference: the stage after its steps, each tensor updated by its own
/// `update` kernel (`instructions`, one per tensor).
std::vector<std::vector<float>>
perTensorUpdates(const Stage &stage,
                 const std::vector<plan::Instruction> &instructions) {
  std::vector<std::vector<float>> params = stage.start, grads = stage.start;
  std::vector<std::unique_ptr<Kernel>> kernels;
  for (size_t t = 0; t < params.size(); ++t) {
    KernelArgs args;
    args.instruction = &instructions[t];
    args.inputs = {view(params[t]), view(grads[t])};
    kernels.push_back(
        (*KernelRegistry::instance().lookup("update", Backend::CPU))(args));
  }
  for (const auto &step : stage.stepGrads)
    for (size_t t = 0; t < params.size(); ++t) {
      grads[t] = step[t];
      kernels[t]->run(StepContext());
    }
  return params;
}

/// One ShardedUpdate per device of `layout` (cut over `devices`), each
/// tensor with the rule of its `instructions` entry.
std::vector<ShardedUpdate>
shardedUpdates(const std::vector<plan::Instruction> &instructions,
               const ShardLayout &layout, int devices) {
  std::vector<UpdateRule> rules;
  for (const plan::Instruction &instruction : instructions) {
    KernelArgs args;
    args.instruction = &instruction;
    rules.emplace_back(args);
  }
  std::vector<ShardedUpdate> shards;
  for (int d = 0; d < devices; ++d)
    shards.emplace_back(rules, layout, d);
  return shards;
}

TEST(ShardedUpdate, EqualsThePerTensorUpdateBitForBit) {
  struct Optimizer {
    std::string name;
    double momentum;
  };
  for (const Optimizer &opt : std::vector<Optimizer>{
           {"sgd", 0.0}, {"sgd", 0.9}, {"adam", 0.0}, {"adamw", 0.0}}) {
    Stage stage(3);
    const std::vector<int64_t> &sizes = stage.sizes;
    std::vector<plan::Instruction> instructions;
    for (double decay : stage.decays)
      instructions.push_back(updateInstruction(opt.name, opt.momentum, decay));
    std::vector<std::vector<float>> want =
        perTensorUpdates(stage, instructions);
    // N devices, each its shard of every step; then the parameters as
    // an all-gather would assemble them.
    for (int devices : {1, 2, 3, 5, 48}) {
      ShardLayout layout(sizes, devices);
      std::vector<std::vector<float>> got = stage.start;
      std::vector<ShardedUpdate> shards =
          shardedUpdates(instructions, layout, devices);
      for (const auto &step : stage.stepGrads) {
        std::vector<float *> params;
        std::vector<const float *> g;
        for (size_t t = 0; t < sizes.size(); ++t) {
          params.push_back(got[t].data());
          g.push_back(step[t].data());
        }
        for (ShardedUpdate &shard : shards)
          shard.run(params, g);
      }
      for (size_t t = 0; t < sizes.size(); ++t)
        EXPECT_EQ(0, std::memcmp(got[t].data(), want[t].data(),
                                 sizes[t] * sizeof(float)))
            << opt.name << " momentum " << opt.momentum << ", " << devices
            << " devices, tensor " << t;
      // ZeRO's 1/N: each device's moments are one shard, not the stage.
      if (opt.name != "sgd" || opt.momentum != 0.0)
        EXPECT_EQ(static_cast<int64_t>(shards[0].first.size()),
                  layout.shardSize());
    }
  }
}

/// fp16: a sharded update that keeps its schedule apart and skips the
/// step an overflow marks gives what the per-tensor updates naming the
/// loss-scale buffer give, bit for bit: Adam with a step schedule halving
/// the rate each step, step 1 skipped, so step 2 applies the third rate
/// with the second update count (Adam's bias corrections).
TEST(ShardedUpdate, SkipsAnOverflowedStepAsThePerTensorUpdatesDo) {
  Stage stage(7);
  const std::vector<int64_t> &sizes = stage.sizes;
  std::vector<plan::Instruction> instructions;
  for (double decay : stage.decays) {
    instructions.push_back(updateInstruction("adam", 0.0, decay));
    plan::Attribute *schedule = instructions.back().add_attributes();
    schedule->set_name("lr_schedule");
    schedule->set_s("step");
    plan::Attribute *period = instructions.back().add_attributes();
    period->set_name("lr_period");
    period->set_i(1);
  }
  std::vector<std::vector<float>> want = stage.start, grads = stage.start;
  std::vector<float> lossScale = {1024.0f, 0.0f, 0.0f};
  std::vector<std::unique_ptr<Kernel>> kernels;
  for (size_t t = 0; t < sizes.size(); ++t) {
    KernelArgs args;
    args.instruction = &instructions[t];
    args.inputs = {view(want[t]), view(grads[t]), view(lossScale)};
    kernels.push_back(
        (*KernelRegistry::instance().lookup("update", Backend::CPU))(args));
  }
  ShardLayout layout(sizes, 2);
  std::vector<std::vector<float>> got = stage.start;
  std::vector<ShardedUpdate> shards = shardedUpdates(instructions, layout, 2);
  for (ShardedUpdate &shard : shards)
    shard.countScheduleApart();
  for (size_t step = 0; step < stage.stepGrads.size(); ++step) {
    bool skipped = step == 1;
    lossScale[2] = skipped ? 1.0f : 0.0f;
    std::vector<float *> params;
    std::vector<const float *> g;
    for (size_t t = 0; t < sizes.size(); ++t) {
      grads[t] = stage.stepGrads[step][t];
      kernels[t]->run(StepContext());
      params.push_back(got[t].data());
      g.push_back(stage.stepGrads[step][t].data());
    }
    for (ShardedUpdate &shard : shards)
      skipped ? shard.skip() : shard.run(params, g);
  }
  for (size_t t = 0; t < sizes.size(); ++t)
    EXPECT_EQ(
        0, std::memcmp(got[t].data(), want[t].data(), sizes[t] * sizeof(float)))
        << "tensor " << t;
  EXPECT_EQ(*shards[0].stepCounter(), 2);
  ASSERT_NE(shards[0].scheduleCounter(), nullptr);
  EXPECT_EQ(*shards[0].scheduleCounter(), 3);
  // Without a separate schedule the rate follows the update count.
  ShardedUpdate plain(std::vector<UpdateRule>{}, layout, 0);
  EXPECT_EQ(plain.scheduleCounter(), nullptr);
}

/// Every device's copy of the stage after 3 steps of `shard_update` on a
/// LocalFabric of `devices` (Adam, per-tensor weight decays).
TEST(ShardUpdateKernel, EveryDeviceEndsWithTheUnshardedParameters) {
  Stage stage(5);
  const std::vector<int64_t> &sizes = stage.sizes;
  const std::vector<double> &decays = stage.decays;
  const auto &start = stage.start;
  const auto &stepGrads = stage.stepGrads;
  std::vector<plan::Instruction> perTensor;
  for (double decay : decays)
    perTensor.push_back(updateInstruction("adam", 0.0, decay));
  std::vector<std::vector<float>> want = perTensorUpdates(stage, perTensor);
  plan::Instruction shard = updateInstruction("adam", 0.0, 0.0);
  shard.set_op("shard_update");
  plan::Attribute *weightDecays = shard.add_attributes();
  weightDecays->set_name("weight_decays");
  for (double decay : decays)
    weightDecays->mutable_floats()->add_values(decay);
  for (int devices : {1, 2, 3, 4}) {
    LocalFabric fabric(devices);
    std::vector<std::vector<std::vector<float>>> params(devices, start);
    std::vector<std::vector<std::vector<float>>> grads(devices);
    std::vector<int64_t> momentBytes(devices);
    std::vector<std::thread> threads;
    for (int d = 0; d < devices; ++d)
      threads.emplace_back([&, d] {
        grads[d] = stepGrads[0];
        KernelArgs args;
        args.instruction = &shard;
        for (auto &p : params[d])
          args.inputs.push_back(view(p));
        for (auto &g : grads[d])
          args.inputs.push_back(view(g));
        args.communicator = &fabric.endpoint(d);
        args.device = d;
        auto kernel = (*KernelRegistry::instance().lookup("shard_update",
                                                          Backend::CPU))(args);
        for (int64_t step = 0; step < 3; ++step) {
          for (size_t t = 0; t < sizes.size(); ++t)
            std::copy(stepGrads[step][t].begin(), stepGrads[step][t].end(),
                      grads[d][t].begin());
          StepContext context;
          context.step = step;
          kernel->run(context);
        }
        for (auto &[name, moment] : kernel->state().tensors)
          momentBytes[d] += moment.numel() * 4;
      });
    for (std::thread &thread : threads)
      thread.join();
    ShardLayout layout(sizes, devices);
    for (int d = 0; d < devices; ++d) {
      for (size_t t = 0; t < sizes.size(); ++t)
        EXPECT_EQ(0, std::memcmp(params[d][t].data(), want[t].data(),
                                 sizes[t] * sizeof(float)))
            << devices << " devices: device " << d << ", tensor " << t;
      // Adam's two moments of one shard: 8 x ceil(48 / N) bytes.
      EXPECT_EQ(momentBytes[d], 8 * layout.shardSize());
    }
  }
}

} // namespace

// ZeRO stage 3's shard_update sizes its moments from `sizes`: sizes an
// edited plan gives that do not cut into its parameter shard, one per
// device, are refused before anything is allocated by them.
TEST(ShardUpdateKernel, StageThreeRefusesSizesThatDoNotFillTheShards) {
  LocalFabric fabric(2);
  std::vector<float> shard(5, 0.0f), grad(5, 0.0f);
  for (std::vector<int64_t> sizes :
       {std::vector<int64_t>{int64_t(1) << 50}, {3, 3}, {4, -1, 2}, {}}) {
    plan::Instruction instruction = updateInstruction("adam", 0.0, 0.0);
    instruction.set_op("shard_update");
    plan::Attribute *zero = instruction.add_attributes();
    zero->set_name("zero");
    zero->set_i(3);
    plan::Attribute *decays = instruction.add_attributes();
    decays->set_name("weight_decays");
    plan::Attribute *given = instruction.add_attributes();
    given->set_name("sizes");
    for (int64_t size : sizes) {
      given->mutable_ints()->add_values(size);
      decays->mutable_floats()->add_values(0.0);
    }
    KernelArgs args;
    args.instruction = &instruction;
    args.inputs = {view(shard), view(grad)};
    args.communicator = &fabric.endpoint(0);
    EXPECT_THROW((*KernelRegistry::instance().lookup("shard_update",
                                                     Backend::CPU))(args),
                 RuntimeError)
        << sizes.size() << " sizes";
  }
}
