//===- Loss.cpp - classification losses on the CPU ------------------------===//
//
// ONNX semantics: per-element loss -w[label] * logp[label]; elements whose
// label is ignore_index contribute nothing; `mean` divides by the sum of the
// weights of the counted elements (their number without weights).
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "SoftmaxRows.h"
#include "VectorMath.h"
#include "cdp/Runtime/OpTable.h"

#include "../NarrowOperands.h"

#include <cmath>

namespace cdp::runtime::cpu {

namespace {

struct ClassGeometry {
  int64_t batch, classes, spatial;
  int64_t classStride, spatialStride; // apart: classes (N, C, d...) or last
  std::string reduction;
  bool hasIgnore;
  int64_t ignore;
  ClassGeometry(const KernelArgs &args, const std::vector<int64_t> &scores)
      : ClassGeometry(scores, ops::NllLossAttributes::read(args),
                      args.i("classes_last", 0) != 0) {}
  /// The four loss ops (and their gradients) declare the same reduction.
  ClassGeometry(const std::vector<int64_t> &scores,
                const ops::NllLossAttributes &attrs, bool classesLast)
      : batch(scores[0]), classes(classesLast ? scores.back() : scores[1]),
        spatial(classesLast ? product(scores, 1, scores.size() - 1)
                            : product(scores, 2)),
        classStride(classesLast ? 1 : spatial),
        spatialStride(classesLast ? classes : 1), reduction(attrs.reduction),
        hasIgnore(attrs.ignore_index.has_value()),
        ignore(attrs.ignore_index.value_or(0)) {}
  int64_t at(int64_t n, int64_t c, int64_t i) const {
    return n * classes * spatial + c * classStride + i * spatialStride;
  }

  /// Checks a label; returns false when it is ignored.
  bool valid(int64_t label, const std::string &location) const {
    if (hasIgnore && label == ignore)
      return false;
    if (label < 0 || label >= classes)
      throw RuntimeError("loss at '" + location + "': label " +
                         std::to_string(label) + " is out of range for " +
                         std::to_string(classes) +
                         " classes (check the labels data)");
    return true;
  }

