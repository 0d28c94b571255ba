//===- cdp-compile.cpp - ONNX model to cdp IR and plans -------------------===//
//
// Imports an ONNX model and, for now, prints the imported cdp IR
// (--emit=mlir). Every error is one line, `cdp-compile: error: ...`, with
// exit status 1.
//
//===----------------------------------------------------------------------===//

#include "cdp/Import/OnnxImporter.h"
#include "cdp/InitAll.h"
#include "cdp/Passes/Pipelines.h"
#include "cdp/Passes/Profile.h"
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
#include "cdp/Sched/Pipeline.h"
#include "cdp/Sched/ScheduleTable.h"

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

namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("cdp-compile options");

cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.onnx>"),
                               cl::cat(category));
cl::opt<std::string> outputPath("o",
                                cl::desc("Output file (default: standard "
                                         "output for --emit=mlir)"),
                                cl::value_desc("FILE"), cl::init("-"),
                                cl::cat(category));
cl::opt<std::string>
    emit("emit",
         cl::desc("What to write: plan (the artefact cdp-run runs, default), "
                  "plan-text (the same plan's instruction streams, one line "
                  "per instruction, for reading and FileCheck), mlir (the "
                  "imported cdp IR), train-mlir (the training module: loss, "
                  "backward graph, updates), sched-mlir (the schedule in the "
                  "sched dialect: the pipelines' per-device step programs, "
                  "the dp, cdp, gpipe, 1f1b and 2bw timelines), "
                  "schedule-csv (a pipeline's step as a table: a row per "
                  "time step, a column per device, actions such as 0F1, "
                  "1B0, 0SEND_F1; --schedule reads it back)"),
         cl::value_desc("plan|plan-text|mlir|train-mlir|sched-mlir|"
                        "schedule-csv"),
         cl::init("plan"), cl::cat(category));
cl::opt<std::string>
    backendName("backend",
                cl::desc("Where the plan's devices run by default: cpu "
                         "(default) or cuda (NVIDIA GPUs); cdp-run --backend "
                         "overrides it"),
                cl::value_desc("cpu|cuda"), cl::init("cpu"), cl::cat(category));
cl::opt<std::string> strategy(
    "strategy",
    cl::desc("Parallel strategy: single (one device), dp (data parallel), cdp "
             "(cyclic data parallel), gpipe, 1f1b (PipeDream-Flush), 2bw "
             "(PipeDream-2BW), cdp-mp (CDP with model parallelism: "
             "--micro-batches N share the devices of --stages L), "
             "interleaved-1f1b (each device runs --stages-per-device "
             "stages), zb-h1 (zero-bubble 1F1B: backwards split into input "
             "and weight gradients), laysa (dp exchanging top-k updates "
             "with error feedback in mirror weights: --density)"),
    cl::value_desc("single|dp|cdp|gpipe|1f1b|2bw|cdp-mp|interleaved-1f1b|"
                   "zb-h1|laysa"),
    cl::init("single"), cl::cat(category));
cl::opt<std::string> stagesPerDevice(
    "stages-per-device",
    cl::desc("interleaved-1f1b: stages V each device runs, stage s on device "
             "(s - 1) mod (stages / V); devices = stages / V x replicas, and "
             "--micro-batches a multiple of stages / V (default 2)"),
    cl::value_desc("V"), cl::init("2"), cl::cat(category));
cl::opt<std::string> schedulePath(
    "schedule",
    cl::desc("Pipelines (not cdp-mp): follow this schedule CSV instead of the "
             "strategy's own (as --emit=schedule-csv writes it; the columns "
             "are the devices of one replica; checked, and refused with the "
             "line and column at fault)"),
    cl::value_desc("FILE.csv"), cl::cat(category));
cl::opt<std::string> devices("devices",
                             cl::desc("Devices N: dp and cdp run one "
                                      "micro-batch each per step; gpipe, 1f1b "
                                      "and 2bw one stage each (N = stages x "
                                      "replicas); cdp-mp derives it from N "
                                      "and L (docs/strategies/cdp-mp.md)"),
                             cl::value_desc("N"), cl::init("1"),
                             cl::cat(category));
cl::opt<std::string>
    stages("stages",
           cl::desc("Stages L: granularity of reductions (dp), the time-step "
                    "model's L (cdp), the pipeline's depth (gpipe, 1f1b, 2bw, "
                    "cdp-mp); default min(4, ops with parameters)"),
           cl::value_desc("L"), cl::init("0"), cl::cat(category));
cl::opt<std::string> stageBoundaries(
    "stage-boundaries",
    cl::desc(
        "Cut stages after these ONNX nodes instead of using the cost model"),
    cl::value_desc("NODE,..."), cl::cat(category));
cl::opt<std::string> planMode(
    "plan",
    cl::desc(
        "2bw: 'auto' picks the stages, replicas (stages x replicas = "
        "--devices) and micro-batches (--global-batch = M x replicas x "
        "the model's batch) with the least predicted step time (--profile, "
        "else --hw) whose plan fits --device-memory (else the --hw "
        "memory), printing every "
        "candidate; 'manual' (default) takes the flags as given"),
    cl::value_desc("auto|manual"), cl::init("manual"), cl::cat(category));
cl::opt<std::string> globalBatch(
    "global-batch",
    cl::desc("With --plan auto: samples per step over all micro-batches and "
             "replicas"),
    cl::value_desc("G"), cl::cat(category));
cl::opt<std::string> replicas(
    "replicas",
    cl::desc("Pipelines (gpipe, 1f1b, 2bw): data-parallel copies of the "
             "pipeline, each running --micro-batches a step; stage gradients "
             "are summed over them before every update (devices = stages x "
             "replicas; default 1)"),
    cl::value_desc("R"), cl::init("1"), cl::cat(category));
cl::opt<std::string> deviceMemory(
    "device-memory",
    cl::desc("Per-device memory cap in bytes for gpipe, 1f1b, 2bw and "
             "cdp-mp: stages are cut so that each fits (weights x versions, "
             "gradients, optimizer state, stashed activations), balancing "
             "cost among the partitions that do; the plan is then held to "
             "the cap: what each device allocates and its live peak"),
    cl::value_desc("BYTES"), cl::cat(category));
cl::opt<std::string> profilePath(
    "profile",
    cl::desc("Balance stages on measured times: a cdp-run --profile FILE of "
             "this model (single device), instead of the analytic cost "
             "model"),
    cl::value_desc("FILE"), cl::cat(category));
cl::opt<std::string> hardwarePath(
    "hw",
    cl::desc("Hardware model for predicted step times of pipelines, when no "
             "--profile is given: a JSON object with flops_per_s, "
             "memory_bytes (--plan auto's cap without --device-memory), "
             "memory_bandwidth_bytes_per_s, link_bandwidth_bytes_per_s, "
             "link_latency_s (defaults: 5e10, 16 GiB, 2e10, 1e10, 5e-6)"),
    cl::value_desc("FILE.json"), cl::cat(category));
cl::opt<std::string> cdpRule("cdp-rule",
                             cl::desc("CDP update rule (default v2)"),
                             cl::value_desc("v1|v2"), cl::init("v2"),
                             cl::cat(category));
cl::opt<std::string> v2Table(
    "v2-table",
    cl::desc("CDP-v2 freshness table: timing (from the time-step model, "
             "default) or code (the authors' rule l >= L - i)"),
    cl::value_desc("timing|code"), cl::init("timing"), cl::cat(category));
cl::opt<std::string> cdpReduce(
    "cdp-reduce",
    cl::desc("How stage gradients are reduced: allreduce (default), or chain "
             "(point to point along the slots, the mean back one hop per "
             "time step; refused where a version would arrive late)"),
    cl::value_desc("allreduce|chain"), cl::init("allreduce"),
    cl::cat(category));
cl::opt<std::string> zeroStage(
    "zero",
    cl::desc("ZeRO-style sharding of the model states over the data-parallel "
             "devices: 0 (default) none; 1 the optimizer state, each device "
             "updating its shard of every stage and all-gathering the "
             "updated parameters; 2 also the gradients (a reduce-scatter "
             "instead of the all-reduce); 3 also the parameters, each "
             "stage all-gathered before the work that reads it and freed "
             "after. --strategy dp; --strategy cdp takes --zero 3 with "
             "--cdp-rule v1 (CDP-ZeRO: each stage has an owner device, its "
             "parameters go from device to device point to point); the "
             "pipelines with --replicas 2 or more take --zero 1 (sharded "
             "over a stage's replicas)"),
    cl::value_desc("0|1|2|3"), cl::init("0"), cl::cat(category));
