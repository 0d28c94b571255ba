//===- SparseExchange.cu - laysa's error feedback on the GPU --------------===//
//
// The CPU's sparse_absorb, sparse_select and sparse_apply (SparseExchange.cpp,
// SparseMirror.cpp) on device memory, with the CPU's float operations in
// its order and unfused (__fadd_rn, __fmul_rn: no multiply-add), so that a
// device selects, from the same values, the indices the CPU would:
//
//  - absorb: one thread per element, the momentum buffer in device memory
//    of the kernel's own (its state, for checkpoints);
//  - select: each parameter's pending update a (W - M, or r) computed where
//    read; the k-th largest |a| found by a radix select on its bits (four
//    passes of a 256-bin histogram, the bin picked by one thread), then one
//    block per chunk of 4096 elements writes the chosen values and indices
//    in index order: every |a| above the threshold, and the lowest-indexed
//    of those equal to it until k (the CPU's tie rule). Counts only, no
//    sort: the chunks' counts are scanned by one thread;
//  - apply: every device's selection added into a sum in device order (one
//    launch per device: a selection's indices are distinct), then the mean
//    subtracted where any device chose an element, and the mirror given
//    back this device's own values. An index out of range sets the status
//    word's kIndexOutOfRange instead of writing.
//
// sparse_gather is the CPU kernel on the devices' links where the
// communicator carries device memory (Communication.cu).
//
//===----------------------------------------------------------------------===//

#include "../LearningRate.h"
#include "../SparseStage.h"
#include "CudaKernels.h"
#include "Reduce.cuh"

#include <vector>

