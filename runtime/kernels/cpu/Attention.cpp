//===- Attention.cpp - cdp.attention and its gradient on the CPU ----------===//
//
// One slice (a batch x head) at a time, each thread with its own buffers:
// the scores and probabilities never leave them. Grouped-query attention
// reads a group's keys and v for each of its query slices and writes their
// gradients per query slice (AttentionGeometry.h). `scale` is the first
// product's alpha (and the operand gradients' products'). The forward keeps
// each row's maximum and log-sum (the stats); the backward recomputes the
// probabilities from them with the same functions, so the same bits.
// Under narrow_operands the scores, the probabilities that multiply and
// the backward's dP, dS and operand gradients are rounded where autocast's
// separate ops round them. The bias's gradient sums the slices in their
// order, whatever the number of threads.
//
// Each slice's operands are read once into row-major matrices of the type
// its products multiply (read where they lie when they are such already),
// straight from the plan's storage (2-byte values included), the keys as
// n x k rows for every layout (transposed from a stored k x n matrix; the
// products read them transposed): no widened copies of whole operands.
// Rows are taken in blocks, each only over the columns a mask leaves live
// (AttentionBlocks.h). The softmax's rows run in vectors (SoftmaxRows.h)
// and write the probabilities and dS in the products' type as they go.
//
//===----------------------------------------------------------------------===//

#include "../AttentionGeometry.h"
#include "../NarrowFloat.h"
#include "../NarrowOperands.h"
#include "AttentionBlocks.h"
#include "CpuKernels.h"
#include "SoftmaxRows.h"

#include <cmath>
#include <cstring>
#include <map>
#include <omp.h>
#include <tuple>
#include <type_traits>

