//===- LayoutTest.cpp - the strategy flags checked by the library ---------===//
//
// checkLayout and checkFeatures without cdp-compile: the numbers a layout
// derives (pipelines' devices and micro-batches, cdp-mp's devices), the
// refusals of each feature's descriptor, and the order in which two
// problems are reported.
//
//===----------------------------------------------------------------------===//

#include "cdp/Schedule/Layout.h"

#include <gtest/gtest.h>

using namespace cdp;

namespace {

/// cdp-compile's defaults, with `flags` given on top.
LayoutRequest request(std::map<std::string, std::string> flags) {
  LayoutRequest request;
  request.values = {{"strategy", "single"},   {"devices", "1"},
                    {"stages", "0"},          {"replicas", "1"},
                    {"micro-batches", "1"},   {"plan", "manual"},
                    {"cdp-rule", "v2"},       {"v2-table", "timing"},
                    {"cdp-reduce", "ring"},   {"zero", "0"},
                    {"density", "0.01"},      {"dense-below", "1024"},
                    {"memory-reuse", "none"}, {"optimizer", "sgd"},
                    {"clip-grad-norm", "0"}};
  for (auto &[flag, value] : flags) {
    request.values[flag] = value;
    request.given.insert(flag);
  }
  return request;
}

std::string problemOf(const std::map<std::string, std::string> &flags) {
  LayoutRequest given = request(flags);
  LayoutResult checked = checkLayout(given);
  if (!checked.problem.empty())
    return checked.problem;
  return checkFeatures(given, checked.layout);
}

TEST(Layout, PipelineDerivesDevicesAndMicroBatches) {
  LayoutResult checked =
      checkLayout(request({{"strategy", "1f1b"}, {"replicas", "2"}}));
  ASSERT_EQ(checked.problem, "");
  EXPECT_EQ(checked.layout.stages, 4);       // the pipelines' default
  EXPECT_EQ(checked.layout.microBatches, 4); // the stage count
  EXPECT_EQ(checked.layout.devices, 8);      // 4 stages x 2 replicas
  checked = checkLayout(request({{"strategy", "zb-v"}, {"stages", "6"}}));
  ASSERT_EQ(checked.problem, "");
  EXPECT_EQ(checked.layout.stagesPerDevice, 2);
  EXPECT_EQ(checked.layout.devices, 3);
}

TEST(Layout, CdpMpDerivesItsDevices) {
  LayoutResult checked = checkLayout(request(
      {{"strategy", "cdp-mp"}, {"stages", "3"}, {"micro-batches", "2"}}));
  ASSERT_EQ(checked.problem, "");
  EXPECT_EQ(checked.layout.devices, 4);
  EXPECT_NE(problemOf({{"strategy", "cdp-mp"},
                       {"stages", "3"},
                       {"micro-batches", "2"},
                       {"devices", "9"}})
                .find("runs on 4 devices (1, 2, 1 per stage"),
            std::string::npos);
}

TEST(Layout, RefusesWhatTheStrategyDoesNotTake) {
  EXPECT_EQ(problemOf({{"strategy", "single"}, {"devices", "2"}}),
            "--strategy single runs on 1 device, not 2 (use --strategy dp or "
            "cdp)");
  EXPECT_EQ(
      problemOf({{"strategy", "dp"}, {"devices", "2"}, {"cdp-rule", "v1"}}),
      "--cdp-rule applies to --strategy cdp and cdp-mp, not dp");
  EXPECT_EQ(problemOf({{"strategy", "1f1b"}, {"devices", "3"}}),
            "--strategy 1f1b runs one device per stage: --devices 3 differs "
            "from the 4 stages");
  EXPECT_EQ(problemOf({{"strategy", "dp"}, {"devices", "+2"}}),
            "--devices must be a positive integer, got '+2'");
}

TEST(Layout, ZeroFollowsTheStrategysDescriptor) {
  for (const char *zero : {"1", "2", "3"})
    EXPECT_EQ(problemOf({{"strategy", "dp"}, {"devices", "4"}, {"zero", zero}}),
              "");
  EXPECT_NE(problemOf({{"strategy", "cdp"}, {"devices", "4"}, {"zero", "2"}})
                .find("--zero 2 with --strategy cdp is not built"),
            std::string::npos);
  EXPECT_EQ(problemOf({{"strategy", "cdp"},
                       {"devices", "4"},
                       {"zero", "3"},
                       {"cdp-rule", "v1"}}),
            "");
  EXPECT_NE(problemOf({{"strategy", "1f1b"}, {"zero", "1"}})
                .find("give --replicas 2 or more"),
            std::string::npos);
  // laysa takes no --zero: the ZeRO descriptor refuses it before laysa's.
  EXPECT_EQ(problemOf({{"strategy", "laysa"}, {"devices", "2"}, {"zero", "1"}})
                .rfind("--zero applies to --strategy dp and cdp", 0),
            0u);
}

TEST(Layout, SparseExchangeSetsItsNumbers) {
  LayoutRequest given = request({{"strategy", "laysa"},
                                 {"devices", "2"},
                                 {"density", "0.25"},
                                 {"dense-below", "7"},
                                 {"sparse-baseline", "residual"}});
  LayoutResult checked = checkLayout(given);
  ASSERT_EQ(checked.problem, "");
  ASSERT_EQ(checkFeatures(given, checked.layout), "");
  EXPECT_DOUBLE_EQ(checked.layout.density, 0.25);
  EXPECT_EQ(checked.layout.denseBelow, 7);
  EXPECT_TRUE(checked.layout.sparseResidual);
  EXPECT_EQ(
      problemOf({{"strategy", "dp"}, {"devices", "2"}, {"density", "0.1"}}),
      "--density applies to --strategy laysa, not dp");
  EXPECT_EQ(
      problemOf({{"strategy", "laysa"}, {"devices", "2"}, {"density", " 0.5"}}),
      "--density must be a number, got ' 0.5'");
}

TEST(Layout, FeaturesAreRegisteredInCheckOrder) {
  std::vector<std::string> names;
  for (const FeatureTraits *feature : allFeatures())
    names.push_back(feature->name);
  EXPECT_EQ(names, (std::vector<std::string>{"zero", "sparse-exchange",
                                             "memory-reuse"}));
  LayoutRequest given = request({{"memory-reuse", "layer"}});
  LayoutResult checked = checkLayout(given);
  ASSERT_EQ(checkFeatures(given, checked.layout), "");
  EXPECT_TRUE(checked.layout.layerReuse);
}

} // namespace