namespace cdp::runtime::cuda {

namespace {

/// The elements a chunk block of the selection's last pass writes.
constexpr int kChunk = 4096;
constexpr int kPerThread = kChunk / kThreads;

/// A parameter's pending update, element by element: W - M, or r.
struct Pending {
  const float *w;
  float *s;
  bool mirror;
  __device__ float at(int64_t i) const {
    return mirror ? __fsub_rn(w[i], s[i]) : s[i];
  }
};

/// |a|'s order as an unsigned integer's (the sign bit cleared).
__device__ uint32_t magnitudeKey(float a) {
  return __float_as_uint(a) & 0x7fffffffu;
}

__global__ void absorbKernel(const float *w, const float *g, float *s, float *u,
                             int64_t n, float decay, float momentum, bool first,
                             float sign) {
  CDP_FOR_EACH(i, n) {
    float d = __fadd_rn(g[i], __fmul_rn(decay, w[i]));
    if (u) {
      u[i] = first ? d : __fadd_rn(__fmul_rn(momentum, u[i]), d);
      d = u[i];
    }
    s[i] = __fadd_rn(s[i], __fmul_rn(sign, d));
  }
}

/// The radix select's state: the threshold's bits found so far, how many
/// elements at or above the current prefix remain to choose, and the pass's
/// histogram.
struct Threshold {
  uint32_t prefix;
  long long remaining;
  unsigned long long bins[256];
};

__global__ void startThreshold(Threshold *t, long long k) {
  t->prefix = 0;
  t->remaining = k;
  for (int b = 0; b < 256; ++b)
    t->bins[b] = 0;
}

/// The histogram of the keys' byte at `shift` among those whose higher
/// bytes are the prefix's.
__global__ void histogramKernel(Pending a, int64_t n, Threshold *t, int shift) {
  __shared__ unsigned int local[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x)
    local[b] = 0;
  __syncthreads();
  int above = shift + 8;
  uint32_t high = above >= 32 ? 0u : t->prefix >> above;
  CDP_FOR_EACH(i, n) {
    uint32_t key = magnitudeKey(a.at(i));
    if (above >= 32 || (key >> above) == high)
      atomicAdd(&local[(key >> shift) & 255u], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x)
    if (local[b])
      atomicAdd(&t->bins[b], static_cast<unsigned long long>(local[b]));
}

/// One thread: the highest bin holding the remaining k-th largest key.
__global__ void pickBinKernel(Threshold *t, int shift) {
  long long remaining = t->remaining;
  int b = 255;
  for (; b > 0; --b) {
    auto count = static_cast<long long>(t->bins[b]);
    if (count >= remaining)
      break;
    remaining -= count;
  }
  t->prefix |= static_cast<uint32_t>(b) << shift;
  t->remaining = remaining; // past the last pass: how many equal ones to take
  for (int k = 0; k < 256; ++k)
    t->bins[k] = 0;
}

/// Per chunk: its keys above the threshold and equal to it.
__global__ void chunkCountsKernel(Pending a, int64_t n, const Threshold *t,
                                  long long *above, long long *equal) {
  __shared__ int counts[2];
  if (threadIdx.x < 2)
    counts[threadIdx.x] = 0;
  __syncthreads();
  uint32_t threshold = t->prefix;
  int64_t begin = int64_t(blockIdx.x) * kChunk;
  int64_t end = min(n, begin + kChunk);
  int over = 0, at = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    uint32_t key = magnitudeKey(a.at(i));
    over += key > threshold;
    at += key == threshold;
  }
  atomicAdd(&counts[0], over);
  atomicAdd(&counts[1], at);
  __syncthreads();
  if (threadIdx.x == 0) {
    above[blockIdx.x] = counts[0];
    equal[blockIdx.x] = counts[1];
  }
}

/// One thread: the counts of the chunks before each chunk, in place.
__global__ void chunkOffsetsKernel(long long *above, long long *equal,
                                   int64_t chunks) {
  long long over = 0, at = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    long long o = above[c], e = equal[c];
    above[c] = over;
    equal[c] = at;
    over += o;
    at += e;
  }
}

/// One block per chunk, kPerThread adjacent elements a thread: the chosen
/// elements' values and indices at their rank in index order (`clear`:
/// the residual baseline forgets what it sends).
__global__ void writeChosenKernel(Pending a, int64_t n, const Threshold *t,
                                  const long long *aboveBefore,
                                  const long long *equalBefore, float *values,
                                  int32_t *indices, bool clear) {
  __shared__ int over[kThreads], at[kThreads];
  uint32_t threshold = t->prefix;
  long long take = t->remaining;
  int64_t begin = int64_t(blockIdx.x) * kChunk + threadIdx.x * kPerThread;
  int64_t end = min(n, begin + kPerThread);
  int o = 0, e = 0;
  for (int64_t i = begin; i < end; ++i) {
    uint32_t key = magnitudeKey(a.at(i));
    o += key > threshold;
    e += key == threshold;
  }
  over[threadIdx.x] = o;
  at[threadIdx.x] = e;
  __syncthreads();
  long long above = aboveBefore[blockIdx.x], equal = equalBefore[blockIdx.x];
  for (int j = 0; j < static_cast<int>(threadIdx.x); ++j) {
    above += over[j];
    equal += at[j];
  }
  for (int64_t i = begin; i < end; ++i) {
    float v = a.at(i);
    uint32_t key = magnitudeKey(v);
    long long rank = -1;
    if (key > threshold)
      rank = above++ + min(equal, take);
    else if (key == threshold && equal++ < take)
      rank = above + equal - 1;
    if (rank < 0)
      continue;
    values[rank] = v;
    indices[rank] = static_cast<int32_t>(i);
    if (clear)
      a.s[i] = 0.0f;
  }
}

/// A parameter sent whole: its pending update in index order.
__global__ void writeWholeKernel(Pending a, int64_t n, float *values,
                                 bool clear) {
  CDP_FOR_EACH(i, n) {
    values[i] = a.at(i);
    if (clear)
      a.s[i] = 0.0f;
  }
}

/// v added into `into` at `indices` (distinct; null: the whole parameter,
/// in index order), marking each element in `touched` where given: a
/// device's selection into the sum, or this device's into its mirror.
__global__ void addAtKernel(float *into, unsigned char *touched, const float *v,
                            const int32_t *indices, int64_t k, int64_t n,
                            int *status) {
  CDP_FOR_EACH(j, k) {
    int64_t i = indices ? indices[j] : j;
    if (i < 0 || i >= n) {
      atomicOr(status, kIndexOutOfRange);
      continue;
    }
    into[i] = __fadd_rn(into[i], v[j]);
    if (touched)
      touched[i] = 1;
  }
}

/// W <- W - S / N (and M likewise) where any device chose the element.
__global__ void applyMeanKernel(float *w, float *mirror, const float *sum,
                                const unsigned char *touched, int64_t n,
                                float scale) {
  CDP_FOR_EACH(i, n) {
    if (!touched[i])
      continue;
    float step = __fmul_rn(sum[i], scale);
    w[i] = __fsub_rn(w[i], step);
    if (mirror)
      mirror[i] = __fsub_rn(mirror[i], step);
  }
}

/// One parameter's pending update (the CPU's AbsorbKernel): the step
/// through the momentum buffer, times the scheduled rate, taken from the
/// mirror or added to the residual.
class AbsorbKernel : public Kernel {
public:
  explicit AbsorbKernel(const KernelArgs &args)
      : weights(args.inputs[0]), gradient(args.inputs[1]),
        feedback(args.inputs[2]), rule(args), mirror(isMirrorForm(args)) {
    if (rule.hasFirst())
      momentum = std::make_unique<Scratch>(
          deviceOf(args), std::max<int64_t>(weights.numel(), 1) * 4,
          Scratch::OptimizerState);
  }

