//===- Optimizer.cpp - parameter updates and buffer writes ----------------===//

#include "CpuKernels.h"
#include "ParameterUpdate.h"

#include "../GradientClip.h"
#include "../LearningRate.h"
#include "../LossScale.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace cdp::runtime::cpu {

namespace {

/// PyTorch's SGD (dampening 0, first step sets the momentum buffer to the
/// gradient), Adam (L2 weight decay added to the gradient) and AdamW (the
/// decay decoupled: the parameter shrinks by lr * decay first).
///
/// A kernel that took over the updates after it (`takeOver`: rules equal
/// but for weight decay, no loss scale) runs them all in one parallel loop
/// over slices of at most kSliceElements, each slice by its tensor's rule at
/// the count they share: the same float operations per element as one by
/// one, so the same bits.
class UpdateKernel : public Kernel {
public:
  explicit UpdateKernel(const KernelArgs &args)
      : param(args.inputs[0]), grad(args.inputs[1]), rule(args) {
    if (args.inputs.size() > 2) // the loss-scale buffer: skip on overflow
      lossScale = args.inputs[2];
    if (rule.hasFirst())
      first.assign(param.numel(), 0.0f);
    if (rule.hasSecond())
      second.assign(param.numel(), 0.0f);
  }

  void run(const StepContext &context) override {
    bool together = !context.oneByOne && !followers.empty() && countsAgree();
    // The schedule advances every step, skipped or not (a scheduler.step()
    // per iteration beside GradScaler); the update count only with an
    // update (Adam's bias corrections, as optimizer.step()'s).
    float rate = rule.scheduledLr(scheduled);
    ++scheduled;
    if (lossScale.data && lossScale.f32()[kOverflow] != 0.0f)
      return; // GradScaler.step: an overflowed step changes nothing
    ++steps;
    if (updated) { // by the kernel that took this one over
      updated = false;
      return;
    }
    if (!together) {
      update({this, 0, param.numel()}, rate);
      return;
    }
    for (UpdateKernel *follower : followers)
      follower->updated = true;
    int64_t count = static_cast<int64_t>(slices.size());
#pragma omp parallel for schedule(dynamic) if (count > 1)
    for (int64_t i = 0; i < count; ++i)
      update(slices[i], rate);
  }

  size_t takeOver(Kernel *const *following, size_t count) override {
    if (lossScale.data)
      return 0;
    for (size_t k = 0; k < count; ++k) {
      auto *next = dynamic_cast<UpdateKernel *>(following[k]);
      if (!next || next->lossScale.data || !rule.sameButWeightDecay(next->rule))
        break;
      followers.push_back(next);
    }
    for (UpdateKernel *kernel : members())
      for (int64_t at = 0, n = kernel->param.numel(); at < n;
           at += kSliceElements)
        slices.push_back({kernel, at, std::min(n - at, kSliceElements)});
    return followers.size();
  }

  KernelState state() override {
    KernelState result;
    result.counter = &steps;
    if (lossScale.data)
      result.scheduleCounter = &scheduled;
    auto add = [&](const char *name, std::vector<float> &values) {
      if (values.empty())
        return;
      TensorView view = param;
      view.data = values.data();
      result.tensors.emplace_back(name, view);
    };
    add(rule.adam ? "exp_avg" : "momentum_buffer", first);
    add("exp_avg_sq", second);
    return result;
  }

private:
  static constexpr int64_t kSliceElements = int64_t(1) << 16;

  /// Elements [offset, offset + length) of `kernel`'s tensor.
  struct Slice {
    UpdateKernel *kernel;
    int64_t offset, length;
  };

  std::vector<UpdateKernel *> members() {
    std::vector<UpdateKernel *> all = {this};
    all.insert(all.end(), followers.begin(), followers.end());
    return all;
  }

  /// Whether the kernels taken over have counted the steps this one has (a
  /// checkpoint restores each kernel's counts; else one by one).
  bool countsAgree() const {
    for (const UpdateKernel *follower : followers)
      if (follower->steps != steps || follower->scheduled != scheduled)
        return false;
    return true;
  }

