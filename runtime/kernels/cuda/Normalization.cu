//===- Normalization.cu - batch/layer norm and softmax on the GPU ---------===//
//
// One block per channel (batch norm) or row (layer norm, softmax);
// statistics are summed in double in a fixed order, as the CPU kernels sum
// them in double, so that results stay within float32 rounding of them.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "Reduce.cuh"

namespace cdp::runtime::cuda {

namespace {

/// (N, C, spatial) view of a batch-norm input.
struct Channels {
  int64_t batch, channels, spatial;
  __host__ __device__ int64_t count() const { return batch * spatial; }
  /// Element r (of count()) of channel c.
  __device__ int64_t at(int64_t c, int64_t r) const {
    return (r / spatial * channels + c) * spatial + r % spatial;
  }
};

Channels channelsOf(const std::vector<int64_t> &shape) {
  return {shape[0], shape[1], product(shape, 2)};
}

__device__ void channelStats(const Channels &v, const float *x, int64_t c,
                             double &mean, double &var) {
  double sum = 0;
  for (int64_t r = threadIdx.x; r < v.count(); r += blockDim.x)
    sum += x[v.at(c, r)];
  mean = blockSum(sum) / v.count();
  double squares = 0;
  for (int64_t r = threadIdx.x; r < v.count(); r += blockDim.x) {
    double d = x[v.at(c, r)] - mean;
    squares += d * d;
  }
  var = blockSum(squares) / v.count();
}

struct BatchNormParams {
  double epsilon, momentum;
  bool training, unbiased;
};

__global__ void batchNormKernel(Channels v, const float *x, const float *scale,
                                const float *bias, const float *mean,
                                const float *var, float *y, float *runMean,
                                float *runVar, BatchNormParams p) {
  int64_t c = blockIdx.x;
  double m, s;
  if (p.training) {
    channelStats(v, x, c, m, s);
    double batchVar =
        p.unbiased && v.count() > 1 ? s * v.count() / (v.count() - 1) : s;
    if (threadIdx.x == 0) {
      runMean[c] =
          static_cast<float>(p.momentum * mean[c] + (1 - p.momentum) * m);
      runVar[c] =
          static_cast<float>(p.momentum * var[c] + (1 - p.momentum) * batchVar);
    }
  } else {
    m = mean[c];
    s = var[c];
    __syncthreads(); // every thread read mean and var before they change
    if (threadIdx.x == 0) {
      runMean[c] = static_cast<float>(m);
      runVar[c] = static_cast<float>(s);
    }
  }
  double inv = 1.0 / sqrt(s + p.epsilon);
  double a = scale[c] * inv, b = bias[c] - m * a;
  for (int64_t r = threadIdx.x; r < v.count(); r += blockDim.x)
    y[v.at(c, r)] = static_cast<float>(x[v.at(c, r)] * a + b);
}

__global__ void batchNormGradKernel(Channels v, const float *dy, const float *x,
                                    const float *scale, const float *mean,
                                    const float *var, float *dx, float *dscale,
                                    float *dbias, double epsilon,
                                    bool training) {
  int64_t c = blockIdx.x;
  double m, s;
  if (training)
    channelStats(v, x, c, m, s);
  else {
    m = mean[c];
    s = var[c];
  }
  double inv = 1.0 / sqrt(s + epsilon);
  double sumDy = 0, sumDyXhat = 0;
  for (int64_t r = threadIdx.x; r < v.count(); r += blockDim.x) {
    int64_t k = v.at(c, r);
    sumDy += dy[k];
    sumDyXhat += dy[k] * (x[k] - m) * inv;
  }
  sumDy = blockSum(sumDy);
  sumDyXhat = blockSum(sumDyXhat);
  if (threadIdx.x == 0) {
    dbias[c] = static_cast<float>(sumDy);
    dscale[c] = static_cast<float>(sumDyXhat);
  }
  double g = scale[c] * inv, count = static_cast<double>(v.count());
  for (int64_t r = threadIdx.x; r < v.count(); r += blockDim.x) {
    int64_t k = v.at(c, r);
    double value = dy[k];
    if (training)
      value = value - sumDy / count - (x[k] - m) * inv * sumDyXhat / count;
    dx[k] = static_cast<float>(g * value);
  }
}

__global__ void layerNormKernel(const float *x, const float *scale,
                                const float *bias, float *y, float *meanOut,
                                float *invOut, int64_t inner, double epsilon,
                                IndexMap si, IndexMap bi) {
  int64_t o = blockIdx.x;
  const float *row = x + o * inner;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x)
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
    y[o * inner + i] = static_cast<float>((row[i] - m) * inv * scale[si(i)] +
                                          (bias ? bias[bi(i)] : 0.0f));
}

__global__ void layerNormGradKernel(const float *dy, const float *x,
                                    const float *scale, const float *meanIn,
                                    const float *invIn, float *dx,
                                    int64_t inner, IndexMap si) {
  int64_t o = blockIdx.x;
  const float *row = x + o * inner, *grad = dy + o * inner;
  double m = meanIn[o], inv = invIn[o], sumG = 0, sumGXhat = 0;
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
    double g = grad[i] * scale[si(i)];
    sumG += g;
    sumGXhat += g * (row[i] - m) * inv;
  }
  sumG = blockSum(sumG);
  sumGXhat = blockSum(sumGXhat);
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
    double xhat = (row[i] - m) * inv, g = grad[i] * scale[si(i)];
    dx[o * inner + i] =
        static_cast<float>(inv * (g - sumG / inner - xhat * sumGXhat / inner));
  }
}