  void run(const StepContext &context) override {
    float rate = rule.scheduledLr(steps);
    ++steps;
    int64_t n = weights.numel();
    if (n == 0)
      return;
    absorbKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
        weights.f32(), gradient.f32(), feedback.f32(),
        momentum ? momentum->as<float>() : nullptr, n, rule.weightDecay,
        rule.momentum, steps == 1, mirror ? -rate : rate);
    launched("sparse_absorb");
  }

  KernelState state() override {
    return absorbState(steps, weights,
                       momentum ? momentum->as<void>() : nullptr);
  }

private:
  TensorView weights, gradient, feedback;
  UpdateRule rule;
  bool mirror;
  int64_t steps = 0;
  std::unique_ptr<Scratch> momentum;
};

/// Parameter p's pending update, element by element.
Pending pendingOf(const StageTensors &stage, size_t p, bool mirror) {
  return {stage.weights[p].f32(), stage.states[p].f32(), mirror};
}

/// Every parameter's selection into the stage's values and indices.
class SelectKernel : public Kernel {
public:
  explicit SelectKernel(const KernelArgs &args)
      : stage(args), mirror(isMirrorForm(args)), values(args.outputs[0]),
        indices(args.outputs.size() > 1 ? args.outputs[1] : TensorView{}),
        threshold(deviceOf(args), sizeof(Threshold)) {
    int64_t chunks =
        std::max<int64_t>((stage.largest() + kChunk - 1) / kChunk, 1);
    above = std::make_unique<Scratch>(deviceOf(args), chunks * 8);
    equal = std::make_unique<Scratch>(deviceOf(args), chunks * 8);
  }

  void run(const StepContext &context) override {
    cudaStream_t stream = streamOf(context);
    int64_t valueAt = 0, indexAt = 0;
    for (size_t p = 0; p < stage.counts.size(); ++p) {
      int64_t n = stage.weights[p].numel(), k = stage.counts[p];
      Pending a = pendingOf(stage, p, mirror);
      if (stage.whole(p)) {
        if (n > 0)
          writeWholeKernel<<<blocksFor(n), kThreads, 0, stream>>>(
              a, n, values.f32() + valueAt, !mirror);
        valueAt += n;
        continue;
      }
      if (k > 0)
        choose(stream, a, n, k, valueAt, indexAt);
      valueAt += k;
      indexAt += k;
    }
    launched("sparse_select");
  }

private:
  /// The k chosen elements of a parameter of n, into the outputs at the
  /// given offsets.
  void choose(cudaStream_t stream, const Pending &a, int64_t n, int64_t k,
              int64_t valueAt, int64_t indexAt) {
    auto *t = threshold.as<Threshold>();
    startThreshold<<<1, 1, 0, stream>>>(t, k);
    for (int shift = 24; shift >= 0; shift -= 8) {
      histogramKernel<<<blocksFor(n), kThreads, 0, stream>>>(a, n, t, shift);
      pickBinKernel<<<1, 1, 0, stream>>>(t, shift);
    }
    auto chunks = static_cast<unsigned>((n + kChunk - 1) / kChunk);
    chunkCountsKernel<<<chunks, kThreads, 0, stream>>>(
        a, n, t, above->as<long long>(), equal->as<long long>());
    chunkOffsetsKernel<<<1, 1, 0, stream>>>(above->as<long long>(),
                                            equal->as<long long>(), chunks);
    writeChosenKernel<<<chunks, kThreads, 0, stream>>>(
        a, n, t, above->as<long long>(), equal->as<long long>(),
        values.f32() + valueAt, static_cast<int32_t *>(indices.data) + indexAt,
        !mirror);
  }

