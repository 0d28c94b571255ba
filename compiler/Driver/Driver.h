//===- Driver.h - what cdp-compile's files share (internal) ----*- C++ -*-===//
//
// The flags (LLVM cl options defined in Flags.cpp), the Settings they are
// checked into, and the functions one file of the driver calls in another.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_COMPILER_DRIVER_DRIVER_H
#define CDP_COMPILER_DRIVER_DRIVER_H

#include "cdp/Driver/CompileMain.h"
#include "cdp/Import/OnnxImporter.h"
#include "cdp/InitAll.h"
#include "cdp/Passes/Pipelines.h"
#include "cdp/Plan/CostModel.h"
#include "cdp/Plan/EmitPlan.h"
#include "cdp/Plan/Paths.h"
#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/PlanText.h"
#include "cdp/Plan/Planner.h"
#include "cdp/Plan/Printable.h"
#include "cdp/Plan/Residency.h"
#include "cdp/Runtime/Report.h"
#include "cdp/Schedule/Layout.h"
#include "cdp/Schedule/Pipeline.h"
#include "cdp/Schedule/ScheduleTable.h"
#include "cdp/Support/Profile.h"

#include <google/protobuf/arena.h>

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

namespace cdp::driver {

namespace cl = llvm::cl;
using cdp::Hardware;
using cdp::InstructionCost;

extern cl::OptionCategory category;
extern cl::opt<std::string> inputPath;
extern cl::opt<std::string> outputPath;
extern cl::opt<std::string> emit;
extern cl::opt<std::string> backendName;
extern cl::opt<std::string> strategy;
extern cl::opt<std::string> stagesPerDevice;
extern cl::opt<std::string> schedulePath;
extern cl::opt<std::string> devices;
extern cl::opt<std::string> stages;
extern cl::opt<std::string> stageBoundaries;
extern cl::opt<std::string> planMode;
extern cl::opt<std::string> globalBatch;
extern cl::opt<std::string> replicas;
extern cl::opt<std::string> deviceMemory;
extern cl::opt<std::string> profilePath;
extern cl::opt<std::string> hardwarePath;
extern cl::opt<std::string> cdpRule;
extern cl::opt<std::string> v2Table;
extern cl::opt<std::string> cdpReduce;
extern cl::opt<std::string> zeroStage;
extern cl::opt<std::string> density;
extern cl::opt<std::string> denseBelow;
extern cl::opt<std::string> sparseBaseline;
extern cl::opt<std::string> memoryReuse;
extern cl::opt<std::string> recompute;
extern cl::opt<std::string> precision;
extern cl::opt<std::string> lossScale;
extern cl::opt<std::string> lossScaleInterval;
extern cl::opt<bool> offload;
extern cl::opt<bool> inference;
extern cl::opt<std::string> loss;
extern cl::opt<std::string> lossOutput;
extern cl::opt<std::string> labelsName;
extern cl::opt<std::string> optimizer;
extern cl::opt<std::string> lr;
extern cl::opt<std::string> momentum;
extern cl::opt<std::string> adamBetas;
extern cl::opt<std::string> adamEps;
extern cl::opt<std::string> weightDecay;
extern cl::opt<std::string> lrSchedule;
extern cl::opt<std::string> lrPeriod;
extern cl::opt<std::string> lrGamma;
extern cl::opt<std::string> lrMin;
extern cl::opt<std::string> lrStartFactor;
extern cl::opt<std::string> lrEndFactor;
extern cl::opt<std::string> warmupSteps;
extern cl::opt<std::string> warmupStartFactor;
extern cl::opt<bool> noFusion;
extern cl::opt<std::string> clipGradNorm;
extern cl::list<std::string> noDecay;
extern cl::list<std::string> freeze;
extern cl::opt<std::string> trainableFrom;
extern cl::list<std::string> trainableNames;
extern cl::opt<std::string> classAxis;
extern cl::opt<std::string> ignoreIndex;
extern cl::opt<std::string> bnRunningVar;
extern cl::opt<std::string> microBatches;
extern cl::opt<std::string> batchSize;
extern cl::list<std::string> batchAxis;
extern cl::opt<std::string> maxTensorBytes;
extern cl::list<std::string> constInput;
extern cl::opt<std::string> reportPath;
extern cl::opt<std::string> reportSteps;
extern cl::opt<bool> printParamData;

/// The flags, checked: what the passes, the planner and the emitter read.
struct Settings {
  bool planText = false; ///< --emit=plan-text (emit then reads "plan")
  /// The strategy's layout and features, checked by the schedule library.
  cdp::Layout layout;
  cdp::Strategy kind() const { return layout.traits->strategy; }
  cdp::PlanForm form() const { return cdp::planForm(kind()); }
  int64_t reportStepCount = 3;
  bool reportOnly = false;    ///< --report without -o
  int64_t ignoreIndex = -100; ///< --ignore-index
  double lr = 0, weightDecay = 0, momentum = -1, epsilon = 0, beta1 = 0,
         beta2 = 0, lrGamma = 0.1, lrMin = 0, lrStart = 1.0 / 3, lrEnd = 1,
         warmupStart = 1.0 / 3, clipGradNorm = 0;
  int64_t lrPeriod = 1, warmup = 0;
  /// --recompute (none: unset).
  std::optional<cdp::RecomputeMode> recompute;
  /// --precision's narrow format for cdp-autocast ("": float32).
  std::string autocast;
  /// --precision fp16 training: the initial loss scale (0: no scaling) and
  /// the clean steps before it doubles.
  double lossScale = 0;
  int64_t lossScaleInterval = 2000;
  cdp::ImportOptions import;
};

using cdp::kMostDevices;
using cdp::kMostMicroBatches;
using cdp::kMostReportSteps;

[[noreturn]] void die(const llvm::Twine &message);

/// A count flag's value, refused in one line outside [least, most].
int64_t positiveInteger(const std::string &flag, const std::string &text,
                        int64_t least = 1,
                        int64_t most = std::numeric_limits<int64_t>::max());

/// Runs LLVM's parser but reports a bad flag as one line.
void parseCommandLine(int argc, char **argv);

Settings checkFlags();

/// Why a step time could not be predicted, for the user.
std::string unpredictableStep(cdp::plan::SimulatedTime::Status status);

cdp::EmitOptions emitOptionsFor(const Settings &settings);

/// Writes an output at once ("-": stdout): a full disk or a killed run
/// leaves the previous file whole (cdp::writeFileAtomically), and a failed
/// write is one line.
void writeOutput(const std::string &path, const std::string &text);

/// The plan, its text (--emit=plan-text) and its report; then ends the
/// process without tearing down the MLIR context and the plan (a tenth of
/// a large pipeline's compile time).
[[noreturn]] void writePlanOutputs(mlir::ModuleOp module,
                                   const Settings &settings,
                                   const InstructionCost &stepCost,
                                   const std::string &diagnostic);

} // namespace cdp::driver

#endif // CDP_COMPILER_DRIVER_DRIVER_H
