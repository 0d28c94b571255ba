//===- Normalization.cpp - batch/layer norm and softmax on the CPU --------===//
//
// Statistics are accumulated in double so that float32 results stay close
// to PyTorch's over large reductions.
//
//===----------------------------------------------------------------------===//

#include "../Activations.h"
#include "CpuKernels.h"
#include "VectorMath.h"
#include "cdp/Runtime/OpTable.h"

#include <cmath>

namespace cdp::runtime::cpu {

namespace {

/// (N, C, spatial) view of a batch-norm input: channel c's values are
/// `batch` contiguous runs of `spatial` elements, one per image.
struct ChannelView {
  int64_t batch, channels, spatial;
  explicit ChannelView(const std::vector<int64_t> &shape)
      : batch(shape[0]), channels(shape[1]), spatial(product(shape, 2)) {}
  int64_t count() const { return batch * spatial; }
  /// The first element of image n's run of channel c.
  int64_t run(int64_t n, int64_t c) const {
    return (n * channels + c) * spatial;
  }
};

/// Double sums over float runs, eight independent partial sums so the
/// compiler vectorises them (one running sum is a chain it must keep in
/// order); the partials are added in a fixed order, so results do not
/// depend on threads.
constexpr int kLanes = 8;
struct Sums {
  double lane[kLanes] = {};
  double total() const {
    double t = 0;
    for (double v : lane)
      t += v;
    return t;
  }
};

/// sum over channel c of f(element index k).
template <typename Term>
double channelSum(const ChannelView &v, int64_t c, const Term &term) {
  Sums sums;
  for (int64_t n = 0; n < v.batch; ++n) {
    int64_t begin = v.run(n, c), i = 0;
    for (; i + kLanes <= v.spatial; i += kLanes)
      for (int l = 0; l < kLanes; ++l)
        sums.lane[l] += term(begin + i + l);
    for (; i < v.spatial; ++i)
      sums.lane[i % kLanes] += term(begin + i);
  }
  return sums.total();
}

/// Channel c's batch mean and (biased) variance, two passes in double.
void batchStats(const ChannelView &v, const float *x, int64_t c, double &mean,
                double &var) {
  mean = channelSum(v, c, [&](int64_t k) { return double(x[k]); }) / v.count();
  var = channelSum(v, c,
                   [&](int64_t k) {
                     double d = x[k] - mean;
                     return d * d;
                   }) /
        v.count();
}

} // namespace

/// Batch normalization and its gradient.
static void registerBatchNorm(KernelRegistry &registry) {
  addKernel(registry, "batch_norm", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], scale = args.inputs[1],
               bias = args.inputs[2], mean = args.inputs[3],
               var = args.inputs[4];
    TensorView y = args.outputs[0], runMean = args.outputs[1],
               runVar = args.outputs[2];
    ops::BatchNormAttributes attrs = ops::BatchNormAttributes::read(args);
    double epsilon = attrs.epsilon, momentum = attrs.momentum;
    bool training = attrs.training_mode;
    bool unbiased = attrs.unbiased_running_var;
    bool relu = attrs.activation.value_or("") == "relu";
    NarrowFormat rounding = roundingOf(args);
    ChannelView v(x.shape);
    return [=](const StepContext &) {
#pragma omp parallel for
      for (int64_t c = 0; c < v.channels; ++c) {
        double m, s;
        if (training) {
          batchStats(v, x.f32(), c, m, s);
          double batchVar =
              unbiased && v.count() > 1 ? s * v.count() / (v.count() - 1) : s;
          runMean.f32()[c] =
              static_cast<float>(momentum * mean.f32()[c] + (1 - momentum) * m);
          runVar.f32()[c] = static_cast<float>(momentum * var.f32()[c] +
                                               (1 - momentum) * batchVar);
        } else {
          m = mean.f32()[c];
          s = var.f32()[c];
          runMean.f32()[c] = mean.f32()[c];
          runVar.f32()[c] = var.f32()[c];
        }
        double inv = 1.0 / std::sqrt(s + epsilon);
        double a = scale.f32()[c] * inv, b = bias.f32()[c] - m * a;
        for (int64_t n = 0; n < v.batch; ++n) {
          const float *in = x.f32() + v.run(n, c);
          float *out = y.f32() + v.run(n, c);
          for (int64_t i = 0; i < v.spatial; ++i) {
            float value = static_cast<float>(in[i] * a + b);
            out[i] = relu ? reluOf(value) : value;
          }
          // round_result on the run just written, while it is in cache.
          roundInPlace(rounding, out, v.spatial);
        }
      }
    };
  });

  addKernel(registry, "batch_norm_grad", [](const KernelArgs &args) {
    TensorView dy = args.inputs[0], x = args.inputs[1], scale = args.inputs[2],
               mean = args.inputs[3], var = args.inputs[4];
    TensorView dx = args.outputs[0], dscale = args.outputs[1],
               dbias = args.outputs[2];
    ops::BatchNormGradAttributes attrs =
        ops::BatchNormGradAttributes::read(args);
    double epsilon = attrs.epsilon;
    bool training = attrs.training_mode;
    NarrowFormat rounding = roundingOf(args);
    ChannelView v(x.shape);
    return [=](const StepContext &) {
#pragma omp parallel for
      for (int64_t c = 0; c < v.channels; ++c) {
        double m, s;
        if (training)
          batchStats(v, x.f32(), c, m, s);
        else {
          m = mean.f32()[c];
          s = var.f32()[c];
        }
        double inv = 1.0 / std::sqrt(s + epsilon);
        const float *g = dy.f32(), *in = x.f32();
        double sumDy =
            channelSum(v, c, [&](int64_t k) { return double(g[k]); });
        double sumDyXhat = inv * channelSum(v, c, [&](int64_t k) {
                             return double(g[k]) * (in[k] - m);
                           });
        dbias.f32()[c] = static_cast<float>(sumDy);
        dscale.f32()[c] = static_cast<float>(sumDyXhat);
        double gain = scale.f32()[c] * inv;
        double count = static_cast<double>(v.count());
        // dx = gain (dy - sumDy / count - xhat sumDyXhat / count), with
        // xhat = (x - m) inv: one multiply-add per element.
        double slope = training ? gain * inv * sumDyXhat / count : 0.0;
        double offset = training ? -gain * sumDy / count + slope * m : 0.0;
        for (int64_t n = 0; n < v.batch; ++n) {
          int64_t begin = v.run(n, c);
          float *out = dx.f32() + begin;
          for (int64_t i = 0; i < v.spatial; ++i)
            out[i] = static_cast<float>(gain * g[begin + i] -
                                        slope * in[begin + i] + offset);
          roundInPlace(rounding, out, v.spatial);
        }
      }
    };
  });
}

