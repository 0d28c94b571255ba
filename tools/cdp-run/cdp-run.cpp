//===- cdp-run.cpp - run a cdp plan ---------------------------------------===//
//
// Loads a plan artefact, feeds it data (--feed files or an IDX data set),
// trains for --steps or --epochs, and writes what the user asked for:
// metrics, parameters, gradients, outputs, the trained ONNX model. The
// flags are parsed here; the run itself is the runtime's TrainingRun. Every
// error is one line, `cdp-run: error: ...`, with exit status 1.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/Printable.h"
#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/TrainingRun.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <system_error>
#include <vector>

using namespace cdp;
using namespace cdp::runtime;

namespace {

/// The one error line and exit status 1; under mpirun, `fabric` ends the
/// other processes too (they would wait for this one until --comm-timeout).
[[noreturn]] void die(const std::string &message, Fabric *fabric = nullptr) {
  // One write: std::cerr flushes after every <<, and under mpirun pieces
  // written apart can be forwarded around mpirun's own lines.
  std::cerr << "cdp-run: error: " + printable(message) + "\n" << std::flush;
  if (fabric)
    fabric->abortRun();
  std::exit(1);
}

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

double parseReal(const std::string &flag, const std::string &text) {
  char *end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end || errno || !std::isfinite(value))
    die(flag + " must be a finite number, got '" + text + "'");
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

/// cdp-run's flags: each its value, help and what it sets in `o`.
std::vector<Flag> runFlags(RunOptions &o) {
  return {
      {"--feed", "NAME=FILE",
       "Feed graph input NAME from FILE (.npy, ONNX TensorProto .pb, or a "
       "folder of .npy shards joined along their first axis in name "
       "order); repeatable. Slot k of step t takes entries [(t*K+k)*B, "
       "(t*K+k+1)*B) along the input's batch axis, modulo its length",
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
      {"--feed-scale", "X",
       "Integer or bool .npy data fed to a float32 input is multiplied by X "
       "(1/255 = 0.00392156862745098 turns image bytes into [0, 1], as "
       "torchvision's ToTensor; default 1)",
       [&](const std::string &v) {
         o.feedScale = parseReal("--feed-scale", v);
       }},
      {"--feed-offset", "Y",
       "Added to integer or bool .npy data fed to a float32 input, after "
       "--feed-scale (default 0); float data is fed as it is",
       [&](const std::string &v) {
         o.feedOffset = parseReal("--feed-offset", v);
       }},
      {"--shuffle", nullptr,
       "Feed each epoch of --feed's samples in a new order: epoch e (every "
       "n samples along the batch axes) in the order "
       "numpy.random.default_rng(seed + e).permutation(n) gives, the same "
       "for every feed (--seed S; default: in file order)",
       [&](const std::string &) { o.shuffle = true; }},
      {"--partial-batch", "wrap|drop|error",
       "--feed training when the samples are not a whole number of steps: "
       "wrap (the last step of an epoch takes the next epoch's first "
       "samples; default), drop (an epoch is its whole steps, the rest "
       "unused, as PyTorch's DataLoader(drop_last=True)) or error",
       [&](const std::string &v) {
         if (v != "wrap" && v != "drop" && v != "error")
           die("--partial-batch must be wrap, drop or error, got '" + v + "'");
         o.partialBatch = v;
       }},
      {"--data", "DIR|fashion-mnist",
       "Train on an IDX data set (train-/t10k- images and labels, .gz read "
       "directly); fashion-mnist is /usr/share/datasets/fashion-mnist",
       [&](const std::string &v) { o.data = v; }},
      {"--weights", "FILE",
       "The plan's weights file (the initial values cdp-compile wrote beside "
       "the plan as PLAN.cdp.weights; default: that file beside the plan). "
       "Refused unless it is the file of this very compile",
       [&](const std::string &v) { o.weights = v; }},
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
      {"--cuda-graphs", nullptr,
       "CUDA: record each run of kernels that launch the same work every "
       "step as a CUDA graph on its second step and replay it from then on "
       "(one launch instead of hundreds; the optimizer's updates, messages "
       "and data loads run between the graphs as before; off by default)",
       [&](const std::string &) { o.cudaGraphs = true; }},
      {"--threads", "T",
       "oneDNN/OpenMP threads per device (default: all cores for one device, "
       "1 per device for several; under mpirun the node's cores shared "
       "among the devices its processes run; 1 where every device's step "
       "is under 50 million multiply-adds, too short to share)",
       [&](const std::string &v) {
         o.threads = parseCount("--threads", v, 1);
         if (o.threads > 1024) // OpenMP cannot create them; nor is it useful
           die("--threads must be at most 1024, got '" + v + "'");
       }},
      {"--progress-every", "S",
       "Where standard error is not a terminal (a log file, a scheduler's "
       "output), print the progress line (step, loss, samples/s over the "
       "last interval, learning rate, time left) every S seconds (default "
       "10; 0: never); on a terminal it is redrawn in place",
       [&](const std::string &v) {
         o.progressEvery = parseReal("--progress-every", v);
         if (o.progressEvery < 0)
           die("--progress-every must be >= 0, got '" + v + "'");
       }},
      {"--metrics", "FILE",
       "JSON lines, one per step: step, loss, samples_per_s (and accuracy); "
       "a resumed run keeps the lines of earlier steps and appends",
       [&](const std::string &v) { o.metrics = v; }},
      {"--tensorboard", "DIR",
       "Write TensorBoard event files into DIR (made if needed), one event "
       "per step with the --metrics scalars: loss, lr, samples_per_s, and "
       "test_loss and accuracy where evaluated; `tensorboard --logdir DIR` "
       "shows them as the run goes. A resumed run adds a file that "
       "replaces the steps it runs again",
       [&](const std::string &v) { o.tensorboard = v; }},
      {"--dump-params", "DIR",
       "Write every trainable parameter and buffer after the run (.npy + "
       "index.json), the folder replaced as a whole",
       [&](const std::string &v) { o.dumpParams = v; }},
      {"--dump-grads", "DIR",
       "Write the loss gradients the last update applied (.npy + index.json)",
       [&](const std::string &v) { o.dumpGrads = v; }},
      {"--save-outputs", "DIR",
       "Write the graph outputs of the last step, its micro-batches "
       "concatenated along the batch axis (the loss: their mean)",
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
      {"--save-onnx-external-data", nullptr,
       "Write the values of --save-onnx's and --save-onnx-eval's models to "
       "FILE.data beside each (ONNX external data, as onnx.save(..., "
       "save_as_external_data=True)); without it they go there only where a "
       "model would pass protobuf's 2 GiB",
       [&](const std::string &) { o.saveOnnxExternalData = true; }},
      {"--checkpoint", "DIR",
       "Save every device's parameters, buffers, optimizer state and "
       "micro-batches in flight to DIR (at the end, or every "
       "--checkpoint-every steps): one shard per process and manifest.bin, "
       "so that a crash keeps the previous checkpoint whole; one run at a "
       "time per folder (DIR/.lock). SIGTERM or SIGINT (Ctrl-C) then stops "
       "the run at the next step boundary with a checkpoint there and exit "
       "status 0 (under mpirun the processes agree on the step, whichever "
       "got the signal)",
       [&](const std::string &v) { o.checkpoint = v; }},
      {"--portable-checkpoint", "DIR",
       "After the run, write its state by name into DIR (replaced as a "
       "whole): every parameter and buffer, and each parameter's optimizer "
       "state (momentum_buffer, exp_avg, exp_avg_sq) as .npy, with "
       "checkpoint.json naming them and the step, samples consumed, update "
       "count and data. --resume DIR continues from it with another plan "
       "of the same model: another strategy, device or process count, "
       "learning rate or schedule (the same optimizer, seed and data)",
       [&](const std::string &v) { o.portableCheckpoint = v; }},
      {"--checkpoint-every", "N",
       "Checkpoint every N steps (default: at the end)",
       [&](const std::string &v) {
         o.checkpointEvery = parseCount("--checkpoint-every", v, 1);
       }},
      {"--resume", "DIR",
       "Continue from a checkpoint of the same plan, seed, data (files "
       "unchanged) and process count; --steps/--epochs count from the start "
       "of training, so the result is bit-identical to an uninterrupted run. "
       "From a --portable-checkpoint folder: any plan of the same model and "
       "optimizer, starting at the step that has consumed the same samples "
       "(its schedule starts afresh there)",
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
       "Refuse a fed .pb tensor (read whole) larger than N bytes (default "
       "16 GiB); .npy feeds are streamed and take no memory",
       [&](const std::string &v) {
         o.maxTensorBytes = parseCount("--max-tensor-bytes", v, 1);
       }},
  };
}

[[noreturn]] void printHelp(const std::vector<Flag> &flags) {
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
}

RunOptions parseArguments(int argc, char **argv) {
  RunOptions o;
  std::vector<Flag> flags = runFlags(o);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h")
      printHelp(flags);
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
    // What mpirun's processes must share (the threads, the timeout and
    // where the weights lie may differ from machine to machine; the
    // weights file's stamp is checked wherever it lies).
    if (name != "--threads" && name != "--comm-timeout" &&
        name != "--progress-every" && name != "--weights")
      o.agreedFlags += name + '\0' + value + '\0';
  }
  if (o.plan.empty())
    die("no plan given (usage: cdp-run MODEL.cdp [options])");
  return o;
}

} // namespace

int main(int argc, char **argv) {
  RunOptions options = parseArguments(argc, argv);
  TrainingRun *current = nullptr;
  TrainingRun run(options, [&](const std::string &message) {
    die(message, current->mpiFabric());
  });
  current = &run;
  try {
    run.execute();
  } catch (const ReportedElsewhere &) {
    // The root process prints why and ends with status 1, which mpirun
    // returns. Status 0 here: a non-zero one could end the job before the
    // root's line is out (mpirun kills the rest when a process fails).
    std::exit(0);
  } catch (const RuntimeError &e) {
    die(e.what(), run.mpiFabric());
  } catch (const std::bad_alloc &) {
    die("out of memory", run.mpiFabric());
  } catch (const std::system_error &e) {
    // Thread creation, for one: a plan of more devices than the system
    // gives threads.
    die(std::string("the system refused: ") + e.what(), run.mpiFabric());
  }
  return 0;
}
