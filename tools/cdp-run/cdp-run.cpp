//===- cdp-run.cpp - run a cdp plan ---------------------------------------===//
//
// Loads a plan artefact, feeds it data (--feed files or an IDX data set),
// trains for --steps or --epochs, and writes what the user asked for:
// metrics, parameters, gradients, outputs, the trained ONNX model. Every
// error is one line, `cdp-run: error: ...`, with exit status 1.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/Paths.h"
#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/Printable.h"
#include "cdp/Runtime/Checkpoint.h"
#include "cdp/Runtime/Data.h"
#include "cdp/Runtime/Executor.h"
#include "cdp/Runtime/Json.h"
#include "cdp/Runtime/MetricsLog.h"
#include "cdp/Runtime/MpiCommunicator.h"
#include "cdp/Runtime/OnnxInferenceMode.h"
#include "cdp/Runtime/Report.h"
#include "cdp/Runtime/ReportSvg.h"

#include <omp.h>
#include <onnx/onnx_pb.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <sys/stat.h>
#include <system_error>
#include <thread>
#include <unistd.h>

using namespace cdp;
using namespace cdp::runtime;

namespace {

/// Under mpirun: the fabric, so that an error ends every process, not just
/// this one (the others would wait for it until --comm-timeout).
cdp::runtime::Fabric *mpiFabric = nullptr;

[[noreturn]] void die(const std::string &message) {
  std::cerr << "cdp-run: error: " << printable(message) << "\n";
  if (mpiFabric) {
    std::cerr << std::flush;
    mpiFabric->abortRun();
  }
  std::exit(1);
}

struct Options {
  std::string plan;
  /// The flags and values every process of an mpirun job must share.
  std::string agreedFlags;
  std::vector<std::pair<std::string, std::string>> feeds;
  /// --eval-feed: held-out arrays for the plan's inputs, labels included.
  std::vector<std::pair<std::string, std::string>> evalFeeds;
  std::string data;
  int64_t steps = -1, epochs = -1;
  uint64_t seed = 0;
  bool eval = false;
  bool allowNonfinite = false; ///< train on fed NaN or infinities
  int threads = 0;
  int64_t commTimeout = 300; ///< seconds a device waits for a message
  std::string metrics, dumpParams, dumpGrads, saveOutputs, saveOnnx,
      saveOnnxEval;
  std::string checkpoint, resume, profile;
  std::string report, reportSvg, compareReport, trace;
  int64_t reportSteps = -1;
  int64_t checkpointEvery = 0;
  int64_t maxTensorBytes = int64_t(16) << 30;
  std::string backend; ///< empty: the plan's
  bool allowTf32 = false, allowNondeterministic = false;
};

struct Flag {
  const char *name;
  const char *value; // null: a switch
  const char *help;
  std::function<void(const std::string &)> set;
};

int64_t parseCount(const std::string &flag, const std::string &text,
                   int64_t minimum) {
  char *end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end || errno || value < minimum)
    die(flag + " must be an integer >= " + std::to_string(minimum) + ", got '" +
        text + "'");
  return value;
}

/// NAME=FILE of --feed and --eval-feed.
std::pair<std::string, std::string> nameAndFile(const char *flag,
                                                const std::string &v) {
  size_t eq = v.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
    die(std::string(flag) + " takes NAME=FILE, got '" + v + "'");
  return {v.substr(0, eq), v.substr(eq + 1)};
}

Options parseArguments(int argc, char **argv) {
  Options o;
  std::vector<Flag> flags = {
      {"--feed", "NAME=FILE",
       "Feed graph input NAME from FILE (.npy or ONNX TensorProto .pb); "
       "repeatable. Slot k of step t takes entries [(t*K+k)*B, (t*K+k+1)*B) "
       "along the input's batch axis, modulo its length",
       [&](const std::string &v) {
         o.feeds.push_back(nameAndFile("--feed", v));
       }},
      {"--eval-feed", "NAME=FILE",
       "Held-out data for input NAME (repeatable; every input, the labels "
       "included): after training with --feed, the test loss and, for a "
       "classifier, the test accuracy over it, in full batches",
       [&](const std::string &v) {
         o.evalFeeds.push_back(nameAndFile("--eval-feed", v));
       }},
      {"--data", "DIR|fashion-mnist",
       "Train on an IDX data set (train-/t10k- images and labels, .gz read "
       "directly); fashion-mnist is /usr/share/datasets/fashion-mnist",
       [&](const std::string &v) { o.data = v; }},
      {"--steps", "T", "Training steps (required with --feed)",
       [&](const std::string &v) { o.steps = parseCount("--steps", v, 0); }},
      {"--epochs", "E", "Epochs over --data (default 1)",
       [&](const std::string &v) { o.epochs = parseCount("--epochs", v, 1); }},
      {"--seed", "S", "Shuffling and dropout seed (default 0)",
       [&](const std::string &v) { o.seed = parseCount("--seed", v, 0); }},
      {"--eval", nullptr,
       "Report the test loss and accuracy on --data's test split after each "
       "epoch",
       [&](const std::string &) { o.eval = true; }},
      {"--allow-nonfinite", nullptr,
       "Train on fed data holding NaN or infinities (refused by default); a "
       "model that ends non-finite is still not written",
       [&](const std::string &) { o.allowNonfinite = true; }},
      {"--comm-timeout", "S",
       "Under mpirun: seconds a device waits for a message before the run "
       "fails, naming the process it waited for (default 300)",
       [&](const std::string &v) {
         o.commTimeout = parseCount("--comm-timeout", v, 1);
       }},
      {"--backend", "cpu|cuda",
       "Run every device of the plan on this backend (default: the plan's, "
       "which cdp-compile --backend chose); cuda maps device d to GPU d "
       "modulo the GPUs visible, so several devices may share one",
       [&](const std::string &v) {
         if (v != "cpu" && v != "cuda")
           die("--backend must be cpu or cuda, got '" + v + "'");
         o.backend = v;
       }},
      {"--allow-tf32", nullptr,
       "CUDA: let cuBLAS and cuDNN use TF32 tensor cores for float32 "
       "products (faster, about 1e-3 relative error; off by default so that "
       "results match the CPU backend's)",
       [&](const std::string &) { o.allowTf32 = true; }},
      {"--allow-nondeterministic", nullptr,
       "CUDA: let cuDNN use its fastest convolution algorithms, also those "
       "whose results vary in the last bits from run to run (a resumed run "
       "then differs from an uninterrupted one by rounding; off by default)",
       [&](const std::string &) { o.allowNondeterministic = true; }},
      {"--threads", "T",
       "oneDNN/OpenMP threads per device (default: all cores for one device, "
       "1 per device for several; under mpirun the node's cores shared "
       "among the devices its processes run)",
       [&](const std::string &v) {
         o.threads = parseCount("--threads", v, 1);
         if (o.threads > 1024) // OpenMP cannot create them; nor is it useful
           die("--threads must be at most 1024, got '" + v + "'");
       }},
      {"--metrics", "FILE",
       "JSON lines, one per step: step, loss, samples_per_s (and accuracy); "
       "a resumed run keeps the lines of earlier steps and appends",
       [&](const std::string &v) { o.metrics = v; }},
      {"--dump-params", "DIR",
       "Write every trainable parameter and buffer after the run (.npy + "
       "index.json), the folder replaced as a whole",
       [&](const std::string &v) { o.dumpParams = v; }},
      {"--dump-grads", "DIR",
       "Write the loss gradients the last update applied (.npy + index.json)",
       [&](const std::string &v) { o.dumpGrads = v; }},
      {"--save-outputs", "DIR", "Write the graph outputs of the last step",
       [&](const std::string &v) { o.saveOutputs = v; }},
      {"--save-onnx", "FILE",
       "Write the original model with the trained parameters and buffers",
       [&](const std::string &v) { o.saveOnnx = v; }},
      {"--save-onnx-eval", "FILE",
       "Write the trained model for inference, as PyTorch's model.eval() "
       "runs it: BatchNormalization on its running statistics, Dropout "
       "passing its input through (a training-mode export keeps both in "
       "training mode, and ONNX runtimes and --inference follow the file)",
       [&](const std::string &v) { o.saveOnnxEval = v; }},
      {"--checkpoint", "DIR",
       "Save every device's parameters, buffers, optimizer state and "
       "micro-batches in flight to DIR (at the end, or every "
       "--checkpoint-every steps): one shard per process and manifest.bin, "
       "so that a crash keeps the previous checkpoint whole; one run at a "
       "time per folder (DIR/.lock)",
       [&](const std::string &v) { o.checkpoint = v; }},
      {"--checkpoint-every", "N",
       "Checkpoint every N steps (default: at the end)",
       [&](const std::string &v) {
         o.checkpointEvery = parseCount("--checkpoint-every", v, 1);
       }},
      {"--resume", "DIR",
       "Continue from a checkpoint of the same plan, seed, data (files "
       "unchanged) and process count; --steps/--epochs count from the start "
       "of training, so the result is bit-identical to an uninterrupted run",
       [&](const std::string &v) { o.resume = v; }},
      {"--profile", "FILE",
       "Measure every instruction and write its mean time per step as JSON "
       "(cdp-compile --profile balances stages on it; the first step, setup, "
       "is left out when more ran)",
       [&](const std::string &v) { o.profile = v; }},
      {"--trace", "FILE.json",
       "Chrome trace events (Perfetto, chrome://tracing): a track per device; "
       "each stage's forward, backward, update and communication as spans",
       [&](const std::string &v) { o.trace = v; }},
      {"--report", "FILE.json",
       "Write the measured memory by category, activation units and bytes "
       "sent per device and time step (same schema as cdp-compile --report)",
       [&](const std::string &v) { o.report = v; }},
      {"--report-svg", "FILE.svg",
       "Draw activation memory over time and gradient bytes per time step",
       [&](const std::string &v) { o.reportSvg = v; }},
      {"--compare-report", "OTHER.json",
       "Overlay another report on --report-svg (e.g. dp against cdp)",
       [&](const std::string &v) { o.compareReport = v; }},
      {"--report-steps", "T", "Steps the report covers (default: all)",
       [&](const std::string &v) {
         o.reportSteps = parseCount("--report-steps", v, 1);
       }},
      {"--max-tensor-bytes", "N",
       "Refuse a fed tensor larger than N bytes (default 16 GiB)",
       [&](const std::string &v) {
         o.maxTensorBytes = parseCount("--max-tensor-bytes", v, 1);
       }},
  };
  auto help = [&]() {
    std::cout << "OVERVIEW: cdp-run: runs a plan compiled by cdp-compile\n\n"
                 "USAGE: cdp-run MODEL.cdp [options]\n\n"
                 "  cdp-run lenet.cdp --data fashion-mnist --epochs 1 --eval\n"
                 "  cdp-run mlp.cdp --feed input=x.npy --feed labels=y.npy "
                 "--steps 3 --dump-params out/\n\nOPTIONS:\n";
    for (const Flag &f : flags) {
      std::string left = std::string(f.name) +
                         (f.value ? std::string("=<") + f.value + ">" : "");
      std::cout << "  " << left
                << std::string(left.size() < 30 ? 30 - left.size() : 1, ' ')
                << "- " << f.help << "\n";
    }
    std::cout << "  --help                        - This text\n";
    std::cout
        << "  --version                     - cdp's version and plan format\n";
    std::exit(0);
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h")
      help();
    if (arg == "--version") {
      std::cout << "cdp-run (cdp " CDP_VERSION "), plan format "
                << plan::kPlanFormatVersion << "\n";
      std::exit(0);
    }
    if (arg.rfind("-", 0) != 0) {
      if (!o.plan.empty())
        die("more than one plan given ('" + o.plan + "' and '" + arg + "')");
      o.plan = arg;
      continue;
    }
    std::string name = arg, value;
    bool hasValue = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      hasValue = true;
    }
    auto flag = std::find_if(flags.begin(), flags.end(),
                             [&](const Flag &f) { return name == f.name; });
    if (flag == flags.end())
      die("unknown option '" + name + "' (see cdp-run --help)");
    if (flag->value && !hasValue) {
      if (i + 1 >= argc)
        die(name + " needs a value <" + flag->value + ">");
      value = argv[++i];
    } else if (!flag->value && hasValue) {
      die(name + " takes no value");
    }
    flag->set(value);
    // What mpirun's processes must share (the threads and the timeout may
    // differ from machine to machine).
    if (name != "--threads" && name != "--comm-timeout")
      o.agreedFlags += name + '\0' + value + '\0';
  }
  if (o.plan.empty())
    die("no plan given (usage: cdp-run MODEL.cdp [options])");
  return o;
}

