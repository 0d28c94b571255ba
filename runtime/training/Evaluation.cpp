//===- Evaluation.cpp - held-out evaluation and metrics lines -------------===//
//
// The held-out loss and accuracy (--eval, --eval-feed) and the --metrics
// lines.
//
//===----------------------------------------------------------------------===//

#include "../kernels/LearningRate.h"
#include "../kernels/LossScale.h"
#include "Run.h"

#include "cdp/Plan/ReservedNames.h"
#include "cdp/Runtime/Json.h"
#include <numeric>

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace cdp::runtime::training {

/// The rule of the first instruction with a rate (update, shard_update,
/// ...) on a device of this process, looked for once; null without one.
static const UpdateRule *reportedRule(Run &run) {
  if (run.reportedRuleFound)
    return run.reportedRule.get();
  run.reportedRuleFound = true;
  Executor &executor = run.local();
  const plan::Device &device = executor.plan().devices(executor.device());
  for (const plan::Instruction &instruction : device.instructions()) {
    KernelArgs args;
    args.instruction = &instruction;
    if (args.find("lr")) {
      run.reportedRule = std::make_shared<const UpdateRule>(args);
      break;
    }
  }
  return run.reportedRule.get();
}

/// The learning rate applied to step `step`'s gradients: the reported
/// rule's at update `step` (each parameter's k-th update applies the
/// gradients of step k, whatever step's program runs it: dp's and cdp's
/// run in the next). Negative in a plan without updates.
double learningRateAt(Run &run, int64_t step) {
  const UpdateRule *rule = reportedRule(run);
  if (!rule)
    return -1.0;
  // The kernels' float32 rate, printed as the float it is.
  char text[32];
  std::snprintf(text, sizeof(text), "%.7g",
                static_cast<double>(rule->scheduledLr(step)));
  return std::strtod(text, nullptr);
}

int findLossScale(const plan::Plan &plan) {
  for (const plan::Tensor &t : plan.tensors())
    if (t.kind() == plan::BUFFER && t.name() == kLossScaleBuffer)
      return t.id();
  return -1;
}

LossScaleState readLossScale(const Run &run, Executor &executor) {
  HostTensor state = executor.stageOut(executor.view(run.lossScaleTensor));
  return {state.view().f32()[kScale], state.view().f32()[kOverflow] != 0.0f};
}

void noteLossScale(Run &run) {
  if (!run.lossScaled())
    return;
  LossScaleState state = readLossScale(run, run.local());
  run.lossScale = state.scale;
  run.lastStepOverflowed = state.overflowed;
  run.overflowedSteps += run.lastStepOverflowed;
}

/// One line of --metrics and one event of --tensorboard: the step, its
/// loss, speed and learning rate, the loss scale after it and whether its
/// updates were skipped (fp16), and the test loss and accuracy where they
/// were evaluated (the same names in both).
void writeMetricsLine(Run &run, int64_t step, double loss, double rate,
                      const Evaluation &evaluation) {
  runtime::Json line = {
      {"step", step}, {"loss", loss}, {"samples_per_s", rate}};
  if (double lr = learningRateAt(run, step); lr >= 0)
    line["lr"] = lr;
  if (run.lossScale > 0) {
    line["loss_scale"] = run.lossScale;
    line["skipped"] = run.lastStepOverflowed ? 1 : 0;
  }
  if (evaluation.loss >= 0)
    line["test_loss"] = evaluation.loss;
  if (evaluation.accuracy >= 0)
    line["accuracy"] = evaluation.accuracy;
  if (run.metrics.isOpen())
    run.metrics.writeLine(runtime::jsonText(line));
  if (run.tensorboard.isOpen()) {
    std::vector<std::pair<std::string, float>> scalars;
    // A loss that overflowed under fp16 is null in JSON; TensorBoard
    // takes the float as it is.
    for (const auto &[name, value] : line.items())
      if (name != "step")
        scalars.push_back({name, name == "loss" ? static_cast<float>(loss)
                                                : value.get<float>()});
    run.tensorboard.writeStep(step, scalars);
  }
}

/// Whether the run evaluates: --eval on --data's test split, or --eval-feed.
bool evaluates(const Run &run) {
  return (run.options.eval && !run.options.data.empty()) ||
         !run.evalFeeds.empty();
}

bool masksPartialBatch(const Run &run) {
  return run.plan.labels() >= 0 && run.plan.has_eval_loss() &&
         run.plan.eval_loss() >= 0;
}

namespace {

/// The evaluation stream over held-out samples, batch by batch, summing
/// per-sample losses and counting correct predictions.
class HeldOutPass {
public:
  using Stage = std::function<void(const std::vector<int64_t> &rows)>;
  HeldOutPass(Run &run, const Stage &stage, const int64_t *labels)
      : run(run), executor(run.first()), stage(stage), labels(labels),
        batch(run.batch) {
    classifier = labels && run.plan.scores() >= 0 &&
                 executor.view(run.plan.scores()).shape.size() == 2;
    classes = classifier ? executor.view(run.plan.scores()).numel() / batch : 0;
    hasLoss = run.plan.has_eval_loss() && run.plan.eval_loss() >= 0;
  }

  /// Samples [first, first + count), count <= batch. A partial batch is
  /// padded with copies of its first sample; a second pass of that sample
  /// alone gives its loss, which the padding's share subtracts: the loss,
  /// a mean of per-sample terms, becomes the mean over the real samples.
  void add(int64_t first, int64_t count) {
    std::vector<int64_t> rows(batch, first);
    std::iota(rows.begin(), rows.begin() + count, first);
    double mean = evaluateRows(rows, first, count);
    if (!hasLoss || (count < batch && !masksPartialBatch(run)))
      return; // a model's own loss: whole batches only
    double padding = 0;
    if (count < batch)
      padding = (batch - count) *
                evaluateRows(std::vector<int64_t>(batch, first), first, 0);
    lossSum += mean * batch - padding;
    lossSamples += count;
  }

  Evaluation result(int64_t samples) const {
    Evaluation evaluation;
    if (lossSamples > 0)
      evaluation.loss = lossSum / lossSamples;
    if (classifier && samples > 0)
      evaluation.accuracy = static_cast<double>(correct) / samples;
    return evaluation;
  }

private:
  /// One batch of `rows`; its first `scored` rows (samples from `first`)
  /// count for the accuracy. Returns the batch's loss (0 without one).
  double evaluateRows(const std::vector<int64_t> &rows, int64_t first,
                      int64_t scored) {
    stage(rows);
    executor.runEval(StepContext{0, 0, run.options.seed});
    double loss =
        hasLoss ? executor.stageOut(run.plan.eval_loss()).view().f32()[0] : 0.0;
    if (!classifier || scored == 0)
      return loss;
    HostTensor scores = executor.stageOut(run.plan.scores());
    Array widened; // scores a bf16 or fp16 plan stores in 2 bytes
    const float *values = scores.view().f32();
    if (scores.view().dtype != plan::F32) {
      widened = widenedToFloat32(scores.view());
      values = reinterpret_cast<const float *>(widened.bytes.data());
    }
    for (int64_t j = 0; j < scored; ++j) {
      const float *row = values + j * classes;
      int64_t best = std::max_element(row, row + classes) - row;
      correct += best == labels[first + j];
    }
    return loss;
  }

  Run &run;
  Executor &executor;
  const Stage &stage;
  const int64_t *labels;
  int64_t batch, classes = 0, correct = 0, lossSamples = 0;
  bool classifier = false, hasLoss = false;
  double lossSum = 0;
};

} // namespace

/// Runs the evaluation stream over `samples` held-out samples, batch by
/// batch: `stage(rows)` fills the inputs with those samples; `labels` (may
/// be null) are the class of each sample for the accuracy.
static Evaluation evaluateBatches(Run &run, int64_t samples,
                                  const HeldOutPass::Stage &stage,
                                  const int64_t *labels) {
  HeldOutPass pass(run, stage, labels);
  for (int64_t first = 0; first < samples; first += run.batch)
    pass.add(first, std::min(run.batch, samples - first));
  return pass.result(samples);
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
    std::vector<int64_t> held; // the labels, out of a streamed feed
    auto it = run.evalFeeds.find(run.plan.labels());
    if (it != run.evalFeeds.end() && it->second.dtype == plan::I64 &&
        it->second.shape.size() == 1) {
      held.resize(it->second.numel());
      it->second.readElements(0, held.size(),
                              reinterpret_cast<char *>(held.data()));
      labels = held.data();
    }
    return evaluateBatches(
        run, run.evalSamples,
        [&](const std::vector<int64_t> &rows) {
          for (auto &[id, array] : run.evalFeeds)
            stageRowList(executor, id, array, run.plan.tensors(id).batch_axis(),
                         rows);
        },
        labels);
  }
  const int64_t *labels =
      reinterpret_cast<const int64_t *>(run.test.labels.bytes.data());
  return evaluateBatches(
      run, run.test.labels.numel(),
      [&](const std::vector<int64_t> &rows) {
        stageRowList(executor, run.imageInput, run.test.images, 0, rows);
        stageRowList(executor, run.plan.labels(), run.test.labels, 0, rows);
      },
      labels);
}