cl::opt<std::string> density(
    "density",
    cl::desc("laysa: fraction of each parameter's entries a device sends per "
             "step, the largest of its pending update (0 < D <= 1, default "
             "0.01; 1 sends everything, which is dp)"),
    cl::value_desc("D"), cl::init("0.01"), cl::cat(category));
cl::opt<std::string> denseBelow(
    "dense-below",
    cl::desc("laysa: parameters with fewer elements than this go whole, "
             "without indices (biases, normalization scales; default 1024)"),
    cl::value_desc("ELEMENTS"), cl::init("1024"), cl::cat(category));
cl::opt<std::string> sparseBaseline(
    "sparse-baseline",
    cl::desc("laysa: run the naive top-k baseline instead: residual (an "
             "explicit residual buffer per parameter, the dense gradient "
             "kept until the selection)"),
    cl::value_desc("residual"), cl::cat(category));
cl::opt<std::string> memoryReuse(
    "memory-reuse",
    cl::desc("none (default) or layer: layer-centric memory reuse, every "
             "strategy: element-wise results overwrite the operands they "
             "use last (a gradient over the activation it replaces), and a "
             "gradient's buffer returns to the pool when the step hands it "
             "off (all-reduce start, laysa's mirror, single's update moved "
             "into the backward) instead of at the step's end; no result "
             "changes"),
    cl::value_desc("none|layer"), cl::init("none"), cl::cat(category));
cl::opt<bool> offload(
    "offload",
    cl::desc("Move activations to host memory between their last forward "
             "use and their backward (CUDA backend, not built yet; "
             "refused on the CPU backend)"),
    cl::init(false), cl::cat(category));
cl::opt<bool> inference(
    "inference",
    cl::desc("Compile a forward-only plan (no loss, no "
             "training); cdp-run runs it on --feed, batch after batch"),
    cl::init(false), cl::cat(category));
cl::opt<std::string> loss("loss",
                          cl::desc("Training loss added to the model's first "
                                   "output (none: the model computes it)"),
                          cl::value_desc("softmax-cross-entropy|mse|none"),
                          cl::init("softmax-cross-entropy"), cl::cat(category));
cl::opt<std::string>
    lossOutput("loss-output",
               cl::desc("With --loss=none: the graph output that is the loss"),
               cl::value_desc("NAME"), cl::cat(category));
cl::opt<std::string> labelsName(
    "labels-name",
    cl::desc("Name of the labels input the loss adds (default labels)"),
    cl::value_desc("NAME"), cl::init("labels"), cl::cat(category));
cl::opt<std::string> optimizer("optimizer",
                               cl::desc("Optimizer, PyTorch's semantics "
                                        "(default sgd)"),
                               cl::value_desc("sgd|momentum|adam|adamw"),
                               cl::init("sgd"), cl::cat(category));
cl::opt<std::string> lr("lr", cl::desc("Learning rate (default 0.01)"),
                        cl::value_desc("X"), cl::init("0.01"),
                        cl::cat(category));
cl::opt<std::string> momentum(
    "momentum",
    cl::desc("Momentum, PyTorch semantics, dampening 0 (default 0 for sgd, "
             "0.9 for momentum)"),
    cl::value_desc("X"), cl::cat(category));
cl::opt<std::string> adamBetas("adam-betas",
                               cl::desc("Adam betas (default 0.9,0.999)"),
                               cl::value_desc("B1,B2"), cl::init("0.9,0.999"),
                               cl::cat(category));
cl::opt<std::string> adamEps("adam-eps",
                             cl::desc("Adam epsilon (default 1e-8)"),
                             cl::value_desc("X"), cl::init("1e-8"),
                             cl::cat(category));
cl::opt<std::string> weightDecay(
    "weight-decay",
    cl::desc("Weight decay: L2, added to the gradient, acting on the "
             "version being updated (default 0); with adamw decoupled, the "
             "parameter shrinking by lr x decay each update (default 0.01, "
             "as PyTorch's AdamW)"),
    cl::value_desc("X"), cl::init("0"), cl::cat(category));
cl::opt<std::string> lrSchedule(
    "lr-schedule",
    cl::desc("Learning-rate schedule over updates, PyTorch's: constant "
             "(default), step (StepLR: x --lr-gamma every --lr-period "
             "updates), cosine (CosineAnnealingLR: down to --lr-min over "
             "--lr-period updates) or linear (LinearLR: factor "
             "--lr-start-factor to --lr-end-factor over --lr-period updates)"),
    cl::value_desc("constant|step|cosine|linear"), cl::init("constant"),
    cl::cat(category));
cl::opt<std::string> lrPeriod(
    "lr-period",
    cl::desc("step: updates between decays; cosine: updates to the minimum "
             "(T_max) (default 1)"),
    cl::value_desc("N"), cl::init("1"), cl::cat(category));
cl::opt<std::string> lrGamma("lr-gamma",
                             cl::desc("step: the decay factor (default 0.1)"),
                             cl::value_desc("X"), cl::init("0.1"),
                             cl::cat(category));
cl::opt<std::string> lrMin("lr-min",
                           cl::desc("cosine: the lowest rate (default 0)"),
                           cl::value_desc("X"), cl::init("0"),
                           cl::cat(category));
cl::opt<std::string>
    lrStartFactor("lr-start-factor",
                  cl::desc("linear: the first update's factor (default 1/3)"),
                  cl::value_desc("X"), cl::init("0.3333333333333333"),
                  cl::cat(category));
cl::opt<std::string>
    lrEndFactor("lr-end-factor",
                cl::desc("linear: the factor from --lr-period on (default 1)"),
                cl::value_desc("X"), cl::init("1"), cl::cat(category));
cl::opt<std::string> warmupSteps(
    "warmup-steps",
    cl::desc("Updates of linear warmup, from --warmup-start-factor x --lr up "
             "to --lr, before the schedule starts (PyTorch's SequentialLR of "
             "a LinearLR and the schedule; default 0)"),
    cl::value_desc("W"), cl::init("0"), cl::cat(category));
cl::opt<std::string> warmupStartFactor(
    "warmup-start-factor", cl::desc("The warmup's first factor (default 1/3)"),
    cl::value_desc("X"), cl::init("0.3333333333333333"), cl::cat(category));
cl::opt<bool> noFusion(
    "no-fusion",
    cl::desc("Compile the model's ops as exported, without the fusion passes "
             "(a decomposed LayerNorm into one layer_norm, Transposes into "
             "the matrix products that read them); for comparing results "
             "and speed"),
    cl::init(false), cl::cat(category));
cl::opt<std::string> clipGradNorm(
    "clip-grad-norm",
    cl::desc("Scale the step's gradients so their global L2 norm is at most "
             "X before the update (PyTorch's clip_grad_norm_): over all "
             "stages and devices for single, dp and the pipelines; under cdp "
             "each device clips its own gradient before the reduction "
             "(default 0: off)"),
    cl::value_desc("X"), cl::init("0"), cl::cat(category));
cl::list<std::string> noDecay(
    "no-decay",
    cl::desc("Update parameters whose names match PATTERN (a glob, e.g. "
             "'*.bias') without weight decay: PyTorch's parameter group with "
             "weight_decay 0 (repeatable)"),
    cl::value_desc("PATTERN"), cl::cat(category));
cl::list<std::string> freeze("freeze",
                             cl::desc("Keep this parameter fixed; repeatable"),
                             cl::value_desc("NAME"), cl::cat(category));
cl::opt<std::string> trainableFrom(
    "trainable-from",
    cl::desc("Train exactly the initializers this file names, one per line: "
             "the names of torch's model.named_parameters() (needed for "
             "models from torch.onnx.export(..., dynamo=True))"),
    cl::value_desc("FILE"), cl::cat(category));
