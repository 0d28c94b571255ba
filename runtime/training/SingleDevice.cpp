//===- SingleDevice.cpp - training on one device --------------------------===//
//
// The single-device loop: per step its slots, the loss, progress,
// checkpoints and per-epoch lines.
//
//===----------------------------------------------------------------------===//

#include "Progress.h"
#include "Run.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

namespace cdp::runtime::training {

/// The loss after a slot: staged out of the device.
float readLoss(const plan::Plan &plan, const Executor &executor) {
  return plan.loss() >= 0 ? executor.stageOut(plan.loss()).view().f32()[0]
                          : 0.0f;
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

/// Stages the inputs of slot `k` of step `step` (with --data, rows of
/// `order`, the shuffle of the step's epoch).
static void stageSlot(Run &run, int64_t step, int64_t k,
                      const std::vector<int64_t> &order) {
  Executor &executor = run.first();
  if (run.options.data.empty()) {
    for (auto &[id, array] : run.feeds)
      stageRows(executor, id, array, run.plan.tensors(id).batch_axis(),
                run.feedRow((step * run.slots + k) * run.batch), nullptr,
                run.feedOrder.get());
    return;
  }
  int64_t first = ((step % run.stepsPerEpoch) * run.slots + k) * run.batch;
  stageRows(executor, run.imageInput, run.train.images, 0, first, &order);
  stageRows(executor, run.plan.labels(), run.train.labels, 0, first, &order);
}

/// One device's step `step`: its slots one after another, the step's loss
/// the mean over them (a non-finite slot stops the run right there, unless
/// the loss is scaled: the step's updates then skip the overflow). On a
/// GPU the next slot of the epoch is staged while one runs; `staged` says
/// whether slot 0 of `step` already was.
static float runSingleStep(Run &run, int64_t step,
                           const std::vector<int64_t> &order, bool &staged) {
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
    if (!std::isfinite(slotLoss) && !run.lossScaled())
      return slotLoss;
  }
  return stepLoss;
}

/// One device, from `step` (0, or --resume's): per step the metrics line,
/// progress on a terminal, checkpoints, and a line per epoch with --data.
void runSingleDevice(Run &run, int64_t step) {
  const RunOptions &options = run.options;
  const int64_t step0 = step;
  std::vector<int64_t> order;
  int64_t shuffledEpoch = -1;
  auto started = std::chrono::steady_clock::now(), runStarted = started;
  double epochLoss = 0;
  int64_t epochSteps = 0;
  bool staged = false; // the step's first slot, while the step before ran
  ProgressLine line(run, step);
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
    noteLossScale(run);
    // Under fp16 a forward that overflowed is a skipped step (the
    // summary counts it); the means are over the finite losses.
    if (std::isfinite(loss)) {
      epochLoss += loss;
      ++epochSteps;
    } else if (!run.lossScaled()) {
      fail(nonFiniteLoss(run.plan, run.first(), step, loss));
    }
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
    if (run.logsSteps())
      writeMetricsLine(run, step, loss, rate, evaluation);
    line.update(step + 1, loss);
    bool stop = !options.checkpoint.empty() && stopSignal() != 0 &&
                step + 1 < run.total;
    if (checkpointDue(run, step + 1) || stop)
      saveCheckpoint(options.checkpoint, run.checkpointScope(), run.identity,
                     step + 1);
    if (stop) {
      run.stoppedAt = step + 1;
      line.finish();
      std::printf("%s\n", stopLine(run, step + 1).c_str());
      return;
    }
    if (last && !options.data.empty()) {
      double elapsed = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - started)
                           .count();
      line.finish();
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
  line.finish();
  // --feed training ends with one line, as a multi-device run does (--data
  // printed a line per epoch).
  if (options.data.empty() && step0 < run.total)
    printRunSummary(run, step0,
                    epochSteps ? epochLoss / epochSteps
                               : std::numeric_limits<double>::quiet_NaN(),
                    std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - runStarted)
                        .count(),
                    Evaluation());
  // A resume at the end still leaves a checkpoint there.
  if (!options.checkpoint.empty() && step0 == run.total)
    saveCheckpoint(options.checkpoint, run.checkpointScope(), run.identity,
                   run.total);
}

} // namespace cdp::runtime::training
