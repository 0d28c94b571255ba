//===- ReportSvgTest.cpp - reading a report's curves back -----------------===//
//
// A report writes devices alike in every number once (series_of, schema
// cdp-report/2): the curves over all devices count each row as many times
// as devices share it, and a series_of naming a row a time step lacks is
// refused.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/ReportSvg.h"

#include <gtest/gtest.h>

using namespace cdp::runtime;

namespace {

std::string twoRowReport(const std::string &seriesOf) {
  return R"({"schema": "cdp-report/2", "strategy": "dp", "devices": 3,)" +
         seriesOf + R"( "time_steps": [
  {"t": 0, "devices": [{"activation_bytes": 10, "gathered_weight_bytes": 1},
                       {"activation_bytes": 100, "gathered_weight_bytes": 0}],
   "grad_ready_bytes": 7}]})";
}

TEST(ReportSvg, SharedRowsCountOncePerDevice) {
  std::string error;
  // Devices 0 and 2 share row 0, device 1 has row 1.
  auto curves =
      readReportCurves(twoRowReport(R"("series_of": [0, 1, 0],)"), "r", error);
  ASSERT_TRUE(curves) << error;
  EXPECT_EQ(curves->activation, std::vector<double>{120});
  EXPECT_EQ(curves->gathered, std::vector<double>{2});
  EXPECT_EQ(curves->ready, std::vector<double>{7});
}

TEST(ReportSvg, RowPerDeviceWithoutSeriesOf) {
  std::string error;
  auto curves = readReportCurves(twoRowReport(""), "r", error);
  ASSERT_TRUE(curves) << error;
  EXPECT_EQ(curves->activation, std::vector<double>{110});
}

TEST(ReportSvg, SeriesOfPastTheRowsIsRefused) {
  for (const char *bad : {R"("series_of": [0, 2, 0],)",
                          R"("series_of": [0, -1],)", R"("series_of": 3,)"}) {
    std::string error;
    EXPECT_FALSE(readReportCurves(twoRowReport(bad), "r", error)) << bad;
    EXPECT_EQ(error, "series_of names a row a time step lacks") << bad;
  }
}

} // namespace
