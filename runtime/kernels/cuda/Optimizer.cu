//===- Optimizer.cu - parameter updates and buffer writes on the GPU ------===//
//
// The CPU's update rules element for element, one fused kernel per
// parameter; the learning rate and bias corrections are computed on the
// host per update (the step count lives there) and passed by value. The
// moments live in device memory of the kernel's own, allocated at load.
// Under fp16's loss scaling whether a step updates at all is known on the
// device only (the overflow flag), so there the count lives on the device
// too and one thread computes the step's values before the update reads
// them: no synchronisation per update.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "Reduce.cuh"

#include "../GradientClip.h"
#include "../LearningRate.h"
#include "../LossScale.h"
#include "../MessageBuffers.h"
#include "../ShardOperands.h"
#include "cdp/Plan/ShardLayout.h"
#include "cdp/Runtime/MessageTags.h"

#include <optional>

namespace cdp::runtime::cuda {

namespace {

struct SgdStep {
  float rate, momentum, weightDecay;
  bool first; ///< the first update sets the momentum buffer to the gradient
};

__device__ void sgdElement(int64_t i, float *p, const float *g, float *buffer,
                           const SgdStep &s) {
  float d = g[i] + s.weightDecay * p[i];
  if (buffer) {
    buffer[i] = s.first ? d : s.momentum * buffer[i] + d;
    d = buffer[i];
  }
  p[i] -= s.rate * d;
}

__global__ void sgdKernel(float *p, const float *g, float *buffer, int64_t n,
                          SgdStep s) {
  CDP_FOR_EACH(i, n) { sgdElement(i, p, g, buffer, s); }
}

struct AdamStep {
  float beta1, beta2, epsilon, weightDecay, stepSize, root2, shrink;
  bool decoupled;
};

__device__ void adamElement(int64_t i, float *p, const float *g, float *first,
                            float *second, const AdamStep &s) {
  float d = g[i];
  if (s.decoupled)
    p[i] *= s.shrink;
  else
    d += s.weightDecay * p[i];
  first[i] = s.beta1 * first[i] + (1.0f - s.beta1) * d;
  second[i] = s.beta2 * second[i] + (1.0f - s.beta2) * d * d;
  p[i] -= s.stepSize * first[i] / (sqrtf(second[i]) / s.root2 + s.epsilon);
}

__global__ void adamKernel(float *p, const float *g, float *first,
                           float *second, int64_t n, AdamStep s) {
  CDP_FOR_EACH(i, n) { adamElement(i, p, g, first, second, s); }
}

/// The most elements one block of a multi-tensor launch covers: a stage's
/// tensors are cut into slices of at most this many, a block each.
constexpr int64_t kSliceElements = int64_t(1) << 16;

/// Calls visit(begin, end) for each slice of a tensor of n elements.
template <typename Visit> void forEachSlice(int64_t n, Visit visit) {
  for (int64_t at = 0; at < n; at += kSliceElements)
    visit(at, std::min(n, at + kSliceElements));
}

/// `values` copied into device memory of a kernel's own, at load (`what`
/// names the kernel in a failure).
template <typename T>
std::unique_ptr<Scratch> uploadedAtLoad(CudaDevice &device,
                                        const std::vector<T> &values,
                                        const char *what) {
  std::unique_ptr<Scratch> memory =
      std::make_unique<Scratch>(device, values.size() * sizeof(T));
  checkCuda(cudaMemcpy(memory->as<void>(), values.data(),
                       values.size() * sizeof(T), cudaMemcpyHostToDevice),
            what);
  return memory;
}

/// Elements [begin, end) of one tensor of a multi-tensor update, with its
/// weight decay (the rest of the rule the tensors share).
struct UpdateSlice {
  float *p;
  const float *g;
  float *first, *second;
  int64_t begin, end;
  float weightDecay;
};

/// One block per slice: the updates of a stage's tensors in one launch,
/// each element as sgdKernel or adamKernel updates it.
__global__ void sgdSlicesKernel(const UpdateSlice *slices, SgdStep s) {
  UpdateSlice slice = slices[blockIdx.x];
  s.weightDecay = slice.weightDecay;
  for (int64_t i = slice.begin + threadIdx.x; i < slice.end; i += blockDim.x)
    sgdElement(i, slice.p, slice.g, slice.first, s);
}

__global__ void adamSlicesKernel(const UpdateSlice *slices, AdamStep s,
                                 float rate) {
  UpdateSlice slice = slices[blockIdx.x];
  s.weightDecay = slice.weightDecay;
  // The host's 1 - rate * decay, rounded as it rounds (no fused multiply-add).
  s.shrink = __fsub_rn(1.0f, __fmul_rn(rate, slice.weightDecay));
  for (int64_t i = slice.begin + threadIdx.x; i < slice.end; i += blockDim.x)
    adamElement(i, slice.p, slice.g, slice.first, slice.second, s);
}

/// An fp16 plan's update step as the device decides it: whether the step
/// overflowed, the updates applied so far, and the step's values.
struct DeviceStep {
  long long count;
  int skip;
  SgdStep sgd;
  AdamStep adam;
};

/// One thread: the overflow flag decides; an applied update counts and
/// gets its bias corrections (Adam) or first-step rule (momentum).
__global__ void prepareStepKernel(const float *lossScale, DeviceStep *step,
                                  SgdStep sgd, AdamStep adam, float rate,
                                  bool isAdam) {
  step->skip = lossScale[kOverflow] != 0.0f;
  if (step->skip)
    return;
  long long t = ++step->count;
  if (isAdam) {
    float correction1 = 1.0f - powf(adam.beta1, static_cast<float>(t));
    float correction2 = 1.0f - powf(adam.beta2, static_cast<float>(t));
    adam.stepSize = rate / correction1;
    adam.root2 = sqrtf(correction2);
    step->adam = adam;
  } else {
    sgd.first = t == 1;
    step->sgd = sgd;
  }
}

__global__ void setCountKernel(DeviceStep *step, long long count) {
  step->count = count;
}

/// The update the device decided, with this range's tensor's weight decay
/// (and AdamW's shrink from it).
__global__ void sgdStepKernel(float *p, const float *g, float *buffer,
                              int64_t n, const DeviceStep *step, float decay) {
  if (step->skip)
    return;
  SgdStep s = step->sgd;
  s.weightDecay = decay;
  CDP_FOR_EACH(i, n) { sgdElement(i, p, g, buffer, s); }
}

__global__ void adamStepKernel(float *p, const float *g, float *first,
                               float *second, int64_t n, const DeviceStep *step,
                               float decay, float shrink) {
  if (step->skip)
    return;
  AdamStep s = step->adam;
  s.weightDecay = decay;
  s.shrink = shrink;
  CDP_FOR_EACH(i, n) { adamElement(i, p, g, first, second, s); }
}

__global__ void accumulateKernel(const float *g, float *acc, int64_t n,
                                 float scale, bool first) {
  CDP_FOR_EACH(i, n) { acc[i] = (first ? 0.0f : acc[i]) + g[i] * scale; }
}

/// Elements [begin, end) of one gradient: a block of the launches that
/// cover a stage's gradients at once (the clip, the loss scale's checks).
struct GradientSlice {
  float *g;
  int64_t begin, end;
};

/// Gradients cut into slices of at most kSliceElements, a block each, so
/// that one launch covers them all over the whole GPU (a launch per tensor,
/// or a block per tensor, left most of it idle); the table is built at load.
class GradientSlices {
public:
  GradientSlices(const KernelArgs &args, const std::vector<TensorView> &grads) {
    std::vector<GradientSlice> slices;
    for (const TensorView &g : grads)
      forEachSlice(g.numel(), [&](int64_t begin, int64_t end) {
        slices.push_back({g.f32(), begin, end});
      });
    count = static_cast<int64_t>(slices.size());
    if (count > 0)
      memory = uploadedAtLoad(deviceOf(args), slices,
                              args.instruction->op().c_str());
  }
  int64_t size() const { return count; }
  unsigned blocks() const { return static_cast<unsigned>(count); }
  const GradientSlice *table() const {
    return memory ? memory->as<GradientSlice>() : nullptr;
  }

private:
  std::unique_ptr<Scratch> memory;
  int64_t count = 0;
};

/// One block per slice: its squares summed in double, in a fixed order,
/// into partials[slice].
__global__ void sliceSquaresKernel(const GradientSlice *slices,
                                   double *partials) {
  GradientSlice slice = slices[blockIdx.x];
  double sum = 0;
  for (int64_t i = slice.begin + threadIdx.x; i < slice.end; i += blockDim.x)
    sum += static_cast<double>(slice.g[i]) * slice.g[i];
  sum = blockSum(sum);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = sum;
}

/// One thread: the squared norm (the slices' partials in order, or the
/// stages' shares, in stage order) into the clip coefficient, or with
/// `asShare` the float share itself.
__global__ void clipCoefficientKernel(const double *partials, int64_t slices,
                                      const float *const *shares, int count,
                                      float maxNorm, bool asShare, float *out) {
  double squared = 0.0;
  if (count == 0)
    for (int64_t s = 0; s < slices; ++s)
      squared += partials[s];
  for (int k = 0; k < count; ++k)
    squared += *shares[k];
  *out =
      asShare ? static_cast<float>(squared) : clipCoefficient(squared, maxNorm);
}

__global__ void scaleSlicesKernel(const GradientSlice *slices,
                                  const float *coefficient) {
  float c = *coefficient;
  if (c >= 1.0f)
    return;
  GradientSlice slice = slices[blockIdx.x];
  for (int64_t i = slice.begin + threadIdx.x; i < slice.end; i += blockDim.x)
    slice.g[i] *= c;
}

/// The gradients after the first `partials` inputs.
std::vector<TensorView> gradientsAfter(const KernelArgs &args,
                                       size_t partials) {
  return {args.inputs.begin() + std::min(partials, args.inputs.size()),
          args.inputs.end()};
}

/// squared_norm and clip_grad_norm (the CPU kernels say what they mean),
/// on the device's stream with no host synchronisation: the sums and the
/// coefficient stay in device memory. The squares and the scale are one
/// launch each over the gradients' slices (a block per tensor took a large
/// model's norm on one multiprocessor); the partial sums are added in
/// slice order by one thread, so the norm does not change from run to run.
class GradientClipKernel : public Kernel {
public:
  GradientClipKernel(const KernelArgs &args, bool clip)
      : clip(clip), maxNorm(static_cast<float>(args.f("max_norm", 1.0))),
        coefficient(deviceOf(args), sizeof(float)),
        slices(args, gradientsAfter(args, partialsOf(args, clip))) {
    size_t partials = partialsOf(args, clip);
    std::vector<const float *> pointers;
    for (size_t k = 0; k < partials; ++k)
      pointers.push_back(args.inputs[k].f32());
    if (!clip)
      out = args.outputs[0].f32();
    if (!pointers.empty())
      shares = uploadedAtLoad(deviceOf(args), pointers, "clip_grad_norm");
    count = static_cast<int>(pointers.size());
    if (slices.size() > 0)
      sums = std::make_unique<Scratch>(deviceOf(args),
                                       slices.size() * sizeof(double));
  }