cl::list<std::string>
    trainableNames("trainable",
                   cl::desc("Train this initializer too (a scalar, or one "
                            "cdp took for a buffer); repeatable"),
                   cl::value_desc("NAME"), cl::cat(category));
cl::opt<std::string> classAxis(
    "class-axis",
    cl::desc("Where the first output's classes are, for scores of rank 3 or "
             "more: 1 (N, C, d1, ...) or last (N, ..., C: Hugging Face's "
             "language-model logits)"),
    cl::value_desc("1|last"), cl::cat(category));
cl::opt<std::string> ignoreIndex(
    "ignore-index",
    cl::desc("The label that counts for nothing in softmax-cross-entropy "
             "(default -100, as torch)"),
    cl::value_desc("I"), cl::init("-100"), cl::cat(category));
cl::opt<std::string> bnRunningVar(
    "bn-running-var",
    cl::desc("Batch variance entering BatchNorm's running_var: unbiased "
             "(PyTorch, default) or biased (ONNX)"),
    cl::value_desc("unbiased|biased"), cl::init("unbiased"), cl::cat(category));
cl::opt<std::string> microBatches(
    "micro-batches",
    cl::desc("Micro-batches per step (single: M > 1 accumulates the "
             "gradients of M micro-batches per update; dp, cdp: = --devices; "
             "pipelines: per replica, default the stages; cdp-mp: the CDP "
             "slots N sharing the stages' devices)"),
    cl::value_desc("M"), cl::init("1"), cl::cat(category));
// Numbers are read as strings so that a bad value gets our one-line error.
cl::opt<std::string> batchSize(
    "batch-size",
    cl::desc("Binds a symbolic batch dimension to B (one micro-batch)"),
    cl::value_desc("B"), cl::cat(category));
cl::list<std::string> batchAxis(
    "batch-axis",
    cl::desc("Batch axis of a graph input (default 0; none: no batch axis). "
             "Repeatable"),
    cl::value_desc("NAME=A|NAME=none"), cl::cat(category));
cl::opt<std::string> maxTensorBytes(
    "max-tensor-bytes",
    cl::desc("Refuse any tensor larger than N bytes (default 16 GiB)"),
    cl::value_desc("N"), cl::init("17179869184"), cl::cat(category));
cl::list<std::string> constInput(
    "const-input",
    cl::desc("Bind a graph input to the value in FILE (a serialized ONNX "
             "TensorProto) at compile time, for shape-like inputs such as "
             "Reshape's shape. Repeatable"),
    cl::value_desc("NAME=FILE"), cl::cat(category));
cl::opt<std::string> reportPath(
    "report",
    cl::desc("Write the predicted memory and communication per device and "
             "time step (cdp-report/1 JSON), without running anything; "
             "alone (no -o), initializers may carry shapes without data"),
    cl::value_desc("FILE.json"), cl::cat(category));
cl::opt<std::string> reportSteps(
    "steps",
    cl::desc("Training steps the --report and --emit=sched-mlir cover "
             "(default 3)"),
    cl::value_desc("T"), cl::init("3"), cl::cat(category));
cl::opt<bool> printParamData(
    "print-param-data",
    cl::desc("With --emit=mlir, print parameter data in full instead of "
             "eliding it (makes the output parseable by cdp-opt)"),
    cl::init(false), cl::cat(category));

[[noreturn]] void die(const llvm::Twine &message) {
  llvm::errs() << "cdp-compile: error: " << cdp::printable(message.str())
               << "\n";
  std::exit(1);
}

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

/// LLVM prints "requires a value!" itself for a flag given last without
/// one: catch that first, in one line.
void checkTrailingFlag(int argc, char **argv) {
  if (argc < 2)
    return;
  llvm::StringRef last(argv[argc - 1]);
  if (!last.starts_with("-") || last.contains('='))
    return;
  llvm::StringRef name = last.ltrim('-');
  auto &options = cl::getRegisteredOptions();
  auto it = options.find(name);
  if (it != options.end() &&
      it->second->getValueExpectedFlag() == cl::ValueRequired)
    die(last + " needs a value (see cdp-compile --help)"); // as typed
}

/// Runs LLVM's parser but reports a bad flag as one line.
void parseCommandLine(int argc, char **argv) {
  checkTrailingFlag(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "cdp-compile (cdp " CDP_VERSION "), plan format "
       << cdp::plan::kPlanFormatVersion << "\n";
  });
  std::string messages;
  llvm::raw_string_ostream stream(messages);
  if (!cl::ParseCommandLineOptions(
          argc, argv,
          "cdp-compile: compiles an ONNX model into a cdp training plan\n\n"
          "  cdp-compile MODEL.onnx -o MODEL.cdp [--optimizer sgd --lr 0.01]\n"
          "  cdp-compile MODEL.onnx --inference -o MODEL.cdp\n"
          "  cdp-compile MODEL.onnx --emit=mlir [--batch-size B]\n",
          &stream)) {
    // LLVM writes "<argv0>: <problem>.  Try: ..." and a suggestion line;
    // keep only the problem.
    llvm::StringRef first = llvm::StringRef(messages).split('\n').first;
    first = first.split(": ").second.split("  Try:").first;
    die(first.trim().rtrim('.') + " (see cdp-compile --help)");
  }
}

using cdp::Hardware;
using cdp::InstructionCost;

/// --profile FILE's measured costs.
InstructionCost profileCost(const std::string &path) {
  std::string error;
  InstructionCost cost = cdp::profileCost(path, error);
  if (!cost)
    die("--profile " + path + ": " + error);
  return cost;
}

/// --hw FILE.json, or the default hardware model.
Hardware readHardware(const std::string &path) {
  Hardware hw;
  if (path.empty())
    return hw;
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    die("--hw " + path + ": " + buffer.getError().message());
  std::string error;
  if (!cdp::parseHardware((*buffer)->getBuffer().str(), hw, error))
    die("--hw " + path + ": " + error);
  return hw;
}

/// Why a step time could not be predicted, for the user.
std::string unpredictableStep(cdp::plan::SimulatedTime::Status status) {
  if (status == cdp::plan::SimulatedTime::Status::UnknownCost)
    return "--profile " + profilePath.getValue() +
           ": lacks an instruction of the plan; profile this model with "
           "cdp-run --profile on one device";
  return "the timing model finds a receive without its send (a compiler "
         "bug: please report it with the model and flags)";
}

/// The flags, checked: what the passes, the planner and the emitter read.
struct Settings {
  bool planText = false; ///< --emit=plan-text (emit then reads "plan")
  cdp::Strategy kind = cdp::Strategy::Single;
  const cdp::StrategyTraits *traits = nullptr;
  bool dataParallel() const { return traits->dataParallel; }
  bool pipelined() const { return traits->pipelined; }
  /// cdp-mp: its slots follow the CDP rules (dp and cdp check them in
  /// their passes).
  bool cyclicPipeline() const { return traits->pipelined && traits->cyclic; }
  int64_t deviceCount = 1, stageCount = 0, replicaCount = 1,
          microBatchCount = 1, deviceMemoryBytes = 0, reportStepCount = 3;
  bool reportOnly = false;    ///< --report without -o
  int64_t ignoreIndex = -100; ///< --ignore-index
  double lr = 0, weightDecay = 0, momentum = -1, epsilon = 0, beta1 = 0,
         beta2 = 0, lrGamma = 0.1, lrMin = 0, lrStart = 1.0 / 3, lrEnd = 1,
         warmupStart = 1.0 / 3, clipGradNorm = 0;
  int64_t lrPeriod = 1, warmup = 0;
  /// laysa's --density, --dense-below and --sparse-baseline residual.
  double density = 0.01;
  int64_t denseBelow = 1024;
  bool sparseResidual = false;
  /// --memory-reuse layer.
  bool layerReuse = false;
  cdp::ImportOptions import;
  /// interleaved-1f1b's --stages-per-device (1 otherwise).
  int64_t stagesPerDevice = 1;
  /// --schedule's table, read and checked.
  std::optional<cdp::pipeline::ScheduleTable> schedule;

  /// The stage count the flags give: --stage-boundaries, else --stages.
  int64_t flagStages() const {
    return stageBoundaries.empty()
               ? stageCount
               : static_cast<int64_t>(
                     llvm::StringRef(stageBoundaries).count(',') + 2);
  }
};