/// Writes an output file all at once (cdp::writeFileAtomically): a crash
/// or a full disk never leaves half of it.
void writeOutput(const std::string &path, const std::string &bytes) {
  std::string error;
  if (!writeFileAtomically(path, bytes, error))
    die(path + ": " + error);
}

/// Writes views as .npy files plus index.json mapping ONNX names to files,
/// as a set: the folder is replaced at once (writeFolderAtomically).
void writeFolder(
    const std::string &dir,
    const std::vector<std::pair<std::string, TensorView>> &tensors) {
  FileNamer namer;
  runtime::Json index = runtime::Json::object();
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto &[name, view] : tensors) {
    std::string file = namer.name(name) + ".npy";
    files.emplace_back(file, npyBytes(view));
    index[name] = file;
  }
  files.emplace_back("index.json", runtime::jsonText(index, 1) + "\n");
  std::string error;
  if (!writeFolderAtomically(dir, files, error))
    die(dir + ": " + error);
}

/// Tensors of `executor` by name, staged out of the device, into a folder.
void writeTensors(const std::string &dir, const Executor &executor,
                  const std::vector<std::pair<std::string, int>> &tensors) {
  std::vector<HostTensor> staged;
  std::vector<std::pair<std::string, TensorView>> views;
  for (const auto &[name, id] : tensors)
    staged.push_back(executor.stageOut(id));
  for (size_t i = 0; i < tensors.size(); ++i)
    views.emplace_back(tensors[i].first, staged[i].view());
  writeFolder(dir, views);
}

/// Copies slot rows of `source` into the input tensor: along the batch axis,
/// entry j of the slot is source entry (first + j) modulo its length.
void copyRows(const Array &source, const TensorView &target, int64_t batchAxis,
              int64_t first, const std::vector<int64_t> *order = nullptr) {
  int64_t width = plan::dtypeSize(target.dtype);
  if (batchAxis < 0) {
    if (target.numel() > 0) // an empty tensor's data may be null
      std::memcpy(target.data, source.bytes.data(), target.numel() * width);
    return;
  }
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < batchAxis; ++d)
    outer *= target.shape[d];
  for (size_t d = batchAxis + 1; d < target.shape.size(); ++d)
    inner *= target.shape[d];
  int64_t rows = target.shape[batchAxis],
          length = source.numel() / (outer * inner);
  // A large micro-batch is copied by every thread of the process: on a GPU
  // the copy into the staging memory is on the step's critical path.
  bool large = outer * rows * inner * width > (int64_t(1) << 20);
#pragma omp parallel for collapse(2) if (large)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < rows; ++j) {
      int64_t entry = (first + j) % length;
      if (order)
        entry = (*order)[entry];
      std::memcpy(static_cast<char *>(target.data) +
                      ((o * rows + j) * inner) * width,
                  source.bytes.data() + ((o * length + entry) * inner) * width,
                  inner * width);
    }
}

void checkFeed(const std::string &flag, const std::string &name,
               const std::string &file, const Array &array,
               const TensorView &target, int64_t batchAxis) {
  auto shapeText = [](const std::vector<int64_t> &shape) {
    std::string text = "[";
    for (size_t i = 0; i < shape.size(); ++i)
      text += (i ? "," : "") + std::to_string(shape[i]);
    return text + "]";
  };
  if (array.dtype != target.dtype)
    die(flag + " " + name + "=" + file +
        ": element type differs from the input's (" +
        std::string(target.dtype == plan::F32   ? "float32"
                    : target.dtype == plan::I64 ? "int64"
                                                : "bool") +
        ")");
  bool fits = array.shape.size() == target.shape.size();
  for (size_t d = 0; fits && d < target.shape.size(); ++d)
    fits = array.shape[d] == target.shape[d] ||
           (static_cast<int64_t>(d) == batchAxis && array.shape[d] >= 1);
  if (!fits)
    die(flag + " " + name + "=" + file + ": shape " + shapeText(array.shape) +
        " does not fit the input's " + shapeText(target.shape) +
        (batchAxis >= 0 ? " (any length along batch axis " +
                              std::to_string(batchAxis) + ")"
                        : ""));
}

/// The loss after a slot: staged out of the device.
float readLoss(const plan::Plan &plan, const Executor &executor) {
  return plan.loss() >= 0 ? executor.stageOut(plan.loss()).view().f32()[0]
                          : 0.0f;
}

/// Fills input `id` with the rows `copy` writes, staged into the device.
void stageRows(Executor &executor, int id, const Array &source,
               int64_t batchAxis, int64_t first,
               const std::vector<int64_t> *order = nullptr) {
  executor.stageInWhole(id, [&](const TensorView &host) {
    copyRows(source, host, batchAxis, first, order);
  });
}

/// The one error line for a non-finite loss: the step, the device when
/// there are several, and the first non-finite tensor in instruction order.
std::string nonFiniteLoss(const plan::Plan &plan, Executor &executor,
                          int64_t step, float loss) {
  int instruction = -1;
  int bad = executor.firstNonFinite(instruction);
  const plan::Device &device = plan.devices(executor.device());
  std::string where =
      bad < 0
          ? std::string("no tensor is non-finite")
          : "first non-finite tensor: " +
                (plan.tensors(bad).name().empty()
                     ? "#" + std::to_string(bad)
                     : "'" + plan.tensors(bad).name() + "'") +
                ", output of '" + device.instructions(instruction).op() +
                "' at '" + device.instructions(instruction).location() + "'";
  std::string who = "step " + std::to_string(step);
  if (plan.devices_size() > 1)
    who += ", device " + std::to_string(executor.device());
  return who + ": the loss is " + (std::isnan(loss) ? "NaN" : "infinite") +
         "; " + where + " (check the inputs, or lower --lr)";
}

/// The training order of epoch `epoch`: every sample once, shuffled by
/// --seed and the epoch.
std::vector<int64_t> shuffledOrder(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed * 1000003ull + epoch);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[i],
              order[std::uniform_int_distribution<int64_t>(0, i)(rng)]);
  return order;
}

