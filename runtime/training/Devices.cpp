//===- Devices.cpp - training on device threads ---------------------------===//
//
// Multi-device runs: a thread per device of this process, the step
// rendezvous for checkpoints, and the summary the root prints.
//
//===----------------------------------------------------------------------===//

#include "Progress.h"
#include "Run.h"
#include "cdp/Plan/PlanCheck.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

namespace cdp::runtime::training {

/// Whether --checkpoint saves before step `next`: every
/// --checkpoint-every steps, and at the end.
bool checkpointDue(const Run &run, int64_t next) {
  const RunOptions &options = run.options;
  return !options.checkpoint.empty() &&
         (next == run.total ||
          (options.checkpointEvery > 0 && next % options.checkpointEvery == 0));
}

namespace {
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
} // namespace

namespace {
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
} // namespace

namespace {
/// Device d's loss of step t into `losses` ([t * N + q]): a pipeline's loss
/// device writes the step's loss for every device, a data-parallel device
/// its own.
void storeLoss(const Run &run, std::vector<float> &losses, int64_t t, int d,
               float loss) {
  bool pipeline = plan::isPipeline(run.plan);
  for (int q = 0; q < run.deviceCount; ++q)
    if (pipeline || q == d)
      losses[t * run.deviceCount + q] = loss;
}

/// Whether the loss's device adjusts the loss scale of step t in step t +
/// 1's program (dp, which updates at the start of the next step; 2bw,
/// whose stages update a step late), not in step t's own (the flushing
/// pipelines).
static bool scalesAStepLate(const Run &run) {
  if (!plan::isPipeline(run.plan))
    return true;
  for (const plan::Instruction &instruction :
       run.plan.devices(run.plan.loss_device()).instructions())
    if (instruction.op() == "unscale_grads")
      return instruction.drain();
  return false;
}

/// How many steps after step t's program the loss-scale buffer holds step
/// t's adjustment: 1 under dp (it unscales step t's means at the start of
/// step t + 1), 1 + D under cdp, whose device 0 adjusts the scale where it
/// applies its first trained stage's means, D steps later still (the
/// `delay` of that wait).
static int64_t lossScaleLag(const Run &run) {
  const plan::Device &device = run.plan.devices(0);
  bool ownUnscale = false, adjusted = false;
  int64_t delay = 0, adjustDelay = 0;
  for (const plan::Instruction &instruction : device.instructions()) {
    int64_t adjust = plan::intAttribute(instruction, "adjust", 1);
    if (instruction.op() == "unscale_grads" && adjust == 0)
      ownUnscale = true;
    if (instruction.op() == "unscale_grads" && adjust == 1 && !adjusted) {
      adjustDelay = delay;
      adjusted = true;
    }
    if (instruction.op() == "reduce_wait" || instruction.op() == "chain_wait")
      delay = plan::intAttribute(instruction, "delay", 0);
  }
  return 1 + (ownUnscale ? adjustDelay : 0);
}

/// When each step ends, and the --metrics lines written as steps end: a
/// step ends when every device wrote its loss (a pipeline: the loss device,
/// for all); its line gives the samples/s of that step alone. Under mpirun
/// the other processes' devices post their losses to the root as their
/// steps end (remoteLoss), kept apart from `losses` until the run's facts
/// are gathered.
class StepLog {
public:
  StepLog(Run &run, int64_t start, int writers)
      : run(run), start(start), written(start), writers(writers),
        tracksScale(run.lossScaled()), lateScale(scalesAStepLate(run)),
        arrived(run.total), endNanos(run.total),
        scales(tracksScale ? run.total : 0),
        remote(run.mpi && run.root() ? run.total * run.deviceCount : 0, 0.0f),
        began(std::chrono::steady_clock::now()) {}
  /// Another process's device's loss of a step (the root, under mpirun).
  void remoteLoss(const Fabric::StepLoss &posted) {
    if (posted.step < 0 || posted.step >= run.total)
      return;
    if (posted.scaleOnly) {
      noteScale(posted.step, {posted.lossScale, posted.overflowed});
      return;
    }
    storeLoss(run, remote, posted.step, posted.device, posted.loss);
    if (plan::isPipeline(run.plan) && !lateScale)
      noteScale(posted.step, {posted.lossScale, posted.overflowed});
    stepDone(posted.step);
  }
  /// The root, under mpirun: the losses other processes posted so far
  /// (`wait`: all of them, until every process said it is done); a
  /// pipeline whose loss device runs elsewhere progresses with them.
  void takeRemoteLosses(std::atomic<int64_t> &progress, bool wait) {
    Fabric::StepLoss posted;
    while (finishedProcesses + 1 < run.fabric->processCount() &&
           run.fabric->takeStepLoss(posted, wait)) {
      if (posted.step < 0) {
        ++finishedProcesses;
        continue;
      }
      remoteLoss(posted);
      if (plan::isPipeline(run.plan) && !posted.scaleOnly &&
          progress < posted.step + 1)
        progress = posted.step + 1;
    }
  }
  /// The run's facts are gathered: `losses` holds every device's.
  void remoteGathered() { remote.assign(remote.size(), 0.0f); }
  /// A writer's losses of step t are in place.
  void stepDone(int64_t t) {
    if (++arrived[t] == writers)
      endNanos[t] = std::max<int64_t>(1, sinceBegan());
  }
  /// Whether the lines carry the loss scale (fp16, every strategy that
  /// scales: dp's device 0 reads it after the next step's program, which
  /// unscales the step's means first; a pipeline's loss device with its
  /// step's loss, or (2bw) after the next step's program as dp's, under
  /// mpirun posted to the root apart from the loss: StepLoss::scaleOnly).
  bool tracksLossScale() const { return tracksScale; }
  /// fp16: the loss scale after step t's gradients were unscaled and
  /// whether its updates skipped. dp's device 0 notes it: dp updates at
  /// the start of the next step's program, so step t's are known once
  /// step t + 1 ran (the last step's after the flush); its line waits. A
  /// pipeline's loss device notes it with the step's loss.
  void noteScale(int64_t t, LossScaleState state) {
    if (!tracksScale || t < start || t >= run.total)
      return;
    scales[t] = state;
    scalesKnown = t + 1;
  }
  /// The lines of the steps that ended, but the last step's (its line waits
  /// for the evaluation).
  void writeEnded(const std::vector<float> &losses) {
    while (written + 1 < run.total && endNanos[written] != 0 &&
           (!tracksScale || written < scalesKnown))
      writeLine(losses, written++, Evaluation());
  }
  /// A run stopped before step `next` by a signal: the lines of the steps
  /// before it, a step whose updates wait for the resume without its loss
  /// scale (fp16 under dp).
  void writeStopped(const std::vector<float> &losses, int64_t next) {
    for (; written < next; ++written)
      writeLine(losses, written, Evaluation());
  }
  /// After the run: the remaining lines, the last with `evaluation`, and
  /// for the summary under fp16 the steps skipped and the last scale.
  void writeRest(const std::vector<float> &losses, double elapsed,
                 const Evaluation &evaluation) {
    if (tracksScale && run.total > start) {
      run.overflowedSteps = 0;
      for (int64_t t = start; t < run.total; ++t)
        run.overflowedSteps += scales[t].overflowed;
      run.lossScale = scales[run.total - 1].scale;
    }
    average = elapsed > 0 ? (run.total - start) * run.perStep / elapsed : 0.0;
    for (; written < run.total; ++written)
      writeLine(losses, written,
                written + 1 == run.total ? evaluation : Evaluation());
  }