namespace {

/// Rows of a layer_norm (or RMSNorm) and its gradient: the row's sums in
/// kNormLanes fixed lanes of doubles, added in lane order (the same bits on
/// any processor and thread count, and vectorized, where one running double
/// sum kept the loop scalar), the element-wise passes in double as before.
constexpr int kNormLanes = 8;

/// Two sums of a row's terms. A plain aggregate, not std::pair: clang
/// leaves std::pair's constructor undefined where a target_clones function
/// instantiates it (a link error in the sanitizers' build).
struct TwoSums {
  double first, second;
};

/// The sums of the pairs terms(i) for i < n: term i in lane i mod
/// kNormLanes.
template <typename Terms> TwoSums laneSums(int64_t n, Terms terms) {
  double first[kNormLanes] = {}, second[kNormLanes] = {};
  int64_t i = 0;
  for (; i + kNormLanes <= n; i += kNormLanes)
    for (int l = 0; l < kNormLanes; ++l) {
      TwoSums term = terms(i + l);
      first[l] += term.first;
      second[l] += term.second;
    }
  for (int l = 0; i < n; ++i, ++l) {
    TwoSums term = terms(i);
    first[l] += term.first;
    second[l] += term.second;
  }
  TwoSums total{0.0, 0.0};
  for (int l = 0; l < kNormLanes; ++l) {
    total.first += first[l];
    total.second += second[l];
  }
  return total;
}

/// The values of a broadcast scale (or bias) over the normalized elements,
/// read once per run: the rows then read them contiguously.
std::vector<float> spreadOver(const TensorView &t,
                              const std::vector<int64_t> &index) {
  std::vector<float> values(index.size());
  for (size_t i = 0; i < index.size(); ++i)
    values[i] = t.f32()[index[i]];
  return values;
}

/// Rows a block of layer_norm_grad's rows holds: the scale's and bias's
/// gradients are summed per block (rows in order), then over the blocks in
/// order, so that the blocks can run on any threads with the same sums. At
/// least 16 rows, at most 256 blocks (their partial sums' memory).
int64_t rowsPerBlock(int64_t rows) {
  return std::max<int64_t>(16, (rows + 255) / 256);
}

/// One normalized row: its mean (0 unless `centered`) and inverse
/// deviation into `stats`, out = (x - mean) inverse gamma + beta.
CDP_VECTOR_CLONES void normalizedRow(const float *x, int64_t n, bool centered,
                                     double epsilon, const float *gamma,
                                     const float *beta, float *out,
                                     double stats[2]) {
  double m = centered ? laneSums(
                            n,
                            [&](int64_t i) {
                              return TwoSums{static_cast<double>(x[i]), 0.0};
                            }).first /
                            n
                      : 0.0;
  double squares = laneSums(n, [&](int64_t i) {
                     double d = x[i] - m;
                     return TwoSums{d * d, 0.0};
                   }).first;
  double inv = 1.0 / std::sqrt(squares / n + epsilon);
  // simd: out may be x (each element replaced by its own result), which the
  // compiler's overlap checks would send to the scalar loop.
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<float>((x[i] - m) * inv * gamma[i] + beta[i]);
  stats[0] = m;
  stats[1] = inv;
}

/// One row of layer_norm's gradient from its mean `m` and inverse
/// deviation `inv`: dx into `out` (plus `addend` where there is one), each
/// element's terms of the scale's and bias's gradients added into `ds` and
/// `db`.
CDP_VECTOR_CLONES void normalizedGradRow(const float *grad, const float *x,
                                         int64_t n, double m, double inv,
                                         bool centered, const float *gamma,
                                         const float *addend, float *out,
                                         float *ds, float *db) {
  // Plain doubles, not a structured binding: clang's OpenMP cannot capture
  // one in the simd loop below.
  TwoSums sums = laneSums(n, [&](int64_t i) {
    double g = grad[i] * gamma[i];
    // RMSNorm's mean is no function of x: no term for its gradient.
    return TwoSums{centered ? g : 0.0, g * ((x[i] - m) * inv)};
  });
  double sumG = sums.first, sumGXhat = sums.second;
  // simd: out, ds and db are the kernel's own rows (out may be grad or x,
  // each element replaced by its own result); too many pointers for the
  // compiler to check their overlap.
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    double xhat = (x[i] - m) * inv;
    double g = grad[i] * gamma[i];
    float value =
        static_cast<float>(inv * (g - sumG / n - xhat * sumGXhat / n));
    ds[i] += static_cast<float>(grad[i] * xhat);
    db[i] += grad[i];
    out[i] = addend ? addend[i] + value : value;
  }
}

} // namespace