  void run(const StepContext &context) override {
    cudaStream_t stream = streamOf(context);
    if (count == 0 && slices.blocks() > 0)
      sliceSquaresKernel<<<slices.blocks(), kThreads, 0, stream>>>(
          slices.table(), sums->as<double>());
    clipCoefficientKernel<<<1, 1, 0, stream>>>(
        sums ? sums->as<double>() : nullptr, count == 0 ? slices.size() : 0,
        shares ? shares->as<const float *>() : nullptr, count, maxNorm, !clip,
        clip ? coefficient.as<float>() : out);
    if (clip && slices.blocks() > 0)
      scaleSlicesKernel<<<slices.blocks(), kThreads, 0, stream>>>(
          slices.table(), coefficient.as<float>());
    launched(clip ? "clip_grad_norm" : "squared_norm");
  }
  bool sameEveryStep() const override { return true; }

private:
  static size_t partialsOf(const KernelArgs &args, bool clip) {
    return clip ? static_cast<size_t>(args.i("partials", 0)) : 0;
  }

  bool clip;
  float maxNorm;
  Scratch coefficient;
  GradientSlices slices;
  std::unique_ptr<Scratch> shares, sums;
  float *out = nullptr;
  int count = 0;
};

/// One block per slice: every gradient times 1 / scale, the reciprocal
/// read from the loss-scale buffer on the device; *overflow set where a
/// gradient is not finite.
__global__ void unscaleSlicesKernel(const GradientSlice *slices,
                                    const float *state, int *overflow) {
  float inverse = inverseLossScale(state);
  GradientSlice slice = slices[blockIdx.x];
  for (int64_t i = slice.begin + threadIdx.x; i < slice.end; i += blockDim.x) {
    float x = slice.g[i];
    if (!isfinite(x))
      *overflow = 1;
    slice.g[i] = x * inverse;
  }
}

/// One block per slice: *overflow set where a gradient is not finite
/// (found_inf's check).
__global__ void findNonFiniteSlicesKernel(const GradientSlice *slices,
                                          int *overflow) {
  GradientSlice slice = slices[blockIdx.x];
  for (int64_t i = slice.begin + threadIdx.x; i < slice.end; i += blockDim.x)
    if (!isfinite(slice.g[i]))
      *overflow = 1;
}

/// *overflow set where another stage's flag says so.
__global__ void takeFlagKernel(const float *flag, int *overflow) {
  if (*flag != 0.0f)
    *overflow = 1;
}

__global__ void writeFlagKernel(const int *overflow, float *flag) {
  *flag = *overflow != 0 ? 1.0f : 0.0f;
}

__global__ void adjustKernel(float *state, const int *overflow, float growth,
                             float backoff, int64_t interval) {
  adjustLossScale(state, *overflow != 0, growth, backoff, interval);
}

__global__ void markKernel(float *state, const int *overflow) {
  state[kOverflow] = *overflow != 0 ? 1.0f : 0.0f;
}

/// unscale_grads (the CPU kernel says what it means) on the device's
/// stream with no host synchronisation: the overflow flag and the scale
/// stay in device memory; the gradients in one launch over their slices.
class UnscaleKernel : public Kernel {
public:
  explicit UnscaleKernel(const KernelArgs &args)
      : state(args.inputs[0]),
        flags(args.inputs.begin() + 1,
              args.inputs.begin() + 1 + args.i("flags", 0)),
        grads(args, gradientsAfter(args, 1 + args.i("flags", 0))),
        growth(static_cast<float>(args.f("growth_factor", 2.0))),
        backoff(static_cast<float>(args.f("backoff_factor", 0.5))),
        interval(args.i("growth_interval", 2000)), adjust(args.i("adjust", 1)),
        overflow(deviceOf(args), sizeof(int)) {}