  int64_t sinceBegan() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now() - began)
        .count();
  }
  /// The loss of the last step before `done` whose writers all wrote
  /// theirs (device 0 may be a step ahead of the others, and other
  /// processes' losses arrive as the root polls); negative where none has.
  double latestLoss(const std::vector<float> &losses, int64_t done) const {
    for (int64_t t = std::min(done, run.total) - 1;
         t >= std::max(start, done - 8); --t)
      if (endNanos[t] != 0)
        return lossOf(losses, t);
    return -1;
  }

private:
  double lossOf(const std::vector<float> &losses, int64_t t) const {
    int N = run.deviceCount;
    double loss = 0;
    for (int d = 0; d < N; ++d)
      loss += losses[t * N + d] + (remote.empty() ? 0.0f : remote[t * N + d]);
    return loss / N;
  }
  void writeLine(const std::vector<float> &losses, int64_t t,
                 const Evaluation &evaluation) {
    if (!run.logsSteps())
      return;
    double loss = lossOf(losses, t);
    if (tracksScale) { // unknown (0: not logged) before a stop's resume
      LossScaleState state = t < scalesKnown ? scales[t] : LossScaleState();
      run.lossScale = state.scale;
      run.lastStepOverflowed = state.overflowed;
    }
    writeMetricsLine(run, t, loss, rateAt(t), evaluation);
  }
  /// Samples/s of step t: of that step alone in one process; under mpirun,
  /// where other processes' steps are seen ending as the root polls (every
  /// 20 ms), over the steps that ended in the last 100 ms or more.
  double rateAt(int64_t t) const {
    if (endNanos[t] == 0)
      return average;
    int64_t window = run.mpi ? 100'000'000 : 0;
    int64_t u = t - 1; // the last step ended before the window
    while (u >= start && endNanos[u] != 0 && endNanos[t] - endNanos[u] < window)
      --u;
    if (u >= start && endNanos[u] == 0)
      return average;
    int64_t from = u >= start ? endNanos[u].load() : 0;
    double seconds = (endNanos[t] - from) * 1e-9;
    return seconds > 0 ? (t - u) * run.perStep / seconds : 0.0;
  }