  StageTensors stage;
  bool mirror;
  TensorView values, indices;
  Scratch threshold;
  std::unique_ptr<Scratch> above, equal; ///< per chunk of the largest
};

/// The mean of every device's selection applied to the stage.
class ApplyKernel : public Kernel {
public:
  explicit ApplyKernel(const KernelArgs &args)
      : stage(args), mirror(isMirrorForm(args)), self(args.device),
        devices(static_cast<size_t>(args.i("devices", 1))),
        status(deviceOf(args).status()),
        sum(deviceOf(args), std::max<int64_t>(stage.largest(), 1) * 4),
        touched(deviceOf(args), std::max<int64_t>(stage.largest(), 1)) {
    size_t first = 2 * stage.counts.size();
    if (args.inputs.size() < first + 2 || devices < 1 ||
        self >= static_cast<int>(devices))
      args.fail("needs every device's gathered values and indices");
    for (size_t j = 0; j < devices; ++j) {
      values.push_back(devicePart(args.inputs[first], j, devices));
      indices.push_back(devicePart(args.inputs[first + 1], j, devices));
    }
  }

  void run(const StepContext &context) override {
    cudaStream_t stream = streamOf(context);
    int64_t valueAt = 0, indexAt = 0;
    float scale = 1.0f / static_cast<float>(devices);
    for (size_t p = 0; p < stage.counts.size(); ++p) {
      int64_t n = stage.weights[p].numel(), k = stage.counts[p];
      bool whole = stage.whole(p);
      if (whole)
        k = n;
      if (n > 0)
        applyOne(stream, p, k, whole, valueAt, indexAt, scale);
      valueAt += k;
      indexAt += whole ? 0 : k;
    }
    launched("sparse_apply");
  }

private:
  void applyOne(cudaStream_t stream, size_t p, int64_t k, bool whole,
                int64_t valueAt, int64_t indexAt, float scale) {
    int64_t n = stage.weights[p].numel();
    float *w = stage.weights[p].f32();
    float *m = mirror ? stage.states[p].f32() : nullptr;
    checkCuda(cudaMemsetAsync(sum.as<void>(), 0, n * 4, stream),
              "sparse_apply");
    checkCuda(cudaMemsetAsync(touched.as<void>(), 0, n, stream),
              "sparse_apply");
    auto at = [&](size_t j) {
      return whole ? nullptr
                   : static_cast<const int32_t *>(indices[j].data) + indexAt;
    };
    for (size_t j = 0; j < devices && k > 0; ++j)
      addAtKernel<<<blocksFor(k), kThreads, 0, stream>>>(
          sum.as<float>(), touched.as<unsigned char>(),
          values[j].f32() + valueAt, at(j), k, n, status);
    applyMeanKernel<<<blocksFor(n), kThreads, 0, stream>>>(
        w, m, sum.as<float>(), touched.as<unsigned char>(), n, scale);
    if (!m)
      return;
    if (whole) // sent whole, nothing is left pending: the mirror is W again
      checkCuda(cudaMemcpyAsync(m, w, n * 4, cudaMemcpyDeviceToDevice, stream),
                "sparse_apply");
    else if (k > 0)
      addAtKernel<<<blocksFor(k), kThreads, 0, stream>>>(
          m, nullptr, values[self].f32() + valueAt, at(self), k, n, status);
  }

  StageTensors stage;
  bool mirror;
  int self;
  size_t devices;
  int *status;
  Scratch sum, touched; ///< sized for the stage's largest parameter
  std::vector<TensorView> values, indices;
};

} // namespace

void registerSparseExchange(KernelRegistry &registry) {
  registry.add("sparse_absorb", Backend::CUDA, [](const KernelArgs &args) {
    return std::make_unique<AbsorbKernel>(args);
  });
  registry.add("sparse_select", Backend::CUDA, [](const KernelArgs &args) {
    return std::make_unique<SelectKernel>(args);
  });
  registry.add("sparse_apply", Backend::CUDA, [](const KernelArgs &args) {
    return std::make_unique<ApplyKernel>(args);
  });
}

} // namespace cdp::runtime::cuda
