//===- Evaluation.cpp - held-out evaluation and metrics lines -------------===//
//
// The held-out loss and accuracy (--eval, --eval-feed) and the --metrics
// lines.
//
//===----------------------------------------------------------------------===//

#include "../kernels/LearningRate.h"
#include "Run.h"
#include "cdp/Runtime/Json.h"

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

/// One line of --metrics: the step, its loss, speed and learning rate, and
/// the test loss and accuracy where they were evaluated.
void writeMetricsLine(Run &run, int64_t step, double loss, double rate,
                      const Evaluation &evaluation) {
  runtime::Json line = {
      {"step", step}, {"loss", loss}, {"samples_per_s", rate}};
  if (double lr = learningRateAt(run, step); lr >= 0)
    line["lr"] = lr;
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
static Evaluation evaluateBatches(Run &run, int64_t samples,
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
  if (run.total > start)
    std::printf(", loss %.4f", meanLoss);
  std::printf(", %.1f s", seconds);
  printEvaluation(evaluation);
  std::printf("\n");
  std::fflush(stdout);
}

} // namespace cdp::runtime::training