  void run(const StepContext &context) override {
    cudaStream_t stream = streamOf(context);
    checkCuda(cudaMemsetAsync(overflow.as<void>(), 0, sizeof(int), stream),
              "unscale_grads");
    for (const TensorView &flag : flags)
      takeFlagKernel<<<1, 1, 0, stream>>>(flag.f32(), overflow.as<int>());
    if (grads.blocks() > 0)
      unscaleSlicesKernel<<<grads.blocks(), kThreads, 0, stream>>>(
          grads.table(), state.f32(), overflow.as<int>());
    if (adjust == 1)
      adjustKernel<<<1, 1, 0, stream>>>(state.f32(), overflow.as<int>(), growth,
                                        backoff, interval);
    else if (adjust == 2) // mark: the skip flag only
      markKernel<<<1, 1, 0, stream>>>(state.f32(), overflow.as<int>());
    launched("unscale_grads");
  }
  /// Reads the scale, flags and gradients where they lie: no count.
  bool sameEveryStep() const override { return true; }

private:
  TensorView state;
  std::vector<TensorView> flags;
  GradientSlices grads;
  float growth, backoff;
  int64_t interval, adjust;
  Scratch overflow;
};

/// found_inf (the CPU kernel says what it means) on the device's stream:
/// the flag a pipeline stage sends the others, with no host
/// synchronisation; the gradients in one launch over their slices.
class FoundInfKernel : public Kernel {
public:
  explicit FoundInfKernel(const KernelArgs &args)
      : grads(args, args.inputs), flag(args.outputs[0]),
        overflow(deviceOf(args), sizeof(int)) {}