/// The line of an evaluation after the run's steps (not per epoch).
void printHeldOut(const Run &run, const Evaluation &evaluation) {
  std::printf("after %lld steps", (long long)run.total);
  if (run.evalSamples > 0)
    std::printf(", held-out %lld samples", (long long)run.evalSamples);
  printEvaluation(evaluation);
  std::printf("\n");
}

/// The run's last line: what ran (after --resume, the steps this run made
/// and where it started), the mean loss over `meanOver` of them, seconds,
/// and the evaluation.
void printRunSummary(const Run &run, int64_t start, double meanLoss,
                     double seconds, const Evaluation &evaluation) {
  int devices = run.deviceCount;
  std::printf("%s on %d device%s: %lld steps", run.plan.strategy().c_str(),
              devices, devices == 1 ? "" : "s", (long long)(run.total - start));
  if (start > 0)
    std::printf(" from the checkpoint at step %lld (%lld in all)",
                (long long)start, (long long)run.total);
  // Under fp16 the mean is over the steps whose forward did not overflow;
  // where none did there is no loss to give.
  if (run.total > start)
    std::printf(std::isfinite(meanLoss) ? ", loss %.4f" : ", no finite loss",
                meanLoss);
  if (run.lossScale > 0)
    std::printf(", %lld skipped on overflow, loss scale %g",
                (long long)run.overflowedSteps,
                static_cast<double>(run.lossScale));
  std::printf(", %.1f s", seconds);
  printEvaluation(evaluation);
  std::printf("\n");
  std::fflush(stdout);
}

} // namespace cdp::runtime::training