/// layer_norm: rows on the threads, each read once into float32 (a 2-byte
/// input widened), its mean and inverse deviation from lane sums, then
/// normalized, scaled and shifted, and rounded (round_result) or stored in
/// 2 bytes.
static std::function<void(const StepContext &)>
layerNorm(const KernelArgs &args) {
  TensorView x = args.inputs[0], scale = args.inputs[1];
  TensorView bias = args.inputs.size() > 2 ? args.inputs[2] : TensorView();
  TensorView y = args.outputs[0], meanOut = args.outputs[1],
             invOut = args.outputs[2];
  ops::LayerNormAttributes attrs = ops::LayerNormAttributes::read(args);
  int64_t axis = normalizeAxis(attrs.axis, x.rank());
  int64_t outer = product(x.shape, 0, axis), inner = product(x.shape, axis);
  double epsilon = attrs.epsilon;
  bool centered = !attrs.rms;
  NarrowFormat rounding = roundingOf(args);
  std::vector<int64_t> normalized(x.shape.begin() + axis, x.shape.end());
  auto si = std::make_shared<std::vector<int64_t>>(
      broadcastIndex(scale.shape, normalized));
  std::shared_ptr<std::vector<int64_t>> bi;
  if (bias.present())
    bi = std::make_shared<std::vector<int64_t>>(
        broadcastIndex(bias.shape, normalized));
  return [=](const StepContext &) {
    std::vector<float> gamma = spreadOver(scale, *si),
                       beta = bi ? spreadOver(bias, *bi)
                                 : std::vector<float>(inner, 0.0f);
#pragma omp parallel if (outer * inner > 65536)
    {
      std::vector<float> in(inner), out(inner);
#pragma omp for
      for (int64_t o = 0; o < outer; ++o) {
        float *results = resultsOf(y, o * inner, out.data());
        double stats[2];
        normalizedRow(floatsOf(x, o * inner, inner, in.data()), inner, centered,
                      epsilon, gamma.data(), beta.data(), results, stats);
        meanOut.f32()[o] = static_cast<float>(stats[0]);
        invOut.f32()[o] = static_cast<float>(stats[1]);
        storeRow(results, inner, rounding, y, o * inner);
      }
    }
  };
}