/// Bounds on counts: a plan holds them in 32-bit fields, and beyond these
/// no machine runs the plan (its instructions grow with their product).
constexpr int64_t kMostDevices = 4096, kMostMicroBatches = 65536,
                  kMostReportSteps = 10000;

int64_t positiveInteger(const std::string &flag, const std::string &text,
                        int64_t least = 1,
                        int64_t most = std::numeric_limits<int64_t>::max()) {
  int64_t value = 0;
  if (!llvm::to_integer(llvm::StringRef(text), value, 10) || value < least)
    die(flag + " must be a positive integer, got '" + text + "'");
  if (value > most)
    die(flag + " must be at most " + std::to_string(most) + ", got '" + text +
        "'");
  return value;
}

double parseReal(const std::string &flag, const std::string &text) {
  double value = 0;
  if (llvm::StringRef(text).getAsDouble(value) || !std::isfinite(value))
    die(flag + " must be a number, got '" + text + "'");
  return value;
}

/// --emit=schedule-csv, --stages-per-device and --schedule against the
/// strategy.
void checkScheduleFlags(Settings &settings) {
  const cdp::StrategyTraits &traits = *settings.traits;
  bool tabled = traits.pipelined && !traits.cyclic;
  const char *tabledNames = "gpipe, 1f1b, 2bw, interleaved-1f1b and zb-h1";
  if (emit == "schedule-csv" && !tabled)
    die(std::string("--emit=schedule-csv writes the schedules of ") +
        tabledNames + ", not --strategy " + strategy);
  if (!schedulePath.empty() && !tabled)
    die(std::string("--schedule applies to ") + tabledNames +
        ", not --strategy " + strategy);
  if (stagesPerDevice.getNumOccurrences() && !traits.interleaved)
    die("--stages-per-device applies to interleaved-1f1b, not --strategy " +
        strategy);
  if (traits.interleaved)
    settings.stagesPerDevice = positiveInteger(
        "--stages-per-device", stagesPerDevice, 1, kMostDevices);
}

/// --schedule: the CSV, read and checked for S stages and M micro-batches.
void readScheduleFile(Settings &settings, int64_t S, int64_t M) {
  if (schedulePath.empty())
    return;
  cdp::pipeline::CsvResult read =
      cdp::pipeline::readScheduleFile(schedulePath, S, M, settings.kind);
  if (!read.table)
    die(read.error);
  settings.schedule = std::move(read.table);
}

/// --emit, --strategy, --devices, --stages and the flags that depend on
/// the strategy alone.
void checkStrategyFlags(Settings &settings) {
  if (inputPath.empty())
    die("no input model given (usage: cdp-compile MODEL.onnx --emit=mlir)");
  if (emit != "mlir" && emit != "plan" && emit != "plan-text" &&
      emit != "train-mlir" && emit != "sched-mlir" && emit != "schedule-csv")
    die("--emit must be plan, plan-text, mlir, train-mlir, sched-mlir or "
        "schedule-csv, got '" +
        emit + "'");
  // plan-text is the plan, printed: everything below treats it as a plan.
  settings.planText = emit == "plan-text";
  if (settings.planText)
    emit = "plan";
  if (backendName != "cpu" && backendName != "cuda")
    die("--backend must be cpu or cuda, got '" + backendName + "'");
  std::optional<cdp::Strategy> parsed = cdp::parseStrategy(strategy.getValue());
  if (!parsed)
    die("--strategy " + strategy +
        " is not available yet (this release supports " + cdp::strategyNames() +
        ")");
  settings.kind = *parsed;
  const cdp::StrategyTraits &traits = cdp::traitsOf(settings.kind);
  settings.traits = &traits;
  settings.deviceCount = positiveInteger("--devices", devices, 1, kMostDevices);
  settings.stageCount = positiveInteger("--stages", stages, 0, kMostDevices);
  if (settings.kind == cdp::Strategy::Single && settings.deviceCount != 1)
    die("--strategy single runs on 1 device, not " + devices +
        " (use --strategy dp or cdp)");
  if (settings.cyclicPipeline() && cdpRule != "v1" && cdpRule != "v2")
    die("--cdp-rule must be v1 or v2, got '" + cdpRule + "'");
  if (settings.cyclicPipeline() && v2Table != "timing" && v2Table != "code")
    die("--v2-table must be timing or code, got '" + v2Table + "'");
  if (settings.pipelined() && settings.stageCount == 0 &&
      stageBoundaries.empty())
    settings.stageCount = 4;
  if (emit == "sched-mlir" && !settings.dataParallel() && !settings.pipelined())
    die("--emit=sched-mlir writes the schedules of dp, cdp and the pipelines; "
        "--strategy " +
        strategy + " has none (--emit=plan-text shows its stream)");
  checkScheduleFlags(settings);
  if (planMode != "auto" && planMode != "manual")
    die("--plan must be auto or manual, got '" + planMode + "'");
  settings.replicaCount =
      positiveInteger("--replicas", replicas, 1, kMostDevices);
  if (settings.replicaCount > 1 && !traits.replicable)
    die("--replicas applies to gpipe, 1f1b, 2bw, interleaved-1f1b and zb-h1, "
        "not --strategy " +
        strategy);
  if (deviceMemory.getNumOccurrences()) {
    int64_t bytes = 0;
    if (!llvm::to_integer(llvm::StringRef(deviceMemory), bytes, 10) ||
        bytes < 1)
      die("--device-memory must be a positive number of bytes, got '" +
          deviceMemory + "'");
    settings.deviceMemoryBytes = bytes;
    if (!settings.pipelined())
      die("--device-memory applies to the pipelines (gpipe, 1f1b, 2bw, "
          "cdp-mp), not --strategy " +
          strategy);
    if (!stageBoundaries.empty())
      die("--device-memory cuts the stages itself; drop --stage-boundaries");
    if (traits.interleaved)
      die("--device-memory sizes one stage per device; interleaved-1f1b runs "
          "several (not supported yet)");
  }
}

/// cdp-mp: N micro-batches (CDP slots) share the stages' devices; stage l
/// needs as many devices as it has ops at one time step of CDP's cycle (L
/// in all when N | L and 2L/N is even, N when L | N).
void deriveCdpMpDevices(Settings &settings, int64_t L) {
  int64_t N = settings.microBatchCount, derived = 0;
  std::string perStage;
  for (int64_t s = 1; s <= L; ++s) {
    int64_t count = cdp::pipeline::cdpStageDeviceCount(s, L, N);
    derived += count;
    perStage += (s > 1 ? ", " : "") + std::to_string(count);
  }
  auto [slot, stage] = cdp::pipeline::cdpCodeTableTooEarly(L, N);
  if (cdpRule == "v2" && v2Table == "code" && slot >= 0)
    die("--strategy cdp-mp --v2-table code: with N = " + std::to_string(N) +
        " and L = " + std::to_string(L) + " the code table makes slot " +
        std::to_string(slot) + " read stage " + std::to_string(stage) +
        "'s new version before the update that makes it "
        "(docs/strategies/cdp.md, update rules); use --v2-table timing");
  if (devices.getNumOccurrences() && settings.deviceCount != derived)
    die("--strategy cdp-mp with N = " + std::to_string(N) +
        " micro-batches on L = " + std::to_string(L) + " stages runs on " +
        std::to_string(derived) + " devices (" + perStage +
        " per stage, docs/strategies/cdp-mp.md): --devices " + devices +
        " differs");
  settings.deviceCount = derived;
}

/// interleaved-1f1b: the devices of one replica, L / V, which must divide
/// the micro-batches (Megatron-LM's order goes through the devices' stages
/// a round of L / V micro-batches at a time).
int64_t interleavedDevices(const Settings &settings, int64_t L) {
  int64_t V = settings.stagesPerDevice, M = settings.microBatchCount;
  if (L % V != 0)
    die("--strategy interleaved-1f1b: --stages " + std::to_string(L) +
        " is not a multiple of --stages-per-device " + std::to_string(V));
  if (M % (L / V) != 0)
    die("--strategy interleaved-1f1b: --micro-batches " + std::to_string(M) +
        " is not a multiple of the " + std::to_string(L / V) +
        " devices (stages / stages per device)");
  return L / V;
}