/// Flags that mean nothing for this plan or beside the other flags are
/// refused rather than ignored.
void checkMeaningfulFlags(const Options &options, const plan::Plan &plan) {
  if (plan.inference()) {
    for (auto [flag, given] :
         {std::pair<const char *, bool>{"--steps", options.steps >= 0},
          {"--epochs", options.epochs >= 0},
          {"--eval", options.eval},
          {"--eval-feed", !options.evalFeeds.empty()},
          {"--dump-grads", !options.dumpGrads.empty()},
          {"--checkpoint", !options.checkpoint.empty()},
          {"--resume", !options.resume.empty()},
          {"--report", !options.report.empty()},
          {"--metrics", !options.metrics.empty()}})
      if (given)
        die(std::string(flag) + " applies to training plans; " + options.plan +
            " is forward-only");
  }
  if (!options.dumpGrads.empty() && plan.memory_reuse() == "layer" &&
      plan.applied_gradients_size() == 0)
    die("--dump-grads reads the gradients at the step's end, but " +
        options.plan +
        " reuses their memory once they are handed off (cdp-compile "
        "--memory-reuse layer); compile without it to dump them");
  if (!options.dumpGrads.empty() && plan.schedule().zero() >= 2)
    die("--dump-grads writes the mean gradients, which a --zero " +
        std::to_string(plan.schedule().zero()) +
        " plan never holds whole on every device (dp: one shard per "
        "device; cdp: on each stage's owner); compile with --strategy dp "
        "--zero 1 to dump them");
  bool owned = std::any_of(plan.schedule().shard_groups().begin(),
                           plan.schedule().shard_groups().end(),
                           [](const auto &group) { return group.has_owner(); });
  if (owned && (!options.checkpoint.empty() || !options.resume.empty()))
    die(std::string(options.resume.empty() ? "--checkpoint" : "--resume") +
        " is not built yet for a cdp --zero 3 plan (its stage owners send "
        "the next step's parameters before the step starts); compile with "
        "--strategy dp --zero 3 to checkpoint sharded model states");
  if (options.eval && options.data.empty())
    die("--eval evaluates on the test split of --data; with --feed give the "
        "held-out data with --eval-feed NAME=FILE");
  if (!options.evalFeeds.empty() && !options.data.empty())
    die("--eval-feed is held-out data for --feed training; with --data, "
        "--eval evaluates on its test split");
  if (options.checkpointEvery > 0 && options.checkpoint.empty())
    die("--checkpoint-every needs --checkpoint DIR");
  if (options.reportSteps > 0 && options.report.empty())
    die("--report-steps needs --report FILE.json");
  if (options.allowNonfinite && options.feeds.empty())
    die("--allow-nonfinite applies to --feed data (a data set's pixels are "
        "always finite)");
}

/// --backend overrides the plan's devices' backend; --allow-tf32 and
/// --allow-nondeterministic need a GPU device to mean something.
void selectBackend(const Options &options, plan::Plan &plan) {
  if (!options.backend.empty())
    for (plan::Device &device : *plan.mutable_devices())
      device.set_backend(options.backend);
  bool gpu = std::any_of(
      plan.devices().begin(), plan.devices().end(),
      [](const plan::Device &device) { return device.backend() == "cuda"; });
  for (auto [flag, given] :
       {std::pair{"--allow-tf32", options.allowTf32},
        std::pair{"--allow-nondeterministic", options.allowNondeterministic}})
    if (given && !gpu)
      die(std::string(flag) +
          " applies to the CUDA backend, and this plan's devices run on the "
          "CPU (add --backend cuda)");
  setAllowTf32(options.allowTf32);
  setAllowNondeterministic(options.allowNondeterministic);
}

/// Reads the plan and refuses one that would hang or options that do not
/// go together.
void readCheckedPlan(const Options &options, plan::Plan &plan,
                     uint64_t &planChecksum) {
  std::string error;
  if (!plan::readPlan(options.plan, plan, error, options.maxTensorBytes))
    die(options.plan + ": " + error);
  selectBackend(options, plan);
  // A plan whose sends and receives cannot all match would hang the device
  // threads: refuse it, naming the first stuck device.
  std::string hang = plan::findSendRecvDeadlock(plan);
  if (!hang.empty()) {
    std::istringstream lines(hang);
    std::string line, text;
    std::getline(lines, line);
    text = line.substr(0, line.find(';'));
    while (std::getline(lines, line) && line.rfind("  device ", 0) == 0)
      text += "; " + line.substr(2);
    die(options.plan + ": " + text);
  }
  {
    std::ifstream in(options.plan, std::ios::binary);
    std::stringstream content;
    content << in.rdbuf();
    planChecksum = plan::checksum(content.str().data(), content.str().size());
  }
  if (!options.feeds.empty() && !options.data.empty())
    die("give --feed or --data, not both");
  bool training = !plan.inference();
  if (training && options.feeds.empty() && options.data.empty())
    die("nothing to train on: give --data DIR|fashion-mnist or --feed "
        "NAME=FILE");
  if (!options.feeds.empty() && training && options.steps < 0)
    die("--feed needs --steps T");
  if (options.data.empty() && options.epochs >= 0)
    die("--epochs goes with --data");
  checkMeaningfulFlags(options, plan);
  // Before training: a model without an inference mode is refused now,
  // not after the run.
  if (!options.saveOnnxEval.empty()) {
    onnx::ModelProto model;
    if (!model.ParseFromString(plan.source_model()))
      die("--save-onnx-eval: the plan holds no readable ONNX model");
    if (std::string problem = runtime::toInferenceMode(model); !problem.empty())
      die("--save-onnx-eval: " + problem);
  }
}

/// The last component of `path`: a run's name in the report's legend.
std::string fileName(const std::string &path) {
  return std::filesystem::path(path).filename().string();
}

/// --compare-report: the other run's curves, read before training starts.
runtime::ReportCurves readComparison(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    die(path + ": cannot open: " + std::strerror(errno));
  std::stringstream content;
  content << in.rdbuf();
  std::string error;
  std::optional<runtime::ReportCurves> curves =
      runtime::readReportCurves(content.str(), fileName(path), error);
  if (!curves)
    die("--compare-report " + path + ": " + error);
  return *curves;
}

/// One run of a plan: its devices, the data bound to its inputs, the step
/// counts and what records the run.
struct Run {
  Run(const Options &options, plan::Plan &plan)
      : options(options), plan(plan) {}
  const Options &options;
  plan::Plan &plan;
  uint64_t planChecksum = 0;
  /// What its checkpoints record of the run (runIdentity), once the data
  /// are read.
  RunIdentity identity;
  bool training = false, terminal = false;
  int deviceCount = 1, threadsPerDevice = 1;
  /// Devices as threads that communicate (every multi-device plan, and dp
  /// and cdp on one device).
  bool multiDevice = false;
  /// The devices' fabric (in-process, or over mpirun's processes): each
  /// device's executor talks through its own endpoint.
  std::unique_ptr<Fabric> fabric;
  bool mpi = false; ///< started by mpirun: this process runs some devices
  /// Gathered after a multi-device run: every device's send log, workspace
  /// and optimizer bytes (on the root).
  std::vector<std::vector<Communicator::SendRecord>> sendLogs;
  std::vector<double> workspaceBytes, optimizerBytes;
  std::vector<std::unique_ptr<Executor>> executors;
  std::unique_ptr<ReportBuilder> report;
  /// --compare-report: the other run, drawn dashed in --report-svg.
  std::optional<runtime::ReportCurves> comparison;
  std::unique_ptr<TraceRecorder> trace;
  std::map<int, Array> feeds;
  std::map<int, Array> evalFeeds; ///< --eval-feed, by input id
  int64_t evalSamples = 0;
  Dataset train, test;
  int imageInput = -1;
  int64_t slots = 1, batch = 1, perStep = 1, stepsPerEpoch = 0, epochs = 1,
          total = 0;
  MetricsLog metrics;
  /// --dump-grads and --save-outputs written (before a final evaluation,
  /// which reuses their buffers).
  bool stepOutputsWritten = false;
  /// An inference plan run batch by batch: its outputs with a batch axis,
  /// one row per fed sample (by tensor id).
  std::map<int, Array> gatheredOutputs;
  /// Device 0: where parameters are gathered and outputs are read.
  Executor &first() { return *executors[0]; }
  /// A device this process runs (shapes for checking feeds).
  Executor &local() {
    for (auto &executor : executors)
      if (executor)
        return *executor;
    die("no device runs in this process");
  }
  /// Whether this process writes the outputs.
  bool root() const { return !fabric || fabric->isRoot(); }
  /// What a checkpoint of this process holds.
  CheckpointScope checkpointScope() {
    CheckpointScope scope;
    for (auto &executor : executors)
      if (executor)
        scope.devices.push_back(executor.get());
    scope.fabric = fabric.get();
    return scope;
  }
};

/// The device threads of this process meet between two steps: the last to
/// arrive runs the action (a checkpoint) while the others wait, so that no
/// device has begun the next step. A failed action, or a device that
/// failed elsewhere (abandon), fails every thread that meets.
/// Waiting devices are parked in the fabric (its stall check); the last
/// sets them running before it wakes them.
class StepRendezvous {
public:
  StepRendezvous(int threads, Fabric &fabric)
      : threads(threads), fabric(fabric) {}
  void meet(int device, const std::function<void()> &action) {
    std::unique_lock<std::mutex> lock(mutex);
    int64_t mine = generation;
    if (failure.empty() && ++arrived < threads) {
      parked.push_back(device);
      fabric.setParked(device, true);
      changed.wait(lock,
                   [&] { return generation != mine || !failure.empty(); });
    } else if (failure.empty()) {
      try {
        action();
      } catch (const RuntimeError &e) {
        failure = e.what();
      }
      arrived = 0;
      ++generation;
      for (int d : parked)
        fabric.setParked(d, false);
      parked.clear();
      changed.notify_all();
    }
    if (!failure.empty())
      throw RuntimeError(failure);
  }
  void abandon(const std::string &why) {
    std::lock_guard<std::mutex> lock(mutex);
    if (failure.empty())
      failure = why;
    changed.notify_all();
  }

private:
  const int threads;
  Fabric &fabric;
  std::vector<int> parked;
  std::mutex mutex;
  std::condition_variable changed;
  int arrived = 0;
  int64_t generation = 0;
  std::string failure;
};

