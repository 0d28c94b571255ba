//===- ReportSvg.cpp - a report drawn over time ---------------------------===//

#include "cdp/Runtime/ReportSvg.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace cdp::runtime {

/// How many devices each row of a time step stands for: one each, or as
/// many as `series_of` (schema 2) maps to it. Empty where `series_of` is
/// malformed.
static std::vector<double> rowWeights(const nlohmann::json &report,
                                      size_t rows) {
  if (!report.contains("series_of"))
    return std::vector<double>(rows, 1.0);
  const nlohmann::json &seriesOf = report["series_of"];
  std::vector<double> weights(rows, 0.0);
  if (!seriesOf.is_array())
    return {};
  for (const nlohmann::json &row : seriesOf) {
    if (!row.is_number_integer() || row.get<int64_t>() < 0 ||
        row.get<uint64_t>() >= rows)
      return {};
    weights[row.get<size_t>()] += 1;
  }
  return weights;
}

std::optional<ReportCurves> readReportCurves(const std::string &json,
                                             const std::string &label,
                                             std::string &error) {
  nlohmann::json report =
      nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  std::string schema = report.is_object() ? report.value("schema", "") : "";
  if (report.is_discarded() || !report.is_object() ||
      (schema != "cdp-report/1" && schema != "cdp-report/2") ||
      !report.contains("time_steps") || !report["time_steps"].is_array()) {
    error = "not a cdp report (a JSON object with schema cdp-report/2 and "
            "time_steps)";
    return std::nullopt;
  }
  ReportCurves curves;
  curves.label = label + " (" + report.value("strategy", "?") + ", " +
                 std::to_string(report.value("devices", 0)) + " devices)";
  for (const nlohmann::json &step : report["time_steps"]) {
    if (!step.is_object() || !step.contains("devices") ||
        !step["devices"].is_array()) {
      error = "a time step without its devices";
      return std::nullopt;
    }
    std::vector<double> weights = rowWeights(report, step["devices"].size());
    if (weights.size() != step["devices"].size()) {
      error = "series_of names a row a time step lacks";
      return std::nullopt;
    }
    double total = 0, gathered = 0;
    for (size_t row = 0; row < weights.size(); ++row)
      if (const nlohmann::json &device = step["devices"][row];
          device.is_object()) {
        total += weights[row] * device.value("activation_bytes", 0.0);
        gathered += weights[row] * device.value("gathered_weight_bytes", 0.0);
      }
    curves.activation.push_back(total);
    curves.gathered.push_back(gathered);
    curves.ready.push_back(step.value("grad_ready_bytes", 0.0));
  }
  return curves;
}

namespace {

/// A round step (1, 2 or 5 times a power of ten) giving at most `most`
/// intervals up to `top`.
double tickStep(double top, int most) {
  double raw = std::max(top, 1e-9) / most;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw)
      return m * power;
  return 10 * power;
}

/// Bytes in the decimal unit that keeps `top` between 1 and 1000.
struct Unit {
  const char *name;
  double bytes;
};
Unit unitFor(double top) {
  for (Unit unit : {Unit{"GB", 1e9}, Unit{"MB", 1e6}, Unit{"kB", 1e3}})
    if (top >= unit.bytes)
      return unit;
  return {"bytes", 1};
}

/// `text` with XML's special characters escaped (labels are file names).
std::string escaped(const std::string &text) {
  std::string out;
  for (char c : text) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else
      out += c;
  }
  return out;
}

std::string number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

const char *kThis = "stroke=\"#1f77b4\" stroke-width=\"2\"";
const char *kOther =
    "stroke=\"#d62728\" stroke-width=\"2\" stroke-dasharray=\"6,4\"";

/// One panel: a title, a y axis in a byte unit with grid lines, an x axis
/// of time steps, the run's series (`bars` or a line) and the other's
/// dashed.
class Panel {
public:
  Panel(std::ostringstream &os, double top, double left, double width,
        double height, size_t steps)
      : os(os), top(top), left(left), width(width), height(height),
        dx(width / std::max<size_t>(steps > 1 ? steps - 1 : 1, 1)),
        steps(steps) {}