/// --micro-batches against the devices and stages.
void checkMicroBatches(Settings &settings) {
  settings.microBatchCount =
      positiveInteger("--micro-batches", microBatches, 1, kMostMicroBatches);
  if (settings.pipelined()) {
    // One device per stage; --micro-batches defaults to the stage count.
    int64_t pipelineStages = settings.flagStages();
    if (!microBatches.getNumOccurrences())
      settings.microBatchCount = pipelineStages;
    if (settings.cyclicPipeline())
      deriveCdpMpDevices(settings, pipelineStages);
    int64_t R = settings.replicaCount, perReplica = pipelineStages;
    if (settings.traits->interleaved)
      perReplica = interleavedDevices(settings, pipelineStages);
    readScheduleFile(settings, pipelineStages, settings.microBatchCount);
    if (settings.schedule)
      perReplica = settings.schedule->devices;
    if (planMode != "auto" && devices.getNumOccurrences() &&
        !settings.cyclicPipeline() && settings.deviceCount != perReplica * R)
      die("--strategy " + strategy + " runs " +
          (perReplica == pipelineStages
               ? std::string("one device per stage")
               : std::to_string(perReplica) + " devices a replica") +
          (R > 1 && perReplica == pipelineStages ? " and replica" : "") +
          ": --devices " + devices + " differs from the " +
          (perReplica == pipelineStages
               ? std::to_string(pipelineStages) + " stages"
               : std::to_string(perReplica) + " devices") +
          (R > 1 ? " x " + std::to_string(R) + " replicas" : ""));
    if (planMode != "auto" && !settings.cyclicPipeline())
      settings.deviceCount = perReplica * R;
    if (planMode != "auto" && settings.kind == cdp::Strategy::TwoBW &&
        settings.microBatchCount < pipelineStages)
      die("--strategy 2bw needs at least as many micro-batches as stages "
          "(m >= d): got --micro-batches " +
          std::to_string(settings.microBatchCount) + " for " +
          std::to_string(pipelineStages) + " stages");
  }
  if (settings.dataParallel() && microBatches.getNumOccurrences() &&
      settings.microBatchCount != settings.deviceCount)
    die("--strategy " + strategy +
        " runs one micro-batch per device: "
        "--micro-batches " +
        microBatches + " differs from --devices " + devices);
}

/// The optimizer's numbers.
void readOptimizerFlags(Settings &settings) {
  settings.lr = parseReal("--lr", lr);
  settings.weightDecay = parseReal("--weight-decay", weightDecay);
  // AdamW decays by default, as PyTorch's (weight_decay=0.01).
  if (optimizer == "adamw" && !weightDecay.getNumOccurrences())
    settings.weightDecay = 0.01;
  // -1: not given (the optimizer's default), so a given value must not be.
  settings.momentum =
      momentum.getNumOccurrences() ? parseReal("--momentum", momentum) : -1.0;
  if (momentum.getNumOccurrences() && settings.momentum < 0)
    die("--momentum must be a non-negative number, got '" + momentum + "'");
  if (lrSchedule != "constant" && lrSchedule != "step" &&
      lrSchedule != "cosine" && lrSchedule != "linear")
    die("--lr-schedule must be constant, step, cosine or linear, got '" +
        lrSchedule + "'");
  settings.lrStart = parseReal("--lr-start-factor", lrStartFactor);
  settings.lrEnd = parseReal("--lr-end-factor", lrEndFactor);
  settings.warmup = positiveInteger("--warmup-steps", warmupSteps, 0);
  settings.warmupStart = parseReal("--warmup-start-factor", warmupStartFactor);
  if (settings.lrStart <= 0 || settings.lrEnd < 0 || settings.warmupStart <= 0)
    die("--lr-start-factor and --warmup-start-factor must be positive, "
        "--lr-end-factor not negative");
  settings.lrPeriod = positiveInteger("--lr-period", lrPeriod);
  settings.lrGamma = parseReal("--lr-gamma", lrGamma);
  settings.lrMin = parseReal("--lr-min", lrMin);
  if (settings.lrGamma <= 0 || settings.lrMin < 0)
    die("--lr-gamma must be positive and --lr-min not negative");
  settings.clipGradNorm = parseReal("--clip-grad-norm", clipGradNorm);
  if (settings.clipGradNorm < 0)
    die("--clip-grad-norm must be a positive norm (0: off), got '" +
        clipGradNorm + "'");
  settings.epsilon = parseReal("--adam-eps", adamEps);
  auto [beta1Text, beta2Text] = llvm::StringRef(adamBetas).split(',');
  settings.beta1 = parseReal("--adam-betas", beta1Text.str());
  settings.beta2 = parseReal("--adam-betas", beta2Text.str());
}

/// --trainable-from FILE: one parameter per line, its names separated by
/// spaces where torch ties several; blank lines and lines that start with
/// '#' are skipped.
std::vector<std::vector<std::string>>
readTrainableFile(const std::string &path) {
  if (llvm::sys::fs::exists(path) && !llvm::sys::fs::is_regular_file(path))
    die("--trainable-from " + path +
        ": not a regular file (a FIFO, device or folder)");
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    die("--trainable-from " + path + ": " + buffer.getError().message());
  std::vector<std::vector<std::string>> names;
  llvm::SmallVector<llvm::StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n');
  for (llvm::StringRef line : lines) {
    line = line.trim();
    if (line.empty() || line.starts_with("#"))
      continue;
    llvm::SmallVector<llvm::StringRef> aliases;
    line.split(aliases, ' ', -1, /*KeepEmpty=*/false);
    names.emplace_back();
    for (llvm::StringRef alias : aliases)
      names.back().push_back(alias.trim().str());
  }
  if (names.empty())
    die("--trainable-from " + path + " names no parameter");
  return names;
}

/// No output replaces the model's external data (named as the importer
/// finds it, before anything is written).
void checkNotExternalData(const std::string &file) {
  std::error_code ec;
  for (auto [flag, path] :
       {std::pair<const char *, std::string>{"-o", outputPath.getValue()},
        {"--report", reportPath.getValue()}})
    if (!path.empty() && path != "-" &&
        std::filesystem::equivalent(path, file, ec))
      die(std::string(flag) + " " + path + " is the external data of " +
          inputPath + "; give another path");
}

/// What is trained: the importer decides from these.
void readTrainableFlags(Settings &settings) {
  cdp::ImportOptions &options = settings.import;
  options.training = !inference;
  if (!trainableFrom.empty())
    options.trainableFrom = readTrainableFile(trainableFrom);
  options.trainable.assign(trainableNames.begin(), trainableNames.end());
  options.freeze.assign(freeze.begin(), freeze.end());
  options.externalData = [](const std::string &file) {
    checkNotExternalData(file);
  };
  options.warn = [](const std::string &line) {
    llvm::errs() << "cdp-compile: warning: " << cdp::printable(line) << "\n";
  };
  if (classAxis.getNumOccurrences() && classAxis != "1" && classAxis != "last")
    die("--class-axis takes 1 or last, got '" + classAxis + "'");
  if (!llvm::to_integer(llvm::StringRef(ignoreIndex).trim(),
                        settings.ignoreIndex, 10))
    die("--ignore-index takes an integer, got '" + ignoreIndex + "'");
}

/// What the importer needs, and where the outputs go.
void readImportFlags(Settings &settings) {
  cdp::ImportOptions &options = settings.import;
  if (batchSize.getNumOccurrences())
    options.batchSize = positiveInteger("--batch-size", batchSize);
  options.maxTensorBytes =
      positiveInteger("--max-tensor-bytes", maxTensorBytes);
  for (const std::string &entry : batchAxis) {
    auto [name, axisText] = llvm::StringRef(entry).rsplit('=');
    int64_t axis = -1;
    if (name.empty() || axisText.empty() ||
        (axisText != "none" &&
         (!llvm::to_integer(axisText, axis, 10) || axis < 0)))
      die("--batch-axis takes NAME=A with A a non-negative axis or none, got "
          "'" +
          entry + "'");
    options.batchAxes[name.str()] = axisText == "none" ? -1 : axis;
  }
  for (const std::string &entry : constInput) {
    auto [name, file] = llvm::StringRef(entry).split('=');
    if (name.empty() || file.empty())
      die("--const-input takes NAME=FILE, got '" + entry + "'");
    options.constInputs[name.str()] = file.str();
  }
  readTrainableFlags(settings);
  settings.reportStepCount =
      positiveInteger("--steps", reportSteps, 1, kMostReportSteps);
  settings.reportOnly = !reportPath.empty() && outputPath == "-" &&
                        emit == "plan" && !settings.planText;
  if (settings.reportOnly)
    options.shapesOnly = true;
  if (emit == "plan" && !settings.planText && outputPath == "-" &&
      reportPath.empty())
    die("give -o FILE.cdp for the plan, --report FILE.json for a prediction, "
        "or --emit=mlir to print IR");
}

