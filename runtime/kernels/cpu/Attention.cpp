//===- Attention.cpp - cdp.attention and its gradient on the CPU ----------===//
//
// One slice (a batch x head) at a time, each thread with its own m x n
// buffers: the scores and probabilities never leave them. Grouped-query
// attention reads a group's keys and v for each of its query slices and
// writes their gradients per query slice (AttentionGeometry.h). `scale` is the
// first product's alpha (and the operand gradients' products'). The forward
// keeps each row's maximum and log-sum (the stats); the backward recomputes
// the probabilities from them with the same function, so the same bits.
// Under narrow_operands the scores, the probabilities that multiply and
// the backward's dP, dS and operand gradients are rounded where autocast's
// separate ops round them. The bias's gradient sums the slices in their
// order, whatever the number of threads.
//
//===----------------------------------------------------------------------===//

#include "../AttentionGeometry.h"
#include "../NarrowOperands.h"
#include "CpuKernels.h"
#include "VectorMath.h"

#include <cmath>
#include <omp.h>

namespace cdp::runtime::cpu {

namespace {

/// The bias value of each scores element: row r (over all slices) starts
/// at rows(r), its values `step` apart (0 where the bias broadcasts along
/// the keys). Without a bias, no values.
struct BiasRows {
  const float *data = nullptr;
  BroadcastOffsets rows;
  int64_t step = 0;

  BiasRows(const TensorView &bias, const std::vector<int64_t> &scores)
      : data(bias.present() ? bias.f32() : nullptr),
        rows(bias.present() ? bias.shape : std::vector<int64_t>{}, scores, 0,
             scores.size() - 1) {
    BroadcastOffsets keys(bias.present() ? bias.shape : std::vector<int64_t>{},
                          scores, scores.size() - 1, scores.size());
    step = keys.stride[0];
  }
  const float *row(int64_t r) const { return data ? data + rows(r) : nullptr; }
};

/// A scores row's value c, its bias added.
inline float scoreAt(const float *s, const float *bias, int64_t step,
                     int64_t c) {
  return bias ? s[c] + bias[c * step] : s[c];
}

/// The factor a row's exponentials are scaled by into probabilities:
/// exp(-log-sum), from the stats as stored (float), so that the forward
/// and the backward's recomputation use the same one.
inline double probabilityScale(const float *stats) {
  return std::exp(-static_cast<double>(stats[1]));
}

/// Row `s`'s exponentials exp(score - top) into `e` (n values): the
/// differences first, then the exponentials in vectors (VectorMath.h).
void exponentialsOf(const float *s, const float *bias, int64_t step, int64_t n,
                    float top, float *e) {
  for (int64_t c = 0; c < n; ++c)
    e[c] = scoreAt(s, bias, step, c) - top;
  expInPlace(e, n);
}

/// Probabilities from a row's exponentials and its scale, into `p`.
void scaleInto(const float *e, int64_t n, double scale, float *p) {
  for (int64_t c = 0; c < n; ++c)
    p[c] = static_cast<float>(e[c] * scale);
}

/// A row's stats (its maximum and the log of its sum of exponentials: NaN
/// where the row holds a NaN or is all -inf) and its probabilities, into
/// `p` (which may be `s`): each exponential exp(score - maximum) is
/// computed once (into `e`, n values), summed in double, then scaled; a
/// row whose log-sum is NaN is zeros under zeroNanRows.
void statsAndProbabilityRow(const float *s, const float *bias, int64_t step,
                            int64_t n, bool zeroNanRows, float *stats, float *e,
                            float *p) {
  float top = scoreAt(s, bias, step, 0);
  for (int64_t c = 1; c < n; ++c)
    top = std::max(top, scoreAt(s, bias, step, c));
  exponentialsOf(s, bias, step, n, top, e);
  double sum = 0;
  for (int64_t c = 0; c < n; ++c)
    sum += e[c];
  stats[0] = top;
  stats[1] = static_cast<float>(std::log(sum));
  if (zeroNanRows && std::isnan(stats[1])) {
    std::fill(p, p + n, 0.0f);
    return;
  }
  scaleInto(e, n, probabilityScale(stats), p);
}

/// A row's probabilities from its stats, into `p` (which may be `s`), as
/// statsAndProbabilityRow computed them (the same bits); a row whose
/// log-sum is NaN is zeros under zeroNanRows.
void probabilityRow(const float *s, const float *bias, int64_t step, int64_t n,
                    const float *stats, bool zeroNanRows, float *p) {
  if (zeroNanRows && std::isnan(stats[1])) {
    std::fill(p, p + n, 0.0f);
    return;
  }
  // p as the exponentials' buffer: each value is read before it is written.
  exponentialsOf(s, bias, step, n, stats[0], p);
  scaleInto(p, n, probabilityScale(stats), p);
}

/// Slice i's matrix of `x` (laid out as `at` says) into `to`, row-major;
/// `transposed`: its transpose (the keys' n x k slice as the k x n matrix
/// the product reads).
void gatherSlice(const float *x, const SliceLayout &at, int64_t i,
                 bool transposed, float *to) {
  const float *from = x + at.offset(i);
  for (int64_t r = 0; r < at.rows; ++r)
    for (int64_t c = 0; c < at.cols; ++c)
      (transposed ? to[c * at.rows + r] : to[r * at.cols + c]) =
          from[r * at.ld + c];
}

/// The reverse of gatherSlice: a row-major matrix (or its transpose) into
/// slice i of `y`.
void scatterSlice(const float *from, const SliceLayout &at, int64_t i,
                  bool transposed, float *y) {
  float *to = y + at.offset(i);
  for (int64_t r = 0; r < at.rows; ++r)
    for (int64_t c = 0; c < at.cols; ++c)
      to[r * at.ld + c] =
          transposed ? from[c * at.rows + r] : from[r * at.cols + c];
}

/// A thread's matrices of one slice where the operands interleave the
/// heads (layout "bshd"): the slice's a, b (k x n), v and the incoming
/// gradient gathered row-major, and its result's matrices before they are
/// scattered back. Unused (and empty) for contiguous slices, read in place.
struct SliceMatrices {
  float *a, *b, *v, *grad, *out, *da, *db;