  void run(const StepContext &context) override {
    cudaStream_t stream = streamOf(context);
    checkCuda(cudaMemsetAsync(overflow.as<void>(), 0, sizeof(int), stream),
              "found_inf");
    if (grads.blocks() > 0)
      findNonFiniteSlicesKernel<<<grads.blocks(), kThreads, 0, stream>>>(
          grads.table(), overflow.as<int>());
    writeFlagKernel<<<1, 1, 0, stream>>>(overflow.as<int>(), flag.f32());
    launched("found_inf");
  }
  /// Reads the scale, flags and gradients where they lie: no count.
  bool sameEveryStep() const override { return true; }

private:
  GradientSlices grads;
  TensorView flag;
  Scratch overflow;
};

/// The optimizer step of ranges of device memory that share one update
/// count: a parameter (`update`), or the pieces of a stage's tensors in a
/// ZeRO shard (`shard_update`), each piece by its tensor's rule. The count
/// and the schedule's count follow the CPU's (ShardedUpdate); under fp16's
/// loss scaling the device decides whether a step updates and keeps the
/// count, so the host never waits for the overflow flag.
class DeviceUpdater {
public:
  /// Parameters, gradients and `elements` moments' elements from `offset`.
  struct Range {
    float *p;
    const float *g;
    int64_t offset, n;
    const UpdateRule *rule;
  };

  DeviceUpdater(CudaDevice &device, const UpdateRule &rule, int64_t elements,
                const TensorView &lossScale)
      : lossScale(lossScale), stream(device.stream()), adam(rule.adam) {
    size_t bytes = std::max<int64_t>(elements, 1) * sizeof(float);
    if (rule.hasFirst())
      first = std::make_unique<Scratch>(device, bytes, Scratch::OptimizerState);
    if (rule.hasSecond())
      second =
          std::make_unique<Scratch>(device, bytes, Scratch::OptimizerState);
    if (lossScale.data)
      deviceStep = std::make_unique<Scratch>(device, sizeof(DeviceStep),
                                             Scratch::OptimizerState);
  }

  /// One step over `ranges`, whose rules differ in weight decay only
  /// (`rule` is one of them); a step without elements counts too.
  void step(cudaStream_t queue, const std::vector<Range> &ranges,
            const UpdateRule &rule) {
    // The schedule advances every step, skipped or not (a scheduler.step()
    // per iteration beside GradScaler); the update count only with an
    // update (Adam's bias corrections, as optimizer.step()'s).
    float rate = rule.scheduledLr(scheduled);
    ++scheduled;
    if (lossScale.data)
      return stepScaled(queue, ranges, rate, rule);
    ++steps;
    for (const Range &r : ranges)
      if (r.n > 0)
        launchHostValued(queue, r, rate);
    launched("update");
  }

  /// One step over `count` slices of several updaters' tensors (their
  /// moments where the slices say), in one launch at this updater's count;
  /// no loss scale.
  void stepSlices(cudaStream_t queue, const UpdateSlice *slices, int64_t count,
                  const UpdateRule &rule) {
    float rate = rule.scheduledLr(scheduled);
    countOnly();
    if (count == 0)
      return;
    auto blocks = static_cast<unsigned>(count);
    if (rule.adam)
      adamSlicesKernel<<<blocks, kThreads, 0, queue>>>(
          slices, adamStepOf(rule, rate), rate);
    else
      sgdSlicesKernel<<<blocks, kThreads, 0, queue>>>(slices,
                                                      sgdStepOf(rule, rate));
    launched("update");
  }

  /// A step another updater's launch made for this one (no loss scale).
  void countOnly() {
    ++scheduled;
    ++steps;
  }
  bool countsAs(const DeviceUpdater &other) const {
    return steps == other.steps && scheduled == other.scheduled;
  }
  float *firstMoment() const { return moment(first, 0); }
  float *secondMoment() const { return moment(second, 0); }