namespace cdp::runtime::cpu {

namespace {

bool skippingMaskedScores = true;

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

/// The factor a row's exponentials are scaled by into probabilities:
/// exp(-log-sum), from the stats as stored (float), so that the forward
/// and the backward's recomputation use the same one.
inline double probabilityScale(const float *stats) {
  return std::exp(-static_cast<double>(stats[1]));
}

/// A stored operand's values in the products' type: float32 (2-byte values
/// widened exactly), or bf16 bits (float32 values rounded to nearest even:
/// the incoming gradient as tensor cores read it; q, k and v are exact).
template <typename T> struct ProductValue;
template <> struct ProductValue<float> {
  static float of(float x) { return x; }
  static float ofBits(uint16_t x, bool bf16) {
    return bf16 ? floatOfBfloat16(x) : floatOfFloat16(x);
  }
};
template <> struct ProductValue<uint16_t> {
  static uint16_t of(float x) { return narrowBitsOf(x, true); }
  static uint16_t ofBits(uint16_t x, bool bf16) {
    return bf16 ? x : narrowBitsOf(floatOfFloat16(x), true);
  }
};

/// Whether `x` holds the products' type T as stored.
template <typename T> bool storedAs(const TensorView &x) {
  return x.dtype == (std::is_same<T, float>::value ? plan::F32 : plan::BF16);
}

/// Element `index` of a stored operand in the products' type T.
template <typename T> T valueAt(const TensorView &x, int64_t index) {
  if (x.dtype == plan::F32)
    return ProductValue<T>::of(x.f32()[index]);
  return ProductValue<T>::ofBits(static_cast<const uint16_t *>(x.data)[index],
                                 x.dtype == plan::BF16);
}

/// Slice i of `x` (laid out as `at` says) as a row-major matrix of T: where
/// it lies when it is one already, else converted into `own`.
template <typename T>
const T *operandOf(const TensorView &x, const SliceLayout &at, int64_t i,
                   T *own) {
  if (storedAs<T>(x) && !at.interleaved)
    return static_cast<const T *>(x.data) + at.offset(i);
  for (int64_t r = 0; r < at.rows; ++r) {
    int64_t from = at.offset(i) + r * at.ld;
    T *to = own + r * at.cols;
    if (storedAs<T>(x))
      std::memcpy(to, static_cast<const T *>(x.data) + from,
                  at.cols * sizeof(T));
    else
      for (int64_t c = 0; c < at.cols; ++c)
        to[c] = valueAt<T>(x, from + c);
  }
  return own;
}

/// Slice i of the keys as the products read them, n x k rows: as stored
/// under "bshd", else transposed from the stored k x n matrix into `own`.
/// One orientation for every layout: the same products, so the same bits.
template <typename T>
const T *keysOf(const TensorView &x, const SliceLayout &at, int64_t i, T *own) {
  if (at.interleaved)
    return operandOf(x, at, i, own);
  for (int64_t r = 0; r < at.rows; ++r)
    for (int64_t c = 0; c < at.cols; ++c)
      own[c * at.rows + r] = valueAt<T>(x, at.offset(i) + r * at.cols + c);
  return own;
}

/// Where slice i of result `y` (laid out as `at`) is computed: in place
/// where y is float32 with contiguous slices, else in `own`.
float *resultOf(const TensorView &y, const SliceLayout &at, int64_t i,
                float *own) {
  return y.dtype == plan::F32 && !at.interleaved ? y.f32() + at.offset(i) : own;
}

/// Slice i of `y`, computed at `values` (already rounded where the op
/// rounds it), stored where resultOf did not place it; `transposed`:
/// values holds the transpose of the slice (the keys' gradient of a k x n
/// layout).
void storeResult(const float *values, const TensorView &y,
                 const SliceLayout &at, int64_t i, bool transposed = false) {
  if (!transposed && values == resultOf(y, at, i, nullptr))
    return;
  std::vector<float> column(transposed ? at.cols : 0);
  for (int64_t r = 0; r < at.rows; ++r) {
    const float *row = values + r * at.cols;
    if (transposed) {
      for (int64_t c = 0; c < at.cols; ++c)
        column[c] = values[c * at.rows + r];
      row = column.data();
    }
    storeRow(row, at.cols, NarrowFormat::None, y, at.offset(i) + r * at.ld);
  }
}

/// A slice's matrix products, block by block (AttentionBlocks.h): every
/// one in float32 (oneDNN's sgemm), or, under narrow_operands = bf16 where
/// the processor has bf16 dot products and oneDNN serves every shape
/// (Bf16Gemm), every one on bf16 operands with float32 sums, as a GPU's
/// tensor cores multiply. The keys are n x k rows (keysOf), their gradient
/// too. Where the blocks skip columns, v's and the keys' gradients are sums
/// over the blocks (beta 1).
class SliceProducts {
public:
  enum Which { Scores, Pv, Dv, Dp, Da, Db, Count };

  /// The products `used` (the forward's or the backward's).
  SliceProducts(const AttentionGeometry &g, const ScoreBlocks &blocks,
                NarrowFormat format, float scale,
                const std::vector<Which> &used, int threads,
                KernelScratch &scratch)
      : g(g), scale(scale), accumulate(blocks.skips()) {
    if (format == NarrowFormat::Bfloat16)
      makeBf16Gemms(blocks, used, threads, scratch);
  }