  static int64_t floats(const AttentionGeometry &g) {
    if (!g.interleaved)
      return 0;
    return 2 * (g.m * g.k + g.k * g.n) + 2 * g.n * g.d + 2 * g.m * g.d;
  }
  SliceMatrices(const AttentionGeometry &g, float *at) {
    a = at;
    b = a + g.m * g.k;
    v = b + g.k * g.n;
    grad = v + g.n * g.d;
    out = grad + g.m * g.d; // the result, or v's gradient
    da = out + g.n * g.d;
    db = da + g.m * g.k;
  }
};

/// A slice's matrix products, as sgemm takes them: in float32, or, under
/// narrow_operands = bf16 where the processor has bf16 dot products
/// (Bf16Gemm), on the operands packed into the thread's 2-byte buffers:
/// every operand is exact in bf16 there (q, k and v, the rounded
/// probabilities and dS), but the incoming gradient, which is rounded to
/// bf16 as a GPU's tensor cores read it.
class SliceProducts {
public:
  enum Which { Scores, Pv, Dv, Dp, Da, Db, Count };

  SliceProducts(const AttentionGeometry &g, NarrowFormat format, float scale,
                int threads, KernelScratch &scratch) {
    const int64_t m = g.m, n = g.n, k = g.k, d = g.d;
    shapes[Scores] = {false, false, m, n, k, scale};
    shapes[Pv] = {false, false, m, d, n, 1.0f};
    shapes[Dv] = {true, false, n, d, m, 1.0f};
    shapes[Dp] = {false, true, m, n, d, 1.0f};
    shapes[Da] = {false, true, m, k, n, scale};
    shapes[Db] = {true, false, k, n, m, scale};
    if (format != NarrowFormat::Bfloat16)
      return;
    for (int i = 0; i < Count; ++i) {
      const Shape &s = shapes[i];
      gemms[i] = Bf16Gemm::make(s.transA, s.transB, s.m, s.n, s.k, s.alpha);
      if (!gemms[i])
        continue;
      operandValues = std::max(operandValues, s.m * s.k + s.k * s.n);
      padBytes = std::max(padBytes, gemms[i]->scratchpadBytes());
    }
    padBytes = (padBytes + 63) / 64 * 64;
    perThread = operandValues * sizeof(uint16_t) + padBytes;
    if (perThread > 0)
      buffers = scratch.take(threads * perThread);
  }

  /// Whether product `which` packs its operands into bf16 (rounding each
  /// value to nearest even as cdp.round_to does): then an operand need not
  /// be rounded before it, the same bits.
  bool roundsOperands(Which which) const { return gemms[which] != nullptr; }