/// Under mpirun without --threads: the node's cores shared among the
/// devices its processes run (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE
/// processes, each running devices / OMPI_COMM_WORLD_SIZE), at least one.
int mpiThreadsPerDevice(int devices, int cores) {
  auto count = [](const char *name) {
    const char *value = std::getenv(name);
    int n = value ? std::atoi(value) : 0;
    return n > 0 ? n : 1;
  };
  int perProcess = std::max(devices / count("OMPI_COMM_WORLD_SIZE"), 1);
  return std::max(cores / (count("OMPI_COMM_WORLD_LOCAL_SIZE") * perProcess),
                  1);
}

/// --data's folder (fashion-mnist: the packaged one).
std::string dataFolder(const Options &options) {
  return options.data == "fashion-mnist" ? "/usr/share/datasets/fashion-mnist"
                                         : options.data;
}

/// The files --data reads: the training split's, and the test split's
/// with `withTest` (a RuntimeError naming one that is missing).
std::vector<std::string> dataFiles(const Options &options, bool withTest) {
  std::vector<std::string> files;
  if (options.data.empty())
    return files;
  files = idxSplitFiles(dataFolder(options), "train");
  if (withTest)
    for (std::string &file : idxSplitFiles(dataFolder(options), "t10k"))
      files.push_back(std::move(file));
  return files;
}

/// What this process must share with the others of an mpirun job: the
/// plan, the flags, and its data files' sizes and contents (the first and
/// last MiB: another machine's copy of a file has another modification
/// time).
RunAgreement agreementOf(const Run &run) {
  const Options &options = run.options;
  RunAgreement agreement;
  agreement.plan = run.planChecksum;
  agreement.flags =
      plan::checksum(options.agreedFlags.data(), options.agreedFlags.size());
  auto add = [&](const std::string &flag, const std::string &file) {
    FileFingerprint print = fingerprintFile(file);
    agreement.files.emplace_back(flag, print.hash ^ print.size);
  };
  try {
    for (const auto &[name, file] : options.feeds)
      add("--feed " + name + "=" + file, file);
    for (const auto &[name, file] : options.evalFeeds)
      add("--eval-feed " + name + "=" + file, file);
    for (const std::string &file : dataFiles(options, options.eval))
      add("--data " + file, file);
  } catch (const RuntimeError &e) {
    die(e.what());
  }
  return agreement;
}

/// One executor per device, each with its own memory; devices of
/// multi-device plans talk through the in-process communicator.
void createDevices(Run &run, int cores) {
  const Options &options = run.options;
  run.deviceCount = run.plan.devices_size();
  run.threadsPerDevice = options.threads > 0   ? options.threads
                         : run.deviceCount > 1 ? 1
                                               : std::max(cores, 1);
  if (options.threads == 0 && launchedByMpirun())
    run.threadsPerDevice = mpiThreadsPerDevice(run.deviceCount, cores);
  omp_set_num_threads(run.threadsPerDevice);
  // dp and cdp reduce even on one device (a communicator of one), and their
  // last reductions are applied after training: they run as device threads.
  run.multiDevice =
      run.deviceCount > 1 || plan::traitsOf(run.plan).dataParallel;
  run.mpi = launchedByMpirun();
  if (run.mpi) {
    std::string error;
    run.fabric = createMpiFabric(run.deviceCount,
                                 static_cast<double>(options.commTimeout),
                                 agreementOf(run), error);
    if (!run.fabric && error.empty())
      std::exit(1); // the root says why
    if (!run.fabric)
      die(error);
    mpiFabric = run.fabric.get();
    run.multiDevice = true;
  } else if (run.multiDevice) {
    run.fabric = std::make_unique<LocalFabric>(run.deviceCount);
  }
  for (int d = 0; d < run.deviceCount; ++d)
    run.executors.push_back(
        run.fabric && !run.fabric->owns(d)
            ? std::unique_ptr<Executor>()
            : std::make_unique<Executor>(run.plan, run.threadsPerDevice, d,
                                         run.fabric ? &run.fabric->endpoint(d)
                                                    : nullptr));
  if (run.multiDevice && !options.profile.empty())
    die("--profile is not available yet for dp, cdp and multi-device plans "
        "(" +
        run.plan.strategy() + ")");
  if (run.deviceCount > 1 && !options.saveOutputs.empty() &&
      plan::traitsOf(run.plan).pipelined)
    die("--save-outputs is not available for pipeline plans (" +
        run.plan.strategy() + "): the outputs are spread over stash slots");
  run.slots = std::max(run.plan.micro_batches(), 1);
  if (!options.reportSvg.empty() && options.report.empty())
    die("--report-svg needs --report FILE.json");
  if (!options.compareReport.empty() && options.reportSvg.empty())
    die("--compare-report needs --report-svg FILE.svg");
  if (!options.compareReport.empty())
    run.comparison = readComparison(options.compareReport);
  if (!options.trace.empty()) {
    run.trace = std::make_unique<TraceRecorder>(run.deviceCount);
    for (auto &executor : run.executors)
      if (executor)
        executor->setTrace(run.trace.get());
    if (run.fabric) { // every process's clock starts together
      run.fabric->barrier();
      run.trace->restartClock();
    }
  }
}

/// --feed: each file bound to the plan input it names.
/// `value` as the message prints it: nan, inf or -inf.
std::string nonFiniteName(float value) {
  return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
}

/// Fed float32 data must be finite: a NaN would train into a NaN model.
void checkFinite(const std::string &flag, const std::string &name,
                 const std::string &file, const Array &array) {
  if (array.dtype != plan::F32)
    return;
  const float *values = reinterpret_cast<const float *>(array.bytes.data());
  for (int64_t i = 0; i < array.numel(); ++i)
    if (!std::isfinite(values[i]))
      die(flag + " " + name + "=" + file + ": element " + std::to_string(i) +
          " is " + nonFiniteName(values[i]) +
          "; the data must be finite (--allow-nonfinite trains on it "
          "anyway)");
}

/// After training: a parameter or buffer that ended non-finite stops the
/// run before anything is written (a NaN the loss never saw, behind a
/// ReLU, would otherwise be saved as the trained model).
void checkTrainedFinite(Run &run) {
  Executor &executor = run.first();
  for (const plan::Tensor &t : run.plan.tensors()) {
    bool trained =
        (t.kind() == plan::PARAM && t.trainable()) || t.kind() == plan::BUFFER;
    int64_t bad = trained ? executor.firstNonFiniteElement(t.id()) : -1;
    if (bad >= 0)
      die("after " + std::to_string(run.total) +
          " steps the trained parameter '" + t.name() +
          "' holds a non-finite value (" +
          nonFiniteName(executor.stageOut(t.id()).view().f32()[bad]) +
          "); nothing was written");
  }
}

/// The arrays `given` names (--feed or --eval-feed, `flag`), each checked
/// against its input; every input must be given when any is.
std::map<int, Array>
readFeeds(Run &run,
          const std::vector<std::pair<std::string, std::string>> &given,
          const std::string &flag) {
  const plan::Plan &plan = run.plan;
  std::map<std::string, int> inputByName;
  for (int id : plan.inputs())
    inputByName[plan.tensors(id).name()] = id;
  std::map<int, Array> feeds;
  for (auto &[name, file] : given) {
    auto it = inputByName.find(name);
    if (it != inputByName.end() && feeds.count(it->second))
      die(flag + " names input '" + name + "' twice");
    if (it == inputByName.end()) {
      std::string names;
      for (auto &[n, id] : inputByName)
        names += (names.empty() ? "" : ", ") + n;
      die(flag + " names '" + name +
          "', which is not an input of the plan (inputs: " + names + ")");
    }
    Array array;
    try {
      array = readArray(file);
    } catch (const RuntimeError &e) {
      die(flag + " " + name + "=" + e.what());
    }
    if (static_cast<int64_t>(array.bytes.size()) > run.options.maxTensorBytes)
      die(flag + " " + name + "=" + file + ": " +
          std::to_string(array.bytes.size()) +
          " bytes, more than --max-tensor-bytes");
    const plan::Tensor &t = plan.tensors(it->second);
    checkFeed(flag, name, file, array, run.local().view(it->second),
              t.batch_axis());
    if (!run.options.allowNonfinite)
      checkFinite(flag, name, file, array);
    feeds[it->second] = std::move(array);
  }
  for (auto &[name, id] : inputByName)
    if (!given.empty() && !feeds.count(id))
      die("input '" + name + "' is not fed (add " + flag + " " + name +
          "=FILE)");
  return feeds;
}

/// The samples `feeds` hold along their inputs' batch axes, which must
/// agree (refused in one line naming `flag` otherwise), and the plan's
/// batch along them; {-1, -1} when no input has a batch axis.
std::pair<int64_t, int64_t> feedSamples(const Run &run,
                                        const std::map<int, Array> &feeds,
                                        const std::string &flag) {
  int64_t samples = -1, batch = -1;
  for (auto &[id, array] : feeds) {
    const plan::Tensor &t = run.plan.tensors(id);
    if (t.batch_axis() < 0)
      continue;
    int64_t count = array.shape[t.batch_axis()];
    if (samples >= 0 && count != samples)
      die(flag +
          ": the inputs hold different numbers of samples along "
          "their batch axes (" +
          std::to_string(samples) + " and " + std::to_string(count) + ")");
    samples = count;
    batch = t.shape(t.batch_axis());
  }
  return {samples, batch};
}

