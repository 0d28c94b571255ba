//===- Inference.cpp - running an inference plan --------------------------===//
//
// A forward-only plan over its feeds, batch by batch.
//
//===----------------------------------------------------------------------===//

#include "Run.h"

namespace cdp::runtime::training {

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
    fail("--feed: an inference plan's feeds hold no samples along their "
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

} // namespace cdp::runtime::training