  /// Fails on the first label out of range (before a parallel loop, where
  /// valid() cannot throw).
  void checkLabels(const int64_t *labels, const std::string &location) const {
    for (int64_t k = 0; k < batch * spatial; ++k)
      valid(labels[k], location);
  }
  /// The reduction's divisor for `mean`.
  double denominator(const int64_t *labels, const TensorView &weights,
                     const std::string &location) const {
    double total = 0;
    for (int64_t k = 0; k < batch * spatial; ++k)
      if (valid(labels[k], location))
        total += weights.present() ? weights.f32()[labels[k]] : 1.0;
    return total;
  }
};

/// Row (n, i)'s largest score and the log of its sum of exponentials.
struct RowLogSum {
  float top;
  double logSum;
};

/// The calling thread's buffers of one row's values (a language model's
/// vocabulary: 50257 floats for GPT-2): `which` 0 for a row's scores
/// widened from 2 bytes or gathered, 1 for its exponentials, computed in
/// loops of their own, which vectorize (VectorMath.h, SoftmaxRows.h).
float *rowBuffer(int64_t classes, int which) {
  thread_local std::vector<float> buffers[2];
  std::vector<float> &buffer = buffers[which];
  if (static_cast<int64_t>(buffer.size()) < classes)
    buffer.resize(classes);
  return buffer.data();
}

/// Row (n, i)'s scores as float32: where they lie when the classes are
/// last and the scores float32, else widened or gathered into the thread's
/// buffer 0.
const float *rowScores(const ClassGeometry &g, const StoredValues &scores,
                       int64_t n, int64_t i) {
  int64_t start = g.at(n, 0, i);
  if (g.classStride == 1 && scores.stored == NarrowFormat::None)
    return static_cast<const float *>(scores.data) + start;
  float *row = rowBuffer(g.classes, 0);
  if (g.classStride == 1) {
    widenedRow(static_cast<const uint16_t *>(scores.data) + start, g.classes,
               scores.stored == NarrowFormat::Bfloat16, row);
    return row;
  }
  for (int64_t c = 0; c < g.classes; ++c)
    row[c] = scores[g.at(n, c, i)];
  return row;
}

/// Row (n, i)'s maximum and log-sum, from its scores `x`; leaves the
/// exponentials exp(x - top) in the thread's buffer 1.
RowLogSum rowLogSumOf(const ClassGeometry &g, const float *x) {
  float top = maximumOfRow(x, g.classes);
  float *e = rowBuffer(g.classes, 1);
  std::copy(x, x + g.classes, e);
  return {top, std::log(exponentialsFrom(e, top, g.classes))};
}

RowLogSum rowLogSumOf(const ClassGeometry &g, const StoredValues &scores,
                      int64_t n, int64_t i) {
  return rowLogSumOf(g, rowScores(g, scores, n, i));
}

/// A score's log-probability in its row: the loss writes it, a gradient
/// `from_scores` recomputes it, with this one expression (the same bits).
float logProbabilityOf(float score, const RowLogSum &row) {
  return static_cast<float>(score - row.top - row.logSum);
}

/// A row's log-probabilities from its scores `x` (n of them), into `logp`
/// (a vocabulary's: in vectors, CDP_VECTOR_CLONES).
CDP_VECTOR_CLONES void logProbabilitiesOf(const float *x, const RowLogSum &row,
                                          int64_t n, float *logp) {
  for (int64_t c = 0; c < n; ++c)
    logp[c] = logProbabilityOf(x[c], row);
}

/// A row's gradient in place of its probabilities p: factor (p - onehot)
/// (an ignored label, outside the classes, has no one); in vectors.
CDP_VECTOR_CLONES void gradientRow(float *p, double factor, int64_t label,
                                   int64_t n) {
  bool counted = label >= 0 && label < n;
  double atLabel =
      counted ? factor * (static_cast<double>(p[label]) - 1.0) : 0.0;
  for (int64_t c = 0; c < n; ++c)
    p[c] = static_cast<float>(factor * static_cast<double>(p[c]));
  if (counted)
    p[label] = static_cast<float>(atLabel);
}

/// Row (n, i)'s values into `y`, rounded to `rounding` (in 2 bytes where
/// `twoBytes`): one pass where the classes are last.
void storeRow(const ClassGeometry &g, const float *values, int64_t n, int64_t i,
              const TensorView &y, NarrowFormat rounding, bool twoBytes) {
  if (g.classStride == 1) {
    cpu::storeRow(values, g.classes, rounding, y, g.at(n, 0, i));
    return;
  }
  for (int64_t c = 0; c < g.classes; ++c)
    storeResult(y.data, g.at(n, c, i), values[c], rounding, twoBytes);
}

/// Reads a counted element's log-probability where `logp` stores them.
auto storedIn(const ClassGeometry &g, const float *logp) {
  return [&g, logp](int64_t n, int64_t label, int64_t i) {
    return logp[g.at(n, label, i)];
  };
}

/// loss = reduce(-w * logp[label]); shared by both losses. `logProbOf(n,
/// label, i)` gives a counted element's log-probability.
template <typename LogProbOf>
void negativeLogLikelihood(const ClassGeometry &g, LogProbOf logProbOf,
                           const int64_t *labels, const TensorView &weights,
                           float *loss, const std::string &location) {
  int64_t rows = g.batch * g.spatial;
  g.checkLabels(labels, location);
  // Rows in parallel (a language model's: a vocabulary of exponentials
  // each), summed in row order, so the same bits for any thread count.
  std::vector<double> values(rows);
#pragma omp parallel for if (rows * g.classes > 65536)
  for (int64_t k = 0; k < rows; ++k) {
    int64_t label = labels[k];
    values[k] = g.valid(label, location)
                    ? -logProbOf(k / g.spatial, label, k % g.spatial) *
                          (weights.present() ? weights.f32()[label] : 1.0f)
                    : 0.0;
  }
  double total = 0;
  for (int64_t k = 0; k < rows; ++k) {
    if (g.reduction == "none")
      loss[k] = static_cast<float>(values[k]);
    total += values[k];
  }
  if (g.reduction == "sum")
    *loss = static_cast<float>(total);
  else if (g.reduction == "mean") {
    double denominator = g.denominator(labels, weights, location);
    *loss = static_cast<float>(denominator > 0 ? total / denominator : 0.0);
  }
}

/// Gradient factor of element k: dloss * w[label] (/ denominator).
template <typename Fn>
void forEachWeightedGradient(const ClassGeometry &g, const TensorView &dloss,
                             const int64_t *labels, const TensorView &weights,
                             const std::string &location, Fn fn) {
  double denominator =
      g.reduction == "mean" ? g.denominator(labels, weights, location) : 1.0;
  int64_t rows = g.batch * g.spatial;
  g.checkLabels(labels, location);
  // Rows in parallel: `fn` writes row (n, i)'s values only.
#pragma omp parallel for if (rows * g.classes > 65536)
  for (int64_t k = 0; k < rows; ++k) {
    int64_t n = k / g.spatial, i = k % g.spatial, label = labels[k];
    if (!g.valid(label, location)) {
      fn(n, i, label, 0.0);
      continue;
    }
    double upstream = g.reduction == "none" ? dloss.f32()[k] : dloss.f32()[0];
    double w = weights.present() ? weights.f32()[label] : 1.0;
    fn(n, i, label, denominator > 0 ? upstream * w / denominator : 0.0);
  }
}

/// softmax_cross_entropy_loss_grad's loop. Its second operand holds the
/// log-probabilities, or with from_scores the scores they are recomputed
/// from. Each value is rounded as it is written (round_result), in 2 bytes
/// where the plan stores the gradient so (a language model's logits'
/// gradient: no float32 copy of batch x sequence x vocabulary values).
std::function<void(const StepContext &)>
softmaxLossGrad(const KernelArgs &args) {
  TensorView dloss = args.inputs[0], rows = args.inputs[1],
             labels = args.inputs[2];
  TensorView weights = args.inputs.size() > 3 ? args.inputs[3] : TensorView();
  TensorView dx = args.outputs[0];
  ClassGeometry g(args, rows.shape);
  bool fromScores = args.i("from_scores", 0) != 0;
  bool twoBytes = storedInTwoBytes(dx);
  NarrowFormat rounding = twoBytes ? storedFormatOf(dx) : roundingOf(args);
  std::string location = args.instruction->location();
  return [=](const StepContext &) {
    StoredValues in = storedValuesOf(rows);
    forEachWeightedGradient(
        g, dloss, labels.i64(), weights, location,
        [&](int64_t n, int64_t i, int64_t label, double factor) {
          const float *x = rowScores(g, in, n, i);
          // The row's probabilities exp(logp), in the thread's buffer 1
          // (rowLogSumOf is done with it).
          float *p = rowBuffer(g.classes, 1);
          if (fromScores)
            logProbabilitiesOf(x, rowLogSumOf(g, x), g.classes, p);
          else
            std::copy(x, x + g.classes, p);
          expInPlace(p, g.classes);
          gradientRow(p, factor, label, g.classes);
          storeRow(g, p, n, i, dx, rounding, twoBytes);
        });
  };
}

} // namespace

void registerLoss(KernelRegistry &registry) {
  addKernel(registry, "softmax_cross_entropy_loss", [](const KernelArgs &args) {
    TensorView scores = args.inputs[0], labels = args.inputs[1];
    TensorView weights = args.inputs.size() > 2 ? args.inputs[2] : TensorView();
    // Without a second output (cdp-recompute-log-probabilities) only the
    // labels' log-probabilities are computed.
    TensorView loss = args.outputs[0];
    TensorView logp = args.outputs.size() > 1 ? args.outputs[1] : TensorView();
    ClassGeometry g(args, scores.shape);
    std::string location = args.instruction->location();
    return [=](const StepContext &) {
      StoredValues in = storedValuesOf(scores);
      if (!logp.present()) {
        auto logProbOf = [&](int64_t n, int64_t label, int64_t i) {
          return logProbabilityOf(in[g.at(n, label, i)],
                                  rowLogSumOf(g, in, n, i));
        };
        negativeLogLikelihood(g, logProbOf, labels.i64(), weights, loss.f32(),
                              location);
        return;
      }
      int64_t rows = g.batch * g.spatial;
#pragma omp parallel for if (rows * g.classes > 65536)
      for (int64_t k = 0; k < rows; ++k) {
        int64_t n = k / g.spatial, i = k % g.spatial;
        const float *x = rowScores(g, in, n, i);
        RowLogSum row = rowLogSumOf(g, x);
        if (g.classStride == 1) {
          logProbabilitiesOf(x, row, g.classes, logp.f32() + g.at(n, 0, i));
          continue;
        }
        for (int64_t c = 0; c < g.classes; ++c)
          logp.f32()[g.at(n, c, i)] = logProbabilityOf(x[c], row);
      }
      negativeLogLikelihood(g, storedIn(g, logp.f32()), labels.i64(), weights,
                            loss.f32(), location);
    };
  });

  // Rounded where it has round_result, stored in 2 bytes where
  // cdp-narrow-results says (softmaxLossGrad writes each value so).
  registry.add("softmax_cross_entropy_loss_grad", Backend::CPU,
               [](const KernelArgs &args) {
                 return std::make_unique<FunctionKernel>(softmaxLossGrad(args));
               });

  addKernel(registry, "nll_loss", [](const KernelArgs &args) {
    TensorView input = args.inputs[0], target = args.inputs[1];
    TensorView weight = args.inputs.size() > 2 ? args.inputs[2] : TensorView();
    TensorView loss = args.outputs[0];
    ClassGeometry g(args, input.shape);
    std::string location = args.instruction->location();
    return [=](const StepContext &) {
      negativeLogLikelihood(g, storedIn(g, input.f32()), target.i64(), weight,
                            loss.f32(), location);
    };
  });

  addKernel(registry, "nll_loss_grad", [](const KernelArgs &args) {
    TensorView dloss = args.inputs[0], target = args.inputs[1];
    TensorView weight = args.inputs.size() > 2 ? args.inputs[2] : TensorView();
    TensorView dx = args.outputs[0];
    ClassGeometry g(args, dx.shape);
    std::string location = args.instruction->location();
    return [=](const StepContext &) {
      std::fill(dx.f32(), dx.f32() + dx.numel(), 0.0f);
      forEachWeightedGradient(
          g, dloss, target.i64(), weight, location,
          [&](int64_t n, int64_t i, int64_t label, double factor) {
            if (factor != 0.0)
              dx.f32()[g.at(n, label, i)] = static_cast<float>(-factor);
          });
    };
  });
}

} // namespace cdp::runtime::cpu