  /// The count, the schedule's (fp16 plans) and the moments, each viewed as
  /// `like` (the parameter, or the shard) for checkpoints.
  KernelState state(TensorView like) {
    KernelState result;
    if (lossScale.data) {
      downloadCount();
      result.scheduleCounter = &scheduled;
    }
    result.counter = &steps;
    auto add = [&](const char *name, const std::unique_ptr<Scratch> &values) {
      if (!values)
        return;
      like.data = values->as<void>();
      result.tensors.emplace_back(name, like);
    };
    add(adam ? "exp_avg" : "momentum_buffer", first);
    add("exp_avg_sq", second);
    return result;
  }

private:
  float *moment(const std::unique_ptr<Scratch> &m, int64_t offset) const {
    return m ? m->as<float>() + offset : nullptr;
  }

  /// Update number `steps`'s values, computed here.
  AdamStep adamStepOf(const UpdateRule &rule, float rate) const {
    float correction1 = 1.0f - std::pow(rule.beta1, static_cast<float>(steps));
    float correction2 = 1.0f - std::pow(rule.beta2, static_cast<float>(steps));
    return {rule.beta1,
            rule.beta2,
            rule.epsilon,
            rule.weightDecay,
            rate / correction1,
            std::sqrt(correction2),
            1.0f - rate * rule.weightDecay,
            rule.decoupled};
  }
  SgdStep sgdStepOf(const UpdateRule &rule, float rate) const {
    return {rate, rule.momentum, rule.weightDecay, steps == 1};
  }

  /// Update number `steps` of one range.
  void launchHostValued(cudaStream_t queue, const Range &r, float rate) {
    const UpdateRule &rule = *r.rule;
    if (rule.adam)
      adamKernel<<<blocksFor(r.n), kThreads, 0, queue>>>(
          r.p, r.g, moment(first, r.offset), moment(second, r.offset), r.n,
          adamStepOf(rule, rate));
    else
      sgdKernel<<<blocksFor(r.n), kThreads, 0, queue>>>(
          r.p, r.g, moment(first, r.offset), r.n, sgdStepOf(rule, rate));
  }

  /// An fp16 plan's step: one thread reads the overflow flag and counts,
  /// the ranges' kernels read what it decided (GradScaler.step: an
  /// overflowed step changes nothing).
  void stepScaled(cudaStream_t queue, const std::vector<Range> &ranges,
                  float rate, const UpdateRule &rule) {
    auto *decided = deviceStep->as<DeviceStep>();
    if (steps != syncedSteps) { // a checkpoint's count was restored
      setCountKernel<<<1, 1, 0, queue>>>(decided, steps);
      syncedSteps = steps;
    }
    SgdStep sgd{rate, rule.momentum, 0.0f, false};
    AdamStep adamStep{rule.beta1, rule.beta2, rule.epsilon, 0.0f,
                      0.0f,       0.0f,       1.0f,         rule.decoupled};
    prepareStepKernel<<<1, 1, 0, queue>>>(lossScale.f32(), decided, sgd,
                                          adamStep, rate, adam);
    for (const Range &r : ranges) {
      if (r.n == 0)
        continue;
      float decay = r.rule->weightDecay, shrink = 1.0f - rate * decay;
      if (adam)
        adamStepKernel<<<blocksFor(r.n), kThreads, 0, queue>>>(
            r.p, r.g, moment(first, r.offset), moment(second, r.offset), r.n,
            decided, decay, shrink);
      else
        sgdStepKernel<<<blocksFor(r.n), kThreads, 0, queue>>>(
            r.p, r.g, moment(first, r.offset), r.n, decided, decay);
    }
    launched("update");
  }

  /// The device's update count into `steps`, where checkpoints read it.
  void downloadCount() {
    long long count = 0;
    checkCuda(cudaMemcpyAsync(&count, &deviceStep->as<DeviceStep>()->count,
                              sizeof(count), cudaMemcpyDeviceToHost, stream),
              "update count");
    checkCuda(cudaStreamSynchronize(stream), "update count");
    if (steps == syncedSteps) // else a restored count waits to go up
      steps = syncedSteps = count;
  }

  TensorView lossScale;
  cudaStream_t stream; ///< the device's
  bool adam;
  int64_t steps = 0, scheduled = 0;
  int64_t syncedSteps = 0; ///< the count the device holds (fp16 plans)
  std::unique_ptr<Scratch> first, second, deviceStep;
};

/// One parameter's update; one that took over the updates after it
/// (`takeOver`: rules equal but for weight decay, no loss scale) runs them
/// all in one launch over a table of slices built at load, each tensor's
/// elements as its own launch would update them.
class UpdateKernel : public Kernel {
public:
  explicit UpdateKernel(const KernelArgs &args)
      : param(args.inputs[0]), grad(args.inputs[1]), rule(args),
        device(deviceOf(args)),
        lossScaled(args.inputs.size() > 2 && args.inputs[2].data),
        updater(device, rule, param.numel(),
                args.inputs.size() > 2 ? args.inputs[2] : TensorView()) {}

