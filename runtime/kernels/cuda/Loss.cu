//===- Loss.cu - classification losses on the GPU -------------------------===//
//
// ONNX semantics, as on the CPU: per-element loss -w[label] * logp[label];
// ignored labels count nothing; `mean` divides by the counted weight. A
// label out of range sets the device's status word (the step then fails
// with one line) instead of throwing inside a kernel.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "Reduce.cuh"
#include "cdp/Runtime/OpTable.h"

#include "../NarrowOperands.h"

namespace cdp::runtime::cuda {

namespace {

enum class Reduction { None, Sum, Mean };

struct Classes {
  int64_t batch, classes, spatial;
  bool classesLast; // scores (N, d..., C) instead of (N, C, d...)
  Reduction reduction;
  bool hasIgnore;
  int64_t ignore;
  __device__ int64_t at(int64_t n, int64_t c, int64_t i) const {
    return classesLast ? (n * spatial + i) * classes + c
                       : (n * classes + c) * spatial + i;
  }
  __host__ __device__ int64_t rows() const { return batch * spatial; }
  /// Whether row k's label counts; flags a label out of range.
  __device__ bool valid(int64_t label, int *status) const {
    if (hasIgnore && label == ignore)
      return false;
    if (label < 0 || label >= classes) {
      atomicOr(status, kLabelOutOfRange);
      return false;
    }
    return true;
  }
};

Classes classesOf(const KernelArgs &args, const std::vector<int64_t> &scores) {
  // The four loss ops (and their gradients) declare the same reduction.
  ops::NllLossAttributes attrs = ops::NllLossAttributes::read(args);
  bool last = args.i("classes_last", 0) != 0;
  return {scores[0],
          last ? scores.back() : scores[1],
          last ? product(scores, 1, scores.size() - 1) : product(scores, 2),
          last,
          attrs.reduction == "none"  ? Reduction::None
          : attrs.reduction == "sum" ? Reduction::Sum
                                     : Reduction::Mean,
          attrs.ignore_index.has_value(),
          attrs.ignore_index.value_or(0)};
}

/// The row k = n * spatial + i and the class c of the scores' element e,
/// through index maps (their 32-bit dividers: a language model's scores
/// are 200 million elements).
struct ScoreIndex {
  IndexMap row, label;
  ScoreIndex(const KernelArgs &args, const Classes &g)
      : row(g.classesLast ? stridedMap(args, {g.rows(), g.classes}, {1, 0})
                          : stridedMap(args, {g.batch, g.classes, g.spatial},
                                       {g.spatial, 0, 1})),
        label(g.classesLast
                  ? coordinateMap(args, {g.rows(), g.classes}, 1)
                  : coordinateMap(args, {g.batch, g.classes, g.spatial}, 1)) {}
};

/// Row (n, i)'s largest score and the log of its sum of exponentials, as
/// every thread of the row's block sees them (block reductions: the same
/// bits in the loss and in its gradient, which share this function and
/// the block size).
struct RowLogSum {
  float top;
  double logSum;
  /// A score's log-probability, with the one expression the loss writes.
  __device__ float logProbability(float score) const {
    return static_cast<float>(score - top - logSum);
  }
};

__device__ RowLogSum rowLogSumOf(const Classes &g, StoredValues scores,
                                 int64_t n, int64_t i) {
  float top = -INFINITY;
  for (int64_t c = threadIdx.x; c < g.classes; c += blockDim.x)
    top = fmaxf(top, scores[g.at(n, c, i)]);
  top = blockMax(top);
  double sum = 0;
  for (int64_t c = threadIdx.x; c < g.classes; c += blockDim.x)
    sum += exp(static_cast<double>(scores[g.at(n, c, i)] - top));
  return {top, log(blockSum(sum))};
}

/// A block per row (sample n, position i): its classes' log-softmax. A
/// language model's rows are 50k classes long; with classes last, the
/// block's threads read them side by side.
__global__ void logSoftmaxRowsKernel(Classes g, StoredValues scores,
                                     float *logp) {
  int64_t k = blockIdx.x, n = k / g.spatial, i = k % g.spatial;
  RowLogSum row = rowLogSumOf(g, scores, n, i);
  for (int64_t c = threadIdx.x; c < g.classes; c += blockDim.x)
    logp[g.at(n, c, i)] = row.logProbability(scores[g.at(n, c, i)]);
}

/// A block per row: the log-probability of the row's label alone (a loss
/// that keeps no log-probabilities; an ignored label's is not read).
__global__ void labelLogProbabilityKernel(Classes g, StoredValues scores,
                                          const int64_t *labels,
                                          float *labelLogp) {
  int64_t k = blockIdx.x, n = k / g.spatial, i = k % g.spatial;
  RowLogSum row = rowLogSumOf(g, scores, n, i);
  int64_t label = labels[k];
  if (threadIdx.x == 0 && label >= 0 && label < g.classes)
    labelLogp[k] = row.logProbability(scores[g.at(n, label, i)]);
}

/// One block: the loss (reduced, or per row for `none`), from the stored
/// log-probabilities or, where `labelLogp` is given, from each row's
/// label's.
__global__ void nllKernel(Classes g, const float *logp, const float *labelLogp,
                          const int64_t *labels, const float *weights,
                          float *loss, int *status) {
  double total = 0, denominator = 0;
  for (int64_t k = threadIdx.x; k < g.rows(); k += blockDim.x) {
    int64_t n = k / g.spatial, i = k % g.spatial, label = labels[k];
    double value = 0;
    if (g.valid(label, status)) {
      double w = weights ? weights[label] : 1.0;
      value = -(labelLogp ? labelLogp[k] : logp[g.at(n, label, i)]) * w;
      denominator += w;
    }
    if (g.reduction == Reduction::None)
      loss[k] = static_cast<float>(value);
    total += value;
  }
  total = blockSum(total);
  denominator = blockSum(denominator);
  if (threadIdx.x != 0)
    return;
  if (g.reduction == Reduction::Sum)
    *loss = static_cast<float>(total);
  else if (g.reduction == Reduction::Mean)
    *loss = static_cast<float>(denominator > 0 ? total / denominator : 0.0);
}

/// One block: the counted weight of the labels (mean's divisor).
__global__ void denominatorKernel(Classes g, const int64_t *labels,
                                  const float *weights, double *out,
                                  int *status) {
  double total = 0;
  for (int64_t k = threadIdx.x; k < g.rows(); k += blockDim.x)
    if (g.valid(labels[k], status))
      total += weights ? weights[labels[k]] : 1.0;
  total = blockSum(total);
  if (threadIdx.x == 0)
    *out = g.reduction == Reduction::Mean ? total : 1.0;
}

/// Row k's gradient factor: dloss * w[label] / denominator (0 if ignored).
__device__ double factorOf(const Classes &g, int64_t k, int64_t label,
                           const float *dloss, const float *weights,
                           double denominator) {
  if ((g.hasIgnore && label == g.ignore) || label < 0 || label >= g.classes ||
      denominator <= 0)
    return 0.0;
  double upstream = g.reduction == Reduction::None ? dloss[k] : dloss[0];
  return upstream * (weights ? weights[label] : 1.0) / denominator;
}

__global__ void softmaxLossGradKernel(Classes g, ScoreIndex at,
                                      const float *dloss, const float *logp,
                                      const int64_t *labels,
                                      const float *weights,
                                      const double *denominator, void *dx,
                                      NarrowFormat rounding, bool twoBytes) {
  CDP_FOR_EACH(e, g.rows() * g.classes) {
    int64_t k = at.row(e), c = at.label(e), label = labels[k];
    double factor = factorOf(g, k, label, dloss, weights, *denominator);
    double p = exp(static_cast<double>(logp[e]));
    storeResult(dx, e,
                static_cast<float>(factor * (p - (c == label ? 1.0 : 0.0))),
                rounding, twoBytes);
  }
}

/// A block per row: softmax_cross_entropy_loss_grad `from_scores`, the
/// row's log-probabilities recomputed as the loss computed them.
__global__ void softmaxLossGradFromScoresKernel(
    Classes g, const float *dloss, StoredValues scores, const int64_t *labels,
    const float *weights, const double *denominator, void *dx,
    NarrowFormat rounding, bool twoBytes) {
  int64_t k = blockIdx.x, n = k / g.spatial, i = k % g.spatial;
  RowLogSum row = rowLogSumOf(g, scores, n, i);
  int64_t label = labels[k];
  double factor = factorOf(g, k, label, dloss, weights, *denominator);
  for (int64_t c = threadIdx.x; c < g.classes; c += blockDim.x) {
    int64_t e = g.at(n, c, i);
    double p = exp(static_cast<double>(row.logProbability(scores[e])));
    storeResult(dx, e,
                static_cast<float>(factor * (p - (c == label ? 1.0 : 0.0))),
                rounding, twoBytes);
  }
}

__global__ void nllGradKernel(Classes g, const float *dloss,
                              const int64_t *labels, const float *weights,
                              const double *denominator, float *dx) {
  CDP_FOR_EACH(k, g.rows()) {
    int64_t n = k / g.spatial, i = k % g.spatial, label = labels[k];
    double factor = factorOf(g, k, label, dloss, weights, *denominator);
    if (factor != 0.0)
      dx[g.at(n, label, i)] = static_cast<float>(-factor);
  }
}

const float *optional(const KernelArgs &args, size_t index) {
  return args.inputs.size() > index && args.inputs[index].present()
             ? args.inputs[index].f32()
             : nullptr;
}

} // namespace

void registerLoss(KernelRegistry &registry) {
  addKernel(registry, "softmax_cross_entropy_loss", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView scores = args.inputs[0], labels = args.inputs[1];
              const float *weights = optional(args, 2);
              TensorView loss = args.outputs[0];
              // Without log-probabilities (cdp-recompute-log-probabilities):
              // each row's label's, in a buffer of the rows.
              TensorView logp =
                  args.outputs.size() > 1 ? args.outputs[1] : TensorView();
              Classes g = classesOf(args, scores.shape);
              CudaDevice &device = deviceOf(args);
              int *status = device.status();
              std::shared_ptr<Scratch> labelLogp;
              if (!logp.present())
                labelLogp = std::make_shared<Scratch>(
                    device, sizeof(float) * std::max<int64_t>(g.rows(), 1));
              return [=](const StepContext &context) {
                cudaStream_t stream = streamOf(context);
                unsigned rows = static_cast<unsigned>(g.rows());
                float *perRow = labelLogp ? labelLogp->as<float>() : nullptr;
                if (rows && perRow)
                  labelLogProbabilityKernel<<<rows, kThreads, 0, stream>>>(
                      g, storedValuesOf(scores), labels.i64(), perRow);
                else if (rows)
                  logSoftmaxRowsKernel<<<rows, kThreads, 0, stream>>>(
                      g, storedValuesOf(scores), logp.f32());
                nllKernel<<<1, kThreads, 0, stream>>>(
                    g, perRow ? nullptr : logp.f32(), perRow, labels.i64(),
                    weights, loss.f32(), status);
                launched("softmax_cross_entropy_loss");
              };
            });

