//===- SparseExchange.cpp - laysa's error feedback as instructions --------===//
//
// A stage's top-k exchange runs as four kinds of instruction: after the
// stage's backward, `sparse_absorb` folds each parameter's gradient into
// its error feedback (the mirror M, or the residual baseline's r); a time
// step later `sparse_select` writes the stage's selections into its
// communication buffers; one more time step later `sparse_gather`
// all-gathers every device's selection (values, then indices) into the
// stage's gathered buffers, in device order, and `sparse_apply` applies
// their mean. No instruction names a device: every device runs the same
// program (one template, as dp's devices do).
//
// A parameter whose count is its size goes whole: its values are its
// pending update in index order, with no indices.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "SparseMirror.h"

#include "../LearningRate.h"
#include "../SparseStage.h"
#include "cdp/Plan/PlanIO.h"

#include "cdp/Runtime/MessageTags.h"
#include <algorithm>

namespace cdp::runtime::cpu {

namespace {

/// One parameter's pending update: the step d = g + wd * W (through the
/// momentum buffer u = mu u + d where the optimizer keeps one, PyTorch's
/// SGD), times the scheduled learning rate, taken from the mirror or added
/// to the residual. The weight decay is part of what is sparsified.
class AbsorbKernel : public Kernel {
public:
  explicit AbsorbKernel(const KernelArgs &args)
      : weights(args.inputs[0]), gradient(args.inputs[1]),
        feedback(args.inputs[2]), rule(args), mirror(isMirrorForm(args)) {
    if (rule.hasFirst())
      momentum.assign(weights.numel(), 0.0f);
  }

  void run(const StepContext &) override {
    float rate = rule.scheduledLr(steps);
    ++steps;
    const float *w = weights.f32(), *g = gradient.f32();
    float *s = feedback.f32(), *u = momentum.data();
    float sign = mirror ? -rate : rate;
    for (int64_t i = 0, n = weights.numel(); i < n; ++i) {
      float d = g[i] + rule.weightDecay * w[i];
      if (u) {
        u[i] = steps == 1 ? d : rule.momentum * u[i] + d;
        d = u[i];
      }
      s[i] += sign * d;
    }
  }