  void run(const StepContext &context) override {
    if (updated) { // by the kernel that took this one over
      updated = false;
      updater.countOnly();
      return;
    }
    cudaStream_t stream = streamOf(context);
    if (context.oneByOne || !slices || !countsAgree()) {
      updater.step(stream, {{param.f32(), grad.f32(), 0, param.numel(), &rule}},
                   rule);
      return;
    }
    for (UpdateKernel *follower : followers)
      follower->updated = true;
    updater.stepSlices(stream, slices->as<UpdateSlice>(), sliceCount, rule);
  }

  size_t takeOver(Kernel *const *following, size_t count) override {
    if (lossScaled)
      return 0;
    for (size_t k = 0; k < count; ++k) {
      auto *next = dynamic_cast<UpdateKernel *>(following[k]);
      if (!next || next->lossScaled || !rule.sameButWeightDecay(next->rule))
        break;
      followers.push_back(next);
    }
    if (followers.empty())
      return 0;
    std::vector<UpdateSlice> table = sliceTable();
    sliceCount = static_cast<int64_t>(table.size());
    slices = uploadedAtLoad(device, table, "update");
    return followers.size();
  }

  KernelState state() override { return updater.state(param); }

private:
  /// This kernel's tensor and its followers', cut into slices of at most
  /// kSliceElements: a block each.
  std::vector<UpdateSlice> sliceTable() {
    std::vector<UpdateSlice> table;
    std::vector<UpdateKernel *> members = {this};
    members.insert(members.end(), followers.begin(), followers.end());
    for (UpdateKernel *k : members)
      forEachSlice(k->param.numel(), [&](int64_t begin, int64_t end) {
        table.push_back({k->param.f32(), k->grad.f32(),
                         k->updater.firstMoment(), k->updater.secondMoment(),
                         begin, end, k->rule.weightDecay});
      });
    return table;
  }

  /// Whether the kernels taken over have counted the steps this one has (a
  /// checkpoint restores each kernel's counts; else one by one).
  bool countsAgree() const {
    for (const UpdateKernel *follower : followers)
      if (!follower->updater.countsAs(updater))
        return false;
    return true;
  }

  TensorView param, grad;
  UpdateRule rule;
  CudaDevice &device;
  bool lossScaled;
  DeviceUpdater updater;
  std::vector<UpdateKernel *> followers; ///< taken over
  std::unique_ptr<Scratch> slices;       ///< theirs and this kernel's
  int64_t sliceCount = 0;
  bool updated = false; ///< this step's update done by the kernel ahead
};

/// The updated pieces of a device's shard copied into `shard`, which is
/// sent to the other devices (ZeRO's gather, the replicas' exchange).
void copyOwnPieces(const std::vector<DeviceUpdater::Range> &ranges,
                   float *shard, cudaStream_t stream) {
  for (const DeviceUpdater::Range &range : ranges)
    checkCuda(cudaMemcpyAsync(shard + range.offset, range.p,
                              range.n * sizeof(float), cudaMemcpyDeviceToDevice,
                              stream),
              "a shard's updated pieces");
}

/// A sharded update's state for checkpoints: the count and the shard's
/// moments, with where each piece of the shard lies in the stage.
KernelState shardStateOf(DeviceUpdater &updater, const ShardLayout &layout,
                         int shard) {
  KernelState result = updater.state(TensorView{
      nullptr, {layout.shardSize()}, plan::F32, MemorySpace::Device});
  for (const ShardLayout::Piece &piece : layout.pieces(shard))
    result.spans.push_back(
        {piece.tensor, piece.offset, piece.shardOffset, piece.length});
  return result;
}

/// ZeRO's sharded optimizer step on the GPU: each piece of the device's
/// shard of a stage updated by its tensor's rule (the CPU's ShardedUpdate,
/// piece for piece), the shard's moments in device memory. Stage 3: the
/// device's shard of the parameters and of their mean gradients, nothing
/// exchanged (shard_gather gathers where the stage is read). Stages 1 and
/// 2, where the communicator takes device memory for ZeRO's collectives (in
/// one process the devices' links; under mpirun device messages, NCCL's
/// routes between processes' GPUs): the stage's parameters whole, their
/// mean gradients (1) or the device's shard of them (2); the updated shard
/// is all-gathered into every device's parameters on the GPUs. A step fp16's
/// loss scale skips is decided on the device, so the gather runs anyway and
/// writes the values the parameters hold.
class ShardUpdateKernel : public Kernel {
public:
  explicit ShardUpdateKernel(const KernelArgs &args)
      : zero(args.i("zero", 1)), comm(args.communicator),
        link(comm->carriesDeviceCollectives() ? deviceOf(args).link()
                                              : nullptr),
        stage(args.i("stage", 0)), timeStep(args.instruction->time_step()),
        cycle(args.i("cycle", 1)), device(args.device) {
    splitOperands(args);
    layout.emplace(stageSizes(args, params), shardDevices(args));
    rules = rulesOf(args, layout->tensors());
    shard = shardIndex(args);
    int64_t size = layout->shardSize();
    if ((zero >= 2 && grads.front().numel() != size) ||
        (zero == 3 && params.front().numel() != size))
      args.fail("has a shard that is not the stage's shards' " +
                std::to_string(size) + " elements");
    updater = std::make_unique<DeviceUpdater>(deviceOf(args), rules.front(),
                                              size, lossScaleOf(args));
    for (const ShardLayout::Piece &piece : layout->pieces(shard))
      ranges.push_back({parameterAt(piece), gradientAt(piece),
                        piece.shardOffset, piece.length, &rules[piece.tensor]});
    if (zero < 3) // the shard sent; its padding stays 0
      own = std::make_unique<Scratch>(deviceOf(args),
                                      std::max<int64_t>(size, 1) * 4);
  }