/// --memory-reuse and --offload.
void checkMemoryFlags(Settings &settings) {
  if (memoryReuse != "none" && memoryReuse != "layer")
    die("--memory-reuse takes none or layer, got '" + memoryReuse + "'");
  settings.layerReuse = memoryReuse == "layer";
  if (offload && backendName == "cuda")
    die("--offload (activations to host memory between their forward and "
        "backward on the CUDA backend) is not built yet; use --memory-reuse "
        "layer to shrink the activations");
  if (offload)
    die("--offload moves activations between GPU and host memory; the CPU "
        "backend's activations are in host memory already, so there is "
        "nothing to offload (use --memory-reuse layer to shrink them)");
}

/// laysa's flags, and what laysa does not combine with.
void checkSparseFlags(Settings &settings) {
  bool laysa = settings.kind == cdp::Strategy::LaySA;
  for (const llvm::cl::opt<std::string> *flag :
       {&density, &denseBelow, &sparseBaseline})
    if (flag->getNumOccurrences() && !laysa)
      die("--" + flag->ArgStr.str() + " applies to --strategy laysa, not " +
          strategy);
  if (!laysa)
    return;
  settings.density = parseReal("--density", density);
  if (!(settings.density > 0 && settings.density <= 1))
    die("--density must lie in (0, 1], got '" + density + "'");
  settings.denseBelow = positiveInteger("--dense-below", denseBelow, 0);
  if (sparseBaseline.getNumOccurrences() && sparseBaseline != "residual")
    die("--sparse-baseline takes residual, got '" + sparseBaseline + "'");
  settings.sparseResidual = sparseBaseline.getNumOccurrences() > 0;
  if (optimizer == "adam" || optimizer == "adamw")
    die("--strategy laysa accumulates SGD steps in its error feedback; use "
        "--optimizer sgd or momentum, not " +
        optimizer);
  if (zeroStage != "0" || cdpReduce.getNumOccurrences() ||
      settings.clipGradNorm > 0)
    die("--strategy laysa takes no --zero, --cdp-reduce or "
        "--clip-grad-norm (its devices never hold the step's mean "
        "gradient)");
}

/// A flag given where it means nothing is refused rather than ignored.
void checkMeaningfulFlags(Settings &settings) {
  const cdp::StrategyTraits &traits = *settings.traits;
  auto given = [](const llvm::cl::Option &flag) {
    return flag.getNumOccurrences() > 0;
  };
  auto refuse = [](const llvm::cl::Option &flag, const std::string &where) {
    die("--" + flag.ArgStr.str() + " applies to " + where);
  };
  using Flags = std::initializer_list<const llvm::cl::Option *>;
  // (--bn-running-var still matters there: a training-mode BatchNorm node
  // returns running statistics.)
  if (inference)
    for (const llvm::cl::Option *flag : Flags{&optimizer,
                                              &lr,
                                              &momentum,
                                              &adamBetas,
                                              &adamEps,
                                              &weightDecay,
                                              &lrSchedule,
                                              &lrPeriod,
                                              &lrGamma,
                                              &lrMin,
                                              &lrStartFactor,
                                              &lrEndFactor,
                                              &warmupSteps,
                                              &warmupStartFactor,
                                              &clipGradNorm,
                                              &zeroStage,
                                              &noFusion,
                                              std::addressof(noDecay),
                                              std::addressof(freeze),
                                              &trainableFrom,
                                              std::addressof(trainableNames),
                                              &classAxis,
                                              &ignoreIndex,
                                              &loss,
                                              &lossOutput,
                                              &labelsName})
      if (given(*flag))
        refuse(*flag, "training plans, not --inference");
  for (const llvm::cl::Option *flag : Flags{&cdpRule, &v2Table})
    if (given(*flag) && !traits.cyclic)
      refuse(*flag, "--strategy cdp and cdp-mp, not " + strategy);
  if (given(cdpReduce) && !traits.dataParallel)
    refuse(cdpReduce, "--strategy dp and cdp, not " + strategy);
  int64_t zero = positiveInteger("--zero", zeroStage, 0, 3);
  if (zero > 0 && zero < 3 && strategy == "cdp")
    die("--zero " + zeroStage +
        " with --strategy cdp is not built: CDP-ZeRO (--zero 3) moves "
        "every model state point to point; sharding only the optimizer "
        "state or the gradients would bring back dp's collectives (use "
        "--strategy dp --zero " +
        zeroStage + ")");
  if (zero == 3 && strategy == "cdp" && cdpRule != "v1")
    die("--zero 3 with --strategy cdp (CDP-ZeRO) runs update rule v1 only: "
        "give --cdp-rule v1 (under v2 a stage's owner would keep and send "
        "two versions)");
  if (zero == 3 && strategy == "cdp" && given(cdpReduce) &&
      cdpReduce != "chain")
    die("--zero 3 with --strategy cdp (CDP-ZeRO) reduces gradients along "
        "the chain of devices; drop --cdp-reduce " +
        cdpReduce);
  if (zero == 3 && strategy == "cdp" && given(clipGradNorm))
    die("--clip-grad-norm with --strategy cdp --zero 3 is not built yet: "
        "CDP-ZeRO's devices never hold a whole step's gradients; use "
        "--strategy dp --zero 3 to clip");
  if (zero > 0 && traits.replicable && zero > 1)
    die("--zero " + zeroStage + " with --strategy " + strategy +
        " is not built yet: a pipeline shards its optimizer state over a "
        "stage's --replicas with --zero 1");
  if (zero > 0 && traits.replicable && settings.replicaCount < 2)
    die("--zero 1 with --strategy " + strategy +
        " shards each stage's optimizer state over the stage's replicas; "
        "give --replicas 2 or more");
  if (zero > 0 && strategy != "dp" && strategy != "cdp" && !traits.replicable)
    refuse(zeroStage, "--strategy dp and cdp, and the --replicas of gpipe, "
                      "1f1b, 2bw, interleaved-1f1b and zb-h1, not " +
                          strategy);
  checkSparseFlags(settings);
  checkMemoryFlags(settings);
  if (given(noDecay) && !given(weightDecay) && optimizer != "adamw")
    refuse(noDecay, "a weight decay (--weight-decay, or --optimizer adamw)");
  if (given(lrPeriod) && lrSchedule == "constant")
    refuse(lrPeriod, "--lr-schedule step and cosine");
  if (given(lrGamma) && lrSchedule != "step")
    refuse(lrGamma, "--lr-schedule step");
  if (given(lrMin) && lrSchedule != "cosine")
    refuse(lrMin, "--lr-schedule cosine");
  for (const llvm::cl::Option *flag : Flags{&lrStartFactor, &lrEndFactor})
    if (given(*flag) && lrSchedule != "linear")
      refuse(*flag, "--lr-schedule linear");
  if (given(warmupStartFactor) && !given(warmupSteps))
    refuse(warmupStartFactor, "--warmup-steps");
  bool adam = optimizer == "adam" || optimizer == "adamw";
  if (given(momentum) && adam)
    refuse(momentum, "--optimizer sgd and momentum, not " + optimizer);
  for (const llvm::cl::Option *flag : Flags{&adamBetas, &adamEps})
    if (given(*flag) && !adam)
      refuse(*flag, "--optimizer adam and adamw, not " + optimizer);
  if (given(hardwarePath) && !traits.pipelined)
    refuse(hardwarePath,
           "the pipelines (gpipe, 1f1b, 2bw, cdp-mp), not " + strategy);
  if (given(globalBatch) && planMode != "auto")
    refuse(globalBatch, "--plan auto");
  if (given(reportSteps) && reportPath.empty() && emit != "sched-mlir")
    refuse(reportSteps, "--report and --emit=sched-mlir");
}