  /// Whether the products multiply bf16 bits (uint16_t), not floats.
  bool packed() const { return packedOperands; }
  /// Product `which` of `block`: c = alpha op(a) op(b) (+ c where it
  /// accumulates), on the calling thread.
  void run(Which which, const ScoreBlock &block, const float *a, const float *b,
           float *c) const {
    Shape s = shapeOf(which, block.rows, block.width);
    sgemm(s.transA, s.transB, s.m, s.n, s.k, s.alpha, a, b, s.beta, c);
  }
  void run(Which which, const ScoreBlock &block, const uint16_t *a,
           const uint16_t *b, float *c) const {
    char *pad = static_cast<char *>(pads.get()) +
                static_cast<size_t>(omp_get_thread_num()) * padBytes;
    gemms.at({which, block.rows, block.width})->run(a, b, c, pad);
  }

private:
  struct Shape {
    bool transA, transB;
    int64_t m, n, k;
    float alpha, beta;
  };
  Shape shapeOf(Which which, int64_t rows, int64_t width) const {
    float sum = accumulate ? 1.0f : 0.0f;
    switch (which) {
    case Scores:
      return {false, true, rows, width, g.k, scale, 0.0f};
    case Pv:
      return {false, false, rows, g.d, width, 1.0f, 0.0f};
    case Dv:
      return {true, false, width, g.d, rows, 1.0f, sum};
    case Dp:
      return {false, true, rows, width, g.d, 1.0f, 0.0f};
    case Da:
      return {false, false, rows, g.k, width, scale, 0.0f};
    default: // Db: dS^T A
      return {true, false, width, g.k, rows, scale, sum};
    }
  }
  void makeBf16Gemms(const ScoreBlocks &blocks, const std::vector<Which> &used,
                     int threads, KernelScratch &scratch) {
    for (Which which : used)
      for (int64_t rows : blocks.rowCounts())
        for (int64_t width : blocks.widths()) {
          Shape s = shapeOf(which, rows, width);
          auto gemm = Bf16Gemm::make(s.transA, s.transB, s.m, s.n, s.k, s.alpha,
                                     s.beta);
          if (!gemm)
            return;
          padBytes = std::max(padBytes, gemm->scratchpadBytes());
          gemms[{which, rows, width}] = std::move(gemm);
        }
    padBytes = (padBytes + 63) / 64 * 64;
    if (padBytes > 0)
      pads = scratch.take(threads * padBytes);
    packedOperands = true;
  }
  AttentionGeometry g;
  float scale;
  bool accumulate;
  bool packedOperands = false;
  std::map<std::tuple<int, int64_t, int64_t>, std::shared_ptr<const Bf16Gemm>>
      gemms;
  size_t padBytes = 0;
  std::shared_ptr<void> pads;
};

/// A thread's buffers for one slice: float32 ones (the scores, then the
/// probabilities; the backward's dP, then dS; the results before they are
/// stored) and the operands in the products' type T (a, b, v and the
/// incoming gradient where they are not read in place; the probabilities
/// and dS as the products read them).
template <typename T> struct SliceBuffers {
  float *s, *dp, *result[3];
  T *a, *b, *v, *grad, *p, *ds;

  static int64_t floats(const AttentionGeometry &g) {
    return 2 * g.m * g.n + g.m * std::max(g.k, g.d) + g.n * g.k + g.n * g.d;
  }
  static int64_t values(const AttentionGeometry &g) {
    return g.m * g.k + g.n * g.k + g.n * g.d + g.m * g.d + 2 * g.m * g.n;
  }
  /// Bytes of one thread's buffers, a multiple of 64.
  static int64_t bytes(const AttentionGeometry &g) {
    int64_t raw = floats(g) * sizeof(float) + values(g) * sizeof(T);
    return (raw + 63) / 64 * 64;
  }
  SliceBuffers(const AttentionGeometry &g, void *at) {
    s = static_cast<float *>(at);
    dp = s + g.m * g.n;
    result[0] = dp + g.m * g.n;                       // the result or dA
    result[1] = result[0] + g.m * std::max(g.k, g.d); // the keys' gradient
    result[2] = result[1] + g.n * g.k;                // v's gradient
    a = reinterpret_cast<T *>(result[2] + g.n * g.d);
    b = a + g.m * g.k;
    v = b + g.n * g.k;
    grad = v + g.n * g.d;
    p = grad + g.m * g.d;
    ds = p + g.m * g.n;
  }
};

/// The probabilities P as the products read them, from the float32 values
/// `x` (m x n): x itself where no rounding applies, else rounded to
/// `format` into `own`.
const float *asProductOperand(float *x, int64_t count, NarrowFormat format,
                              float *own) {
  if (format == NarrowFormat::None)
    return x;
  roundedRow(x, count, format, own);
  return own;
}
const uint16_t *asProductOperand(float *x, int64_t count, NarrowFormat,
                                 uint16_t *own) {
  narrowRowBits(x, count, true, own);
  return own;
}

/// A row's probabilities from its exponentials `e` and stats, into `p` in
/// the products' type (rounded to `format` in float32); zeros where
/// `zero`.
void probabilitiesInto(const float *e, const float *stats, bool zero, int64_t n,
                       NarrowFormat format, float *p) {
  if (zero)
    std::fill(p, p + n, 0.0f);
  else
    scaledRow(e, probabilityScale(stats), n, format, p);
}
void probabilitiesInto(const float *e, const float *stats, bool zero, int64_t n,
                       NarrowFormat, uint16_t *p) {
  if (zero)
    std::fill(p, p + n, uint16_t(0));
  else
    scaledRowBits(e, probabilityScale(stats), n, p);
}

/// What both kernels read: the geometry, the operands, the bias rows and
/// the columns they leave live.
struct AttentionOperands {
  AttentionGeometry g;
  TensorView a, b, v, biasView;
  std::shared_ptr<const BiasRows> bias;
  NarrowFormat format;
  bool zeroNanRows;
  int threads;
  ScoreBlocks blocks;
  /// The bias rows' live columns, scanned at the start of each run where
  /// the blocks skip.
  std::shared_ptr<LiveColumns> live = std::make_shared<LiveColumns>();
  std::shared_ptr<const SliceProducts> products;