  void run(const StepContext &context) override {
    cudaStream_t stream = streamOf(context);
    updater->step(stream, ranges, rules.front());
    if (zero == 3)
      return;
    copyOwnPieces(ranges, own->as<float>(), stream);
    if (!comm->allGather(
            tags::collectives::shardGather(context.step, stage),
            {plan::F32, own->as<float>(), layout->shardSize(), link},
            writtenBuffers(params, link), timeStep + cycle * context.step))
      throw RuntimeError("device " + std::to_string(device) +
                         ": stopped while gathering a stage's parameters "
                         "(another device failed)");
  }

  KernelState state() override {
    return shardStateOf(*updater, *layout, shard);
  }

private:
  /// The parameters (stage 3: the shard) and the gradients (stage 1: the
  /// stage's, else the device's shard of them) of the plan's operands.
  void splitOperands(const KernelArgs &args) {
    std::vector<TensorView> operands = updateOperands(args);
    size_t count = zero == 3   ? 1
                   : zero == 2 ? operands.size() - 1
                               : operands.size() / 2;
    if (operands.size() < 2 || (zero == 3 && operands.size() != 2) ||
        (zero == 1 && operands.size() % 2 != 0))
      args.fail("needs the stage's parameters and their gradients");
    params.assign(operands.begin(), operands.begin() + count);
    grads.assign(operands.begin() + count, operands.end());
  }
  float *parameterAt(const ShardLayout::Piece &piece) const {
    return zero == 3 ? params[0].f32() + piece.shardOffset
                     : params[piece.tensor].f32() + piece.offset;
  }
  const float *gradientAt(const ShardLayout::Piece &piece) const {
    return zero == 1 ? grads[piece.tensor].f32() + piece.offset
                     : grads[0].f32() + piece.shardOffset;
  }

  int64_t zero;
  Communicator *comm;
  DeviceLink *link; ///< where the gather moves device memory
  int64_t stage, timeStep, cycle;
  int device;
  std::vector<TensorView> params, grads;
  std::optional<ShardLayout> layout;
  std::vector<UpdateRule> rules;
  int shard = 0;
  std::unique_ptr<DeviceUpdater> updater;
  std::vector<DeviceUpdater::Range> ranges;
  std::unique_ptr<Scratch> own;
};

/// ZeRO stage 1 over a pipeline stage's replicas (`peers`, the stage's
/// devices by replica; this one `replica`) on the GPU: the replica's shard
/// of the stage updated from the replica sums as ShardUpdateKernel's stage
/// 1 updates its shard, sent to every other replica and theirs written into
/// place, as device messages (the devices' links in one process, NCCL's
/// routes between processes' GPUs). A step fp16's loss scale skips is
/// decided on the device, so the exchange runs anyway with the values the
/// parameters hold.
class ReplicaShardUpdateKernel : public Kernel {
public:
  explicit ReplicaShardUpdateKernel(const KernelArgs &args)
      : replica(args.i("replica", 0)), peers(replicaPeers(args, replica)),
        comm(args.communicator), link(deviceOf(args).link()),
        stage(args.i("stage", 0)), timeStep(args.instruction->time_step()),
        cycle(args.i("cycle", 1)), device(args.device) {
    std::vector<TensorView> operands = updateOperands(args);
    if (operands.size() < 2 || operands.size() % 2 != 0)
      args.fail("needs each parameter and its gradient sum");
    size_t half = operands.size() / 2;
    params.assign(operands.begin(), operands.begin() + half);
    grads.assign(operands.begin() + half, operands.end());
    layout.emplace(sizesOf(params), static_cast<int>(peers.size()));
    rules = rulesOf(args, params.size());
    int64_t size = layout->shardSize(), bytes = std::max<int64_t>(size, 1) * 4;
    updater = std::make_unique<DeviceUpdater>(deviceOf(args), rules.front(),
                                              size, lossScaleOf(args));
    for (const ShardLayout::Piece &piece : layout->pieces(shard()))
      ranges.push_back({params[piece.tensor].f32() + piece.offset,
                        grads[piece.tensor].f32() + piece.offset,
                        piece.shardOffset, piece.length, &rules[piece.tensor]});
    own = std::make_unique<Scratch>(deviceOf(args), bytes);
    received = std::make_unique<Scratch>(deviceOf(args), bytes);
    checkCuda(cudaMemset(own->as<void>(), 0, bytes), "replica_shard_update");
  }

