//===- PlanWeightsTest.cpp - the weights file beside a plan ---------------===//
//
// writeWeights moves initial values out of the plan (equal values once, at
// aligned offsets), PlanWeights reads them back and refuses a file that is
// short, of another compile or corrupt, in one line each.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/PlanWeights.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace cdp::plan;

namespace {

class PlanWeightsTest : public ::testing::Test {
protected:
  void SetUp() override {
    folder = ::testing::TempDir() + "plan-weights-" +
             std::to_string(::getpid()) + "/";
    std::filesystem::create_directories(folder);
    planPath = folder + "model.cdp";
  }
  void TearDown() override { std::filesystem::remove_all(folder); }

  Tensor *add(Plan &plan, const std::string &name, const std::string &data) {
    Tensor *t = plan.add_tensors();
    t->set_id(plan.tensors_size() - 1);
    t->set_name(name);
    t->set_kind(PARAM);
    t->add_shape(static_cast<int64_t>(data.size() / 4));
    t->set_bytes(static_cast<int64_t>(data.size()));
    t->set_data(data);
    return t;
  }

  std::string weightsPath() const { return planPath + ".weights"; }

  std::string folder, planPath;
};

TEST_F(PlanWeightsTest, EqualValuesAreStoredOnceAndReadBack) {
  Plan plan;
  std::string a(12, 'a'), b(100, 'b');
  add(plan, "a", a);
  add(plan, "b", b);
  add(plan, "a2", a);
  add(plan, "empty", "")->set_bytes(0);
  std::string error;
  ASSERT_TRUE(writeWeights(plan, planPath, error)) << error;
  EXPECT_EQ(plan.weights_file(), "model.cdp.weights");
  // A 64-byte header, then 'a' (12 bytes, padded to 64) and 'b' (100, to
  // 128): 'a2' shares 'a''s offset, the empty tensor has no value.
  EXPECT_EQ(plan.weights_bytes(), 64u + 64u + 128u);
  EXPECT_EQ(std::filesystem::file_size(weightsPath()), plan.weights_bytes());
  EXPECT_EQ(plan.tensors(0).initial().offset(), 64u);
  EXPECT_EQ(plan.tensors(1).initial().offset(), 128u);
  EXPECT_EQ(plan.tensors(2).initial().offset(), 64u);
  EXPECT_FALSE(plan.tensors(3).has_initial());
  for (const Tensor &t : plan.tensors())
    EXPECT_TRUE(t.data().empty());

  std::unique_ptr<PlanWeights> weights =
      PlanWeights::open(planPath, plan, error);
  ASSERT_TRUE(weights) << error;
  std::string out(100, '\0');
  EXPECT_EQ(weights->read(plan.tensors(1), out.data()), "");
  EXPECT_EQ(out, b);
  out.assign(12, '\0');
  EXPECT_EQ(weights->read(plan.tensors(2), out.data()), "");
  EXPECT_EQ(out, a);
  EXPECT_EQ(weights->bytesRead(), 112u);
}

TEST_F(PlanWeightsTest, ShortForeignAndCorruptFilesAreRefused) {
  Plan plan, other;
  add(plan, "w", std::string(40, 'w'));
  add(other, "w", std::string(40, 'v'));
  std::string error;
  ASSERT_TRUE(writeWeights(other, planPath, error)) << error;
  std::string foreign = weightsPath() + ".other";
  std::filesystem::rename(weightsPath(), foreign);
  ASSERT_TRUE(writeWeights(plan, planPath, error)) << error;

  std::filesystem::copy_file(foreign, weightsPath(),
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_FALSE(PlanWeights::open(planPath, plan, error));
  EXPECT_NE(error.find("is not the weights file of this plan"),
            std::string::npos)
      << error;

  std::filesystem::resize_file(weightsPath(), 70);
  EXPECT_FALSE(PlanWeights::open(planPath, plan, error));
  EXPECT_NE(error.find("has 70 bytes, the plan's weights file has 128"),
            std::string::npos)
      << error;

  std::filesystem::remove(weightsPath());
  EXPECT_FALSE(PlanWeights::open(planPath, plan, error));
  EXPECT_NE(error.find("cannot open the plan's weights"), std::string::npos)
      << error;

  // The right file with one byte of the value changed: its checksum.
  Plan fresh;
  add(fresh, "w", std::string(40, 'w'));
  ASSERT_TRUE(writeWeights(fresh, planPath, error)) << error;
  {
    std::fstream file(weightsPath(),
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(64 + 3);
    file.put('!');
  }
  std::unique_ptr<PlanWeights> weights =
      PlanWeights::open(planPath, fresh, error);
  ASSERT_TRUE(weights) << error;
  std::string out(40, '\0');
  EXPECT_NE(weights->read(fresh.tensors(0), out.data())
                .find("the initial value of plan tensor 'w' is corrupt"),
            std::string::npos);
}

TEST_F(PlanWeightsTest, AValueAlreadyMovedOutIsNotWrittenAgain) {
  Plan plan;
  add(plan, "w", std::string(8, 'w'));
  std::string error;
  ASSERT_TRUE(writeWeights(plan, planPath, error)) << error;
  EXPECT_TRUE(writeWeights(plan, planPath, error)) << error; // done already
  EXPECT_EQ(plan.weights_file(), "model.cdp.weights");
  EXPECT_FALSE(writeWeights(plan, folder + "again.cdp", error));
  EXPECT_NE(error.find("the plan's values are in model.cdp.weights already"),
            std::string::npos)
      << error;
}

} // namespace