  AttentionOperands(const KernelArgs &args, size_t first, size_t biasInput,
                    const std::vector<SliceProducts::Which> &used,
                    KernelScratch &scratch)
      : g(args.inputs[first].shape, args.inputs[first + 1].shape,
          args.inputs[first + 2].shape, args.s("layout", "bhsd")),
        a(args.inputs[first]), b(args.inputs[first + 1]),
        v(args.inputs[first + 2]),
        biasView(args.inputs.size() > biasInput ? args.inputs[biasInput]
                                                : TensorView()),
        bias(std::make_shared<const BiasRows>(biasView, g.scores)),
        format(narrowOperandsOf(args)),
        zeroNanRows(args.i("zero_nan_rows", 0) != 0),
        threads(static_cast<int>(
            std::max<int64_t>(1, std::min<int64_t>(args.threads, g.count)))),
        blocks(g.m, g.n,
               skippingMaskedScores && biasView.present() && bias->step == 1) {
    products = std::make_shared<const SliceProducts>(
        g, blocks, format, static_cast<float>(args.f("scale", 1.0)), used,
        threads, scratch);
  }

  /// Each bias row's live columns, for this run's bias.
  void scanBias() const {
    if (blocks.skips())
      live->scan(biasView.f32(), biasView.numel() / g.n, g.n);
  }
  /// Block b of slice i.
  ScoreBlock blockOf(int64_t i, int64_t b) const {
    return blocks.block(b, [&](int64_t r) {
      int64_t row = bias->rows(i * g.m + r) / g.n;
      return std::pair<int64_t, int64_t>(live->lo(row), live->hi(row));
    });
  }