  /// c = alpha op(a) op(b) for product `which`, on the calling thread.
  void run(Which which, const float *a, const float *b, float *c) const {
    const Shape &s = shapes[which];
    if (!gemms[which]) {
      sgemm(s.transA, s.transB, s.m, s.n, s.k, s.alpha, a, b, 0.0f, c);
      return;
    }
    char *own = static_cast<char *>(buffers.get()) +
                static_cast<size_t>(omp_get_thread_num()) * perThread;
    auto *bits = reinterpret_cast<uint16_t *>(own + padBytes);
    packNarrow(a, bits, s.m * s.k, /*bf16=*/true);
    packNarrow(b, bits + s.m * s.k, s.k * s.n, /*bf16=*/true);
    gemms[which]->run(bits, bits + s.m * s.k, c, own);
  }

private:
  struct Shape {
    bool transA, transB;
    int64_t m, n, k;
    float alpha;
  };
  Shape shapes[Count];
  std::shared_ptr<const Bf16Gemm> gemms[Count];
  int64_t operandValues = 0;
  size_t padBytes = 0, perThread = 0;
  std::shared_ptr<void> buffers;
};

/// What both kernels read: the geometry, the operands (2-byte ones
/// widened into buffers of the kernel's own), the bias rows.
struct AttentionOperands {
  AttentionGeometry g;
  TensorView a, b, v;
  WidenedOperands widened;
  std::shared_ptr<const BiasRows> bias;
  NarrowFormat format;
  bool zeroNanRows;
  float scale; ///< of the first product's sums
  int threads;
  std::shared_ptr<const SliceProducts> products;

  AttentionOperands(const KernelArgs &args, size_t first, size_t biasInput,
                    KernelScratch &scratch)
      : g(args.inputs[first].shape, args.inputs[first + 1].shape,
          args.inputs[first + 2].shape, args.s("layout", "bhsd")),
        a(args.inputs[first]), b(args.inputs[first + 1]),
        v(args.inputs[first + 2]),
        bias(std::make_shared<const BiasRows>(args.inputs.size() > biasInput
                                                  ? args.inputs[biasInput]
                                                  : TensorView(),
                                              g.scores)),
        format(narrowOperandsOf(args)),
        zeroNanRows(args.i("zero_nan_rows", 0) != 0),
        scale(static_cast<float>(args.f("scale", 1.0))),
        threads(static_cast<int>(
            std::max<int64_t>(1, std::min<int64_t>(args.threads, g.count)))) {
    for (TensorView *operand : {&a, &b, &v})
      widened.add(*operand, scratch);
    products = std::make_shared<const SliceProducts>(g, format, scale, threads,
                                                     scratch);
  }