  /// Update number `steps` of a slice, by its tensor's rule.
  void update(const Slice &slice, float rate) const {
    UpdateKernel &k = *slice.kernel;
    auto at = [&](std::vector<float> &moment) {
      return moment.empty() ? nullptr : moment.data() + slice.offset;
    };
    applyUpdate(k.rule, steps, rate, k.param.f32() + slice.offset,
                k.grad.f32() + slice.offset, at(k.first), at(k.second),
                slice.length);
  }

  TensorView param, grad, lossScale;
  UpdateRule rule;
  int64_t steps = 0, scheduled = 0;
  std::vector<float> first, second;
  std::vector<UpdateKernel *> followers; ///< taken over
  std::vector<Slice> slices;             ///< this kernel's and theirs
  bool updated = false; ///< this step's update done by the kernel ahead
};

/// The sum of the squares of every element of `grads`, in double (four
/// partial sums, so the loop vectorises).
double squaredNorm(const std::vector<TensorView> &grads) {
  double total = 0;
  for (const TensorView &g : grads) {
    const float *x = g.f32();
    int64_t n = g.numel(), i = 0;
    double sums[4] = {0, 0, 0, 0};
    for (; i + 4 <= n; i += 4)
      for (int k = 0; k < 4; ++k)
        sums[k] += static_cast<double>(x[i + k]) * x[i + k];
    for (; i < n; ++i)
      sums[0] += static_cast<double>(x[i]) * x[i];
    total += (sums[0] + sums[1]) + (sums[2] + sums[3]);
  }
  return total;
}

/// Gradient clipping by global norm. `squared_norm`: one stage's share of
/// the squared norm (pipelines send it to the other stages).
/// `clip_grad_norm`: scales its gradients in place by clipCoefficient of
/// the squared norm: the sum of its first `partials` inputs (every stage's
/// share, in stage order) or, with none, of its own gradients.
void registerGradientClip(KernelRegistry &registry) {
  addKernel(registry, "squared_norm", [](const KernelArgs &args) {
    std::vector<TensorView> grads = args.inputs;
    TensorView out = args.outputs[0];
    return [=](const StepContext &) {
      out.f32()[0] = static_cast<float>(squaredNorm(grads));
    };
  });
  addKernel(registry, "clip_grad_norm", [](const KernelArgs &args) {
    auto partials = static_cast<size_t>(args.i("partials", 0));
    std::vector<TensorView> shares(args.inputs.begin(),
                                   args.inputs.begin() + partials),
        grads(args.inputs.begin() + partials, args.inputs.end());
    float maxNorm = static_cast<float>(args.f("max_norm", 1.0));
    return [=](const StepContext &) {
      double squared = 0;
      for (const TensorView &share : shares)
        squared += share.f32()[0];
      if (shares.empty())
        squared = squaredNorm(grads);
      float coefficient = clipCoefficient(squared, maxNorm);
      if (coefficient >= 1.0f)
        return; // multiplying by 1 changes nothing
      for (const TensorView &g : grads)
        for (int64_t i = 0, n = g.numel(); i < n; ++i)
          g.f32()[i] *= coefficient;
    };
  });
}

/// Dynamic loss scaling. `loss_scale`: the backward's seed, the current
/// scale. `found_inf`: 1 where any of the gradients is not finite, else 0
/// (a pipeline stage's flag for the others). `unscale_grads`: the
/// gradients times 1 / scale, overflow noted (in them, or in any of the
/// `flags` inputs after the buffer: every stage's found_inf) and the scale
/// adjusted (LossScale.h); with `adjust` 0 (cdp: a device's own gradients
/// before they are reduced) the gradients only.
void registerLossScaling(KernelRegistry &registry) {
  addKernel(registry, "loss_scale", [](const KernelArgs &args) {
    TensorView state = args.inputs[0], seed = args.outputs[0];
    return [=](const StepContext &) { seed.f32()[0] = state.f32()[kScale]; };
  });
  addKernel(registry, "found_inf", [](const KernelArgs &args) {
    std::vector<TensorView> grads = args.inputs;
    TensorView flag = args.outputs[0];
    return [=](const StepContext &) {
      bool found = false;
      for (const TensorView &g : grads)
        for (int64_t i = 0, n = g.numel(); i < n && !found; ++i)
          found = !std::isfinite(g.f32()[i]);
      flag.f32()[0] = found ? 1.0f : 0.0f;
    };
  });
  addKernel(registry, "unscale_grads", [](const KernelArgs &args) {
    TensorView state = args.inputs[0];
    auto flagCount = static_cast<size_t>(args.i("flags", 0));
    std::vector<TensorView> flags(args.inputs.begin() + 1,
                                  args.inputs.begin() + 1 + flagCount),
        grads(args.inputs.begin() + 1 + flagCount, args.inputs.end());
    float growth = static_cast<float>(args.f("growth_factor", 2.0)),
          backoff = static_cast<float>(args.f("backoff_factor", 0.5));
    int64_t interval = args.i("growth_interval", 2000);
    int64_t adjust = args.i("adjust", 1);
    return [=](const StepContext &) {
      float *s = state.f32(), inverse = inverseLossScale(s);
      bool overflow = false;
      for (const TensorView &flag : flags)
        overflow |= flag.f32()[0] != 0.0f;
      for (const TensorView &g : grads)
        for (int64_t i = 0, n = g.numel(); i < n; ++i) {
          float &x = g.f32()[i];
          overflow |= !std::isfinite(x);
          x *= inverse;
        }
      if (adjust == 1)
        adjustLossScale(s, overflow, growth, backoff, interval);
      else if (adjust == 2) // mark: the skip flag only
        s[kOverflow] = overflow ? 1.0f : 0.0f;
    };
  });
}

} // namespace

