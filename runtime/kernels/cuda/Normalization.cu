//===- Normalization.cu - batch/layer norm and softmax on the GPU ---------===//
//
// One block per channel (batch norm) or row (layer norm, softmax);
// statistics are summed in double in a fixed order, as the CPU kernels sum
// them in double, so that results stay within float32 rounding of them.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "Reduce.cuh"
#include "cdp/Runtime/OpTable.h"

#include "../Activations.h"
#include "../NarrowOperands.h"

namespace cdp::runtime::cuda {

namespace {

struct BatchNormParams {
  double epsilon, momentum;
  bool training, unbiased;
  int64_t count; ///< elements per channel
};

/// Per channel: the statistics (the batch's from the sums s1 = sum x and
/// s2 = sum x^2, else the running ones), the running-statistics update,
/// and y = a x + b's coefficients.
__global__ void batchNormCoefficientsKernel(
    int64_t channels, const double *s1, const double *s2, const float *scale,
    const float *bias, const float *mean, const float *var, float *runMean,
    float *runVar, double *coefficients, BatchNormParams p) {
  CDP_FOR_EACH(c, channels) {
    double m = mean[c], v = var[c];
    if (p.training) {
      m = s1[c] / p.count;
      v = max(s2[c] / p.count - m * m, 0.0);
      double batchVar =
          p.unbiased && p.count > 1 ? v * p.count / (p.count - 1) : v;
      runMean[c] =
          static_cast<float>(p.momentum * mean[c] + (1 - p.momentum) * m);
      runVar[c] =
          static_cast<float>(p.momentum * var[c] + (1 - p.momentum) * batchVar);
    } else {
      runMean[c] = static_cast<float>(m);
      runVar[c] = static_cast<float>(v);
    }
    double a = scale[c] / sqrt(v + p.epsilon);
    coefficients[2 * c] = a;
    coefficients[2 * c + 1] = bias[c] - m * a;
  }
}

/// The ReLU (activation) before the rounding (round_result): they commute.
__global__ void batchNormApplyKernel(const float *x, float *y, int64_t n,
                                     IndexMap channelOf,
                                     const double *coefficients, bool relu,
                                     NarrowFormat rounding) {
  CDP_FOR_EACH(i, n) {
    int64_t c = channelOf(i);
    float value = static_cast<float>(x[i] * coefficients[2 * c] +
                                     coefficients[2 * c + 1]);
    y[i] = roundedTo(rounding, relu ? reluOf(value) : value);
  }
}

/// Per channel, from s1, s2 (of x), sdy = sum dy and sdyx = sum dy x: the
/// parameter gradients and dx = g (dy - k0 - xhat k1)'s coefficients.
__global__ void batchNormGradCoefficientsKernel(
    int64_t channels, const double *s1, const double *s2, const double *sdy,
    const double *sdyx, const float *scale, const float *mean, const float *var,
    float *dscale, float *dbias, double *coefficients, BatchNormParams p) {
  CDP_FOR_EACH(c, channels) {
    double m = mean[c], v = var[c];
    if (p.training) {
      m = s1[c] / p.count;
      v = max(s2[c] / p.count - m * m, 0.0);
    }
    double inv = 1.0 / sqrt(v + p.epsilon);
    double sumDyXhat = inv * (sdyx[c] - m * sdy[c]);
    dbias[c] = static_cast<float>(sdy[c]);
    dscale[c] = static_cast<float>(sumDyXhat);
    double *k = coefficients + 5 * c;
    k[0] = m;
    k[1] = inv;
    k[2] = scale[c] * inv;
    k[3] = p.training ? sdy[c] / p.count : 0.0;
    k[4] = p.training ? sumDyXhat / p.count : 0.0;
  }
}

__global__ void batchNormGradApplyKernel(const float *dy, const float *x,
                                         float *dx, int64_t n,
                                         IndexMap channelOf,
                                         const double *coefficients,
                                         NarrowFormat rounding) {
  CDP_FOR_EACH(i, n) {
    const double *k = coefficients + 5 * channelOf(i);
    double xhat = (x[i] - k[0]) * k[1];
    dx[i] = roundedTo(rounding,
                      static_cast<float>(k[2] * (dy[i] - k[3] - xhat * k[4])));
  }
}

/// The output rounded to `rounding` (round_result), stored in 2 bytes
/// where `twoBytes` (cdp-narrow-results); RMSNorm's rows not `centered`.
__global__ void layerNormKernel(const float *x, const float *scale,
                                const float *bias, void *y, float *meanOut,
                                float *invOut, int64_t inner, double epsilon,
                                bool centered, IndexMap si, IndexMap bi,
                                NarrowFormat rounding, bool twoBytes) {
  int64_t o = blockIdx.x;
  const float *row = x + o * inner;
  double sum = 0;
  for (int64_t i = threadIdx.x; centered && i < inner; i += blockDim.x)
    sum += row[i];
  double m = blockSum(sum) / inner, squares = 0;
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x)
    squares += (row[i] - m) * (row[i] - m);
  double inv = 1.0 / sqrt(blockSum(squares) / inner + epsilon);
  if (threadIdx.x == 0) {
    meanOut[o] = static_cast<float>(m);
    invOut[o] = static_cast<float>(inv);
  }
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x)
    storeResult(y, o * inner + i,
                static_cast<float>((row[i] - m) * inv * scale[si(i)] +
                                   (bias ? bias[bi(i)] : 0.0f)),
                rounding, twoBytes);
}

