//===- PlanOutputs.cpp - the plan, its report and its summary -------------===//
//
// The plan artefact (or its text), the --report prediction, the check of
// its peaks against --device-memory and the stage balance printed after.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "cdp/Plan/PlanWeights.h"

#include <onnx/onnx_pb.h>

#include <fstream>
#include <set>

namespace cdp::driver {

/// Writes an output at once ("-": stdout): a full disk or a killed run
/// leaves the previous file whole (cdp::writeFileAtomically), and a failed
/// write is one line.
void writeOutput(const std::string &path, const std::string &text) {
  if (path == "-") {
    llvm::outs() << text;
    llvm::outs().flush();
    return;
  }
  std::string error;
  if (!cdp::writeFileAtomically(path, text, error))
    die(path + ": " + error);
}

/// --device-memory: the partition fit the estimate; hold the plan itself
/// to the cap too: what each device allocates at load (its persistent
/// tensors and arena) with its optimizer state and the most its
/// communicator holds (messages in flight, gradients in a reduction), or
/// its live peak over two steps (2bw's second version
/// and the reductions in flight included), whichever is more.
static void checkPlanPeaks(const cdp::plan::Plan &plan,
                           const Settings &settings) {
  if (settings.layout.deviceMemoryBytes <= 0)
    return;
  std::vector<int64_t> needs = cdp::runtime::predictDeviceNeeds(plan, 2);
  for (auto [device, need] : llvm::enumerate(needs)) {
    if (need <= settings.layout.deviceMemoryBytes)
      continue;
    int64_t allocated = cdp::plan::allocatedBytesPerDevice(plan)[device];
    int64_t peak = cdp::runtime::predictDevicePeaks(plan, 2)[device];
    die(inputPath + ": device " + std::to_string(device) +
        " of the plan needs " + std::to_string(need) + " bytes (it allocates " +
        std::to_string(allocated) +
        " for its tensors and arena, beside its optimizer state and what its "
        "communicator holds: messages in flight, gradients in a reduction; "
        "its predicted live peak is " +
        std::to_string(peak) + "), above --device-memory " + deviceMemory +
        " (the partition's estimate counts a stage's own results, not "
        "the inputs it loads or receives and keeps for its backward, nor "
        "the arena's layout; raise the cap or use more stages)");
  }
}

/// --report: the prediction, with the pipelines' predicted step time.
static void writeReport(const cdp::plan::Plan &plan, const Settings &settings,
                        const InstructionCost &stepCost) {
  // Both only read the plan: the step time on a second thread.
  std::future<cdp::plan::SimulatedTime> stepTime = std::async(
      settings.form() == cdp::PlanForm::Pipeline ? std::launch::async
                                                 : std::launch::deferred,
      [&] {
        return cdp::predictStepMs(plan, stepCost, settings.reportStepCount);
      });
  std::string json =
      cdp::runtime::predictReport(plan, settings.reportStepCount);
  if (settings.form() == cdp::PlanForm::Pipeline) {
    cdp::plan::SimulatedTime time = stepTime.get();
    if (time.status != cdp::plan::SimulatedTime::Status::Ok)
      die(unpredictableStep(time.status));
    // One more top-level key, before the report's closing brace.
    size_t close = json.rfind('}');
    json.insert(close,
                ",\n\"predicted_step_ms\": " + std::to_string(time.end) + "\n");
  }
  writeOutput(reportPath, json);
}

/// Bytes as B, KiB, MiB or GiB with one decimal.
static std::string readableBytes(int64_t bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit ? "%.1f %s" : "%.0f %s", value,
                units[unit]);
  return text;
}