  Run &run;
  const int64_t start;
  int64_t written;
  const int writers;
  const bool tracksScale;
  /// The loss device knows step t's scale only after step t + 1 (dp, 2bw).
  const bool lateScale;
  std::vector<std::atomic<int>> arrived;
  std::vector<std::atomic<int64_t>> endNanos; ///< 0: not ended yet
  std::vector<LossScaleState> scales;         ///< by step (tracksScale)
  std::atomic<int64_t> scalesKnown{0};        ///< scales[t] written for t below
  std::vector<float> remote; ///< [t * N + d], the root under mpirun
  int finishedProcesses = 0; ///< other processes done posting losses
  std::chrono::steady_clock::time_point began;
  double average = 0;
};

/// Where the devices' threads meet and what they share.
struct DeviceThreads {
  const std::vector<std::vector<int64_t>> &orders;
  std::vector<float> &losses; ///< [t * N + d]
  StepLog &log;
  std::atomic<int64_t> &progress;
  StepRendezvous &rendezvous;
  CheckpointCuts &cuts;
  StopPoint &stop;
  int64_t start; ///< the first step (--resume's)
};
} // namespace

/// Device d's part of a multi-device run: every step (pipelines load each
/// micro-batch where a stage reads it, rows (t * M + k) * B on, the same
/// rows dp gives slot k), with the process's checkpoints, then the flush.
/// A checkpoint before step t + 1 is taken where its cut stops each device
/// in step t; a resumed run first finishes that step. Losses go to
/// `losses[t * N + d]`.
static void runDevice(Run &run, int d, DeviceThreads &shared) {
  const std::vector<std::vector<int64_t>> &orders = shared.orders;
  std::vector<float> &losses = shared.losses;
  std::atomic<int64_t> &progress = shared.progress;
  const RunOptions &options = run.options;
  const plan::Plan &plan = run.plan;
  omp_set_num_threads(run.threadsPerDevice);
  Executor &ex = *run.executors[d];
  bool pipeline = plan::isPipeline(plan);
  // fp16: the device whose loss-scale buffer the step log reads (dp's
  // device 0, a pipeline's loss device), and whether it holds step t's
  // scale after step t's program or only after step t + 1's.
  int scaleDevice = pipeline ? plan.loss_device() : 0;
  bool lateScale = scalesAStepLate(run);
  int64_t slots = run.slots, batch = run.batch;
  int size = plan.devices(d).instructions_size();
  Loader loader = [&](int input, int64_t t, int64_t k,
                      const TensorView &target) {
    int64_t first = (t * slots + k) * batch;
    if (options.data.empty()) {
      copyRows(run.feeds.at(input), target, plan.tensors(input).batch_axis(),
               run.feedRow(first), nullptr, run.feedOrder.get());
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
                  run.feedRow((t * slots + d) * batch), nullptr,
                  run.feedOrder.get());
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
    storeLoss(run, losses, t, d, loss);
    if (!std::isfinite(loss) && !run.lossScaled())
      throw RuntimeError(nonFiniteLoss(plan, ex, t, loss));
    LossScaleState scale;
    if (pipeline && !lateScale && shared.log.tracksLossScale()) {
      scale = readLossScale(run, ex);
      shared.log.noteScale(t, scale);
    }
    if (run.mpi && !run.root())
      run.fabric->postStepLoss({d, t, loss, scale.scale, scale.overflowed});
    shared.log.stepDone(t);
    if (pipeline || d == 0)
      progress = t + 1;
  };
  ex.setTotalSteps(run.total, checkpointDue(run, run.total));
  // fp16 under dp: the loss scale after step t's updates, for its line.
  bool notesScale =
      lateScale && d == scaleDevice && shared.log.tracksLossScale();
  int64_t lag = lossScaleLag(run);
  // After step t's program (or the flush's step t): step t - lag's scale.
  auto noteScale = [&](int64_t t) {
    if (!notesScale || t - lag + 1 < 0)
      return;
    LossScaleState scale = readLossScale(run, ex);
    shared.log.noteScale(t - lag + 1, scale);
    if (run.mpi && !run.root()) // a 2bw loss stage in another process
      run.fabric->postStepLoss(
          {d, t - lag + 1, 0.0f, scale.scale, scale.overflowed, true});
  };
  if (shared.start > 0 && !run.portableResume) // the checkpoint's cut step
    runPart(shared.start - 1, shared.cuts.at(shared.start, d), size);
  for (int64_t t = shared.start; t < run.total; ++t) {
    bool stop = !options.checkpoint.empty() && t + 1 < run.total &&
                shared.stop.checkpointBefore(t + 1);
    if (!checkpointDue(run, t + 1) && !stop) {
      runPart(t, 0, size);
      noteScale(t - 1);
      continue;
    }
    int cut = shared.cuts.at(t + 1, d);
    runPart(t, 0, cut);
    if (cut == size) // else step t - 1's updates may lie past the cut
      noteScale(t - 1);
    shared.rendezvous.meet(d, [&] {
      saveCheckpoint(options.checkpoint, run.checkpointScope(), run.identity,
                     t + 1);
    });
    if (stop) // the rest of step t is the checkpoint's in-flight work
      return;
    runPart(t, cut, size);
    if (cut < size)
      noteScale(t - 1);
  }
  ex.flush(run.total, &loader, {}, [&](int64_t st) { noteScale(st - 1); });
  if (lag == 1)
    noteScale(run.total - 1);
  ex.gatherOnDeviceZero(run.modelOnDeviceZero);
}