/// dscale and dbias: sums over the rows, one thread per normalized element.
__global__ void layerNormParamGradKernel(const float *dy, const float *x,
                                         const float *meanIn,
                                         const float *invIn, float *dscale,
                                         float *dbias, int64_t outer,
                                         int64_t inner, IndexMap si) {
  CDP_FOR_EACH(i, inner) {
    double sumScale = 0, sumBias = 0;
    for (int64_t o = 0; o < outer; ++o) {
      double g = dy[o * inner + i];
      sumScale += g * (x[o * inner + i] - meanIn[o]) * invIn[o];
      sumBias += g;
    }
    atomicAdd(dscale + si(i), static_cast<float>(sumScale));
    atomicAdd(dbias + si(i), static_cast<float>(sumBias));
  }
}

/// Rows of a softmax: `length` elements `inner` apart.
__global__ void softmaxKernel(const float *x, float *y, int64_t length,
                              int64_t inner, bool log) {
  int64_t row = blockIdx.x, o = row / inner, j = row % inner;
  const float *in = x + o * length * inner + j;
  float *out = y + o * length * inner + j;
  float top = -INFINITY;
  for (int64_t a = threadIdx.x; a < length; a += blockDim.x)
    top = fmaxf(top, in[a * inner]);
  top = blockMax(top);
  double sum = 0;
  for (int64_t a = threadIdx.x; a < length; a += blockDim.x)
    sum += exp(static_cast<double>(in[a * inner] - top));
  double logSum = ::log(blockSum(sum));
  for (int64_t a = threadIdx.x; a < length; a += blockDim.x) {
    double shifted = in[a * inner] - top;
    out[a * inner] =
        static_cast<float>(log ? shifted - logSum : exp(shifted - logSum));
  }
}

__global__ void softmaxGradKernel(const float *dy, const float *y, float *dx,
                                  int64_t length, int64_t inner, bool log) {
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
    dx[k] =
        static_cast<float>(log ? dy[k] - exp(static_cast<double>(y[k])) * sum
                               : y[k] * (dy[k] - sum));
  }
}

/// Threads per block for rows of `length`: a multiple of 32, at most 256.
unsigned rowThreads(int64_t length) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((length + 31) / 32 * 32, 32, kThreads));
}

void registerBatchNorm(KernelRegistry &registry) {
  addKernel(registry, "batch_norm", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], scale = args.inputs[1],
               bias = args.inputs[2], mean = args.inputs[3],
               var = args.inputs[4];
    TensorView y = args.outputs[0], runMean = args.outputs[1],
               runVar = args.outputs[2];
    BatchNormParams p{args.f("epsilon", 1e-5), args.f("momentum", 0.9),
                      args.i("training_mode", 0) != 0,
                      args.i("unbiased_running_var", 0) != 0};
    Channels v = channelsOf(x.shape);
    return [=](const StepContext &context) {
      if (v.channels == 0)
        return;
      batchNormKernel<<<v.channels, rowThreads(v.count()), 0,
                        streamOf(context)>>>(
          v, x.f32(), scale.f32(), bias.f32(), mean.f32(), var.f32(), y.f32(),
          runMean.f32(), runVar.f32(), p);
      launched("batch_norm");
    };
  });

  addKernel(registry, "batch_norm_grad", [](const KernelArgs &args) {
    TensorView dy = args.inputs[0], x = args.inputs[1], scale = args.inputs[2],
               mean = args.inputs[3], var = args.inputs[4];
    TensorView dx = args.outputs[0], dscale = args.outputs[1],
               dbias = args.outputs[2];
    double epsilon = args.f("epsilon", 1e-5);
    bool training = args.i("training_mode", 0) != 0;
    Channels v = channelsOf(x.shape);
    return [=](const StepContext &context) {
      if (v.channels == 0)
        return;
      batchNormGradKernel<<<v.channels, rowThreads(v.count()), 0,
                            streamOf(context)>>>(
          v, dy.f32(), x.f32(), scale.f32(), mean.f32(), var.f32(), dx.f32(),
          dscale.f32(), dbias.f32(), epsilon, training);
      launched("batch_norm_grad");
    };
  });
}

