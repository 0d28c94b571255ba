//===- Flags.cpp - cdp-compile's flags ------------------------------------===//
//
// The flags (LLVM cl options in one category, each with its --help text)
// and the command line parsed into them with every problem on one line.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

namespace cdp::driver {

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
/// --strategy's help and value names, from the registered strategies.
static const std::string &strategyHelp() {
  static const std::string help = [] {
    std::string text = "Parallel strategy: ";
    for (const cdp::StrategyTraits *traits : cdp::allStrategies()) {
      if (traits != cdp::allStrategies().front())
        text += ", ";
      text += traits->name;
      if (traits->help)
        text += std::string(" (") + traits->help + ")";
    }
    return text;
  }();
  return help;
}

static const std::string &strategyValues() {
  static const std::string values = [] {
    std::string text;
    for (const cdp::StrategyTraits *traits : cdp::allStrategies())
      text += (text.empty() ? "" : "|") + std::string(traits->name);
    return text;
  }();
  return values;
}

cl::opt<std::string> strategy("strategy", cl::desc(strategyHelp()),
                              cl::value_desc(strategyValues()),
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
                                      "micro-batch each per step; the "
                                      "pipelines one stage each (N = stages x "
                                      "replicas; interleaved-1f1b and zb-v "
                                      "run several a device); cdp-mp derives "
                                      "it from N and L "
                                      "(docs/strategies/cdp-mp.md)"),
                             cl::value_desc("N"), cl::init("1"),
                             cl::cat(category));
cl::opt<std::string>
    stages("stages",
           cl::desc("Stages L: granularity of reductions (dp), the time-step "
                    "model's L (cdp), the pipeline's depth (the pipelines); "
                    "default min(4, ops with parameters)"),
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
/// --replicas' help: the strategies that take it, from the registry.
static const std::string &replicasHelp() {
  static const std::string help =
      "Pipelines (" + cdp::scopeNames(cdp::StrategyScope::Replicable, " and ") +
      "): data-parallel copies of the pipeline, each running "
      "--micro-batches a step; stage gradients are summed over them before "
      "every update (devices = devices per replica x replicas; default 1)";
  return help;
}

cl::opt<std::string> replicas("replicas", cl::desc(replicasHelp()),
                              cl::value_desc("R"), cl::init("1"),
                              cl::cat(category));
cl::opt<std::string> deviceMemory(
    "device-memory",
    cl::desc("Per-device memory cap in bytes for the pipelines that run "
             "one stage per device: stages are cut so that each fits (weights "
             "x versions, "
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
cl::opt<std::string> recompute(
    "recompute",
    cl::desc("none (default), stage, layer or selective: activations "
             "dropped after the forward and recomputed in the backward, "
             "every strategy, the same results bit for bit. stage keeps "
             "each stage's inputs; layer the inputs of each layer (a "
             "transformer block is two: attention, MLP); selective all but "
             "element-wise, softmax and layer-norm results and attention's "
             "products (Megatron's selective recompute). --report shows the "
             "activation bytes saved and "
             "the step time it costs"),
    cl::value_desc("none|stage|layer|selective"), cl::init("none"),
    cl::cat(category));
cl::opt<std::string> precision(
    "precision",
    cl::desc(
        "fp32 (default) or bf16: mixed precision as PyTorch's autocast "
        "on a GPU: matrix products and convolutions in bf16 with "
        "float32 accumulation, softmax, norms, reductions and losses "
        "in float32, float32 master weights and optimizer state, "
        "gradients of bf16 tensors in bf16. The CPU backend computes "
        "in float32 and rounds to bf16 at the same points. fp16: the "
        "same in fp16, with dynamic loss scaling as PyTorch's "
        "GradScaler (--loss-scale; single, dp and the pipelines but cdp-mp "
        "so far)"),
    cl::value_desc("fp32|bf16|fp16"), cl::init("fp32"), cl::cat(category));
cl::opt<std::string> lossScale(
    "loss-scale",
    cl::desc("--precision fp16: the initial loss scale S (default 65536, "
             "GradScaler's). The backward starts from S instead of 1 and the "
             "gradients are divided by S before the update; a step whose "
             "gradients overflow (inf or NaN) is skipped and S halves; "
             "after --loss-scale-interval clean steps S doubles"),
    cl::value_desc("S"), cl::init("65536"), cl::cat(category));
cl::opt<std::string> lossScaleInterval(
    "loss-scale-interval",
    cl::desc("--precision fp16: clean steps before the loss scale doubles "
             "(default 2000, GradScaler's growth_interval)"),
    cl::value_desc("N"), cl::init("2000"), cl::cat(category));
cl::opt<bool> offload(
    "offload",
    cl::desc("Move activations to host memory between their last forward "
             "use and their backward: reserved, refused on every backend "
             "(the CUDA backend keeps activations on the GPU; the CPU's are "
             "in host memory already); --memory-reuse layer shrinks them"),
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
    cl::desc("Learning-rate schedule over updates (with --precision fp16 "
             "over steps, skipped or not, as PyTorch's scheduler beside a "
             "GradScaler), PyTorch's: constant "
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
             "(a decomposed LayerNorm or RMSNorm into one layer_norm, "
             "attention into "
             "one op, x * sigmoid(x) into one silu, the rotary embedding "
             "into one rotary, the loss's "
             "log-probabilities recomputed in its gradient instead of kept, "
             "Transposes into the matrix products that read them, a "
             "MatMul by a weight and its bias Add into one Gemm, a ReLU "
             "applied by the Gemm or batch norm before it); for comparing "
             "results and speed"),
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
             "time step (cdp-report/2 JSON), without running anything; "
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

/// LLVM prints "requires a value!" itself for a flag given last without
/// one: catch that first, in one line.
static void checkTrailingFlag(int argc, char **argv) {
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

} // namespace cdp::driver