/// Training feeds pair row i of every input: their lengths must agree
/// (each wrapping modulo its own length would pair other rows).
void bindFeeds(Run &run) {
  run.feeds = readFeeds(run, run.options.feeds, "--feed");
  if (run.plan.inference())
    return; // inference checks its own feeds (runInference)
  feedSamples(run, run.feeds, "--feed");
}

/// --eval-feed's arrays: the same number of samples along every input's
/// batch axis, a whole number of the plan's batches (the loss is a mean
/// per batch, so every sample must sit in a full one).
void bindEvalFeeds(Run &run) {
  run.evalFeeds = readFeeds(run, run.options.evalFeeds, "--eval-feed");
  auto [samples, batch] = feedSamples(run, run.evalFeeds, "--eval-feed");
  if (samples >= 0 && samples % batch != 0)
    die("--eval-feed: " + std::to_string(samples) +
        " held-out samples are not a whole number of the plan's batches of " +
        std::to_string(batch) +
        " (the test loss is a mean per batch: every sample must sit in a "
        "full one)");
  run.evalSamples = std::max<int64_t>(samples, 0);
}

/// --data: the IDX data set, checked against the plan's image input.
void loadDataset(Run &run) {
  const Options &options = run.options;
  const plan::Plan &plan = run.plan;
  if (options.data.empty())
    return;
  std::string dir = dataFolder(options);
  if (plan.labels() < 0)
    die("--data needs a plan compiled with a loss on labels "
        "(--loss softmax-cross-entropy)");
  for (int id : plan.inputs())
    if (id != plan.labels())
      run.imageInput = run.imageInput < 0 ? id : -2;
  if (run.imageInput < 0)
    die("--data needs a plan with exactly one input besides the labels");
  run.train = readIdxSplit(dir, "train", options.maxTensorBytes);
  if (options.eval) {
    run.test = readIdxSplit(dir, "t10k", options.maxTensorBytes);
    if (run.test.images.shape[1] != run.train.images.shape[1])
      die("--data: the test split's images have " +
          std::to_string(run.test.images.shape[1]) +
          " pixels, the training split's " +
          std::to_string(run.train.images.shape[1]));
  }
  const TensorView &image = run.local().view(run.imageInput);
  int64_t pixels = image.numel() / image.shape[0];
  if (pixels != run.train.images.shape[1] ||
      plan.tensors(run.imageInput).batch_axis() != 0)
    die("--data: the model's input '" + plan.tensors(run.imageInput).name() +
        "' takes " + std::to_string(pixels) +
        " values per sample along axis 0; the "
        "data set has " +
        std::to_string(run.train.images.shape[1]) + " pixels per image");
}

/// --dump-grads and --save-outputs: the last step's gradients and outputs.
void writeStepOutputs(Run &run) {
  const Options &options = run.options;
  Executor &executor = run.first();
  if (!options.dumpGrads.empty()) {
    std::vector<std::pair<std::string, int>> tensors = executor.gradients();
    writeTensors(options.dumpGrads, executor, tensors);
  }
  if (!options.saveOutputs.empty()) {
    std::vector<HostTensor> staged;
    staged.reserve(run.plan.outputs_size()); // the views point into them
    std::vector<std::pair<std::string, TensorView>> views;
    for (const plan::Output &output : run.plan.outputs()) {
      auto gathered = run.gatheredOutputs.find(output.tensor());
      if (gathered != run.gatheredOutputs.end()) {
        Array &rows = gathered->second;
        views.emplace_back(output.name(),
                           TensorView{rows.bytes.data(), rows.shape, rows.dtype,
                                      MemorySpace::Host});
        continue;
      }
      staged.push_back(executor.stageOut(output.tensor()));
      views.emplace_back(output.name(), staged.back().view());
    }
    writeFolder(options.saveOutputs, views);
  }
  run.stepOutputsWritten = true;
}

/// What an evaluation measured: the mean test loss over full batches, and
/// the accuracy of a classifier (negative: not measured).
struct Evaluation {
  double loss = -1, accuracy = -1;
};

/// One line of --metrics: the step, its loss and speed, and the test loss
/// and accuracy where they were evaluated.
void writeMetricsLine(Run &run, int64_t step, double loss, double rate,
                      const Evaluation &evaluation) {
  runtime::Json line = {
      {"step", step}, {"loss", loss}, {"samples_per_s", rate}};
  if (evaluation.loss >= 0)
    line["test_loss"] = evaluation.loss;
  if (evaluation.accuracy >= 0)
    line["accuracy"] = evaluation.accuracy;
  run.metrics.writeLine(runtime::jsonText(line));
}

/// Whether the run evaluates: --eval on --data's test split, or --eval-feed.
bool evaluates(const Run &run) {
  return (run.options.eval && !run.options.data.empty()) ||
         !run.evalFeeds.empty();
}

/// Runs the evaluation stream over `samples` held-out samples, batch by
/// batch: `stage(first)` fills the inputs with the batch starting at
/// sample `first`; `labels` (may be null) are the class of each sample for
/// the accuracy. The loss averages full batches only.
Evaluation evaluateBatches(Run &run, int64_t samples,
                           const std::function<void(int64_t)> &stage,
                           const int64_t *labels) {
  Executor &executor = run.first();
  int64_t batch = run.batch, correct = 0, fullBatches = 0;
  double lossSum = 0;
  bool classifier = labels && run.plan.scores() >= 0 &&
                    executor.view(run.plan.scores()).shape.size() == 2;
  int64_t classes =
      classifier ? executor.view(run.plan.scores()).numel() / batch : 0;
  for (int64_t first = 0; first < samples; first += batch) {
    stage(first);
    executor.runEval(StepContext{0, 0, run.options.seed});
    if (run.plan.has_eval_loss() && run.plan.eval_loss() >= 0 &&
        first + batch <= samples) {
      lossSum += executor.stageOut(run.plan.eval_loss()).view().f32()[0];
      ++fullBatches;
    }
    if (!classifier)
      continue;
    HostTensor scores = executor.stageOut(run.plan.scores());
    for (int64_t j = 0; j < batch && first + j < samples; ++j) {
      const float *row = scores.view().f32() + j * classes;
      int64_t best = std::max_element(row, row + classes) - row;
      correct += best == labels[first + j];
    }
  }
  Evaluation result;
  if (fullBatches > 0)
    result.loss = lossSum / fullBatches;
  if (classifier && samples > 0)
    result.accuracy = static_cast<double>(correct) / samples;
  return result;
}

/// ", test loss L, test accuracy A" for the lines cdp-run prints.
void printEvaluation(const Evaluation &evaluation) {
  if (evaluation.accuracy >= 0)
    std::printf(", test accuracy %.4f", evaluation.accuracy);
  if (evaluation.loss >= 0)
    std::printf(", test loss %.4f", evaluation.loss);
}

/// The evaluation after an epoch (--data's test split) or after training
/// (--eval-feed's arrays).
Evaluation evaluate(Run &run) {
  Executor &executor = run.first();
  if (!run.evalFeeds.empty()) {
    const int64_t *labels = nullptr;
    auto it = run.evalFeeds.find(run.plan.labels());
    if (it != run.evalFeeds.end() && it->second.dtype == plan::I64 &&
        it->second.shape.size() == 1)
      labels = reinterpret_cast<const int64_t *>(it->second.bytes.data());
    return evaluateBatches(
        run, run.evalSamples,
        [&](int64_t first) {
          for (auto &[id, array] : run.evalFeeds)
            stageRows(executor, id, array, run.plan.tensors(id).batch_axis(),
                      first);
        },
        labels);
  }
  const int64_t *labels =
      reinterpret_cast<const int64_t *>(run.test.labels.bytes.data());
  return evaluateBatches(
      run, run.test.labels.numel(),
      [&](int64_t first) {
        stageRows(executor, run.imageInput, run.test.images, 0, first);
        stageRows(executor, run.plan.labels(), run.test.labels, 0, first);
      },
      labels);
}

/// Steps per epoch, epochs and the total; the report, which covers the
/// first --report-steps of them.
void countSteps(Run &run) {
  const Options &options = run.options;
  const plan::Plan &plan = run.plan;
  for (int id : plan.inputs())
    if (plan.tensors(id).batch_axis() >= 0) {
      run.batch = plan.tensors(id).shape(plan.tensors(id).batch_axis());
      break;
    }
  run.perStep = run.batch * run.slots;
  run.stepsPerEpoch = options.data.empty()
                          ? options.steps
                          : run.train.labels.numel() / run.perStep;
  run.epochs = options.data.empty() ? 1 : std::max<int64_t>(options.epochs, 1);
  if (!options.data.empty() && options.steps >= 0)
    run.stepsPerEpoch = std::min(run.stepsPerEpoch, options.steps);
  if (!options.data.empty() && run.stepsPerEpoch == 0)
    die("--data: the training split has fewer samples than one step takes "
        "(" +
        std::to_string(run.perStep) + ")");
  run.total = run.stepsPerEpoch * run.epochs;
  if (!options.report.empty()) {
    int64_t covered = options.reportSteps > 0
                          ? std::min(options.reportSteps, run.total)
                          : run.total;
    run.report = std::make_unique<ReportBuilder>(plan, covered);
    for (auto &executor : run.executors)
      if (executor)
        executor->setReport(run.report.get());
  }
}