static std::unique_ptr<Kernel> layerNormGrad(const KernelArgs &args);

static void registerLayerNorm(KernelRegistry &registry) {
  // One pass each, whatever the storage: 2-byte inputs widened a row at a
  // time, results rounded or stored in 2 bytes as each row is written.
  addKernel(registry, "layer_norm", layerNorm);
  registry.add("layer_norm_grad", Backend::CPU, layerNormGrad);
}

/// layer_norm_grad: blocks of rows on the threads (rowsPerBlock), each
/// row's two sums in lanes, dx written as the row is done, the scale's and
/// bias's gradients summed per block and then over the blocks in order.
static std::unique_ptr<Kernel> layerNormGrad(const KernelArgs &args) {
  TensorView dy = args.inputs[0], x = args.inputs[1], scale = args.inputs[2],
             meanIn = args.inputs[3], invIn = args.inputs[4];
  TensorView dx = args.outputs[0], dscale = args.outputs[1],
             dbias = args.outputs[2];
  // A fused gradient sum: dx is added to it (cdp-fuse-gradient-sums).
  TensorView addend = args.inputs.size() > 5 ? args.inputs[5] : TensorView();
  ops::LayerNormGradAttributes attrs = ops::LayerNormGradAttributes::read(args);
  int64_t axis = normalizeAxis(attrs.axis, x.rank());
  int64_t outer = product(x.shape, 0, axis), inner = product(x.shape, axis);
  bool centered = !attrs.rms;
  NarrowFormat rounding = roundingOf(args);
  std::vector<int64_t> normalized(x.shape.begin() + axis, x.shape.end());
  auto si = std::make_shared<std::vector<int64_t>>(
      broadcastIndex(scale.shape, normalized));
  int64_t blockRows = rowsPerBlock(outer);
  int64_t blocks = (outer + blockRows - 1) / blockRows;
  KernelScratch scratch(args);
  std::shared_ptr<void> partials =
      scratch.take(2 * blocks * inner * sizeof(float));
  auto body = [=](const StepContext &) {
    std::vector<float> gamma = spreadOver(scale, *si);
    auto *blockScale = static_cast<float *>(partials.get());
    float *blockBias = blockScale + blocks * inner;
#pragma omp parallel if (outer * inner > 65536)
    {
      std::vector<float> gradIn(inner), xIn(inner), out(inner);
#pragma omp for
      for (int64_t b = 0; b < blocks; ++b) {
        float *ds = blockScale + b * inner, *db = blockBias + b * inner;
        std::fill(ds, ds + inner, 0.0f);
        std::fill(db, db + inner, 0.0f);
        int64_t end = std::min(outer, (b + 1) * blockRows);
        for (int64_t o = b * blockRows; o < end; ++o) {
          float *results = resultsOf(dx, o * inner, out.data());
          normalizedGradRow(floatsOf(dy, o * inner, inner, gradIn.data()),
                            floatsOf(x, o * inner, inner, xIn.data()), inner,
                            centered ? meanIn.f32()[o] : 0.0, invIn.f32()[o],
                            centered, gamma.data(),
                            addend.present() ? addend.f32() + o * inner
                                             : nullptr,
                            results, ds, db);
          storeRow(results, inner, rounding, dx, o * inner);
        }
      }
    }
    std::fill(dscale.f32(), dscale.f32() + dscale.numel(), 0.0f);
    std::fill(dbias.f32(), dbias.f32() + dbias.numel(), 0.0f);
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t i = 0; i < inner; ++i) {
        dscale.f32()[(*si)[i]] += blockScale[b * inner + i];
        dbias.f32()[(*si)[i]] += blockBias[b * inner + i];
      }
  };
  return std::make_unique<FunctionKernel>(body, scratch.ownBytes());
}