  /// Slice i's a, b (k x n) and v: where they lie, or gathered into the
  /// thread's matrices `own` where the heads interleave.
  struct Slice {
    const float *a, *b, *v;
  };
  Slice sliceOf(int64_t i, const SliceMatrices &own) const {
    return {readSlice(a, g.aAt, i, false, own.a),
            readSlice(b, g.bAt, g.kvSlice(i), true, own.b),
            readSlice(v, g.vAt, g.kvSlice(i), false, own.v)};
  }
  /// Slice i of `x` laid out as `at`: where it lies, or gathered into the
  /// thread's matrix `own` (`transposed`: the keys) where the heads
  /// interleave.
  const float *readSlice(const TensorView &x, const SliceLayout &at, int64_t i,
                         bool transposed, float *own) const {
    if (!g.interleaved)
      return x.f32() + at.offset(i);
    gatherSlice(x.f32(), at, i, transposed, own);
    return own;
  }
  /// Where slice i of a result laid out as `at` is computed: in place, or
  /// in the thread's `own` matrix, stored by `store`.
  float *resultOf(const TensorView &y, const SliceLayout &at, int64_t i,
                  float *own) const {
    return g.interleaved ? own : y.f32() + at.offset(i);
  }
  void store(const float *own, const TensorView &y, const SliceLayout &at,
             int64_t i, bool transposed = false) const {
    if (g.interleaved)
      scatterSlice(own, at, i, transposed, y.f32());
  }
  /// Slice i's scaled, rounded scores into `s`.
  void scores(const Slice &in, float *s) const {
    products->run(SliceProducts::Scores, in.a, in.b, s);
    roundInPlace(format, s, g.m * g.n);
  }
  const float *biasRow(int64_t i, int64_t r) const {
    return bias->row(i * g.m + r);
  }
  /// Floats of each thread's buffers: `buffers` m x n ones, then its
  /// SliceMatrices.
  int64_t perThread(int buffers) const {
    return buffers * g.m * g.n + SliceMatrices::floats(g);
  }
  SliceMatrices matricesOf(float *thread, int buffers) const {
    return SliceMatrices(g, thread + buffers * g.m * g.n);
  }
  /// Each thread's buffers (`buffers` m x n ones and its SliceMatrices),
  /// one after another, in the kernel's scratch.
  std::shared_ptr<void> threadBuffers(int buffers,
                                      KernelScratch &scratch) const {
    return scratch.take(threads * perThread(buffers) * sizeof(float));
  }
};

std::unique_ptr<Kernel> attentionKernel(const KernelArgs &args) {
  KernelScratch scratch(args);
  AttentionOperands t(args, 0, 3, scratch);
  TensorView out = args.outputs[0], stats = args.outputs[1];
  // A result the plan stores in 2 bytes: computed into a float32 buffer of
  // the kernel's scratch, then stored rounded (round_result's format).
  NarrowedResult narrowed(out, scratch);
  std::shared_ptr<void> buffers = t.threadBuffers(1, scratch);
  // Each thread's row of exponentials.
  std::shared_ptr<void> exponentials =
      scratch.take(t.threads * t.g.n * sizeof(float));
  auto body = [t, out, stats, buffers, exponentials](const StepContext &) {
    const AttentionGeometry &g = t.g;
    t.widened.widen();
    forEachIndex(g.count, t.threads, [&](int64_t i) {
      float *s = static_cast<float *>(buffers.get()) +
                 omp_get_thread_num() * t.perThread(1);
      SliceMatrices own = t.matricesOf(s, 1);
      AttentionOperands::Slice in = t.sliceOf(i, own);
      t.scores(in, s);
      float *e =
          static_cast<float *>(exponentials.get()) + omp_get_thread_num() * g.n;
      float *sliceStats = stats.f32() + i * g.m * 2;
      for (int64_t r = 0; r < g.m; ++r) {
        const float *bias = t.biasRow(i, r);
        statsAndProbabilityRow(s + r * g.n, bias, t.bias->step, g.n,
                               t.zeroNanRows, sliceStats + 2 * r, e,
                               s + r * g.n);
      }
      if (!t.products->roundsOperands(SliceProducts::Pv))
        roundInPlace(t.format, s, g.m * g.n);
      float *o = t.resultOf(out, g.outAt, i, own.out);
      t.products->run(SliceProducts::Pv, s, in.v, o);
      t.store(o, out, g.outAt, i);
    });
  };
  if (!narrowed.active())
    return std::make_unique<FunctionKernel>(roundedResult(args, body),
                                            scratch.ownBytes());
  return std::make_unique<FunctionKernel>(
      [body, narrowed](const StepContext &context) {
        body(context);
        narrowed.store();
      },
      scratch.ownBytes());
}

/// Slice i of attention_grad, in the thread's buffers `p` and `dp`; leaves
/// the unrounded dS in `dp` for the bias's gradient.
struct AttentionBackward {
  AttentionOperands t;
  TensorView grad, stats, da, db, dv;