  template <typename T> struct Slice {
    const T *a, *b, *v; // q, the keys (n x k rows) and v
  };
  template <typename T>
  Slice<T> sliceOf(int64_t i, const SliceBuffers<T> &own) const {
    return {operandOf(a, g.aAt, i, own.a),
            keysOf(b, g.bAt, g.kvSlice(i), own.b),
            operandOf(v, g.vAt, g.kvSlice(i), own.v)};
  }
  /// Row r of slice i's block `block`, its scores `x`, rounded and biased
  /// in place; returns their maximum.
  float biasedRow(float *x, int64_t i, const ScoreBlock &block,
                  int64_t r) const {
    const float *row = bias->row(i * g.m + r);
    return biasedScoresMaximum(x, row ? row + block.lo * bias->step : nullptr,
                               bias->step, block.width, format);
  }
  /// Whether a row with these stats has zero probabilities.
  bool zeroed(const float *rowStats) const {
    return zeroNanRows && std::isnan(rowStats[1]);
  }
  /// Each thread's buffers, one after another, in the kernel's scratch.
  template <typename T>
  std::shared_ptr<void> threadBuffers(KernelScratch &scratch) const {
    return scratch.take(threads * SliceBuffers<T>::bytes(g));
  }
  template <typename T>
  SliceBuffers<T> buffersOf(const std::shared_ptr<void> &all, int j) const {
    return SliceBuffers<T>(g, static_cast<char *>(all.get()) +
                                  j * SliceBuffers<T>::bytes(g));
  }
};

/// A block's matrices in a thread's m x n buffer: its rows' part of it,
/// `width` values a row.
template <typename T>
T *blockIn(T *buffer, const ScoreBlock &block, int64_t n) {
  return buffer + block.row * n;
}

/// Block `block` of slice i's forward, its result rows into `o`.
template <typename T>
void forwardBlock(const AttentionOperands &t, int64_t i,
                  const ScoreBlock &block,
                  const AttentionOperands::Slice<T> &in,
                  const SliceBuffers<T> &own, float *o, float *stats) {
  const AttentionGeometry &g = t.g;
  float *s = blockIn(own.s, block, g.n);
  t.products->run(SliceProducts::Scores, block, in.a + block.row * g.k,
                  in.b + block.lo * g.k, s);
  // The probabilities as the second product reads them: in place of the
  // scores in float32 (rounded to the format), packed into own.p in bf16.
  T *p = blockIn(own.p, block, g.n);
  if constexpr (std::is_same_v<T, float>)
    p = s;
  for (int64_t r = 0; r < block.rows; ++r) {
    float *x = s + r * block.width, *rowStats = stats + 2 * (block.row + r);
    rowStats[0] = t.biasedRow(x, i, block, block.row + r);
    rowStats[1] = static_cast<float>(
        std::log(exponentialsFrom(x, rowStats[0], block.width)));
    probabilitiesInto(x, rowStats, t.zeroed(rowStats), block.width, t.format,
                      p + r * block.width);
  }
  t.products->run(SliceProducts::Pv, block, p, in.v + block.lo * g.d,
                  o + block.row * g.d);
}

/// The forward of slice i in the thread's buffers `own`; `stats` the
/// slice's.
template <typename T>
void forwardSlice(const AttentionOperands &t, int64_t i,
                  const SliceBuffers<T> &own, const TensorView &out,
                  NarrowFormat rounding, float *stats) {
  const AttentionGeometry &g = t.g;
  AttentionOperands::Slice<T> in = t.sliceOf(i, own);
  float *o = resultOf(out, g.outAt, i, own.result[0]);
  for (int64_t b = 0; b < t.blocks.count(); ++b)
    forwardBlock(t, i, t.blockOf(i, b), in, own, o, stats);
  roundInPlace(rounding, o, g.m * g.d);
  storeResult(o, out, g.outAt, i);
}

template <typename T>
std::unique_ptr<Kernel>
forwardKernel(const AttentionOperands &t, const TensorView &out,
              const TensorView &stats, NarrowFormat rounding,
              KernelScratch &scratch) {
  std::shared_ptr<void> buffers = t.threadBuffers<T>(scratch);
  auto body = [t, out, stats, rounding, buffers](const StepContext &) {
    t.scanBias();
    forEachIndex(t.g.count, t.threads, [&](int64_t i) {
      forwardSlice(t, i, t.buffersOf<T>(buffers, omp_get_thread_num()), out,
                   rounding, stats.f32() + i * t.g.m * 2);
    });
  };
  return std::make_unique<FunctionKernel>(body, scratch.ownBytes());
}

std::unique_ptr<Kernel> attentionKernel(const KernelArgs &args) {
  KernelScratch scratch(args);
  AttentionOperands t(args, 0, 3, {SliceProducts::Scores, SliceProducts::Pv},
                      scratch);
  TensorView out = args.outputs[0], stats = args.outputs[1];
  if (t.products->packed())
    return forwardKernel<uint16_t>(t, out, stats, roundingOf(args), scratch);
  return forwardKernel<float>(t, out, stats, roundingOf(args), scratch);
}

/// attention_grad's operands and results.
struct AttentionBackward {
  AttentionOperands t;
  TensorView grad, stats, da, db, dv;

