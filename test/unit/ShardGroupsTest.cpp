//===- ShardGroupsTest.cpp - a ZeRO stage-3 plan's shard groups, checked --===//
//
// A plan is data anyone can edit: the shard groups the runtime trusts to
// lay a stage's parameters out for an in-place all-gather are checked on
// load. A well-formed group (two parameters of 3 and 2 elements over 2
// devices: shards of 3, one element of padding behind them) passes; each
// edit that would let the gather write outside the stage or the shard
// disagree with the layout is refused in one line naming it.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/ShardGroups.h"
#include "cdp/Plan/PlanValidate.h"

#include <gtest/gtest.h>

#include <functional>

namespace {

namespace plan = cdp::plan;

plan::Tensor *addTensor(plan::Plan &p, const char *name, plan::TensorKind kind,
                        int64_t elements, int64_t offset) {
  plan::Tensor *t = p.add_tensors();
  t->set_id(p.tensors_size() - 1);
  t->set_name(name);
  t->set_dtype(plan::F32);
  t->set_kind(kind);
  t->add_shape(elements);
  t->set_bytes(4 * elements);
  t->set_offset(offset);
  return t;
}

/// Two devices; stage 1's parameters a (3) and b (2) at arena bytes 0 and
/// 12, the padding at 20, each device's shard of 3 elements.
plan::Plan wellFormed() {
  plan::Plan p;
  p.set_loss(-1);
  p.set_labels(-1);
  p.set_scores(-1);
  for (int d = 0; d < 2; ++d) {
    plan::Device *device = p.add_devices();
    device->set_index(d);
    device->set_arena_bytes(64);
    // Something to run: a plan whose devices run nothing is refused.
    plan::Instruction *gather = device->add_instructions();
    gather->set_op("shard_gather");
    gather->set_location("stage1");
  }
  addTensor(p, "a", plan::PARAM, 3, 0)->set_trainable(true);
  addTensor(p, "b", plan::PARAM, 2, 12)->set_trainable(true);
  addTensor(p, "stage1@gather_padding", plan::ACTIVATION, 1, 20);
  addTensor(p, "stage1@param_shard", plan::SHARD, 3, 0);
  plan::ShardGroup *group = p.mutable_schedule()->add_shard_groups();
  group->set_stage(1);
  group->add_params(0);
  group->add_params(1);
  group->set_padding(2);
  group->set_shard(3);
  return p;
}

TEST(ShardGroups, WellFormedGroupPasses) {
  plan::Plan p = wellFormed();
  EXPECT_EQ(plan::checkShardGroups(p), "");
  EXPECT_EQ(plan::validatePlan(p, 1 << 20), "");
  std::vector<char> gathered = plan::gatheredParameters(p);
  EXPECT_EQ(gathered, (std::vector<char>{1, 1, 0, 0}));
  EXPECT_EQ(plan::layoutOf(p, p.schedule().shard_groups(0)).padding(), 1);
}

TEST(ShardGroups, EditsThatBreakTheLayoutAreRefused) {
  struct Case {
    const char *what;
    std::function<void(plan::Plan &)> edit;
    const char *message;
  };
  std::vector<Case> cases = {
      {"gap", [](plan::Plan &p) { p.mutable_tensors(1)->set_offset(16); },
       "'b' does not follow the previous parameter in the arena"},
      {"short shard",
       [](plan::Plan &p) {
         p.mutable_tensors(3)->set_shape(0, 2);
         p.mutable_tensors(3)->set_bytes(8);
       },
       "its shard is not a SHARD tensor of 3 elements"},
      {"no padding",
       [](plan::Plan &p) {
         p.mutable_schedule()->mutable_shard_groups(0)->set_padding(-1);
       },
       "its padding of 1 elements does not follow its parameters"},
      {"not a parameter",
       [](plan::Plan &p) { p.mutable_tensors(0)->set_kind(plan::BUFFER); },
       "holds 'a', not a float32 parameter of every device"},
      {"twice",
       [](plan::Plan &p) {
         p.mutable_schedule()->mutable_shard_groups(0)->set_params(1, 0);
       },
       "names tensor 0, which the plan lacks or another group holds"},
      {"stray shard",
       [](plan::Plan &p) { addTensor(p, "stray", plan::SHARD, 3, 0); },
       "tensor 4 is a shard no shard group names"},
      {"outside the arena",
       [](plan::Plan &p) { p.mutable_devices(1)->set_arena_bytes(16); },
       "lies outside device 1's arena"},
  };
  for (const Case &c : cases) {
    plan::Plan p = wellFormed();
    c.edit(p);
    std::string problem = plan::validatePlan(p, 1 << 20);
    EXPECT_NE(problem.find(c.message), std::string::npos)
        << c.what << ": " << problem;
  }
}

} // namespace
