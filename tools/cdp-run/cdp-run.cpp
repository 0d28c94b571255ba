//===- cdp-run.cpp - run a cdp plan ---------------------------------------===//
//
// Loads a plan artefact, feeds it data (--feed files or an IDX data set),
// trains for --steps or --epochs, and writes what the user asked for:
// metrics, parameters, gradients, outputs, the trained ONNX model. Every
// error is one line, `cdp-run: error: ...`, with exit status 1.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Checkpoint.h"
#include "cdp/Runtime/Data.h"
#include "cdp/Runtime/Executor.h"
#include "cdp/Runtime/Report.h"

#include <omp.h>
#include <onnx/onnx_pb.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace cdp;
using namespace cdp::runtime;

namespace {

[[noreturn]] void die(const std::string &message) {
  std::cerr << "cdp-run: error: " << message << "\n";
  std::exit(1);
}

struct Options {
  std::string plan;
  std::vector<std::pair<std::string, std::string>> feeds;
  std::string data;
  int64_t steps = -1, epochs = -1;
  uint64_t seed = 0;
  bool eval = false;
  int threads = 0;
  std::string metrics, dumpParams, dumpGrads, saveOutputs, saveOnnx;
  std::string checkpoint, resume, profile;
  std::string report, reportSvg, compareReport, trace;
  int64_t reportSteps = -1;
  int64_t checkpointEvery = 0;
  int64_t maxTensorBytes = int64_t(16) << 30;
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

Options parseArguments(int argc, char **argv) {
  Options o;
  std::vector<Flag> flags = {
      {"--feed", "NAME=FILE",
       "Feed graph input NAME from FILE (.npy or ONNX TensorProto .pb); "
       "repeatable. Slot k of step t takes entries [(t*K+k)*B, (t*K+k+1)*B) "
       "along the input's batch axis, modulo its length",
       [&](const std::string &v) {
         size_t eq = v.find('=');
         if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
           die("--feed takes NAME=FILE, got '" + v + "'");
         o.feeds.emplace_back(v.substr(0, eq), v.substr(eq + 1));
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
      {"--eval", nullptr, "Report accuracy on the test split after each epoch",
       [&](const std::string &) { o.eval = true; }},
      {"--threads", "T",
       "oneDNN/OpenMP threads per device (default: all cores for one device)",
       [&](const std::string &v) {
         o.threads = parseCount("--threads", v, 1);
       }},
      {"--metrics", "FILE",
       "JSON lines, one per step: step, loss, samples_per_s (and accuracy)",
       [&](const std::string &v) { o.metrics = v; }},
      {"--dump-params", "DIR",
       "Write every trainable parameter and buffer after the run (.npy + "
       "index.json)",
       [&](const std::string &v) { o.dumpParams = v; }},
      {"--dump-grads", "DIR",
       "Write the loss gradients the last update applied (.npy + index.json)",
       [&](const std::string &v) { o.dumpGrads = v; }},
      {"--save-outputs", "DIR", "Write the graph outputs of the last step",
       [&](const std::string &v) { o.saveOutputs = v; }},
      {"--save-onnx", "FILE",
       "Write the original model with the trained parameters and buffers",
       [&](const std::string &v) { o.saveOnnx = v; }},
      {"--checkpoint", "DIR",
       "Save parameters, buffers and optimizer state to DIR (at the end, or "
       "every --checkpoint-every steps)",
       [&](const std::string &v) { o.checkpoint = v; }},
      {"--checkpoint-every", "N",
       "Checkpoint every N steps (default: at the end)",
       [&](const std::string &v) {
         o.checkpointEvery = parseCount("--checkpoint-every", v, 1);
       }},
      {"--resume", "DIR",
       "Continue from a checkpoint of the same plan; --steps/--epochs count "
       "from the start of training, so the result is bit-identical to an "
       "uninterrupted run",
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
    std::exit(0);
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h")
      help();
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
  }
  if (o.plan.empty())
    die("no plan given (usage: cdp-run MODEL.cdp [options])");
  return o;
}

void makeDirectory(const std::string &dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    die(dir + ": cannot create: " + std::strerror(errno));
}

std::string jsonString(const std::string &text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

/// Writes views as .npy files plus index.json mapping ONNX names to files.
void writeFolder(
    const std::string &dir,
    const std::vector<std::pair<std::string, TensorView>> &tensors) {
  makeDirectory(dir);
  FileNamer namer;
  std::ofstream index(dir + "/index.json");
  index << "{";
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string file = namer.name(tensors[i].first) + ".npy";
    writeNpy(dir + "/" + file, tensors[i].second);
    index << (i ? ",\n " : "\n ") << jsonString(tensors[i].first) << ": "
          << jsonString(file);
  }
  index << "\n}\n";
  if (!index)
    die(dir + "/index.json: write failed");
}

/// Copies slot rows of `source` into the input tensor: along the batch axis,
/// entry j of the slot is source entry (first + j) modulo its length.
void copyRows(const Array &source, const TensorView &target, int64_t batchAxis,
              int64_t first, const std::vector<int64_t> *order = nullptr) {
  int64_t width = plan::dtypeSize(target.dtype);
  if (batchAxis < 0) {
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

void checkFeed(const std::string &name, const std::string &file,
               const Array &array, const TensorView &target,
               int64_t batchAxis) {
  auto shapeText = [](const std::vector<int64_t> &shape) {
    std::string text = "[";
    for (size_t i = 0; i < shape.size(); ++i)
      text += (i ? "," : "") + std::to_string(shape[i]);
    return text + "]";
  };
  if (array.dtype != target.dtype)
    die("--feed " + name + "=" + file +
        ": element type differs from the input's (" +
        std::string(target.dtype == plan::F32   ? "float32"
                    : target.dtype == plan::I64 ? "int64"
                                                : "bool") +
        ")");
  bool fits = array.shape.size() == target.shape.size();
  for (size_t d = 0; fits && d < target.shape.size(); ++d)
    fits = static_cast<int64_t>(d) == batchAxis
               ? array.shape[d] >= 1
               : array.shape[d] == target.shape[d];
  if (!fits)
    die("--feed " + name + "=" + file + ": shape " + shapeText(array.shape) +
        " does not fit the input's " + shapeText(target.shape) +
        (batchAxis >= 0 ? " (any length along batch axis " +
                              std::to_string(batchAxis) + ")"
                        : ""));
}

float readScalar(const TensorView &view) { return view.f32()[0]; }

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

} // namespace

int main(int argc, char **argv) {
  Options options = parseArguments(argc, argv);
  plan::Plan plan;
  std::string error;
  if (!plan::readPlan(options.plan, plan, error))
    die(options.plan + ": " + error);
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
  uint64_t planChecksum = 0;
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
  int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  omp_set_num_threads(options.threads > 0 ? options.threads
                                          : std::max(cores, 1));

  try {
    // One executor per device, each with its own memory; devices of dp and
    // cdp plans talk through the in-process communicator.
    int deviceCount = plan.devices_size();
    int threadsPerDevice = options.threads > 0
                               ? options.threads
                               : (deviceCount > 1 ? 1 : std::max(cores, 1));
    omp_set_num_threads(threadsPerDevice);
    std::unique_ptr<LocalCommunicator> communicator;
    if (deviceCount > 1)
      communicator = std::make_unique<LocalCommunicator>(deviceCount);
    std::vector<std::unique_ptr<Executor>> executors;
    for (int d = 0; d < deviceCount; ++d)
      executors.push_back(std::make_unique<Executor>(plan, threadsPerDevice, d,
                                                     communicator.get()));
    Executor &executor = *executors[0];
    if (deviceCount > 1 &&
        (!options.checkpoint.empty() || !options.resume.empty() ||
         !options.profile.empty()))
      die("--checkpoint, --resume and --profile are not available yet for "
          "multi-device plans (" +
          plan.strategy() + ")");
    if (deviceCount > 1 && !options.saveOutputs.empty() &&
        plan::traitsOf(plan).pipelined)
      die("--save-outputs is not available for pipeline plans (" +
          plan.strategy() + "): the outputs are spread over stash slots");
    int64_t slots = std::max(plan.micro_batches(), 1);
    if (!options.reportSvg.empty() && options.report.empty())
      die("--report-svg needs --report FILE.json");
    if (!options.compareReport.empty() && options.reportSvg.empty())
      die("--compare-report needs --report-svg FILE.svg");
    std::unique_ptr<ReportBuilder> report;
    std::unique_ptr<TraceRecorder> trace;
    if (!options.trace.empty()) {
      trace = std::make_unique<TraceRecorder>(deviceCount);
      for (auto &ex : executors)
        ex->setTrace(trace.get());
    }

    // Bind the data to the plan's inputs.
    std::map<int, Array> feeds;
    std::map<std::string, int> inputByName;
    for (int id : plan.inputs())
      inputByName[plan.tensors(id).name()] = id;
    for (auto &[name, file] : options.feeds) {
      auto it = inputByName.find(name);
      if (it == inputByName.end()) {
        std::string names;
        for (auto &[n, id] : inputByName)
          names += (names.empty() ? "" : ", ") + n;
        die("--feed names '" + name +
            "', which is not an input of the plan (inputs: " + names + ")");
      }
      Array array = readArray(file);
      if (static_cast<int64_t>(array.bytes.size()) > options.maxTensorBytes)
        die("--feed " + name + "=" + file + ": " +
            std::to_string(array.bytes.size()) +
            " bytes, more than --max-tensor-bytes");
      const plan::Tensor &t = plan.tensors(it->second);
      checkFeed(name, file, array, executor.view(it->second),
                training ? t.batch_axis() : -1);
      feeds[it->second] = std::move(array);
    }
    for (auto &[name, id] : inputByName)
      if (!options.feeds.empty() && !feeds.count(id))
        die("input '" + name + "' is not fed (add --feed " + name + "=FILE)");

    Dataset train, test;
    int imageInput = -1;
    if (!options.data.empty()) {
      std::string dir = options.data == "fashion-mnist"
                            ? "/usr/share/datasets/fashion-mnist"
                            : options.data;
      if (plan.labels() < 0)
        die("--data needs a plan compiled with a loss on labels "
            "(--loss softmax-cross-entropy)");
      for (int id : plan.inputs())
        if (id != plan.labels())
          imageInput = imageInput < 0 ? id : -2;
      if (imageInput < 0)
        die("--data needs a plan with exactly one input besides the labels");
      train = readIdxSplit(dir, "train");
      if (options.eval)
        test = readIdxSplit(dir, "t10k");
      const TensorView &image = executor.view(imageInput);
      int64_t pixels = image.numel() / image.shape[0];
      if (pixels != train.images.shape[1] ||
          plan.tensors(imageInput).batch_axis() != 0)
        die("--data: the model's input '" + plan.tensors(imageInput).name() +
            "' takes " + std::to_string(pixels) +
            " values per sample along axis 0; the "
            "data set has " +
            std::to_string(train.images.shape[1]) + " pixels per image");
    }

    if (!options.profile.empty())
      executor.enableProfiling();
    std::ofstream metrics;
    if (!options.metrics.empty()) {
      metrics.open(options.metrics);
      if (!metrics)
        die(options.metrics + ": cannot write: " + std::strerror(errno));
    }
    bool terminal = isatty(2);

    auto evaluate = [&]() -> double {
      const TensorView &image = executor.view(imageInput);
      const TensorView &scores = executor.view(plan.scores());
      int64_t batch = image.shape[0], count = test.labels.numel(), correct = 0;
      const int64_t *labels =
          reinterpret_cast<const int64_t *>(test.labels.bytes.data());
      int64_t classes = scores.numel() / batch;
      for (int64_t first = 0; first < count; first += batch) {
        copyRows(test.images, image, 0, first);
        executor.runEval(StepContext{0, 0, options.seed});
        for (int64_t j = 0; j < batch && first + j < count; ++j) {
          const float *row = scores.f32() + j * classes;
          int64_t best = std::max_element(row, row + classes) - row;
          correct += best == labels[first + j];
        }
      }
      return static_cast<double>(correct) / count;
    };

    if (!training) {
      for (auto &[id, array] : feeds)
        copyRows(array, executor.view(id), -1, 0);
      executor.runStep(StepContext{0, 0, options.seed});
    } else {
      int64_t batch = 1;
      for (int id : plan.inputs())
        if (plan.tensors(id).batch_axis() >= 0) {
          batch = plan.tensors(id).shape(plan.tensors(id).batch_axis());
          break;
        }
      int64_t perStep = batch * slots;
      int64_t stepsPerEpoch =
          options.data.empty() ? options.steps : train.labels.numel() / perStep;
      int64_t epochs =
          options.data.empty() ? 1 : std::max<int64_t>(options.epochs, 1);
      if (!options.data.empty() && options.steps >= 0)
        stepsPerEpoch = std::min(stepsPerEpoch, options.steps);
      if (!options.data.empty() && stepsPerEpoch == 0)
        die("--data: the training split has fewer samples than one step takes "
            "(" +
            std::to_string(perStep) + ")");
      int64_t total = stepsPerEpoch * epochs;
      int64_t step = 0;
      if (!options.report.empty()) {
        int64_t covered = options.reportSteps > 0
                              ? std::min(options.reportSteps, total)
                              : total;
        report = std::make_unique<ReportBuilder>(plan, covered);
        for (auto &ex : executors)
          ex->setReport(report.get());
      }
      if (deviceCount > 1) {
        // Precompute each epoch's order: device threads read it freely.
        std::vector<std::vector<int64_t>> orders;
        if (!options.data.empty())
          for (int64_t e = 0; e < epochs; ++e) {
            std::vector<int64_t> order(train.labels.numel());
            std::iota(order.begin(), order.end(), 0);
            std::mt19937_64 rng(options.seed * 1000003ull + e);
            for (int64_t i = static_cast<int64_t>(order.size()) - 1; i > 0; --i)
              std::swap(
                  order[i],
                  order[std::uniform_int_distribution<int64_t>(0, i)(rng)]);
            orders.push_back(std::move(order));
          }
        bool pipeline = plan::traitsOf(plan).pipelined;
        std::vector<float> losses(total * deviceCount, 0.0f);
        std::atomic<int64_t> progress{0};
        std::mutex errorMutex;
        std::string firstError;
        auto started = std::chrono::steady_clock::now();
        auto runDevice = [&](int d) {
          omp_set_num_threads(threadsPerDevice);
          Executor &ex = *executors[d];
          try {
            // Pipelines load each micro-batch where a stage reads it: rows
            // (t * M + k) * B on, the same rows dp gives slot k.
            Loader loader = [&](int input, int64_t t, int64_t k,
                                const TensorView &target) {
              int64_t first = (t * slots + k) * batch;
              if (options.data.empty()) {
                copyRows(feeds.at(input), target,
                         plan.tensors(input).batch_axis(), first);
                return;
              }
              int64_t epoch = t / stepsPerEpoch;
              first = ((t % stepsPerEpoch) * slots + k) * batch;
              copyRows(input == plan.labels() ? train.labels : train.images,
                       target, 0, first, &orders[epoch]);
            };
            for (int64_t t = 0; t < total; ++t) {
              if (pipeline) {
                ex.runStep(StepContext{t, 0, options.seed, &loader});
                if (d == plan.loss_device()) {
                  float loss = plan.loss() >= 0
                                   ? readScalar(ex.view(plan.loss()))
                                   : 0.0f;
                  for (int q = 0; q < deviceCount; ++q)
                    losses[t * deviceCount + q] = loss;
                  if (!std::isfinite(loss))
                    throw RuntimeError(nonFiniteLoss(plan, ex, t, loss));
                  progress = t + 1;
                }
                continue;
              }
              // Slot k = d of step t.
              if (options.data.empty()) {
                for (auto &[id, array] : feeds)
                  copyRows(array, ex.view(id), plan.tensors(id).batch_axis(),
                           (t * slots + d) * batch);
              } else {
                int64_t epoch = t / stepsPerEpoch, s = t % stepsPerEpoch;
                int64_t first = (s * slots + d) * batch;
                copyRows(train.images, ex.view(imageInput), 0, first,
                         &orders[epoch]);
                copyRows(train.labels, ex.view(plan.labels()), 0, first,
                         &orders[epoch]);
              }
              ex.runStep(StepContext{t, d, options.seed});
              float loss =
                  plan.loss() >= 0 ? readScalar(ex.view(plan.loss())) : 0.0f;
              losses[t * deviceCount + d] = loss;
              if (!std::isfinite(loss))
                throw RuntimeError(nonFiniteLoss(plan, ex, t, loss));
              if (d == 0)
                progress = t + 1;
            }
            ex.flush(total, &loader);
          } catch (const RuntimeError &e) {
            std::lock_guard<std::mutex> lock(errorMutex);
            if (firstError.empty())
              firstError = e.what();
            communicator->abort();
          }
        };
        std::vector<std::thread> threads;
        for (int d = 0; d < deviceCount; ++d)
          threads.emplace_back(runDevice, d);
        while (terminal) {
          int64_t done = progress;
          std::fprintf(stderr, "\r%s on %d devices: step %lld/%lld   ",
                       plan.strategy().c_str(), deviceCount, (long long)done,
                       (long long)total);
          if (done >= total || !firstError.empty())
            break;
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        for (std::thread &thread : threads)
          thread.join();
        if (terminal)
          std::fprintf(stderr, "\n");
        if (!firstError.empty())
          die(firstError);
        double elapsed = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - started)
                             .count();
        // A pipeline's parameters, buffers and optimizer inputs live on
        // their stage's device: gather them where the model is written.
        for (const plan::Tensor &t : plan.tensors()) {
          if (!pipeline || !t.has_device() || t.device() == 0 ||
              (t.kind() != plan::PARAM && t.kind() != plan::BUFFER &&
               t.kind() != plan::REDUCED))
            continue;
          const TensorView &from = executors[t.device()]->view(t.id());
          std::memcpy(executor.view(t.id()).data, from.data,
                      from.numel() * plan::dtypeSize(from.dtype));
        }
        // dp and cdp: buffers (BatchNorm statistics) are averaged over the
        // devices.
        for (const plan::Tensor &t : plan.tensors()) {
          if (pipeline || t.kind() != plan::BUFFER || t.dtype() != plan::F32)
            continue;
          float *out = executor.view(t.id()).f32();
          int64_t n = executor.view(t.id()).numel();
          for (int64_t i = 0; i < n; ++i) {
            double sum = 0;
            for (int d = 0; d < deviceCount; ++d)
              sum += executors[d]->view(t.id()).f32()[i];
            out[i] = static_cast<float>(sum / deviceCount);
          }
        }
        double accuracy =
            options.eval && !options.data.empty() ? evaluate() : -1;
        double rate = elapsed > 0 ? total * perStep / elapsed : 0.0;
        for (int64_t t = 0; t < total && metrics.is_open(); ++t) {
          double loss = 0;
          for (int d = 0; d < deviceCount; ++d)
            loss += losses[t * deviceCount + d];
          metrics << "{\"step\": " << t << ", \"loss\": " << loss / deviceCount
                  << ", \"samples_per_s\": " << rate;
          if (t + 1 == total && accuracy >= 0)
            metrics << ", \"accuracy\": " << accuracy;
          metrics << "}\n";
        }
        double lastLoss = 0;
        for (int d = 0; d < deviceCount; ++d)
          lastLoss += losses[(total - 1) * deviceCount + d] / deviceCount;
        std::printf("%s on %d devices: %lld steps, loss %.4f, %.1f s",
                    plan.strategy().c_str(), deviceCount, (long long)total,
                    lastLoss, elapsed);
        if (accuracy >= 0)
          std::printf(", test accuracy %.4f", accuracy);
        std::printf("\n");
        step = total;
      }
      if (!options.resume.empty()) {
        step = loadCheckpoint(options.resume, executor, planChecksum);
        if (step > total)
          die("--resume: the checkpoint is at step " + std::to_string(step) +
              ", past the " + std::to_string(total) + " steps asked for");
      }
      std::vector<int64_t> order;
      int64_t shuffledEpoch = -1;
      auto started = std::chrono::steady_clock::now();
      for (; step < total && deviceCount == 1; ++step) {
        int64_t epoch = step / stepsPerEpoch, s = step % stepsPerEpoch;
        if (!options.data.empty() && epoch != shuffledEpoch) {
          order.resize(train.labels.numel());
          std::iota(order.begin(), order.end(), 0);
          std::mt19937_64 rng(options.seed * 1000003ull + epoch);
          for (int64_t i = static_cast<int64_t>(order.size()) - 1; i > 0; --i)
            std::swap(order[i],
                      order[std::uniform_int_distribution<int64_t>(0, i)(rng)]);
          shuffledEpoch = epoch;
        }
        if (s == 0)
          started = std::chrono::steady_clock::now();
        auto stepStart = std::chrono::steady_clock::now();
        float stepLoss = 0.0f;
        for (int64_t k = 0; k < slots; ++k) {
          int64_t first = (s * slots + k) * batch;
          if (options.data.empty()) {
            for (auto &[id, array] : feeds)
              copyRows(array, executor.view(id), plan.tensors(id).batch_axis(),
                       (step * slots + k) * batch);
          } else {
            copyRows(train.images, executor.view(imageInput), 0, first, &order);
            copyRows(train.labels, executor.view(plan.labels()), 0, first,
                     &order);
          }
          executor.runStep(StepContext{step, k, options.seed});
          // The step's loss is the mean over its slots; a non-finite slot
          // stops the run right there.
          float slotLoss =
              plan.loss() >= 0 ? readScalar(executor.view(plan.loss())) : 0.0f;
          stepLoss += slotLoss / slots;
          if (!std::isfinite(slotLoss)) {
            stepLoss = slotLoss;
            break;
          }
        }
        float loss = stepLoss;
        if (!std::isfinite(loss))
          die(nonFiniteLoss(plan, executor, step, loss));
        double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - stepStart)
                             .count();
        double rate = seconds > 0 ? perStep / seconds : 0.0;
        bool last = s + 1 == stepsPerEpoch;
        double accuracy = -1;
        if (last && options.eval && !options.data.empty())
          accuracy = evaluate();
        if (metrics.is_open()) {
          metrics << "{\"step\": " << step << ", \"loss\": " << loss
                  << ", \"samples_per_s\": " << rate;
          if (accuracy >= 0)
            metrics << ", \"accuracy\": " << accuracy;
          metrics << "}\n";
        }
        if (terminal && (s % 10 == 0 || last))
          std::fprintf(
              stderr,
              "\repoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f samples/s   ",
              (long long)epoch + 1, (long long)epochs, (long long)s + 1,
              (long long)stepsPerEpoch, loss, rate);
        if (!options.checkpoint.empty() && options.checkpointEvery > 0 &&
            (step + 1) % options.checkpointEvery == 0)
          saveCheckpoint(options.checkpoint, executor, planChecksum, step + 1);
        if (last && !options.data.empty()) {
          double elapsed = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - started)
                               .count();
          if (terminal)
            std::fprintf(stderr, "\n");
          std::printf("epoch %lld: %lld steps, loss %.4f, %.1f s",
                      (long long)epoch + 1, (long long)stepsPerEpoch, loss,
                      elapsed);
          if (accuracy >= 0)
            std::printf(", test accuracy %.4f", accuracy);
          std::printf("\n");
          std::fflush(stdout);
        }
      }
      if (terminal && options.data.empty())
        std::fprintf(stderr, "\n");
      if (!options.checkpoint.empty() && deviceCount == 1)
        saveCheckpoint(options.checkpoint, executor, planChecksum, total);
    }

    if (!options.profile.empty()) {
      std::vector<double> seconds = executor.profileSeconds();
      const plan::Device &device = plan.devices(0);
      int64_t steps = std::max<int64_t>(1, executor.stepsRun());
      std::ofstream out(options.profile);
      // Mean per step over the steps after the first (setup) when more ran.
      out << "{\"schema\": \"cdp-profile/1\", \"steps\": " << steps
          << ", \"instructions\": [";
      for (size_t i = 0; i < seconds.size(); ++i)
        out << (i ? ",\n  " : "\n  ") << "{\"index\": " << i
            << ", \"op\": " << jsonString(device.instructions(i).op())
            << ", \"location\": "
            << jsonString(device.instructions(i).location())
            << ", \"ms\": " << seconds[i] * 1e3 << "}";
      out << "\n]}\n";
      if (!out)
        die(options.profile + ": write failed");
    }
    if (trace) {
      std::ofstream out(options.trace);
      out << trace->json(plan.has_schedule()
                             ? std::max<int64_t>(plan.schedule().cycle(), 1)
                             : 1);
      if (!out)
        die(options.trace + ": cannot write");
    }
    if (report) {
      if (communicator)
        for (const Communicator::SendRecord &record : communicator->sendLog())
          report->sent(record.device, record.tau, record.bytes);
      for (int d = 0; d < deviceCount; ++d) {
        report->setWorkspace(d, executors[d]->workspaceBytes());
        report->setOptimizer(d, executors[d]->optimizerBytes());
      }
      std::string json = report->json();
      std::ofstream out(options.report);
      out << json;
      if (!out)
        die(options.report + ": cannot write");
      if (!options.reportSvg.empty()) {
        std::string other;
        if (!options.compareReport.empty()) {
          std::ifstream in(options.compareReport);
          if (!in)
            die(options.compareReport +
                ": cannot open: " + std::strerror(errno));
          std::stringstream content;
          content << in.rdbuf();
          other = content.str();
          if (other.find("\"schema\": \"cdp-report/1\"") == std::string::npos)
            die(options.compareReport +
                ": not a cdp report (schema cdp-report/1)");
        }
        std::ofstream svg(options.reportSvg);
        svg << runtime::reportSvg(json, other);
        if (!svg)
          die(options.reportSvg + ": cannot write");
      }
    } else if (!options.report.empty()) {
      die("--report covers training runs; this plan is forward-only");
    }
    if (!options.dumpParams.empty()) {
      std::vector<std::pair<std::string, TensorView>> tensors;
      for (const plan::Tensor &t : plan.tensors())
        if ((t.kind() == plan::PARAM && t.trainable()) ||
            t.kind() == plan::BUFFER)
          tensors.emplace_back(t.name(), executor.view(t.id()));
      writeFolder(options.dumpParams, tensors);
    }
    if (!options.dumpGrads.empty()) {
      std::vector<std::pair<std::string, TensorView>> tensors;
      for (auto &[name, id] : executor.gradients())
        tensors.emplace_back(name, executor.view(id));
      writeFolder(options.dumpGrads, tensors);
    }
    if (!options.saveOutputs.empty()) {
      std::vector<std::pair<std::string, TensorView>> tensors;
      for (const plan::Output &output : plan.outputs())
        tensors.emplace_back(output.name(), executor.view(output.tensor()));
      writeFolder(options.saveOutputs, tensors);
    }
    if (!options.saveOnnx.empty()) {
      onnx::ModelProto model;
      if (!model.ParseFromString(plan.source_model()))
        die("the plan holds no readable ONNX model to save into");
      std::map<std::string, int> byName;
      for (const plan::Tensor &t : plan.tensors())
        if (t.kind() == plan::PARAM || t.kind() == plan::BUFFER)
          byName[t.name()] = t.id();
      for (onnx::TensorProto &initializer :
           *model.mutable_graph()->mutable_initializer()) {
        auto it = byName.find(initializer.name());
        if (it == byName.end())
          continue;
        const TensorView &view = executor.view(it->second);
        initializer.clear_float_data();
        initializer.clear_external_data();
        initializer.set_data_location(onnx::TensorProto::DEFAULT);
        initializer.set_raw_data(view.data,
                                 view.numel() * plan::dtypeSize(view.dtype));
      }
      std::ofstream out(options.saveOnnx, std::ios::binary);
      if (!out || !model.SerializeToOstream(&out))
        die(options.saveOnnx + ": cannot write: " + std::strerror(errno));
    }
  } catch (const RuntimeError &e) {
    die(e.what());
  } catch (const std::bad_alloc &) {
    die("out of memory");
  }
  return 0;
}