  void run(const StepContext &context) override {
    cudaStream_t stream = streamOf(context);
    updater->step(stream, ranges, rules.front());
    copyOwnPieces(ranges, own->as<float>(), stream);
    int64_t tag = tags::replicaShard(context.step, stage),
            tau = timeStep + cycle * context.step, size = layout->shardSize();
    for (size_t q = 0; q < peers.size(); ++q)
      if (static_cast<int64_t>(q) != replica)
        comm->send(peers[q], tag, {plan::F32, own->as<float>(), size, link},
                   tau);
    for (size_t q = 0; q < peers.size(); ++q) {
      if (static_cast<int64_t>(q) == replica)
        continue;
      if (!comm->recv(peers[q], tag,
                      {plan::F32, received->as<float>(), size, link}))
        throw RuntimeError("device " + std::to_string(device) +
                           ": stopped while taking a replica's updated "
                           "shard (another device failed)");
      // Queued on the stream the message arrived on, before the next one
      // overwrites `received`.
      for (const ShardLayout::Piece &piece :
           layout->pieces(static_cast<int>(q)))
        checkCuda(cudaMemcpyAsync(params[piece.tensor].f32() + piece.offset,
                                  received->as<float>() + piece.shardOffset,
                                  piece.length * sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream),
                  "a replica's updated shard");
    }
  }

  KernelState state() override {
    return shardStateOf(*updater, *layout, shard());
  }

  /// The shard sent and one received from another replica.
  int64_t workspaceBytes() const override {
    return 2 * layout->shardSize() * static_cast<int64_t>(sizeof(float));
  }

private:
  int shard() const { return static_cast<int>(replica); }

  int64_t replica;
  std::vector<int64_t> peers;
  Communicator *comm;
  DeviceLink *link; ///< where the messages move device memory
  int64_t stage, timeStep, cycle;
  int device;
  std::vector<TensorView> params, grads;
  std::optional<ShardLayout> layout;
  std::vector<UpdateRule> rules;
  std::unique_ptr<DeviceUpdater> updater;
  std::vector<DeviceUpdater::Range> ranges;
  std::unique_ptr<Scratch> own, received; ///< `own`'s padding stays 0
};

} // namespace

/// ZeRO's shard_update on the device: stage 3's always (it exchanges
/// nothing), stages 1 and 2's where the communicator takes device memory for
/// their gather; replica_shard_update where it takes device memory for
/// messages; else null: the host stages them.
std::unique_ptr<Kernel> makeDeviceShardUpdate(const std::string &op,
                                              const KernelArgs &args) {
  if (op == "replica_shard_update" && args.communicator &&
      args.communicator->carriesDeviceMessages()) {
    connectDevice(args);
    return std::make_unique<ReplicaShardUpdateKernel>(args);
  }
  if (op != "shard_update" || !args.communicator ||
      (args.i("zero", 1) != 3 &&
       !args.communicator->carriesDeviceCollectives()))
    return nullptr;
  connectDevice(args);
  return std::make_unique<ShardUpdateKernel>(args);
}

void registerOptimizer(KernelRegistry &registry) {
  registry.add("update", Backend::CUDA, [](const KernelArgs &args) {
    return std::make_unique<UpdateKernel>(args);
  });
  registry.add("squared_norm", Backend::CUDA, [](const KernelArgs &args) {
    return std::make_unique<GradientClipKernel>(args, false);
  });
  registry.add("clip_grad_norm", Backend::CUDA, [](const KernelArgs &args) {
    return std::make_unique<GradientClipKernel>(args, true);
  });
  registry.add("unscale_grads", Backend::CUDA, [](const KernelArgs &args) {
    return std::make_unique<UnscaleKernel>(args);
  });
  registry.add("found_inf", Backend::CUDA, [](const KernelArgs &args) {
    return std::make_unique<FoundInfKernel>(args);
  });
  // The backward's seed: the current scale, copied on the device.
  addKernel(registry, "loss_scale", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView state = args.inputs[0], seed = args.outputs[0];
              return [=](const StepContext &context) {
                checkCuda(cudaMemcpyAsync(seed.data, state.data, sizeof(float),
                                          cudaMemcpyDeviceToDevice,
                                          streamOf(context)),
                          "loss_scale");
              };
            });
  addKernel(registry, "assign", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView buffer = args.inputs[0], value = args.inputs[1];
              size_t bytes = byteSize(buffer);
              return [=](const StepContext &context) {
                if (bytes && buffer.data != value.data)
                  checkCuda(cudaMemcpyAsync(buffer.data, value.data, bytes,
                                            cudaMemcpyDeviceToDevice,
                                            streamOf(context)),
                            "assign");
              };
            });
  addKernel(registry, "accumulate", [](const KernelArgs &args) {
    TensorView g = args.inputs[0], acc = args.outputs[0];
    float scale = 1.0f / static_cast<float>(args.i("slots", 1));
    int64_t reset = args.i("reset", -1);
    int64_t n = g.numel();
    return [=](const StepContext &context) {
      bool first = reset >= 0 ? reset != 0 : context.slot == 0;
      if (n == 0)
        return;
      accumulateKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
          g.f32(), acc.f32(), n, scale, first);
      launched("accumulate");
    };
  });
  addKernel(registry, "gradient", Launches::SameEveryStep,
            [](const KernelArgs &) { return [](const StepContext &) {}; });
}

} // namespace cdp::runtime::cuda