  void slice(int64_t i, float *p, float *dp) const {
    const AttentionGeometry &g = t.g;
    int64_t mn = g.m * g.n;
    SliceMatrices own = t.matricesOf(p, 2);
    AttentionOperands::Slice in = t.sliceOf(i, own);
    const float *dout = t.readSlice(grad, g.outAt, i, false, own.grad);
    t.scores(in, p);
    for (int64_t r = 0; r < g.m; ++r)
      probabilityRow(p + r * g.n, t.biasRow(i, r), t.bias->step, g.n,
                     stats.f32() + (i * g.m + r) * 2, t.zeroNanRows,
                     p + r * g.n);
    // dV = P^T dO, P rounded as the forward multiplied it (by the packing
    // where the product packs its operands).
    const float *multiplied = p;
    if (t.format != NarrowFormat::None &&
        !t.products->roundsOperands(SliceProducts::Dv)) {
      for (int64_t x = 0; x < mn; ++x)
        dp[x] = roundedTo(t.format, p[x]);
      multiplied = dp;
    }
    float *dvi = t.resultOf(dv, g.vGradAt, i, own.out);
    t.products->run(SliceProducts::Dv, multiplied, dout, dvi);
    roundInPlace(t.format, dvi, g.n * g.d);
    t.store(dvi, dv, g.vGradAt, i);
    // dP = dO V^T, then dS = P (dP - sum(dP P)) row by row.
    t.products->run(SliceProducts::Dp, dout, in.v, dp);
    roundInPlace(t.format, dp, mn);
    for (int64_t r = 0; r < g.m; ++r) {
      const float *pr = p + r * g.n;
      float *dpr = dp + r * g.n;
      double sum = 0;
      for (int64_t c = 0; c < g.n; ++c)
        sum += dpr[c] * pr[c];
      for (int64_t c = 0; c < g.n; ++c)
        dpr[c] = static_cast<float>(pr[c] * (dpr[c] - sum));
    }
    // The products read dS rounded (by their packing where they pack); the
    // bias's gradient dS as it is.
    const float *ds = dp;
    if (t.format != NarrowFormat::None &&
        !(t.products->roundsOperands(SliceProducts::Da) &&
          t.products->roundsOperands(SliceProducts::Db))) {
      for (int64_t x = 0; x < mn; ++x)
        p[x] = roundedTo(t.format, dp[x]);
      ds = p;
    }
    float *dai = t.resultOf(da, g.aAt, i, own.da),
          *dbi = t.resultOf(db, g.bGradAt, i, own.db);
    t.products->run(SliceProducts::Da, ds, in.b, dai);
    t.products->run(SliceProducts::Db, in.a, ds, dbi);
    roundInPlace(t.format, dai, g.m * g.k);
    roundInPlace(t.format, dbi, g.k * g.n);
    t.store(dai, da, g.aAt, i);
    t.store(dbi, db, g.bGradAt, i, /*transposed=*/true);
  }

  /// Adds slice i's dS to the bias's gradient.
  void addBiasGrad(int64_t i, const float *ds, float *dbias) const {
    const AttentionGeometry &g = t.g;
    for (int64_t r = 0; r < g.m; ++r) {
      float *row = dbias + t.bias->rows(i * g.m + r);
      for (int64_t c = 0; c < g.n; ++c)
        row[c * t.bias->step] += ds[r * g.n + c];
    }
  }
};

std::unique_ptr<Kernel> attentionGradKernel(const KernelArgs &args) {
  // Gradients the plan stores in 2 bytes are computed into float32 buffers
  // of the kernel's scratch, then stored (each already rounded to the
  // format).
  KernelScratch scratch(args);
  std::vector<TensorView> grads(args.outputs.begin(), args.outputs.begin() + 3);
  std::vector<NarrowedResult> narrowed;
  for (TensorView &grad : grads)
    narrowed.emplace_back(grad, scratch);
  AttentionBackward backward{AttentionOperands(args, 1, 5, scratch),
                             args.inputs[0],
                             args.inputs[4],
                             grads[0],
                             grads[1],
                             grads[2]};
  // A 2-byte incoming gradient is widened with the operands.
  backward.t.widened.add(backward.grad, scratch);
  TensorView dbias = args.outputs.size() > 3 ? args.outputs[3] : TensorView();
  const AttentionOperands &t = backward.t;
  int64_t mn = t.g.m * t.g.n;
  int64_t perThread = t.perThread(2);
  std::shared_ptr<void> buffers = t.threadBuffers(2, scratch);
  auto body = [backward, dbias, buffers, mn, perThread,
               narrowed](const StepContext &) {
    int threads = backward.t.threads;
    int64_t count = backward.t.g.count;
    backward.t.widened.widen();
    if (dbias.present())
      std::fill(dbias.f32(), dbias.f32() + dbias.numel(), 0.0f);
    // Slices `threads` at a time, the bias's gradient summed after each
    // group in slice order.
    for (int64_t first = 0; first < count; first += threads) {
      int64_t group = std::min<int64_t>(threads, count - first);
      forEachIndex(group, threads, [&](int64_t j) {
        float *p = static_cast<float *>(buffers.get()) + j * perThread;
        backward.slice(first + j, p, p + mn);
      });
      if (dbias.present())
        for (int64_t j = 0; j < group; ++j)
          backward.addBiasGrad(first + j,
                               static_cast<const float *>(buffers.get()) +
                                   j * perThread + mn,
                               dbias.f32());
    }
    for (const NarrowedResult &result : narrowed)
      if (result.active())
        result.store();
  };
  return std::make_unique<FunctionKernel>(body, scratch.ownBytes());
}

} // namespace

void registerAttention(KernelRegistry &registry) {
  registry.add("attention", Backend::CPU, attentionKernel);
  registry.add("attention_grad", Backend::CPU, attentionGradKernel);
}

} // namespace cdp::runtime::cpu