  /// Where a slice's gradients are computed: dA, the keys' (n x k) and v's.
  struct Gradients {
    float *da, *db, *dv;
  };

  /// Slice i in the thread's buffers `own`; leaves the unrounded dS of
  /// each block in own.dp for the bias's gradient.
  template <typename T>
  void slice(int64_t i, const SliceBuffers<T> &own) const {
    const AttentionGeometry &g = t.g;
    AttentionOperands::Slice<T> in = t.sliceOf(i, own);
    const T *dout = operandOf(grad, g.outAt, i, own.grad);
    // The keys' gradient n x k, stored transposed where they are k x n.
    bool transposed = !g.bGradAt.interleaved;
    Gradients out{resultOf(da, g.aAt, i, own.result[0]),
                  transposed ? own.result[1]
                             : resultOf(db, g.bGradAt, i, own.result[1]),
                  resultOf(dv, g.vGradAt, i, own.result[2])};
    if (t.blocks.skips()) { // summed over the blocks
      std::fill(out.db, out.db + g.n * g.k, 0.0f);
      std::fill(out.dv, out.dv + g.n * g.d, 0.0f);
    }
    for (int64_t b = 0; b < t.blocks.count(); ++b)
      block(i, t.blockOf(i, b), in, dout, own, out);
    finish(out.da, da, g.aAt, i);
    finish(out.dv, dv, g.vGradAt, i);
    finish(out.db, db, g.bGradAt, i, transposed);
  }

  template <typename T>
  void block(int64_t i, const ScoreBlock &block,
             const AttentionOperands::Slice<T> &in, const T *dout,
             const SliceBuffers<T> &own, const Gradients &out) const {
    const AttentionGeometry &g = t.g;
    int64_t area = block.rows * block.width;
    float *s = blockIn(own.s, block, g.n), *dp = blockIn(own.dp, block, g.n);
    const T *a = in.a + block.row * g.k, *rowsOut = dout + block.row * g.d;
    t.products->run(SliceProducts::Scores, block, a, in.b + block.lo * g.k, s);
    for (int64_t r = 0; r < block.rows; ++r) {
      float *x = s + r * block.width;
      const float *rowStats = stats.f32() + (i * g.m + block.row + r) * 2;
      t.biasedRow(x, i, block, block.row + r);
      exponentialsFrom(x, rowStats[0], block.width);
      probabilitiesInto(x, rowStats, t.zeroed(rowStats), block.width,
                        NarrowFormat::None, x);
    }
    // dV = P^T dO, P rounded as the forward multiplied it.
    const T *p =
        asProductOperand(s, area, t.format, blockIn(own.p, block, g.n));
    t.products->run(SliceProducts::Dv, block, p, rowsOut,
                    out.dv + block.lo * g.d);
    // dP = dO V^T, then dS = P (dP - sum(dP P)) row by row.
    t.products->run(SliceProducts::Dp, block, rowsOut, in.v + block.lo * g.d,
                    dp);
    for (int64_t r = 0; r < block.rows; ++r)
      softmaxGradientRow(s + r * block.width, dp + r * block.width, block.width,
                         t.format);
    // The products read dS rounded; the bias's gradient dS as it is.
    const T *ds =
        asProductOperand(dp, area, t.format, blockIn(own.ds, block, g.n));
    t.products->run(SliceProducts::Da, block, ds, in.b + block.lo * g.k,
                    out.da + block.row * g.k);
    t.products->run(SliceProducts::Db, block, ds, a, out.db + block.lo * g.k);
  }