/// `dy` stored as `stored` (a 2-byte incoming gradient widened as read);
/// dx added to `addend` where there is one (a fused gradient sum). A null
/// `meanIn`: RMSNorm's rows, not centered, whose mean has no gradient.
__global__ void layerNormGradKernel(const void *dy, NarrowFormat stored,
                                    const float *x, const float *scale,
                                    const float *meanIn, const float *invIn,
                                    const float *addend, float *dx,
                                    int64_t inner, IndexMap si) {
  int64_t o = blockIdx.x;
  const float *row = x + o * inner;
  auto grad = [&](int64_t i) { return loadValue(dy, o * inner + i, stored); };
  double m = meanIn ? meanIn[o] : 0.0, inv = invIn[o], sumG = 0, sumGXhat = 0;
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
    double g = grad(i) * scale[si(i)];
    sumG += meanIn ? g : 0.0;
    sumGXhat += g * (row[i] - m) * inv;
  }
  sumG = blockSum(sumG);
  sumGXhat = blockSum(sumGXhat);
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
    double xhat = (row[i] - m) * inv, g = grad(i) * scale[si(i)];
    float value =
        static_cast<float>(inv * (g - sumG / inner - xhat * sumGXhat / inner));
    dx[o * inner + i] = addend ? addend[o * inner + i] + value : value;
  }
}

/// dscale's and dbias's sums over rows [part * chunk, (part + 1) * chunk)
/// (part = blockIdx.y), one thread per normalized element: a column of
/// GPT-2's 4096 rows summed by one thread kept 768 threads busy on a GPU of
/// a hundred thousand.
__global__ void
layerNormParamPartialsKernel(const void *dy, NarrowFormat stored,
                             const float *x, const float *meanIn,
                             const float *invIn, double *partials,
                             int64_t outer, int64_t inner, int64_t chunk) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, part = blockIdx.y;
  if (i >= inner)
    return;
  double sumScale = 0, sumBias = 0;
  for (int64_t o = part * chunk, end = min(outer, o + chunk); o < end; ++o) {
    double g = loadValue(dy, o * inner + i, stored);
    double m = meanIn ? meanIn[o] : 0.0;
    sumScale += g * (x[o * inner + i] - m) * invIn[o];
    sumBias += g;
  }
  double *at = partials + 2 * (part * inner + i);
  at[0] = sumScale;
  at[1] = sumBias;
}

/// Each element's partials added in order (the same sums every run), then
/// into the parameter's gradient (several elements onto one value where the
/// scale broadcasts).
__global__ void layerNormParamGradKernel(const double *partials, int64_t parts,
                                         int64_t inner, float *dscale,
                                         float *dbias, IndexMap si) {
  CDP_FOR_EACH(i, inner) {
    double sumScale = 0, sumBias = 0;
    for (int64_t part = 0; part < parts; ++part) {
      sumScale += partials[2 * (part * inner + i)];
      sumBias += partials[2 * (part * inner + i) + 1];
    }
    atomicAdd(dscale + si(i), static_cast<float>(sumScale));
    atomicAdd(dbias + si(i), static_cast<float>(sumBias));
  }
}

/// A softmax's bias: where row r's first value lies (`at` of the row's first
/// element) and how far apart its values are along the axis; null `values`
/// for none.
struct SoftmaxBias {
  const float *values = nullptr;
  IndexMap at;
  int64_t stride = 0;
};