/// After a multi-device run, onto the root (collective under mpirun): the
/// step losses (each written by one device), every device's send log,
/// workspace and optimizer bytes.
static void gatherRunFacts(Run &run, std::vector<float> &losses) {
  std::vector<double> all(losses.begin(), losses.end());
  run.fabric->sumOntoRoot(all);
  std::copy(all.begin(), all.end(), losses.begin());
  run.sendLogs = run.fabric->gatherSendLogs();
  run.workspaceBytes.assign(run.deviceCount, 0.0);
  run.optimizerBytes.assign(run.deviceCount, 0.0);
  run.weightsReadBytes.assign(run.deviceCount, 0.0);
  for (int d = 0; d < run.deviceCount; ++d)
    if (run.executors[d]) {
      run.workspaceBytes[d] = run.executors[d]->workspaceBytes();
      run.optimizerBytes[d] = run.executors[d]->optimizerBytes();
      run.weightsReadBytes[d] = run.executors[d]->weightsReadBytes();
    }
  run.fabric->sumOntoRoot(run.workspaceBytes);
  run.fabric->sumOntoRoot(run.optimizerBytes);
  run.fabric->sumOntoRoot(run.weightsReadBytes);
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
  const RunOptions &options = run.options;
  // Each epoch's order, precomputed: device threads read it freely.
  std::vector<std::vector<int64_t>> orders;
  if (!options.data.empty())
    for (int64_t e = 0; e < run.epochs; ++e)
      orders.push_back(
          shuffledOrder(options.seed, e, run.train.labels.numel()));
  int N = run.deviceCount;
  // Only an evaluation after training needs the whole model on device 0;
  // the outputs read each trained tensor where it lies (fetchTrained).
  run.modelOnDeviceZero = evaluates(run);
  std::vector<float> losses(run.total * N, 0.0f);
  std::atomic<int64_t> progress{start};
  std::atomic<int> finishedThreads{0};
  std::mutex errorMutex;
  std::string firstError;
  auto started = std::chrono::steady_clock::now();
  int owned = 0;
  for (int d = 0; d < N; ++d)
    owned += run.fabric->owns(d);
  StepRendezvous rendezvous(owned, *run.fabric);
  CheckpointCuts cuts(run.plan);
  StepLog log(run, start, plan::isPipeline(run.plan) ? 1 : N);
  // Under mpirun the processes agree on where a signal stops the run.
  bool agreed = run.mpi && !options.checkpoint.empty();
  StopPoint stop(agreed);
  std::optional<StopAgreement> agreement;
  if (agreed)
    agreement.emplace(run, stop);
  DeviceThreads shared{orders,     losses, log,  progress,
                       rendezvous, cuts,   stop, start};
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
          // However the thread ends, the main loop below stops waiting
          // for it (a pipeline's progress is the loss device's, which
          // under mpirun may run in another process).
          struct Finished {
            std::atomic<int> &count;
            ~Finished() { ++count; }
          } finished{finishedThreads};
          try {
            runDevice(run, d, shared);
            run.fabric->setParked(d, true); // done: it sends no more
          } catch (const RuntimeError &e) {
            std::lock_guard<std::mutex> lock(errorMutex);
            if (firstError.empty())
              firstError = e.what();
            if (run.mpi) // every process ends, with this one's reason
              run.abortAll("device " + std::to_string(d) + ": " + e.what());
            run.fabric->endpoint(d).abort();
            rendezvous.abandon(e.what());
          }
        });
      } catch (const std::system_error &e) {
        stopStarted(e.what());
        throw;
      }
  ProgressLine line(run, start);
  auto threadsRunning = [&] {
    return finishedThreads < static_cast<int>(threads.size());
  };
  while (run.root()) {
    if (agreement)
      agreement->poll();
    log.takeRemoteLosses(progress, false);
    int64_t done = progress;
    log.writeEnded(losses);
    line.update(done, log.latestLoss(losses, done));
    if (done >= run.total || !firstError.empty() || !threadsRunning())
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Devices may wait for the processes' agreement on a stop: it goes on
  // until they end.
  while (agreement && threadsRunning()) {
    agreement->poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (std::thread &thread : threads)
    thread.join();
  if (agreement && firstError.empty())
    agreement->finish();
  if (run.mpi && firstError.empty()) {
    if (!run.root())
      run.fabric->postStepLoss({0, -1, 0.0f}); // done posting
    else
      log.takeRemoteLosses(progress, true); // all, before the run ends
  }
  line.finish();
  if (!firstError.empty())
    fail(firstError);
  if (stop.at() >= 0) {
    run.stoppedAt = stop.at();
    if (run.root()) {
      log.writeStopped(losses, stop.at());
      std::printf("%s\n", stopLine(run, stop.at()).c_str());
    }
    return;
  }
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  gatherRunFacts(run, losses);
  log.remoteGathered();
  if (!run.root())
    return;
  Evaluation evaluation;
  if (evaluates(run)) {
    writeStepOutputs(run); // before the evaluation reuses the buffers
    evaluation = evaluate(run);
  }
  log.writeRest(losses, elapsed, evaluation);
  // As the single-device epoch line: the mean over the last epoch's steps
  // this run made (with --feed, over all of them) whose losses are finite
  // (under fp16 an overflowing forward is a skipped step).
  int64_t from = std::max(start, run.total - run.stepsPerEpoch), counted = 0;
  double meanLoss = 0;
  for (int64_t t = from; t < run.total; ++t) {
    const float *stepLosses = &losses[t * N];
    if (!std::all_of(stepLosses, stepLosses + N,
                     [](float loss) { return std::isfinite(loss); }))
      continue;
    for (int d = 0; d < N; ++d)
      meanLoss += stepLosses[d] / N;
    ++counted;
  }
  meanLoss =
      counted ? meanLoss / counted : std::numeric_limits<double>::quiet_NaN();
  printRunSummary(run, start, meanLoss, elapsed, evaluation);
}

} // namespace cdp::runtime::training