/// What a checkpoint records of this run, so that --resume continues it:
/// with the data's files as they are when training begins.
RunIdentity runIdentity(const Run &run) {
  RunIdentity identity;
  identity.planChecksum = run.planChecksum;
  identity.seed = run.options.seed;
  if (!run.options.data.empty())
    identity.data = "--data " + run.options.data;
  for (const std::string &file : dataFiles(run.options, false))
    identity.files.push_back(fingerprintFile(file));
  for (const auto &[name, file] : run.options.feeds) {
    identity.data += (identity.data.empty() ? "" : " ") +
                     std::string("--feed ") + name + "=" + file;
    identity.files.push_back(fingerprintFile(file));
  }
  return identity;
}

/// Whether --checkpoint saves before step `next`: every
/// --checkpoint-every steps, and at the end.
bool checkpointDue(const Run &run, int64_t next) {
  const Options &options = run.options;
  return !options.checkpoint.empty() &&
         (next == run.total ||
          (options.checkpointEvery > 0 && next % options.checkpointEvery == 0));
}

/// The checkpoint cuts of a run (plan::checkpointCut), computed once per
/// checkpoint by whichever device thread asks first.
class CheckpointCuts {
public:
  explicit CheckpointCuts(const plan::Plan &plan) : plan(plan) {}
  /// Where device d stops in step `next - 1` for the checkpoint before
  /// step `next`.
  int at(int64_t next, int d) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cuts.find(next);
    if (it == cuts.end()) {
      std::string error;
      std::vector<int> cut = plan::checkpointCut(plan, next, error);
      if (cut.empty())
        throw RuntimeError(error);
      it = cuts.emplace(next, std::move(cut)).first;
    }
    return it->second[d];
  }

private:
  const plan::Plan &plan;
  std::mutex mutex;
  std::map<int64_t, std::vector<int>> cuts;
};

/// Where the devices' threads meet and what they share.
struct DeviceThreads {
  const std::vector<std::vector<int64_t>> &orders;
  std::vector<float> &losses; ///< [t * N + d]
  std::atomic<int64_t> &progress;
  StepRendezvous &rendezvous;
  CheckpointCuts &cuts;
  int64_t start; ///< the first step (--resume's)
};

/// Device d's part of a multi-device run: every step (pipelines load each
/// micro-batch where a stage reads it, rows (t * M + k) * B on, the same
/// rows dp gives slot k), with the process's checkpoints, then the flush.
/// A checkpoint before step t + 1 is taken where its cut stops each device
/// in step t; a resumed run first finishes that step. Losses go to
/// `losses[t * N + d]`.
void runDevice(Run &run, int d, DeviceThreads &shared) {
  const std::vector<std::vector<int64_t>> &orders = shared.orders;
  std::vector<float> &losses = shared.losses;
  std::atomic<int64_t> &progress = shared.progress;
  const Options &options = run.options;
  const plan::Plan &plan = run.plan;
  omp_set_num_threads(run.threadsPerDevice);
  Executor &ex = *run.executors[d];
  bool pipeline = plan::traitsOf(plan).pipelined;
  int64_t slots = run.slots, batch = run.batch;
  int size = plan.devices(d).instructions_size();
  Loader loader = [&](int input, int64_t t, int64_t k,
                      const TensorView &target) {
    int64_t first = (t * slots + k) * batch;
    if (options.data.empty()) {
      copyRows(run.feeds.at(input), target, plan.tensors(input).batch_axis(),
               first);
      return;
    }
    int64_t epoch = t / run.stepsPerEpoch;
    first = ((t % run.stepsPerEpoch) * slots + k) * batch;
    copyRows(input == plan.labels() ? run.train.labels : run.train.images,
             target, 0, first, &orders[epoch]);
  };
  // Slot k = d of step t's rows (dp, cdp).
  auto stageSlot = [&](int64_t t) {
    if (options.data.empty()) {
      for (auto &[id, array] : run.feeds)
        stageRows(ex, id, array, plan.tensors(id).batch_axis(),
                  (t * slots + d) * batch);
      return;
    }
    int64_t epoch = t / run.stepsPerEpoch, s = t % run.stepsPerEpoch;
    int64_t first = (s * slots + d) * batch;
    stageRows(ex, run.imageInput, run.train.images, 0, first, &orders[epoch]);
    stageRows(ex, plan.labels(), run.train.labels, 0, first, &orders[epoch]);
  };
  // Instructions [begin, end) of step t; the step's loss once it is whole.
  auto runPart = [&](int64_t t, int begin, int end) {
    if (begin >= end)
      return;
    if (!pipeline && begin == 0)
      stageSlot(t);
    ex.runStep(StepContext{t, pipeline ? 0 : d, options.seed,
                           pipeline ? &loader : nullptr},
               InstructionRange{begin, end});
    if (end < size || (pipeline && d != plan.loss_device()))
      return;
    float loss = readLoss(plan, ex);
    for (int q = 0; q < run.deviceCount; ++q)
      if (pipeline || q == d)
        losses[t * run.deviceCount + q] = loss;
    if (!std::isfinite(loss))
      throw RuntimeError(nonFiniteLoss(plan, ex, t, loss));
    if (pipeline || d == 0)
      progress = t + 1;
  };
  ex.setTotalSteps(run.total);
  if (shared.start > 0)
    runPart(shared.start - 1, shared.cuts.at(shared.start, d), size);
  for (int64_t t = shared.start; t < run.total; ++t) {
    if (!checkpointDue(run, t + 1)) {
      runPart(t, 0, size);
      continue;
    }
    int cut = shared.cuts.at(t + 1, d);
    runPart(t, 0, cut);
    shared.rendezvous.meet(d, [&] {
      saveCheckpoint(options.checkpoint, run.checkpointScope(), run.identity,
                     t + 1);
    });
    runPart(t, cut, size);
  }
  ex.flush(run.total, &loader);
  ex.gatherOnDeviceZero();
}

/// After a multi-device run, onto the root (collective under mpirun): the
/// step losses (each written by one device), every device's send log,
/// workspace and optimizer bytes.
void gatherRunFacts(Run &run, std::vector<float> &losses) {
  std::vector<double> all(losses.begin(), losses.end());
  run.fabric->sumOntoRoot(all);
  std::copy(all.begin(), all.end(), losses.begin());
  run.sendLogs = run.fabric->gatherSendLogs();
  run.workspaceBytes.assign(run.deviceCount, 0.0);
  run.optimizerBytes.assign(run.deviceCount, 0.0);
  for (int d = 0; d < run.deviceCount; ++d)
    if (run.executors[d]) {
      run.workspaceBytes[d] = run.executors[d]->workspaceBytes();
      run.optimizerBytes[d] = run.executors[d]->optimizerBytes();
    }
  run.fabric->sumOntoRoot(run.workspaceBytes);
  run.fabric->sumOntoRoot(run.optimizerBytes);
  if (run.report && run.mpi) {
    std::vector<double> series = run.report->exportSeries();
    run.fabric->sumOntoRoot(series);
    if (run.root())
      run.report->importSeries(series);
  }
  if (run.trace && run.mpi) {
    std::vector<std::string> parts =
        run.fabric->gatherOntoRoot(run.trace->exportDevices());
    for (size_t r = 1; r < parts.size(); ++r)
      run.trace->importDevices(parts[r]);
  }
}