/// Before any work: no output names an input, and every output's folder
/// exists.
void checkOutputPaths() {
  std::vector<std::string> inputs{inputPath, profilePath, hardwarePath,
                                  schedulePath};
  for (const std::string &entry : constInput)
    inputs.push_back(llvm::StringRef(entry).split('=').second.str());
  for (auto [flag, path] :
       {std::pair<const char *, std::string>{"-o", outputPath.getValue()},
        {"--report", reportPath.getValue()}}) {
    std::string problem = cdp::checkOutputPath(flag, path, inputs);
    if (!problem.empty())
      die(problem);
  }
}

Settings checkFlags() {
  Settings settings;
  checkStrategyFlags(settings);
  checkMicroBatches(settings);
  readOptimizerFlags(settings);
  readImportFlags(settings);
  checkMeaningfulFlags(settings);
  checkOutputPaths();
  return settings;
}

/// The strategy's training pipeline (cdp::buildTrainingPipeline, which
/// cdp-opt runs as cdp-dp, cdp-gpipe, ...) for the flags.
cdp::TrainingPipelineConfig pipelineConfigFor(const Settings &settings) {
  cdp::TrainingPipelineConfig config;
  config.strategy = settings.kind;
  config.loss = loss;
  config.labelsName = labelsName;
  config.lossOutput = lossOutput;
  config.stages = settings.stageCount;
  if (!stageBoundaries.empty()) {
    llvm::SmallVector<llvm::StringRef> names;
    llvm::StringRef(stageBoundaries).split(names, ',');
    for (llvm::StringRef name : names)
      config.boundaries.push_back(name.trim().str());
  }
  if (profilePath.getNumOccurrences())
    config.profile = profilePath;
  config.deviceMemory = settings.deviceMemoryBytes;
  bool withMomentum = optimizer == "momentum" ? settings.momentum != 0.0
                                              : settings.momentum > 0.0;
  config.optimizerCopies = optimizer == "adam" || optimizer == "adamw" ? 2
                           : withMomentum                              ? 1
                                                                       : 0;
  config.classAxis = classAxis;
  config.ignoreIndex = settings.ignoreIndex;
  config.bnRunningVar = bnRunningVar;
  config.optimizer = optimizer;
  config.lr = settings.lr;
  config.momentum = settings.momentum;
  config.weightDecay = settings.weightDecay;
  config.beta1 = settings.beta1;
  config.beta2 = settings.beta2;
  config.epsilon = settings.epsilon;
  config.noDecay.assign(noDecay.begin(), noDecay.end());
  config.lrSchedule = lrSchedule;
  config.lrPeriod = settings.lrPeriod;
  config.lrGamma = settings.lrGamma;
  config.lrMin = settings.lrMin;
  config.lrStart = settings.lrStart;
  config.lrEnd = settings.lrEnd;
  config.warmup = settings.warmup;
  config.warmupStart = settings.warmupStart;
  config.clipGradNorm = settings.clipGradNorm;
  config.fuse = !noFusion;
  config.devices = settings.deviceCount;
  config.zero = positiveInteger("--zero", zeroStage, 0, 3);
  config.density = settings.density;
  config.denseBelow = settings.denseBelow;
  config.sparseResidual = settings.sparseResidual;
  config.layerReuse = settings.layerReuse;
  config.microBatches = settings.microBatchCount;
  config.replicas = settings.replicaCount;
  config.cdpRule = cdpRule;
  config.v2Table = v2Table;
  config.cdpReduce = cdpReduce;
  config.stagesPerDevice = settings.stagesPerDevice;
  config.schedulePath = schedulePath;
  if (emit == "sched-mlir")
    config.timelineSteps = settings.reportStepCount;
  config.planMemory = emit == "plan";
  return config;
}

/// The passes for the current stage, replica and micro-batch counts
/// (--plan auto runs them once per candidate on a copy of the module).
mlir::LogicalResult runTrainingPasses(mlir::MLIRContext &context,
                                      mlir::ModuleOp target,
                                      const Settings &settings) {
  mlir::PassManager pm(&context);
  if (inference) {
    if (emit == "plan")
      pm.addPass(cdp::createPlanMemory());
  } else {
    cdp::buildTrainingPipeline(pm, pipelineConfigFor(settings));
  }
  return pm.run(target);
}

cdp::EmitOptions emitOptionsFor(const Settings &settings) {
  cdp::EmitOptions emitOptions;
  emitOptions.strategy = settings.kind;
  emitOptions.microBatches =
      settings.dataParallel() ? 1 : settings.microBatchCount;
  emitOptions.inference = inference;
  emitOptions.optimizer = inference ? std::string() : optimizer.getValue();
  emitOptions.sourceName = llvm::sys::path::filename(inputPath).str();
  emitOptions.backend = backendName;
  return emitOptions;
}

/// Predicted step times: measured per-op times when profiled, else the
/// hardware model's.
InstructionCost stepCostFor(const Settings &settings,
                            const Hardware &hardware) {
  if (!settings.pipelined() || !profilePath.getNumOccurrences())
    return cdp::hardwareCost(hardware);
  return profileCost(profilePath);
}

/// The batch of the model's first input with a batch axis (0: none).
int64_t modelBatch(mlir::ModuleOp source) {
  int64_t batch = 0;
  source.walk([&](mlir::func::FuncOp func) {
    for (unsigned i = 0; i < func.getNumArguments() && !batch; ++i)
      if (auto axis =
              func.getArgAttrOfType<mlir::IntegerAttr>(i, "cdp.batch_axis"))
        if (axis.getInt() >= 0)
          batch =
              mlir::cast<mlir::RankedTensorType>(func.getArgument(i).getType())
                  .getDimSize(axis.getInt());
  });
  return batch;
}

/// Prints a --plan auto candidate's row.
void printCandidate(const cdp::PlanCandidate &candidate) {
  auto count = [](int64_t n) { return static_cast<long long>(n); };
  if (candidate.ms >= 0) {
    std::printf("%8lld %9lld %14lld %12.3f %14lld  %s\n",
                count(candidate.stages), count(candidate.replicas),
                count(candidate.microBatches), candidate.ms,
                count(candidate.peak), candidate.why.c_str());
    return;
  }
  std::string micro = candidate.why == "fewer micro-batches than stages"
                          ? std::to_string(candidate.microBatches)
                          : "-";
  std::printf("%8lld %9lld %14s %12s %14s  %s\n", count(candidate.stages),
              count(candidate.replicas), micro.c_str(), "-", "-",
              candidate.why.c_str());
}

/// --plan auto (the 2BW planner, cdp::planCandidates): every stages x
/// replicas = --devices with M = G / (replicas x B) micro-batches,
/// M >= stages; each candidate is compiled and its plan predicted (step
/// time from the profile or the hardware model, peak memory from the
/// report's accounting); the fastest that fits the cap wins and its counts
/// go into `settings`.
void planAutomatically(mlir::ModuleOp source, Settings &settings,
                       const InstructionCost &stepCost, double memoryCap) {
  if (settings.kind != cdp::Strategy::TwoBW)
    die("--plan auto plans --strategy 2bw (docs/design/planner.md), not " +
        strategy);
  int64_t samples = 0;
  if (!globalBatch.getNumOccurrences() ||
      !llvm::to_integer(llvm::StringRef(globalBatch), samples, 10) ||
      samples < 1)
    die("--plan auto needs --global-batch G, a positive number of "
        "samples per step");
  if (!devices.getNumOccurrences())
    die("--plan auto needs --devices N");
  int64_t batch = modelBatch(source), deviceCount = settings.deviceCount;
  if (batch <= 0)
    die("--plan auto: the model has no input with a batch axis");
  std::printf("--plan auto: 2bw on %lld devices, global batch %lld "
              "(micro-batch %lld)\n",
              (long long)deviceCount, (long long)samples, (long long)batch);
  std::printf("%8s %9s %14s %12s %14s  %s\n", "stages", "replicas",
              "micro-batches", "step ms", "needs bytes", "");
  std::vector<cdp::PlanCandidate> candidates =
      cdp::planCandidates(deviceCount, samples, batch);
  std::string capName =
      settings.deviceMemoryBytes > 0 ? "--device-memory" : "the --hw memory";
  for (cdp::PlanCandidate &candidate : candidates) {
    if (candidate.why.empty())
      cdp::evaluateCandidate(source, pipelineConfigFor(settings),
                             emitOptionsFor(settings), stepCost, memoryCap,
                             capName, candidate);
    printCandidate(candidate);
  }
  int best = cdp::bestCandidate(candidates);
  if (best < 0)
    die("--plan auto: no candidate fits (see the table above)");
  const cdp::PlanCandidate &chosen = candidates[best];
  settings.stageCount = chosen.stages;
  settings.replicaCount = chosen.replicas;
  settings.microBatchCount = chosen.microBatches;
  std::printf("chosen: %lld stages x %lld replicas, %lld micro-batches "
              "per step, %.3f ms per step predicted\n",
              (long long)chosen.stages, (long long)chosen.replicas,
              (long long)chosen.microBatches, chosen.ms);
  std::fflush(stdout);
}