/// A pipeline's stages as the partitioner weighed them: each stage's share
/// of the work and its parameters, and how far the largest stage is above
/// the mean (it bounds the step).
static void printStageBalance(mlir::ModuleOp module,
                              const cdp::plan::Plan &plan) {
  auto func = module.lookupSymbol<mlir::func::FuncOp>("main");
  auto costs =
      func ? func->getAttrOfType<mlir::DenseF64ArrayAttr>("cdp.stage_costs")
           : nullptr;
  auto unit = func
                  ? func->getAttrOfType<mlir::StringAttr>("cdp.stage_cost_unit")
                  : nullptr;
  if (!costs || !unit || costs.size() < 2)
    return;
  double total = 0, largest = 0;
  for (double cost : costs.asArrayRef()) {
    total += cost;
    largest = std::max(largest, cost);
  }
  if (total <= 0)
    return;
  bool measured = unit.getValue() == "ms";
  std::printf("%lld stages, %s%s:\n  stage  share of work  %s  parameters\n",
              static_cast<long long>(costs.size()),
              stageBoundaries.empty() ? "cut" : "cut by --stage-boundaries",
              measured ? " (work: profiled ms per micro-batch)"
                       : " (work: the cost model's multiply-adds and "
                         "elements written)",
              measured ? "      ms" : "");
  for (int64_t s = 0; s < static_cast<int64_t>(costs.size()); ++s) {
    int64_t params = s < plan.schedule().stage_param_bytes_size()
                         ? plan.schedule().stage_param_bytes(s)
                         : 0;
    std::string ms;
    if (measured) {
      char text[32];
      std::snprintf(text, sizeof text, "%8.3f", costs[s]);
      ms = text;
    }
    std::printf("  %5lld  %13.3f  %s  %10s\n", static_cast<long long>(s + 1),
                costs[s] / total, ms.c_str(), readableBytes(params).c_str());
  }
  double ratio = largest / (total / costs.size());
  std::printf("  the largest stage is %.2fx the mean%s\n", ratio,
              ratio > 1.25 && stageBoundaries.empty()
                  ? (measured ? " (one node outweighs an even share)"
                              : "; --profile cuts on measured times")
                  : "");
}

/// The source model, for --save-onnx, without the values of its
/// initializers that are the plan's parameters and buffers: the weights
/// file holds their initial values, and --save-onnx writes the trained ones
/// in their place. Parsed from the file (not copied from it first), so
/// that a large model is in memory once more here, not three times.
static void attachSourceModel(cdp::plan::Plan &plan) {
  onnx::ModelProto model;
  std::ifstream in(inputPath, std::ios::binary);
  if (!in || !model.ParseFromIstream(&in))
    return; // imported, so readable: only a model changed since lacks it
  std::set<std::string> trained;
  for (const cdp::plan::Tensor &t : plan.tensors())
    if (t.kind() == cdp::plan::PARAM || t.kind() == cdp::plan::BUFFER)
      trained.insert(t.name());
  for (onnx::TensorProto &initializer :
       *model.mutable_graph()->mutable_initializer()) {
    if (!trained.count(initializer.name()))
      continue;
    initializer.clear_raw_data();
    initializer.clear_float_data();
    initializer.clear_double_data();
    initializer.clear_int32_data();
    initializer.clear_int64_data();
  }
  model.SerializeToString(plan.mutable_source_model());
}

/// The plan, its text (--emit=plan-text) and its report; then ends the
/// process without tearing down the MLIR context and the plan (a tenth of
/// a large pipeline's compile time).
[[noreturn]] void writePlanOutputs(mlir::ModuleOp module,
                                   const Settings &settings,
                                   const InstructionCost &stepCost,
                                   const std::string &diagnostic) {
  cdp::EmitOptions emitOptions = emitOptionsFor(settings);
  emitOptions.moveValues = true; // the module's last use but the stage table
  // On an arena: a pipeline plan holds a message per instruction and
  // tensor copy (hundreds of thousands for 64 x 64), which an arena
  // allocates in blocks and frees at once.
  google::protobuf::Arena arena;
  cdp::plan::Plan &plan =
      *google::protobuf::Arena::CreateMessage<cdp::plan::Plan>(&arena);
  if (mlir::failed(cdp::buildPlan(module, emitOptions, plan)))
    die(inputPath + ": " + diagnostic);
  checkPlanPeaks(plan, settings);
  // Where the output is a file, a pipeline's stage balance on stdout.
  if (settings.form() == cdp::PlanForm::Pipeline &&
      !(settings.planText && outputPath == "-"))
    printStageBalance(module, plan);
  if (!reportPath.empty())
    writeReport(plan, settings, stepCost);
  if (settings.planText) {
    std::ostringstream text;
    cdp::plan::printPlanText(plan, text);
    writeOutput(outputPath, text.str());
  } else if (!settings.reportOnly) {
    // The weights first: their memory is freed before the source model
    // is read.
    std::string writeError;
    if (!cdp::plan::writeWeights(plan, outputPath, writeError))
      die(outputPath + ": " + writeError);
    attachSourceModel(plan);
    if (!cdp::plan::writePlan(plan, outputPath, writeError))
      die(outputPath + ": " + writeError);
  }
  std::fflush(nullptr);
  std::_Exit(0);
}

} // namespace cdp::driver