  void finish(float *values, const TensorView &result, const SliceLayout &at,
              int64_t i, bool transposed = false) const {
    roundInPlace(t.format, values, at.rows * at.cols);
    storeResult(values, result, at, i, transposed);
  }

  /// Adds slice i's dS (its blocks' in `ds`) to the bias's gradient.
  void addBiasGrad(int64_t i, const float *ds, float *dbias) const {
    const AttentionGeometry &g = t.g;
    for (int64_t b = 0; b < t.blocks.count(); ++b) {
      ScoreBlock block = t.blockOf(i, b);
      const float *values = ds + block.row * g.n;
      for (int64_t r = 0; r < block.rows; ++r) {
        float *row = dbias + t.bias->rows(i * g.m + block.row + r) +
                     block.lo * t.bias->step;
        for (int64_t c = 0; c < block.width; ++c)
          row[c * t.bias->step] += values[r * block.width + c];
      }
    }
  }
};

/// Slices `threads` at a time, the bias's gradient summed after each group
/// in slice order; all at once without a bias.
template <typename T>
std::unique_ptr<Kernel> backwardKernel(const AttentionBackward &backward,
                                       const TensorView &dbias,
                                       KernelScratch &scratch) {
  std::shared_ptr<void> buffers = backward.t.threadBuffers<T>(scratch);
  auto body = [backward, dbias, buffers](const StepContext &) {
    const AttentionOperands &t = backward.t;
    t.scanBias();
    if (!dbias.present()) {
      forEachIndex(t.g.count, t.threads, [&](int64_t i) {
        backward.slice(i, t.buffersOf<T>(buffers, omp_get_thread_num()));
      });
      return;
    }
    std::fill(dbias.f32(), dbias.f32() + dbias.numel(), 0.0f);
    for (int64_t first = 0; first < t.g.count; first += t.threads) {
      int64_t group = std::min<int64_t>(t.threads, t.g.count - first);
      forEachIndex(group, t.threads, [&](int64_t j) {
        backward.slice(first + j, t.buffersOf<T>(buffers, j));
      });
      for (int64_t j = 0; j < group; ++j)
        backward.addBiasGrad(first + j, t.buffersOf<T>(buffers, j).dp,
                             dbias.f32());
    }
  };
  return std::make_unique<FunctionKernel>(body, scratch.ownBytes());
}

std::unique_ptr<Kernel> attentionGradKernel(const KernelArgs &args) {
  KernelScratch scratch(args);
  using P = SliceProducts;
  AttentionBackward backward{
      AttentionOperands(args, 1, 5, {P::Scores, P::Dv, P::Dp, P::Da, P::Db},
                        scratch),
      args.inputs[0],
      args.inputs[4],
      args.outputs[0],
      args.outputs[1],
      args.outputs[2]};
  TensorView dbias = args.outputs.size() > 3 ? args.outputs[3] : TensorView();
  if (backward.t.products->packed())
    return backwardKernel<uint16_t>(backward, dbias, scratch);
  return backwardKernel<float>(backward, dbias, scratch);
}

} // namespace

void skipMaskedAttentionScores(bool skip) { skippingMaskedScores = skip; }

void registerAttention(KernelRegistry &registry) {
  registry.add("attention", Backend::CPU, attentionKernel);
  registry.add("attention_grad", Backend::CPU, attentionGradKernel);
}

} // namespace cdp::runtime::cpu