/// Rows of a softmax: `length` elements `inner` apart, each plus its bias
/// value; with `zeroNanRows` a row holding a NaN (its sum is then NaN) comes
/// out as zeros.
__global__ void softmaxKernel(const float *x, SoftmaxBias bias, float *y,
                              int64_t length, int64_t inner, bool log,
                              bool zeroNanRows) {
  int64_t row = blockIdx.x, o = row / inner, j = row % inner;
  int64_t first = o * length * inner + j;
  const float *in = x + first;
  const float *add = bias.values ? bias.values + bias.at(first) : nullptr;
  float *out = y + first;
  auto value = [&](int64_t a) {
    return add ? in[a * inner] + add[a * bias.stride] : in[a * inner];
  };
  float top;
  double sum;
  rowMaxAndExpSum(value, length, top, sum);
  double logSum = ::log(sum);
  bool zeroRow = zeroNanRows && isnan(sum);
  for (int64_t a = threadIdx.x; a < length; a += blockDim.x) {
    double shifted = value(a) - top;
    out[a * inner] = zeroRow ? 0.0f
                             : static_cast<float>(log ? shifted - logSum
                                                      : exp(shifted - logSum));
  }
}

__global__ void softmaxGradKernel(const float *dy, const float *y, void *dx,
                                  int64_t length, int64_t inner, bool log,
                                  NarrowFormat rounding, bool twoBytes) {
  int64_t row = blockIdx.x, o = row / inner, j = row % inner;
  int64_t base = o * length * inner + j;
  double sum = 0;
  for (int64_t a = threadIdx.x; a < length; a += blockDim.x) {
    int64_t k = base + a * inner;
    sum += log ? dy[k] : dy[k] * y[k];
  }
  sum = blockSum(sum);
  for (int64_t a = threadIdx.x; a < length; a += blockDim.x) {
    int64_t k = base + a * inner;
    storeResult(
        dx, k,
        static_cast<float>(log ? dy[k] - exp(static_cast<double>(y[k])) * sum
                               : y[k] * (dy[k] - sum)),
        rounding, twoBytes);
  }
}

/// Threads per block for rows of `length`: a multiple of 32, at most 256.
unsigned rowThreads(int64_t length) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((length + 31) / 32 * 32, 32, kThreads));
}

/// Batch norm's per-channel sums over (N, spatial) and the double buffers
/// they land in, sized at load.
struct ChannelSums {
  ChannelSums(const KernelArgs &args, const std::vector<int64_t> &shape,
              int buffers, int coefficientsPerChannel)
      : sum(args, shape, channelAxes(shape)), channels(shape[1]),
        memory(deviceOf(args),
               static_cast<size_t>(std::max<int64_t>(channels, 1)) *
                   (buffers + coefficientsPerChannel) * sizeof(double)) {}
  static std::vector<bool> channelAxes(const std::vector<int64_t> &shape) {
    std::vector<bool> reduced(shape.size(), true);
    reduced[1] = false;
    return reduced;
  }
  double *buffer(int k) const { return memory.as<double>() + k * channels; }
  SegmentedSum sum;
  int64_t channels;
  Scratch memory;
};