void registerOptimizer(KernelRegistry &registry) {
  registerGradientClip(registry);
  registerLossScaling(registry);
  registry.add("update", Backend::CPU, [](const KernelArgs &args) {
    return std::make_unique<UpdateKernel>(args);
  });
  addKernel(registry, "assign", [](const KernelArgs &args) {
    TensorView buffer = args.inputs[0], value = args.inputs[1];
    size_t bytes = byteSize(buffer);
    return [=](const StepContext &) {
      std::memcpy(buffer.data, value.data, bytes);
    };
  });
  // Gradient accumulation over the step's slots: acc = sum_k g_k / M.
  // `reset` (pipelines: the step's first micro-batch) starts a new sum;
  // without it the slot of the step decides (single with M slots).
  addKernel(registry, "accumulate", [](const KernelArgs &args) {
    TensorView g = args.inputs[0], acc = args.outputs[0];
    float scale = 1.0f / static_cast<float>(args.i("slots", 1));
    int64_t reset = args.i("reset", -1);
    int64_t n = g.numel();
    return [=](const StepContext &context) {
      bool first = reset >= 0 ? reset != 0 : context.slot == 0;
      for (int64_t i = 0; i < n; ++i)
        acc.f32()[i] = (first ? 0.0f : acc.f32()[i]) + g.f32()[i] * scale;
    };
  });
  // The gradient stays where autodiff left it; the executor records it.
  addKernel(registry, "gradient",
            [](const KernelArgs &) { return [](const StepContext &) {}; });
}

void registerAll(KernelRegistry &registry);

} // namespace cdp::runtime::cpu

namespace cdp::runtime {
void registerCpuKernels(KernelRegistry &registry) {
  cpu::registerElementwise(registry);
  cpu::registerLinalg(registry);
  cpu::registerDnnlConvolution(registry); // after the im2col fallbacks
  cpu::registerPooling(registry);
  cpu::registerNormalization(registry);
  cpu::registerAttention(registry);
  cpu::registerShape(registry);
  cpu::registerSelection(registry);
  cpu::registerIndexing(registry);
  cpu::registerLoss(registry);
  cpu::registerOptimizer(registry);
  cpu::registerShardUpdate(registry);
  cpu::registerCommunication(registry);
  cpu::registerSparseExchange(registry);
  cpu::registerDnnlPrimitives(
      registry); // after the project kernels they fall back to
  cpu::registerPoolingFastPaths(registry); // ahead of oneDNN's pooling
}
} // namespace cdp::runtime