  KernelState state() override {
    return absorbState(steps, weights,
                       momentum.empty() ? nullptr : momentum.data());
  }

private:
  TensorView weights, gradient, feedback;
  UpdateRule rule;
  bool mirror;
  int64_t steps = 0;
  std::vector<float> momentum;
};

/// Parameter p's pending update a: W - M, or r.
std::vector<float> pendingOf(const StageTensors &stage, size_t p, bool mirror) {
  const float *w = stage.weights[p].f32(), *s = stage.states[p].f32();
  int64_t n = stage.weights[p].numel();
  return mirror ? pendingUpdate(w, s, n) : std::vector<float>(s, s + n);
}

void registerSelect(KernelRegistry &registry) {
  addKernel(registry, "sparse_select", [](const KernelArgs &args) {
    auto stage = std::make_shared<StageTensors>(args);
    bool mirror = isMirrorForm(args);
    TensorView values = args.outputs[0];
    TensorView indices =
        args.outputs.size() > 1 ? args.outputs[1] : TensorView{};
    return [=](const StepContext &) {
      float *v = values.f32();
      int32_t *at =
          indices.data ? static_cast<int32_t *>(indices.data) : nullptr;
      for (size_t p = 0; p < stage->counts.size(); ++p) {
        std::vector<float> a = pendingOf(*stage, p, mirror);
        if (stage->whole(p)) {
          v = std::copy(a.begin(), a.end(), v);
          if (!mirror) // all of it sent: nothing left
            std::fill_n(stage->states[p].f32(), a.size(), 0.0f);
          continue;
        }
        SparseSelection chosen = selectTopK(
            a.data(), static_cast<int64_t>(a.size()), stage->counts[p]);
        v = std::copy(chosen.values.begin(), chosen.values.end(), v);
        at = std::copy(chosen.indices.begin(), chosen.indices.end(), at);
        if (!mirror) // the residual keeps what is not sent
          for (int32_t i : chosen.indices)
            stage->states[p].f32()[i] = 0.0f;
      }
    };
  });
}

/// Every device's selection of parameter p, in device order, read from
/// their values and indices at the parameter's offsets.
std::vector<SparseSelection>
selectionsOf(const std::vector<TensorView> &values,
             const std::vector<TensorView> &indices, int64_t valueAt,
             int64_t indexAt, int64_t count, bool whole) {
  std::vector<SparseSelection> workers(values.size());
  for (size_t j = 0; j < values.size(); ++j) {
    const float *v = values[j].f32() + valueAt;
    workers[j].values.assign(v, v + count);
    workers[j].indices.resize(static_cast<size_t>(count));
    if (whole)
      std::iota(workers[j].indices.begin(), workers[j].indices.end(), 0);
    else
      std::copy_n(static_cast<const int32_t *>(indices[j].data) + indexAt,
                  count, workers[j].indices.begin());
  }
  return workers;
}

/// The stage's selections of every device, one after another in device
/// order, into the gathered buffers (values, then indices where the stage
/// has a sparse parameter).
void registerGather(KernelRegistry &registry) {
  addKernel(registry, "sparse_gather", [](const KernelArgs &args) {
    if (!args.communicator)
      args.fail("needs a communicator (a multi-device plan)");
    Communicator *comm = args.communicator;
    DeviceLink *link = collectiveLinkFor(args); // a GPU's selections stay on it
    std::vector<TensorView> mine = args.inputs, all = args.outputs;
    int64_t stage = args.i("stage", 0), cycle = args.i("cycle", 1);
    int64_t timeStep = args.instruction->time_step();
    int device = args.device;
    return [=](const StepContext &context) {
      for (size_t kind = 0; kind < mine.size(); ++kind) {
        // Values and indices of a step's stage, beside the other tags.
        int64_t tag = tags::collectives::sparseSelection(context.step, stage,
                                                         int64_t(kind));
        if (!comm->allGather(
                tag,
                {mine[kind].dtype, mine[kind].data, mine[kind].numel(), link},
                {all[kind].dtype, all[kind].data, all[kind].numel(), link},
                timeStep + cycle * context.step))
          throw RuntimeError("device " + std::to_string(device) +
                             ": stopped while gathering the selections "
                             "(another device failed)");
      }
    };
  });
}

void registerApply(KernelRegistry &registry) {
  addKernel(registry, "sparse_apply", [](const KernelArgs &args) {
    auto stage = std::make_shared<StageTensors>(args);
    bool mirror = isMirrorForm(args);
    int self = args.device;
    size_t devices = static_cast<size_t>(args.i("devices", 1));
    size_t first = 2 * stage->counts.size();
    std::vector<TensorView> values, indices;
    for (size_t j = 0; j < devices; ++j) {
      values.push_back(devicePart(args.inputs[first], j, devices));
      indices.push_back(devicePart(args.inputs[first + 1], j, devices));
    }
    return [=](const StepContext &) {
      int64_t valueAt = 0, indexAt = 0;
      for (size_t p = 0; p < stage->counts.size(); ++p) {
        int64_t k = stage->counts[p], n = stage->weights[p].numel();
        bool whole = stage->whole(p);
        std::vector<SparseSelection> workers =
            selectionsOf(values, indices, valueAt, indexAt, k, whole);
        float *w = stage->weights[p].f32(), *s = stage->states[p].f32();
        if (mirror)
          applySparseUpdate(w, s, n, workers, self);
        else
          applySparseUpdate(w, nullptr, n, workers, self);
        // Sent whole, nothing is left pending: the mirror is W again.
        if (mirror && whole)
          std::copy(w, w + n, s);
        valueAt += k;
        indexAt += whole ? 0 : k;
      }
    };
  });
}

} // namespace

void registerSparseExchange(KernelRegistry &registry) {
  registry.add("sparse_absorb", Backend::CPU, [](const KernelArgs &args) {
    return std::make_unique<AbsorbKernel>(args);
  });
  registerSelect(registry);
  registerGather(registry);
  registerApply(registry);
}

} // namespace cdp::runtime::cpu