void registerBatchNorm(KernelRegistry &registry) {
  addKernel(
      registry, "batch_norm", Launches::SameEveryStep,
      [](const KernelArgs &args) {
        TensorView x = args.inputs[0], scale = args.inputs[1],
                   bias = args.inputs[2], mean = args.inputs[3],
                   var = args.inputs[4];
        TensorView y = args.outputs[0], runMean = args.outputs[1],
                   runVar = args.outputs[2];
        auto sums = std::make_shared<ChannelSums>(args, x.shape, 2, 2);
        ops::BatchNormAttributes attrs = ops::BatchNormAttributes::read(args);
        BatchNormParams p{attrs.epsilon, attrs.momentum, attrs.training_mode,
                          attrs.unbiased_running_var, sums->sum.count()};
        IndexMap channelOf = channelMap(args, x.shape);
        NarrowFormat rounding = roundingOf(args);
        return [=](const StepContext &context) {
          cudaStream_t stream = streamOf(context);
          int64_t channels = sums->channels, n = x.numel();
          if (channels == 0)
            return;
          using Term = SegmentedSum::Term;
          if (p.training) {
            sums->sum.sums(stream, x.f32(), nullptr, Term::Value,
                           sums->buffer(0));
            sums->sum.sums(stream, x.f32(), nullptr, Term::Square,
                           sums->buffer(1));
          }
          batchNormCoefficientsKernel<<<blocksFor(channels), kThreads, 0,
                                        stream>>>(
              channels, sums->buffer(0), sums->buffer(1), scale.f32(),
              bias.f32(), mean.f32(), var.f32(), runMean.f32(), runVar.f32(),
              sums->buffer(2), p);
          if (n)
            batchNormApplyKernel<<<blocksFor(n), kThreads, 0, stream>>>(
                x.f32(), y.f32(), n, channelOf, sums->buffer(2),
                attrs.activation.value_or("") == "relu", rounding);
          launched("batch_norm");
        };
      });

  addKernel(
      registry, "batch_norm_grad", Launches::SameEveryStep,
      [](const KernelArgs &args) {
        TensorView dy = args.inputs[0], x = args.inputs[1],
                   scale = args.inputs[2], mean = args.inputs[3],
                   var = args.inputs[4];
        TensorView dx = args.outputs[0], dscale = args.outputs[1],
                   dbias = args.outputs[2];
        auto sums = std::make_shared<ChannelSums>(args, x.shape, 4, 5);
        ops::BatchNormGradAttributes attrs =
            ops::BatchNormGradAttributes::read(args);
        BatchNormParams p{attrs.epsilon, 0.0, attrs.training_mode, false,
                          sums->sum.count()};
        IndexMap channelOf = channelMap(args, x.shape);
        NarrowFormat rounding = roundingOf(args);
        return [=](const StepContext &context) {
          cudaStream_t stream = streamOf(context);
          int64_t channels = sums->channels, n = x.numel();
          if (channels == 0)
            return;
          using Term = SegmentedSum::Term;
          if (p.training) {
            sums->sum.sums(stream, x.f32(), nullptr, Term::Value,
                           sums->buffer(0));
            sums->sum.sums(stream, x.f32(), nullptr, Term::Square,
                           sums->buffer(1));
          }
          sums->sum.sums(stream, dy.f32(), nullptr, Term::Value,
                         sums->buffer(2));
          sums->sum.sums(stream, dy.f32(), x.f32(), Term::Product,
                         sums->buffer(3));
          batchNormGradCoefficientsKernel<<<blocksFor(channels), kThreads, 0,
                                            stream>>>(
              channels, sums->buffer(0), sums->buffer(1), sums->buffer(2),
              sums->buffer(3), scale.f32(), mean.f32(), var.f32(), dscale.f32(),
              dbias.f32(), sums->buffer(4), p);
          if (n)
            batchNormGradApplyKernel<<<blocksFor(n), kThreads, 0, stream>>>(
                dy.f32(), x.f32(), dx.f32(), n, channelOf, sums->buffer(4),
                rounding);
          launched("batch_norm_grad");
        };
      });
}

void registerLayerNorm(KernelRegistry &registry) {
  addKernel(
      registry, "layer_norm", Launches::SameEveryStep,
      [](const KernelArgs &args) {
        TensorView x = args.inputs[0], scale = args.inputs[1];
        TensorView bias =
            args.inputs.size() > 2 ? args.inputs[2] : TensorView();
        TensorView y = args.outputs[0], meanOut = args.outputs[1],
                   invOut = args.outputs[2];
        ops::LayerNormAttributes attrs = ops::LayerNormAttributes::read(args);
        int64_t axis = normalizeAxis(attrs.axis, x.rank());
        int64_t outer = product(x.shape, 0, axis),
                inner = product(x.shape, axis);
        double epsilon = attrs.epsilon;
        bool centered = !attrs.rms;
        std::vector<int64_t> normalized(x.shape.begin() + axis, x.shape.end());
        IndexMap si = broadcastMap(args, scale.shape, normalized);
        IndexMap bi = bias.present()
                          ? broadcastMap(args, bias.shape, normalized)
                          : IndexMap();
        NarrowFormat rounding = roundingOf(args);
        bool twoBytes = storedInTwoBytes(y);
        return [=](const StepContext &context) {
          if (outer == 0)
            return;
          layerNormKernel<<<outer, rowThreads(inner), 0, streamOf(context)>>>(
              x.f32(), scale.f32(), bias.present() ? bias.f32() : nullptr,
              y.data, meanOut.f32(), invOut.f32(), inner, epsilon, centered, si,
              bi, rounding, twoBytes);
          launched("layer_norm");
        };
      });

  addKernel(
      registry, "layer_norm_grad", Launches::SameEveryStep,
      [](const KernelArgs &args) {
        TensorView dy = args.inputs[0], x = args.inputs[1],
                   scale = args.inputs[2], meanIn = args.inputs[3],
                   invIn = args.inputs[4];
        TensorView dx = args.outputs[0], dscale = args.outputs[1],
                   dbias = args.outputs[2];
        TensorView addend =
            args.inputs.size() > 5 ? args.inputs[5] : TensorView();
        ops::LayerNormGradAttributes attrs =
            ops::LayerNormGradAttributes::read(args);
        int64_t axis = normalizeAxis(attrs.axis, x.rank());
        int64_t outer = product(x.shape, 0, axis),
                inner = product(x.shape, axis);
        bool rms = attrs.rms;
        std::vector<int64_t> normalized(x.shape.begin() + axis, x.shape.end());
        IndexMap si = broadcastMap(args, scale.shape, normalized);
        NarrowFormat stored = storedFormatOf(dy);
        // Rows in parts, enough threads to fill a large GPU, parts of at least
        // 16 rows.
        int64_t parts =
            std::clamp<int64_t>(131072 / std::max<int64_t>(inner, 1), 1,
                                std::clamp<int64_t>(outer / 16, 1, 65535));
        int64_t chunk = (outer + parts - 1) / std::max<int64_t>(parts, 1);
        auto partials = std::make_shared<Scratch>(
            deviceOf(args),
            static_cast<size_t>(std::max<int64_t>(2 * parts * inner, 1)) *
                sizeof(double));
        return [=](const StepContext &context) {
          cudaStream_t stream = streamOf(context);
          checkCuda(cudaMemsetAsync(dscale.data, 0, byteSize(dscale), stream),
                    "memset");
          checkCuda(cudaMemsetAsync(dbias.data, 0, byteSize(dbias), stream),
                    "memset");
          if (outer == 0 || inner == 0)
            return;
          // RMSNorm's rows: no mean read (null), none subtracted.
          const float *mean = rms ? nullptr : meanIn.f32();
          layerNormGradKernel<<<outer, rowThreads(inner), 0, stream>>>(
              dy.data, stored, x.f32(), scale.f32(), mean, invIn.f32(),
              addend.present() ? addend.f32() : nullptr, dx.f32(), inner, si);
          dim3 grid((inner + kThreads - 1) / kThreads, parts);
          layerNormParamPartialsKernel<<<grid, kThreads, 0, stream>>>(
              dy.data, stored, x.f32(), mean, invIn.f32(),
              partials->as<double>(), outer, inner, chunk);
          layerNormParamGradKernel<<<blocksFor(inner), kThreads, 0, stream>>>(
              partials->as<double>(), parts, inner, dscale.f32(), dbias.f32(),
              si);
          launched("layer_norm_grad");
        };
      });
}