/// --device-memory: the partition fit the estimate; hold the plan itself
/// to the cap too: what each device allocates at load (its persistent
/// tensors and arena) and its live peak over two steps (2bw's second
/// version and the reductions in flight included), whichever is more.
void checkPlanPeaks(const cdp::plan::Plan &plan, const Settings &settings) {
  if (settings.deviceMemoryBytes <= 0)
    return;
  for (auto [device, peak] :
       llvm::enumerate(cdp::runtime::predictDevicePeaks(plan, 2))) {
    int64_t allocated =
        cdp::plan::allocatedBytes(plan, static_cast<int>(device));
    if (std::max(peak, allocated) <= settings.deviceMemoryBytes)
      continue;
    die(inputPath + ": device " + std::to_string(device) +
        " of the plan needs " + std::to_string(std::max(peak, allocated)) +
        " bytes (it allocates " + std::to_string(allocated) +
        " for its tensors and arena; its predicted live peak is " +
        std::to_string(peak) + "), above --device-memory " + deviceMemory +
        " (the partition's estimate counts a stage's own results, not "
        "the inputs it loads or receives and keeps for its backward, nor "
        "the arena's layout; raise the cap or use more stages)");
  }
}

/// --report: the prediction, with the pipelines' predicted step time.
void writeReport(const cdp::plan::Plan &plan, const Settings &settings,
                 const InstructionCost &stepCost) {
  // Both only read the plan: the step time on a second thread.
  std::future<cdp::plan::SimulatedTime> stepTime = std::async(
      settings.pipelined() ? std::launch::async : std::launch::deferred, [&] {
        return cdp::predictStepMs(plan, stepCost, settings.reportStepCount);
      });
  std::string json =
      cdp::runtime::predictReport(plan, settings.reportStepCount);
  if (settings.pipelined()) {
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
std::string readableBytes(int64_t bytes) {
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
void printStageBalance(mlir::ModuleOp module, const cdp::plan::Plan &plan) {
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

/// The plan, its text (--emit=plan-text) and its report; then ends the
/// process without tearing down the MLIR context and the plan (a tenth of
/// a large pipeline's compile time).
[[noreturn]] void writePlanOutputs(mlir::ModuleOp module,
                                   const Settings &settings,
                                   const InstructionCost &stepCost,
                                   const std::string &diagnostic) {
  cdp::EmitOptions emitOptions = emitOptionsFor(settings);
  if (auto file = llvm::MemoryBuffer::getFile(inputPath))
    emitOptions.sourceModel = (*file)->getBuffer().str();
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
  if (settings.pipelined() && !(settings.planText && outputPath == "-"))
    printStageBalance(module, plan);
  if (!reportPath.empty())
    writeReport(plan, settings, stepCost);
  if (settings.planText) {
    std::ostringstream text;
    cdp::plan::printPlanText(plan, text);
    writeOutput(outputPath, text.str());
  } else if (!settings.reportOnly) {
    std::string writeError;
    if (!cdp::plan::writePlan(plan, outputPath, writeError))
      die(outputPath + ": " + writeError);
  }
  std::fflush(nullptr);
  std::_Exit(0);
}

/// Training needs samples: an input whose batch axis is 0 long is refused
/// (ONNX allows empty tensors, and inference plans may take them).
void checkTrainingBatch(mlir::ModuleOp module) {
  module.walk([](mlir::func::FuncOp func) {
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto axis = func.getArgAttrOfType<mlir::IntegerAttr>(i, "cdp.batch_axis");
      auto type =
          mlir::dyn_cast<mlir::RankedTensorType>(func.getArgument(i).getType());
      if (!axis || axis.getInt() < 0 || !type ||
          type.getDimSize(axis.getInt()) != 0)
        continue;
      auto name = func.getArgAttrOfType<mlir::StringAttr>(i, "cdp.name");
      die(inputPath + ": graph input '" + (name ? name.str() : "?") +
          "' has a batch of 0 (axis " + std::to_string(axis.getInt()) +
          "); training needs at least one sample per micro-batch");
    }
  });
}

/// --emit=sched-mlir: the sched.program ops alone.
void printSchedules(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  for (mlir::Operation &op : module.getBody()->getOperations())
    if (mlir::isa<cdp::sched::ProgramOp, cdp::sched::StepProgramOp>(op)) {
      op.print(stream);
      stream << "\n";
    }
  writeOutput(outputPath, text);
}

/// --emit=schedule-csv: the step the plan would run, as a table (the
/// strategy's own, which cdp-schedule-pipeline follows, or --schedule's).
void printScheduleCsv(const Settings &settings) {
  int64_t S = settings.flagStages();
  cdp::pipeline::ScheduleTable table =
      settings.schedule
          ? *settings.schedule
          : cdp::pipeline::strategyTable(settings.kind, S,
                                         settings.microBatchCount,
                                         settings.stagesPerDevice);
  writeOutput(outputPath, cdp::pipeline::writeScheduleCsv(table));
}

/// --emit=mlir and train-mlir: the module, parameter data elided unless
/// --print-param-data.
void printModule(mlir::ModuleOp module) {
  mlir::OpPrintingFlags flags;
  std::string text;
  llvm::raw_string_ostream stream(text);
  if (printParamData) {
    module->print(stream, flags);
    writeOutput(outputPath, text);
    return;
  }
  // Elided resources still print an empty metadata block; drop it so the
  // IR reads as the graph alone.
  flags.elideLargeResourceString(0);
  module->print(stream, flags);
  llvm::StringRef printed(text);
  size_t metadata = printed.rfind("{-#");
  if (metadata != llvm::StringRef::npos &&
      printed.drop_front(metadata + 3).trim() == "#-}")
    printed = printed.take_front(metadata);
  writeOutput(outputPath, printed.rtrim().str() + "\n");
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  parseCommandLine(argc, argv);
  Settings settings = checkFlags();

  mlir::DialectRegistry registry;
  cdp::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  std::string error;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      cdp::importOnnxModel(context, inputPath, settings.import, error);
  if (!module)
    die(inputPath + ": " + error);
  if (emit == "mlir") {
    printModule(*module);
    return 0;
  }

  if (!inference)
    checkTrainingBatch(*module);
  std::string diagnostic;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    if (diagnostic.empty())
      diagnostic = d.str();
    return mlir::success();
  });
  Hardware hardware = readHardware(hardwarePath);
  InstructionCost stepCost = stepCostFor(settings, hardware);
  double memoryCap = settings.deviceMemoryBytes > 0
                         ? static_cast<double>(settings.deviceMemoryBytes)
                         : hardware.memoryBytes;
  if (planMode == "auto")
    planAutomatically(*module, settings, stepCost, memoryCap);
  if (mlir::failed(runTrainingPasses(context, *module, settings)))
    die(inputPath + ": " +
        (diagnostic.empty() ? "compilation failed" : diagnostic));
  if (emit == "sched-mlir") {
    printSchedules(*module);
    return 0;
  }
  if (emit == "schedule-csv") {
    printScheduleCsv(settings);
    return 0;
  }
  if (emit == "plan")
    writePlanOutputs(*module, settings, stepCost, diagnostic);
  printModule(*module);
  return 0;
}