  void draw(const std::string &title, const std::vector<double> &series,
            const std::vector<double> *other, bool bars) {
    double most = 1;
    for (double v : series)
      most = std::max(most, v);
    if (other)
      for (double v : *other)
        most = std::max(most, v);
    Unit unit = unitFor(most);
    double step = tickStep(most / unit.bytes, 5) * unit.bytes;
    double axisTop = std::ceil(most / step) * step;
    double scale = height / axisTop;
    double bottom = top + height;
    os << "<text x=\"" << left << "\" y=\"" << top - 10
       << "\" font-weight=\"bold\">" << title << "</text>\n";
    for (double v = 0; v <= axisTop + step * 0.01; v += step) {
      double y = bottom - v * scale;
      os << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\""
         << left + width << "\" y2=\"" << y << "\" stroke=\"#dddddd\"/>\n"
         << "<text x=\"" << left - 6 << "\" y=\"" << y + 4
         << "\" text-anchor=\"end\">" << number(v / unit.bytes) << "</text>\n";
    }
    os << "<text transform=\"translate(" << left - 55 << "," << top + height / 2
       << ") rotate(-90)\" text-anchor=\"middle\">" << unit.name << "</text>\n";
    drawTimeAxis(bottom);
    if (bars)
      for (size_t i = 0; i < series.size(); ++i) {
        double h = series[i] * scale;
        os << "<rect x=\"" << left + dx * i - dx * 0.35 << "\" y=\""
           << bottom - h << "\" width=\"" << std::max(dx * 0.7, 1.0)
           << "\" height=\"" << h << "\" fill=\"#1f77b4\"/>\n";
      }
    else
      polyline(series, bottom, scale, kThis);
    if (other)
      polyline(*other, bottom, scale, kOther);
  }

private:
  void drawTimeAxis(double bottom) {
    os << "<line x1=\"" << left << "\" y1=\"" << bottom << "\" x2=\""
       << left + width << "\" y2=\"" << bottom << "\" stroke=\"black\"/>\n"
       << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left
       << "\" y2=\"" << bottom << "\" stroke=\"black\"/>\n";
    double step = std::max(1.0, tickStep(steps > 1 ? steps - 1 : 1, 10));
    for (double t = 0; t < steps; t += step)
      os << "<text x=\"" << left + dx * t << "\" y=\"" << bottom + 16
         << "\" text-anchor=\"middle\">" << number(t) << "</text>\n";
    os << "<text x=\"" << left + width / 2 << "\" y=\"" << bottom + 32
       << "\" text-anchor=\"middle\">time step</text>\n";
  }

  void polyline(const std::vector<double> &values, double bottom, double scale,
                const char *style) {
    os << "<polyline fill=\"none\" " << style << " points=\"";
    for (size_t i = 0; i < values.size(); ++i)
      os << left + dx * i << "," << bottom - values[i] * scale << " ";
    os << "\"/>\n";
  }

  std::ostringstream &os;
  double top, left, width, height, dx;
  size_t steps;
};

bool anyPositive(const std::vector<double> &values) {
  return std::any_of(values.begin(), values.end(),
                     [](double v) { return v > 0; });
}

} // namespace

std::string reportSvg(const ReportCurves &run, const ReportCurves *other) {
  size_t steps = std::max<size_t>(
      std::max(run.activation.size(), other ? other->activation.size() : 0), 1);
  bool gradients =
      anyPositive(run.ready) || (other && anyPositive(other->ready));
  bool gathers =
      anyPositive(run.gathered) || (other && anyPositive(other->gathered));
  const double width = 900, left = 90, plotW = width - left - 30, plotH = 200;
  double height = (gradients ? 640 : 370) + (gathers ? 280 : 0);
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width
     << "\" height=\"" << height
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  // The legend: a sample of each run's line and its name.
  auto legend = [&](double y, const char *style, const std::string &text) {
    os << "<line x1=\"" << left << "\" y1=\"" << y - 4 << "\" x2=\""
       << left + 30 << "\" y2=\"" << y - 4 << "\" " << style << "/>\n"
       << "<text x=\"" << left + 38 << "\" y=\"" << y << "\">" << escaped(text)
       << "</text>\n";
  };
  legend(20, kThis, run.label);
  if (other)
    legend(38, kOther, other->label);
  Panel activation(os, 80, left, plotW, plotH, steps);
  activation.draw("Activation bytes live, all devices", run.activation,
                  other ? &other->activation : nullptr, /*bars=*/false);
  if (gradients) {
    Panel ready(os, 360, left, plotW, plotH, steps);
    ready.draw("Gradient bytes ready per time step, G(\u03c4) (bars: " +
                   escaped(run.label) + ")",
               run.ready, other ? &other->ready : nullptr, /*bars=*/true);
  } else {
    os << "<text x=\"" << left << "\" y=\"" << 350
       << "\">No gradient bytes are handed to a reduction in "
       << (other ? "these runs" : "this run")
       << " (pipelines update each stage where it is): no G(\u03c4) "
          "panel.</text>\n";
  }
  if (gathers) {
    Panel gathered(os, gradients ? 640 : 370, left, plotW, plotH, steps);
    gathered.draw("Parameter bytes gathered (ZeRO stage 3), all devices",
                  run.gathered, other ? &other->gathered : nullptr,
                  /*bars=*/false);
  }
  os << "</svg>\n";
  return os.str();
}

} // namespace cdp::runtime