  addKernel(registry, "nll_loss", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView input = args.inputs[0], target = args.inputs[1];
              const float *weights = optional(args, 2);
              TensorView loss = args.outputs[0];
              Classes g = classesOf(args, input.shape);
              int *status = deviceOf(args).status();
              return [=](const StepContext &context) {
                nllKernel<<<1, kThreads, 0, streamOf(context)>>>(
                    g, input.f32(), nullptr, target.i64(), weights, loss.f32(),
                    status);
                launched("nll_loss");
              };
            });

  addKernel(
      registry, "softmax_cross_entropy_loss_grad", Launches::SameEveryStep,
      [](const KernelArgs &args) {
        TensorView dloss = args.inputs[0], logp = args.inputs[1],
                   labels = args.inputs[2];
        const float *weights = optional(args, 3);
        TensorView dx = args.outputs[0];
        Classes g = classesOf(args, logp.shape);
        CudaDevice &device = deviceOf(args);
        int *status = device.status();
        auto denominator = std::make_shared<Scratch>(device, 8);
        NarrowFormat rounding = roundingOf(args);
        bool twoBytes = storedInTwoBytes(dx);
        bool fromScores = args.i("from_scores", 0) != 0;
        ScoreIndex at(args, g);
        return [=](const StepContext &context) {
          cudaStream_t stream = streamOf(context);
          denominatorKernel<<<1, kThreads, 0, stream>>>(
              g, labels.i64(), weights, denominator->as<double>(), status);
          int64_t n = dx.numel();
          if (n && fromScores)
            softmaxLossGradFromScoresKernel<<<static_cast<unsigned>(g.rows()),
                                              kThreads, 0, stream>>>(
                g, dloss.f32(), storedValuesOf(logp), labels.i64(), weights,
                denominator->as<double>(), dx.data, rounding, twoBytes);
          else if (n)
            softmaxLossGradKernel<<<blocksFor(n), kThreads, 0, stream>>>(
                g, at, dloss.f32(), logp.f32(), labels.i64(), weights,
                denominator->as<double>(), dx.data, rounding, twoBytes);
          launched("softmax_cross_entropy_loss_grad");
        };
      });

  addKernel(registry, "nll_loss_grad", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView dloss = args.inputs[0], target = args.inputs[1];
              const float *weights = optional(args, 2);
              TensorView dx = args.outputs[0];
              Classes g = classesOf(args, dx.shape);
              CudaDevice &device = deviceOf(args);
              int *status = device.status();
              auto denominator = std::make_shared<Scratch>(device, 8);
              return [=](const StepContext &context) {
                cudaStream_t stream = streamOf(context);
                checkCuda(cudaMemsetAsync(dx.data, 0, byteSize(dx), stream),
                          "memset");
                denominatorKernel<<<1, kThreads, 0, stream>>>(
                    g, target.i64(), weights, denominator->as<double>(),
                    status);
                if (g.rows())
                  nllGradKernel<<<blocksFor(g.rows()), kThreads, 0, stream>>>(
                      g, dloss.f32(), target.i64(), weights,
                      denominator->as<double>(), dx.f32());
                launched("nll_loss_grad");
              };
            });
}

} // namespace cdp::runtime::cuda