/// One softmax (or log-softmax) row of `length` values `inner` apart, each
/// plus the bias value `biasStride` apart from `bias` where there is one;
/// with `zeroNanRows` a row holding a NaN comes out as zeros (a NaN anywhere
/// in it makes the sum NaN, so the sum says whether it holds one).
static void softmaxRow(const float *in, float *out, int64_t length,
                       int64_t inner, const float *bias, int64_t biasStride,
                       bool log, bool zeroNanRows) {
  auto value = [&](int64_t a) {
    return bias ? in[a * inner] + bias[a * biasStride] : in[a * inner];
  };
  float top;
  double sum;
  rowMaxAndExpSum(value, length, top, sum);
  if (zeroNanRows && std::isnan(sum)) {
    for (int64_t a = 0; a < length; ++a)
      out[a * inner] = 0.0f;
    return;
  }
  double logSum = std::log(sum);
  for (int64_t a = 0; a < length; ++a) {
    double shifted = value(a) - top;
    out[a * inner] =
        static_cast<float>(log ? shifted - logSum : std::exp(shifted - logSum));
  }
}

/// softmax_grad's loop, float32 in and out.
static std::function<void(const StepContext &)>
softmaxGrad(const KernelArgs &args) {
  TensorView dy = args.inputs[0], y = args.inputs[1], dx = args.outputs[0];
  bool log = args.i("log", 0) != 0;
  int64_t outer, length, inner;
  splitAxis(y.shape, normalizeAxis(args.i("axis", -1), y.rank()), outer, length,
            inner);
  return [=](const StepContext &) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) {
        int64_t base = o * length * inner + j;
        double sum = 0;
        for (int64_t a = 0; a < length; ++a) {
          int64_t k = base + a * inner;
          sum += log ? dy.f32()[k] : dy.f32()[k] * y.f32()[k];
        }
        for (int64_t a = 0; a < length; ++a) {
          int64_t k = base + a * inner;
          dx.f32()[k] =
              static_cast<float>(log ? dy.f32()[k] - std::exp(y.f32()[k]) * sum
                                     : y.f32()[k] * (dy.f32()[k] - sum));
        }
      }
  };
}

/// Softmax and log-softmax and their gradient.
static void registerSoftmax(KernelRegistry &registry) {
  for (bool log : {false, true})
    addKernel(
        registry, log ? "log_softmax" : "softmax",
        [log](const KernelArgs &args) {
          TensorView x = args.inputs[0], y = args.outputs[0];
          int64_t outer, length, inner;
          splitAxis(x.shape, normalizeAxis(args.i("axis", -1), x.rank()), outer,
                    length, inner);
          bool zeroNanRows = args.i("zero_nan_rows", 0) != 0;
          // The bias (softmax's second operand, which broadcasts):
          // each row's first value, then one every `biasStride`.
          TensorView bias =
              args.inputs.size() > 1 ? args.inputs[1] : TensorView();
          size_t axis =
              static_cast<size_t>(normalizeAxis(args.i("axis", -1), x.rank()));
          std::vector<int64_t> biasShape =
              bias.present() ? bias.shape : std::vector<int64_t>{};
          BroadcastOffsets outerAt(biasShape, x.shape, 0, axis),
              axisAt(biasShape, x.shape, axis, axis + 1),
              innerAt(biasShape, x.shape, axis + 1, x.shape.size());
          int64_t biasStride = axisAt.stride[0];
          return [=](const StepContext &) {
#pragma omp parallel for
            for (int64_t o = 0; o < outer; ++o)
              for (int64_t j = 0; j < inner; ++j)
                softmaxRow(x.f32() + o * length * inner + j,
                           y.f32() + o * length * inner + j, length, inner,
                           bias.present() ? bias.f32() + outerAt(o) + innerAt(j)
                                          : nullptr,
                           biasStride, log, zeroNanRows);
          };
        });

  registry.add("softmax_grad", Backend::CPU, [](const KernelArgs &args) {
    return narrowResultKernel(args, softmaxGrad);
  });
}

void registerNormalization(KernelRegistry &registry) {
  registerBatchNorm(registry);
  registerLayerNorm(registry);
  registerSoftmax(registry);
}

} // namespace cdp::runtime::cpu