/// Every device of this process on a thread of its own from step `start`,
/// with a progress line on a terminal; then (on the root) the metrics and
/// the summary line.
void runDevices(Run &run, int64_t start) {
  const Options &options = run.options;
  // Each epoch's order, precomputed: device threads read it freely.
  std::vector<std::vector<int64_t>> orders;
  if (!options.data.empty())
    for (int64_t e = 0; e < run.epochs; ++e)
      orders.push_back(
          shuffledOrder(options.seed, e, run.train.labels.numel()));
  int N = run.deviceCount;
  std::vector<float> losses(run.total * N, 0.0f);
  std::atomic<int64_t> progress{start};
  std::mutex errorMutex;
  std::string firstError;
  auto started = std::chrono::steady_clock::now();
  int owned = 0;
  for (int d = 0; d < N; ++d)
    owned += run.fabric->owns(d);
  StepRendezvous rendezvous(owned, *run.fabric);
  CheckpointCuts cuts(run.plan);
  DeviceThreads shared{orders, losses, progress, rendezvous, cuts, start};
  std::vector<std::thread> threads;
  // The system may refuse a thread (more devices than it allows): the
  // devices already started are stopped and joined before the error goes
  // on, or their still-joinable threads would abort the process.
  auto stopStarted = [&](const std::string &why) {
    for (int d = 0; d < N; ++d)
      if (run.fabric->owns(d))
        run.fabric->endpoint(d).abort();
    rendezvous.abandon(why);
    for (std::thread &thread : threads)
      thread.join();
  };
  for (int d = 0; d < N; ++d)
    if (run.fabric->owns(d))
      try {
        threads.emplace_back([&, d] {
          try {
            runDevice(run, d, shared);
            run.fabric->setParked(d, true); // done: it sends no more
          } catch (const RuntimeError &e) {
            std::lock_guard<std::mutex> lock(errorMutex);
            if (firstError.empty())
              firstError = e.what();
            if (run.mpi) // every process ends, with this one's reason
              die("device " + std::to_string(d) + ": " + e.what());
            run.fabric->endpoint(d).abort();
            rendezvous.abandon(e.what());
          }
        });
      } catch (const std::system_error &e) {
        stopStarted(e.what());
        throw;
      }
  while (run.terminal && run.root()) {
    int64_t done = progress;
    std::fprintf(stderr, "\r%s on %d devices: step %lld/%lld   ",
                 run.plan.strategy().c_str(), N, (long long)done,
                 (long long)run.total);
    if (done >= run.total || !firstError.empty())
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (std::thread &thread : threads)
    thread.join();
  if (run.terminal && run.root())
    std::fprintf(stderr, "\n");
  if (!firstError.empty())
    die(firstError);
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  gatherRunFacts(run, losses);
  if (!run.root())
    return;
  Evaluation evaluation;
  if (evaluates(run)) {
    writeStepOutputs(run); // before the evaluation reuses the buffers
    evaluation = evaluate(run);
  }
  double rate = elapsed > 0 ? (run.total - start) * run.perStep / elapsed : 0.0;
  for (int64_t t = start; t < run.total && run.metrics.isOpen(); ++t) {
    double loss = 0;
    for (int d = 0; d < N; ++d)
      loss += losses[t * N + d];
    writeMetricsLine(run, t, loss / N, rate,
                     t + 1 == run.total ? evaluation : Evaluation());
  }
  std::printf("%s on %d devices: %lld steps", run.plan.strategy().c_str(), N,
              (long long)run.total);
  if (run.total > start) {
    // As the single-device epoch line: the mean over the last epoch's steps
    // this run made (with --feed, over all of them).
    int64_t from = std::max(start, run.total - run.stepsPerEpoch);
    double meanLoss = 0;
    for (int64_t t = from; t < run.total; ++t)
      for (int d = 0; d < N; ++d)
        meanLoss += losses[t * N + d] / N;
    std::printf(", loss %.4f", meanLoss / (run.total - from));
  }
  std::printf(", %.1f s", elapsed);
  printEvaluation(evaluation);
  std::printf("\n");
}

/// Stages the inputs of slot `k` of step `step` (with --data, rows of
/// `order`, the shuffle of the step's epoch).
void stageSlot(Run &run, int64_t step, int64_t k,
               const std::vector<int64_t> &order) {
  Executor &executor = run.first();
  if (run.options.data.empty()) {
    for (auto &[id, array] : run.feeds)
      stageRows(executor, id, array, run.plan.tensors(id).batch_axis(),
                (step * run.slots + k) * run.batch);
    return;
  }
  int64_t first = ((step % run.stepsPerEpoch) * run.slots + k) * run.batch;
  stageRows(executor, run.imageInput, run.train.images, 0, first, &order);
  stageRows(executor, run.plan.labels(), run.train.labels, 0, first, &order);
}

/// One device's step `step`: its slots one after another, the step's loss
/// the mean over them (a non-finite slot stops the run right there). On a
/// GPU the next slot of the epoch is staged while one runs; `staged` says
/// whether slot 0 of `step` already was.
float runSingleStep(Run &run, int64_t step, const std::vector<int64_t> &order,
                    bool &staged) {
  Executor &executor = run.first();
  float stepLoss = 0.0f;
  for (int64_t k = 0; k < run.slots; ++k) {
    if (!staged)
      stageSlot(run, step, k, order);
    // Not across an epoch's end: its evaluation stages inputs of its own,
    // and the next epoch's order is not drawn yet.
    int64_t nextStep = k + 1 < run.slots ? step : step + 1,
            nextSlot = k + 1 < run.slots ? k + 1 : 0;
    staged = executor.stagesAhead() && nextStep < run.total &&
             (nextStep == step || nextStep % run.stepsPerEpoch != 0);
    executor.runStep(StepContext{step, k, run.options.seed}, {}, [&] {
      if (staged)
        stageSlot(run, nextStep, nextSlot, order);
    });
    float slotLoss = readLoss(run.plan, executor);
    stepLoss += slotLoss / run.slots;
    if (!std::isfinite(slotLoss))
      return slotLoss;
  }
  return stepLoss;
}

/// The line of an evaluation after the run's steps (not per epoch).
void printHeldOut(const Run &run, const Evaluation &evaluation) {
  std::printf("after %lld steps", (long long)run.total);
  if (run.evalSamples > 0)
    std::printf(", held-out %lld samples", (long long)run.evalSamples);
  printEvaluation(evaluation);
  std::printf("\n");
}

/// One device, from `step` (0, or --resume's): per step the metrics line,
/// progress on a terminal, checkpoints, and a line per epoch with --data.
void runSingleDevice(Run &run, int64_t step) {
  const Options &options = run.options;
  const int64_t step0 = step;
  std::vector<int64_t> order;
  int64_t shuffledEpoch = -1;
  auto started = std::chrono::steady_clock::now();
  double epochLoss = 0;
  int64_t epochSteps = 0;
  bool staged = false; // the step's first slot, while the step before ran
  for (; step < run.total; ++step) {
    int64_t epoch = step / run.stepsPerEpoch, s = step % run.stepsPerEpoch;
    if (!options.data.empty() && epoch != shuffledEpoch) {
      order = shuffledOrder(options.seed, epoch, run.train.labels.numel());
      shuffledEpoch = epoch;
    }
    if (s == 0) {
      started = std::chrono::steady_clock::now();
      epochLoss = 0;
      epochSteps = 0;
    }
    auto stepStart = std::chrono::steady_clock::now();
    float loss = runSingleStep(run, step, order, staged);
    epochLoss += loss;
    ++epochSteps;
    if (!std::isfinite(loss))
      die(nonFiniteLoss(run.plan, run.first(), step, loss));
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - stepStart)
                         .count();
    double rate = seconds > 0 ? run.perStep / seconds : 0.0;
    bool last = s + 1 == run.stepsPerEpoch;
    Evaluation evaluation;
    if (last && evaluates(run)) {
      if (step + 1 == run.total)
        writeStepOutputs(run); // before the evaluation reuses the buffers
      evaluation = evaluate(run);
    }
    if (run.metrics.isOpen())
      writeMetricsLine(run, step, loss, rate, evaluation);
    if (run.terminal && (s % 10 == 0 || last))
      std::fprintf(
          stderr,
          "\repoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f samples/s   ",
          (long long)epoch + 1, (long long)run.epochs, (long long)s + 1,
          (long long)run.stepsPerEpoch, loss, rate);
    if (checkpointDue(run, step + 1))
      saveCheckpoint(options.checkpoint, run.checkpointScope(), run.identity,
                     step + 1);
    if (last && !options.data.empty()) {
      double elapsed = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - started)
                           .count();
      if (run.terminal)
        std::fprintf(stderr, "\n");
      // The epoch's mean loss (over the steps this run made of it).
      std::printf("epoch %lld: %lld steps, loss %.4f, %.1f s",
                  (long long)epoch + 1, (long long)run.stepsPerEpoch,
                  epochLoss / epochSteps, elapsed);
      printEvaluation(evaluation);
      std::printf("\n");
      std::fflush(stdout);
    } else if (last && evaluates(run)) {
      // --feed training: one evaluation, after the last step.
      printHeldOut(run, evaluation);
    }
  }
  // --steps 0, or a resume at the end: the parameters as they are.
  if (step0 == run.total && evaluates(run))
    printHeldOut(run, evaluate(run));
  if (run.terminal && options.data.empty())
    std::fprintf(stderr, "\n");
  // A resume at the end still leaves a checkpoint there.
  if (!options.checkpoint.empty() && step0 == run.total)
    saveCheckpoint(options.checkpoint, run.checkpointScope(), run.identity,
                   run.total);
}

/// Appends rows [0, count) of `output` (a batch along `axis`) to
/// `gathered`, which holds `total` rows along that axis when complete;
/// `first` is where these rows go.
void gatherRows(const TensorView &output, int64_t axis, int64_t first,
                int64_t count, int64_t total, Array &gathered) {
  int64_t width = plan::dtypeSize(output.dtype), outer = 1, inner = width;
  for (int64_t d = 0; d < axis; ++d)
    outer *= output.shape[d];
  for (size_t d = axis + 1; d < output.shape.size(); ++d)
    inner *= output.shape[d];
  if (gathered.bytes.empty()) {
    gathered.dtype = output.dtype;
    gathered.shape = output.shape;
    gathered.shape[axis] = total;
    gathered.bytes.resize(outer * total * inner);
  }
  int64_t rows = output.shape[axis];
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(gathered.bytes.data() + (o * total + first) * inner,
                static_cast<const char *>(output.data) + o * rows * inner,
                count * inner);
}

/// An inference plan over its feeds. A feed with more (or fewer) samples
/// along its input's batch axis than the plan's batch runs batch after
/// batch, the last one completed with samples from the start; the outputs
/// with a batch axis are gathered for --save-outputs, one row per sample.
void runInference(Run &run) {
  Executor &executor = run.first();
  bool exact = true;
  for (auto &[id, array] : run.feeds)
    exact &= array.shape == executor.view(id).shape;
  if (exact) { // one batch, each feed whole (empty tensors included)
    for (auto &[id, array] : run.feeds)
      stageRows(executor, id, array, -1, 0);
    executor.runStep(StepContext{0, 0, run.options.seed});
    return;
  }
  auto [samples, batch] = feedSamples(run, run.feeds, "--feed");
  if (samples <= 0)
    die("--feed: an inference plan's feeds hold no samples along their "
        "batch axes");
  for (int64_t first = 0; first < samples; first += batch) {
    for (auto &[id, array] : run.feeds)
      stageRows(executor, id, array, run.plan.tensors(id).batch_axis(), first);
    executor.runStep(StepContext{0, 0, run.options.seed});
    if (run.options.saveOutputs.empty())
      continue;
    for (const plan::Output &output : run.plan.outputs())
      if (output.batch_axis() >= 0) {
        HostTensor values = executor.stageOut(output.tensor());
        gatherRows(values.view(), output.batch_axis(), first,
                   std::min(batch, samples - first), samples,
                   run.gatheredOutputs[output.tensor()]);
      }
  }
}