void registerLayerNorm(KernelRegistry &registry) {
  addKernel(registry, "layer_norm", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], scale = args.inputs[1];
    TensorView bias = args.inputs.size() > 2 ? args.inputs[2] : TensorView();
    TensorView y = args.outputs[0], meanOut = args.outputs[1],
               invOut = args.outputs[2];
    int64_t axis = normalizeAxis(args.i("axis", -1), x.rank());
    int64_t outer = product(x.shape, 0, axis), inner = product(x.shape, axis);
    double epsilon = args.f("epsilon", 1e-5);
    std::vector<int64_t> normalized(x.shape.begin() + axis, x.shape.end());
    IndexMap si = broadcastMap(args, scale.shape, normalized);
    IndexMap bi = bias.present() ? broadcastMap(args, bias.shape, normalized)
                                 : IndexMap();
    return [=](const StepContext &context) {
      if (outer == 0)
        return;
      layerNormKernel<<<outer, rowThreads(inner), 0, streamOf(context)>>>(
          x.f32(), scale.f32(), bias.present() ? bias.f32() : nullptr, y.f32(),
          meanOut.f32(), invOut.f32(), inner, epsilon, si, bi);
      launched("layer_norm");
    };
  });

  addKernel(registry, "layer_norm_grad", [](const KernelArgs &args) {
    TensorView dy = args.inputs[0], x = args.inputs[1], scale = args.inputs[2],
               meanIn = args.inputs[3], invIn = args.inputs[4];
    TensorView dx = args.outputs[0], dscale = args.outputs[1],
               dbias = args.outputs[2];
    int64_t axis = normalizeAxis(args.i("axis", -1), x.rank());
    int64_t outer = product(x.shape, 0, axis), inner = product(x.shape, axis);
    std::vector<int64_t> normalized(x.shape.begin() + axis, x.shape.end());
    IndexMap si = broadcastMap(args, scale.shape, normalized);
    return [=](const StepContext &context) {
      cudaStream_t stream = streamOf(context);
      checkCuda(cudaMemsetAsync(dscale.data, 0, byteSize(dscale), stream),
                "memset");
      checkCuda(cudaMemsetAsync(dbias.data, 0, byteSize(dbias), stream),
                "memset");
      if (outer == 0 || inner == 0)
        return;
      layerNormGradKernel<<<outer, rowThreads(inner), 0, stream>>>(
          dy.f32(), x.f32(), scale.f32(), meanIn.f32(), invIn.f32(), dx.f32(),
          inner, si);
      layerNormParamGradKernel<<<blocksFor(inner), kThreads, 0, stream>>>(
          dy.f32(), x.f32(), meanIn.f32(), invIn.f32(), dscale.f32(),
          dbias.f32(), outer, inner, si);
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
        registry, log ? "log_softmax" : "softmax",
        [log, rows](const KernelArgs &args) {
          TensorView x = args.inputs[0], y = args.outputs[0];
          int64_t count, length, inner;
          rows(args, x, count, length, inner);
          return [=](const StepContext &context) {
            if (count == 0 || length == 0)
              return;
            softmaxKernel<<<count, rowThreads(length), 0, streamOf(context)>>>(
                x.f32(), y.f32(), length, inner, log);
            launched("softmax");
          };
        });
  addKernel(registry, "softmax_grad", [rows](const KernelArgs &args) {
    TensorView dy = args.inputs[0], y = args.inputs[1], dx = args.outputs[0];
    bool log = args.i("log", 0) != 0;
    int64_t count, length, inner;
    rows(args, y, count, length, inner);
    return [=](const StepContext &context) {
      if (count == 0 || length == 0)
        return;
      softmaxGradKernel<<<count, rowThreads(length), 0, streamOf(context)>>>(
          dy.f32(), y.f32(), dx.f32(), length, inner, log);
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