void registerSoftmax(KernelRegistry &registry) {
  auto rows = [](const KernelArgs &args, const TensorView &t, int64_t &count,
                 int64_t &length, int64_t &inner) {
    int64_t axis = normalizeAxis(args.i("axis", -1), t.rank());
    length = t.shape[axis];
    inner = product(t.shape, axis + 1);
    count = product(t.shape, 0, axis) * inner;
  };
  for (bool log : {false, true})
    addKernel(
        registry, log ? "log_softmax" : "softmax", Launches::SameEveryStep,
        [log, rows](const KernelArgs &args) {
          TensorView x = args.inputs[0], y = args.outputs[0];
          int64_t count, length, inner;
          rows(args, x, count, length, inner);
          bool zeroNanRows = args.i("zero_nan_rows", 0) != 0;
          SoftmaxBias bias;
          if (args.inputs.size() > 1) {
            bias.values = args.inputs[1].f32();
            bias.at = broadcastMap(args, args.inputs[1].shape, x.shape);
            bias.stride = broadcastStrides(
                args.inputs[1].shape,
                x.shape)[normalizeAxis(args.i("axis", -1), x.rank())];
          }
          return [=](const StepContext &context) {
            if (count == 0 || length == 0)
              return;
            softmaxKernel<<<count, rowThreads(length), 0, streamOf(context)>>>(
                x.f32(), bias, y.f32(), length, inner, log, zeroNanRows);
            launched("softmax");
          };
        });
  addKernel(registry, "softmax_grad", Launches::SameEveryStep,
            [rows](const KernelArgs &args) {
              TensorView dy = args.inputs[0], y = args.inputs[1],
                         dx = args.outputs[0];
              bool log = args.i("log", 0) != 0;
              int64_t count, length, inner;
              rows(args, y, count, length, inner);
              NarrowFormat rounding = roundingOf(args);
              bool twoBytes = storedInTwoBytes(dx);
              return [=](const StepContext &context) {
                if (count == 0 || length == 0)
                  return;
                softmaxGradKernel<<<count, rowThreads(length), 0,
                                    streamOf(context)>>>(
                    dy.f32(), y.f32(), dx.data, length, inner, log, rounding,
                    twoBytes);
                launched("softmax_grad");
              };
            });
}

} // namespace

void registerNormalization(KernelRegistry &registry) {
  registerBatchNorm(registry);
  registerLayerNorm(registry);
  registerSoftmax(registry);
}

} // namespace cdp::runtime::cuda