/// Training, on one device or several, from the start or --resume.
void train(Run &run) {
  countSteps(run);
  if (!run.options.checkpoint.empty() && run.root())
    try {
      lockCheckpointFolder(run.options.checkpoint);
    } catch (const RuntimeError &e) {
      die(e.what());
    }
  if (!run.options.checkpoint.empty() || !run.options.resume.empty())
    run.identity = runIdentity(run);
  int64_t step = 0;
  if (!run.options.resume.empty()) {
    try {
      step = loadCheckpoint(run.options.resume, run.checkpointScope(),
                            run.identity);
    } catch (const RuntimeError &e) {
      die(e.what());
    }
    if (step > run.total)
      die("--resume: the checkpoint is at step " + std::to_string(step) +
          ", past the " + std::to_string(run.total) + " steps asked for");
  }
  if (!run.options.metrics.empty() && run.root())
    run.metrics.open(run.options.metrics, step);
  if (run.multiDevice)
    runDevices(run, step);
  else
    runSingleDevice(run, step);
}

/// --profile: every instruction's mean time per step over the steps after
/// the first (setup) when more ran.
void writeProfile(Run &run) {
  const Options &options = run.options;
  std::vector<double> seconds = run.first().profileSeconds();
  const plan::Device &device = run.plan.devices(0);
  int64_t steps = std::max<int64_t>(1, run.first().stepsRun());
  runtime::Json instructions = runtime::Json::array();
  for (size_t i = 0; i < seconds.size(); ++i)
    instructions.push_back({{"index", i},
                            {"op", device.instructions(i).op()},
                            {"location", device.instructions(i).location()},
                            {"ms", seconds[i] * 1e3}});
  runtime::Json profile = {{"schema", "cdp-profile/1"},
                           {"steps", steps},
                           {"instructions", std::move(instructions)}};
  writeOutput(options.profile, runtime::jsonText(profile, 1) + "\n");
}

/// --report (with the bytes the communicator logged), --report-svg.
void writeReport(Run &run) {
  const Options &options = run.options;
  ReportBuilder &report = *run.report;
  for (int d = 0; d < static_cast<int>(run.sendLogs.size()); ++d)
    for (const Communicator::SendRecord &record : run.sendLogs[d])
      report.sent(d, record.tau, record.bytes, record.collective);
  for (int d = 0; d < run.deviceCount; ++d) {
    bool gathered = d < static_cast<int>(run.workspaceBytes.size());
    report.setWorkspace(d, gathered
                               ? static_cast<int64_t>(run.workspaceBytes[d])
                               : run.executors[d]->workspaceBytes());
    report.setOptimizer(d, gathered
                               ? static_cast<int64_t>(run.optimizerBytes[d])
                               : run.executors[d]->optimizerBytes());
  }
  std::string json = report.json();
  writeOutput(options.report, json);
  if (options.reportSvg.empty())
    return;
  std::string error;
  std::optional<runtime::ReportCurves> curves =
      runtime::readReportCurves(json, fileName(options.report), error);
  if (!curves)
    die("the run's report does not read back: " + error);
  writeOutput(
      options.reportSvg,
      runtime::reportSvg(*curves, run.comparison ? &*run.comparison : nullptr));
}

/// --save-onnx: the original model with the trained parameters and
/// buffers as its initializers; --save-onnx-eval (`inference`): the same
/// in inference mode.
void saveOnnx(Run &run, const std::string &path, bool inference) {
  onnx::ModelProto model;
  if (!model.ParseFromString(run.plan.source_model()))
    die("the plan holds no readable ONNX model to save into");
  std::map<std::string, int> byName;
  for (const plan::Tensor &t : run.plan.tensors())
    if (t.kind() == plan::PARAM || t.kind() == plan::BUFFER)
      byName[t.name()] = t.id();
  for (onnx::TensorProto &initializer :
       *model.mutable_graph()->mutable_initializer()) {
    auto it = byName.find(initializer.name());
    if (it == byName.end())
      continue;
    HostTensor trained = run.first().stageOut(it->second);
    const TensorView &view = trained.view();
    initializer.clear_float_data();
    initializer.clear_external_data();
    initializer.set_data_location(onnx::TensorProto::DEFAULT);
    initializer.set_raw_data(view.data,
                             view.numel() * plan::dtypeSize(view.dtype));
  }
  if (inference)
    if (std::string problem = runtime::toInferenceMode(model); !problem.empty())
      die("--save-onnx-eval: " + problem);
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    die(path + ": the model does not serialize (over 2 GiB?)");
  writeOutput(path, bytes);
}

/// Everything the run writes after it ends.
void writeOutputs(Run &run) {
  const Options &options = run.options;
  Executor &executor = run.first();
  if (run.training)
    checkTrainedFinite(run);
  run.metrics.close();
  if (!options.profile.empty())
    writeProfile(run);
  if (run.trace)
    writeOutput(
        options.trace,
        run.trace->json(run.plan.has_schedule()
                            ? std::max<int64_t>(run.plan.schedule().cycle(), 1)
                            : 1));
  // Training runs only: --report on a forward-only plan was refused first.
  if (run.report)
    writeReport(run);
  if (!options.dumpParams.empty()) {
    std::vector<std::pair<std::string, int>> tensors;
    for (const plan::Tensor &t : run.plan.tensors())
      if ((t.kind() == plan::PARAM && t.trainable()) ||
          t.kind() == plan::BUFFER)
        tensors.emplace_back(t.name(), t.id());
    writeTensors(options.dumpParams, executor, tensors);
  }
  if (!run.stepOutputsWritten)
    writeStepOutputs(run);
  if (!options.saveOnnx.empty())
    saveOnnx(run, options.saveOnnx, /*inference=*/false);
  if (!options.saveOnnxEval.empty())
    saveOnnx(run, options.saveOnnxEval, /*inference=*/true);
}

/// Before any work: no output names an input, and every output's folder
/// exists.
void checkOutputPaths(const Options &options) {
  std::vector<std::string> inputs{options.plan, options.compareReport};
  for (const auto &[name, file] : options.feeds)
    inputs.push_back(file);
  for (const auto &[name, file] : options.evalFeeds)
    inputs.push_back(file);
  for (const char *split : {"train", "t10k"})
    if (!options.data.empty())
      try {
        for (const std::string &file :
             idxSplitFiles(dataFolder(options), split))
          inputs.push_back(file);
      } catch (const RuntimeError &) {
        // Missing: loading the data says so.
      }
  std::error_code ec;
  if (!options.resume.empty())
    for (const auto &entry :
         std::filesystem::directory_iterator(options.resume, ec))
      inputs.push_back(entry.path().string());
  for (auto [flag, path] : {std::pair<const char *, const std::string *>{
                                "--metrics", &options.metrics},
                            {"--save-onnx", &options.saveOnnx},
                            {"--save-onnx-eval", &options.saveOnnxEval},
                            {"--report", &options.report},
                            {"--report-svg", &options.reportSvg},
                            {"--trace", &options.trace},
                            {"--profile", &options.profile}}) {
    std::string problem =
        checkOutputPath(flag, *path, inputs,
                        /*replaced=*/std::string(flag) != "--metrics");
    if (!problem.empty())
      die(problem);
  }
  auto dumped = [](const std::string &file) {
    return file == "index.json" ||
           (file.size() > 4 && file.compare(file.size() - 4, 4, ".npy") == 0);
  };
  for (auto [flag, path] : {std::pair<const char *, const std::string *>{
                                "--dump-params", &options.dumpParams},
                            {"--dump-grads", &options.dumpGrads},
                            {"--save-outputs", &options.saveOutputs},
                            {"--checkpoint", &options.checkpoint}}) {
    bool replaced = std::string(flag) != "--checkpoint";
    std::string problem = checkOutputFolder(flag, *path, replaced);
    if (problem.empty() && replaced)
      problem = checkReplaceableFolder(flag, *path, dumped);
    if (!problem.empty())
      die(problem);
  }
}

} // namespace

int main(int argc, char **argv) {
  Options options = parseArguments(argc, argv);
  checkOutputPaths(options);
  plan::Plan plan;
  Run run(options, plan);
  readCheckedPlan(options, plan, run.planChecksum);
  run.training = !plan.inference();
  int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  omp_set_num_threads(options.threads > 0 ? options.threads
                                          : std::max(cores, 1));
  try {
    createDevices(run, cores);
    bindFeeds(run);
    bindEvalFeeds(run);
    loadDataset(run);
    if (!options.profile.empty())
      run.first().enableProfiling();
    run.terminal = isatty(2);
    if (!run.training) {
      runInference(run);
    } else {
      train(run);
    }
    if (run.root())
      writeOutputs(run);
  } catch (const RuntimeError &e) {
    die(e.what());
  } catch (const std::bad_alloc &) {
    die("out of memory");
  } catch (const std::system_error &e) {
    // Thread creation, for one: a plan of more devices than the system
    // gives threads.
    die(std::string("the system refused: ") + e.what());
  }
  return 0;
}
