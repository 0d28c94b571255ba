//===- ReportSvg.h - a report drawn over time -------------------*- C++ -*-===//

#ifndef CDP_RUNTIME_REPORTSVG_H
#define CDP_RUNTIME_REPORTSVG_H

#include <optional>
#include <string>
#include <vector>

namespace cdp::runtime {

/// What the drawing takes from a report (schema cdp-report/2; /1 reads too).
struct ReportCurves {
  std::string label;              ///< the run's name in the legend
  std::vector<double> activation; ///< per time step, all devices
  std::vector<double> ready;      ///< G(τ): gradient bytes ready
  /// Per time step, all devices: parameters gathered (ZeRO stage 3).
  std::vector<double> gathered;
};

/// Reads `json`, a report cdp-compile or cdp-run wrote; `label` names the
/// run in the legend, followed by its strategy and device count. Returns
/// nothing and one line in `error` for text that is not such a report.
std::optional<ReportCurves> readReportCurves(const std::string &json,
                                             const std::string &label,
                                             std::string &error);

/// An SVG with axes, units and a legend: activation bytes live on all
/// devices per time step, the gradient bytes ready per time step (a
/// panel drawn only where a run hands gradients to reductions: pipelines
/// do not) and the parameter bytes gathered (a panel drawn only where a
/// run gathers: --zero 3). `other`, if given, is drawn dashed for
/// comparison.
std::string reportSvg(const ReportCurves &run, const ReportCurves *other);

} // namespace cdp::runtime

#endif // CDP_RUNTIME_REPORTSVG_H
