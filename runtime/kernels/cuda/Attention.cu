//===- Attention.cu - cdp.attention and its gradient on the GPU -----------===//
//
// A chunk of slices (batch x heads) at a time, through the device's shared
// block: the chunk's scores, probabilities and their gradients live there
// (sized near the GPU's L2 cache) and never in the plan's memory. Each
// chunk is strided batched cuBLAS products (2-byte operands and float32
// sums under narrow_operands, float32 otherwise) and one block per scores
// row for the softmax and its gradient. The backward recomputes the
// probabilities from the forward's stats with the same row kernel, so the
// same bits. The bias's gradient adds the chunks' dS slice by slice in
// order: no atomics, the same sums on every run. Grouped-query attention
// (keys and v with fewer heads): a chunk holds whole groups, and each
// product that reads the keys or v runs once per member r of a group, over
// every group-th query slice from r against the chunk's kv slices.
//
//===----------------------------------------------------------------------===//

#include "../../device/Cublas.h"
#include "../AttentionGeometry.h"
#include "../NarrowOperands.h"
#include "CudaKernels.h"
#include "Reduce.cuh"

#include <array>

namespace cdp::runtime::cuda {

namespace {

/// Bytes of the shared block one chunk may take: half an H100's or
/// H200's L2 cache (50 MB), so that the chunk's scores can stay there
/// between the kernels that write and read them, beside the operands.
/// Not yet tuned on a GPU.
constexpr int64_t kChunkBytes = int64_t(24) << 20;

/// The bias: where scores element e's value lies (`at`) and how far apart
/// a row's values are; null `values` for none.
struct AttentionBias {
  const float *values = nullptr;
  IndexMap at;
  int64_t stride = 0;
};

/// y's contiguous matrices (`size` values each, rows of `cols`) from x's
/// (rows `ld` apart, matrices `stride` apart), as 2-byte values.
__global__ void twoByteSlices(const float *x, uint16_t *y, int64_t n,
                              int64_t size, int64_t cols, int64_t ld,
                              int64_t stride, bool bf16) {
  CDP_FOR_EACH(i, n) {
    int64_t j = i / size, e = i % size;
    y[i] = narrowBitsOf(x[j * stride + (e / cols) * ld + e % cols], bf16);
  }
}

__global__ void roundInPlace(float *x, int64_t n, NarrowFormat format) {
  CDP_FOR_EACH(i, n) { x[i] = roundedTo(format, x[i]); }
}

/// One block per scores row `firstRow + blockIdx.x`: the row's scores
/// (rounded to `format`) plus its bias; with `findStats` its stats are
/// computed and written, else read; then its probabilities, as 2-byte
/// values into `p16` where there is one (rounded) and in place where
/// `keepFloat` (the backward's softmax gradient reads them).
__global__ void probabilityRows(float *s, int64_t firstRow, int64_t n,
                                AttentionBias bias, NarrowFormat format,
                                bool zeroNanRows, float *stats, bool findStats,
                                uint16_t *p16, bool keepFloat) {
  int64_t local = blockIdx.x, row = firstRow + local;
  float *in = s + local * n;
  const float *add = bias.values ? bias.values + bias.at(row * n) : nullptr;
  auto value = [&](int64_t c) {
    float score = roundedTo(format, in[c]);
    return add ? score + add[c * bias.stride] : score;
  };
  float *own = stats + row * 2;
  if (findStats) {
    float top;
    double sum;
    rowMaxAndExpSum(value, n, top, sum);
    if (threadIdx.x == 0) {
      own[0] = top;
      own[1] = static_cast<float>(::log(sum));
    }
    __syncthreads();
  }
  float top = own[0], logSum = own[1];
  bool zeroRow = zeroNanRows && isnan(logSum);
  bool bf16 = format == NarrowFormat::Bfloat16;
  // exp(score - top) * exp(-log-sum), as the CPU kernel computes it (its
  // forward keeps each exponential of the sum and scales it).
  double scale = exp(-static_cast<double>(logSum));
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    float p = zeroRow ? 0.0f
                      : static_cast<float>(
                            exp(static_cast<double>(value(c) - top)) * scale);
    if (keepFloat)
      in[c] = p;
    if (p16)
      p16[local * n + c] = narrowBitsOf(p, bf16);
  }
}

/// One block per row: dS = P (dP - sum(dP P)), dP rounded to `format` as
/// read; dS written over dP as it is where `keepFloat` (float32 products,
/// the bias's gradient), and rounded as 2-byte values into `ds16` where
/// there is one.
__global__ void softmaxGradRows(const float *p, float *dp, int64_t n,
                                NarrowFormat format, uint16_t *ds16,
                                bool keepFloat) {
  int64_t first = blockIdx.x * n;
  double sum = 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
    sum += roundedTo(format, dp[first + c]) * p[first + c];
  sum = blockSum(sum);
  bool bf16 = format == NarrowFormat::Bfloat16;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    int64_t e = first + c;
    float ds = static_cast<float>(p[e] * (roundedTo(format, dp[e]) - sum));
    if (keepFloat)
      dp[e] = ds;
    if (ds16)
      ds16[e] = narrowBitsOf(ds, bf16);
  }
}

/// Adds the chunk's `slices` dS matrices (m x n each, slice j the chunk's
/// first plus j) into the bias's gradient: a thread per (r, c), the slices
/// in order. The bias spans the last two dimensions whole (checked at
/// load), so no two threads write one value.
__global__ void addBiasGrad(const float *ds, float *dbias, IndexMap at,
                            int64_t firstSlice, int64_t slices, int64_t mn) {
  CDP_FOR_EACH(e, mn) {
    for (int64_t j = 0; j < slices; ++j)
      dbias[at((firstSlice + j) * mn + e)] += ds[j * mn + e];
  }
}

unsigned threadsForRow(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((n + 31) / 32 * 32, 32, kThreads));
}

/// A chunk's matrices of one operand or result: matrix j at element
/// `first` + j * stride of `base`, its rows `ld` apart, 2-byte values (of
/// the narrow format) or float32.
struct Matrices {
  void *base;
  int64_t first = 0, ld = 0, stride = 0;
  bool twoBytes = false;

  /// Contiguous float32 matrices (the chunk's scores and gradients).
  static Matrices floats(float *values, int64_t rows, int64_t cols) {
    return {values, 0, cols, rows * cols, false};
  }
  /// Contiguous 2-byte matrices (the chunk's copies).
  static Matrices narrow(const void *values, int64_t rows, int64_t cols) {
    return {const_cast<void *>(values), 0, cols, rows * cols, true};
  }
  /// The chunk's matrices of tensor `t` from slice `slice` as `at` lays
  /// them out; 2-byte where the plan stores the tensor so.
  static Matrices of(const TensorView &t, const SliceLayout &at,
                     int64_t slice) {
    return {t.data, at.offset(slice), at.ld, at.stride(), storedInTwoBytes(t)};
  }
  /// Every `group`-th matrix from the `r`-th: one member of each head
  /// group of a chunk's query slices.
  Matrices member(int64_t r, int64_t group) const {
    return {base, first + r * stride, ld, stride * group, twoBytes};
  }
  const void *pointer() const {
    return twoBytes ? static_cast<const void *>(
                          static_cast<const uint16_t *>(base) + first)
                    : static_cast<const void *>(
                          static_cast<const float *>(base) + first);
  }
};

/// A chunk's strided batch of row-major products C_j = op(A_j) op(B_j):
/// 2-byte operands under a narrow format, else float32; float32 sums; a
/// float32 result, or a 2-byte one of the format.
struct ChunkProduct {
  NarrowFormat format;
  cublasHandle_t blas;

  void operator()(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                  int64_t count, const Matrices &a, const Matrices &b,
                  const Matrices &c, float alpha = 1.0f) const {
    cudaDataType type = format == NarrowFormat::Bfloat16  ? CUDA_R_16BF
                        : format == NarrowFormat::Float16 ? CUDA_R_16F
                                                          : CUDA_R_32F;
    float zero = 0.0f;
    checkCublas(cublas().gemmStridedBatchedEx(
                    blas, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                    transA ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
                    b.pointer(), type, b.ld, b.stride, a.pointer(), type, a.ld,
                    a.stride, &zero, const_cast<void *>(c.pointer()),
                    c.twoBytes ? type : CUDA_R_32F, c.ld, c.stride, count,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                "attention product");
  }
};

/// Where a chunk's buffers lie in the shared block: float32 scores and
/// their gradient, 2-byte copies of the operands (under narrow_operands).
struct ChunkLayout {
  int64_t slices = 1;
  size_t scores = 0, gradScores = 0, a16 = 0, b16 = 0, v16 = 0, grad16 = 0,
         p16 = 0, bytes = 0;

  /// `copied`: which of a, b, v and the backward's grad are float32 values
  /// the chunk copies into 2 bytes (under narrow_operands; a tensor the
  /// plan stores in 2 bytes is read where it lies).
  ChunkLayout(const AttentionGeometry &g, bool narrow, bool backward,
              std::array<bool, 4> copied) {
    std::array<int64_t, 4> sizes{g.m * g.k, g.k * g.n, g.n * g.d, g.m * g.d};
    int64_t perSlice =
        4 * g.m * g.n * (backward ? 2 : 1) + (narrow ? 2 * g.m * g.n : 0);
    for (size_t i = 0; i < sizes.size(); ++i)
      perSlice += copied[i] ? 2 * sizes[i] : 0;
    // Interleaved heads: a chunk stays in one batch row, whose slices lie
    // one stride apart.
    slices = std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(perSlice, 1),
                                 1, std::max<int64_t>(g.slicesPerRow(), 1));
    // Whole head groups (a row's slices are whole groups).
    slices = std::max<int64_t>(g.group, slices / g.group * g.group);
    auto take = [&](int64_t values, int64_t width) {
      size_t at = bytes;
      bytes += (slices * values * width + 255) / 256 * 256;
      return at;
    };
    scores = take(g.m * g.n, 4);
    if (backward)
      gradScores = take(g.m * g.n, 4);
    if (narrow)
      p16 = take(g.m * g.n, 2);
    size_t *copies[] = {&a16, &b16, &v16, &grad16};
    for (size_t i = 0; i < sizes.size(); ++i)
      if (copied[i])
        *copies[i] = take(sizes[i], 2);
  }
};

/// A chunk's operands as its products read them; b as stored (n x k
/// where the heads interleave).
struct ChunkOperands {
  Matrices a, b, v;
};

/// Which of a, b, v (from input `first`) and the backward's grad (input 0)
/// a chunk copies into 2 bytes: float32 tensors under narrow_operands.
std::array<bool, 4> copiedOperands(const KernelArgs &args, size_t first,
                                   bool backward) {
  bool narrow = narrowOperandsOf(args) != NarrowFormat::None;
  auto copied = [&](size_t input) {
    return narrow && !storedInTwoBytes(args.inputs[input]);
  };
  return {copied(first), copied(first + 1), copied(first + 2),
          backward && copied(0)};
}

/// What both kernels bind at load.
struct AttentionSetup {
  AttentionGeometry g;
  TensorView a, b, v;
  AttentionBias bias;
  NarrowFormat format;
  bool zeroNanRows;
  float scale; ///< of the first product's sums, and the operands' gradients'
  ChunkLayout layout;
  CudaDevice *device;

  AttentionSetup(const KernelArgs &args, size_t first, size_t biasInput,
                 bool backward)
      : g(args.inputs[first].shape, args.inputs[first + 1].shape,
          args.inputs[first + 2].shape, args.s("layout", "bhsd")),
        a(args.inputs[first]), b(args.inputs[first + 1]),
        v(args.inputs[first + 2]), format(narrowOperandsOf(args)),
        zeroNanRows(args.i("zero_nan_rows", 0) != 0),
        scale(static_cast<float>(args.f("scale", 1.0))),
        layout(g, format != NarrowFormat::None, backward,
               copiedOperands(args, first, backward)),
        device(&deviceOf(args)) {
    if (args.inputs.size() > biasInput && args.inputs[biasInput].present()) {
      const TensorView &values = args.inputs[biasInput];
      bias.values = values.f32();
      bias.at = broadcastMap(args, values.shape, g.scores);
      bias.stride = broadcastStrides(values.shape, g.scores).back();
    }
    if (g.count > 0 && g.m > 0 && g.n > 0)
      device->reserveShared(layout.bytes);
  }
  bool narrow() const { return format != NarrowFormat::None; }
  char *block(size_t offset) const {
    return static_cast<char *>(device->shared()) + offset;
  }
  ChunkProduct product() const { return {format, device->blas()}; }
  float *scores() const {
    return reinterpret_cast<float *>(block(layout.scores));
  }
  uint16_t *probabilities16() const {
    return narrow() ? reinterpret_cast<uint16_t *>(block(layout.p16)) : nullptr;
  }
  /// Slices in the chunk from slice `first`: at most the layout's, within
  /// one batch row where the heads interleave.
  int64_t chunkAt(int64_t first) const {
    int64_t perRow = std::max<int64_t>(g.slicesPerRow(), 1);
    int64_t rowEnd = (first / perRow + 1) * perRow;
    return std::min({layout.slices, g.count - first, rowEnd - first});
  }
  /// `slices` matrices from slice `first` of `operand` (laid out as `at`)
  /// as the chunk's products read them: where the plan stores them in 2
  /// bytes, there; under narrow_operands, copied into contiguous 2-byte
  /// values at `offset` in the block; else the float32 values where they
  /// lie.
  Matrices operandOf(cudaStream_t stream, const TensorView &operand,
                     const SliceLayout &at, int64_t first, int64_t slices,
                     size_t offset) const {
    if (storedInTwoBytes(operand) || !narrow())
      return Matrices::of(operand, at, first);
    return twoBytes(stream, operand.f32(), at, first, slices, offset);
  }
  /// The chunk's a, b and v as its products read them: b and v the kv
  /// slices of the chunk's query slices.
  ChunkOperands operandsOf(cudaStream_t stream, int64_t first,
                           int64_t slices) const {
    int64_t kvFirst = g.kvSlice(first), kvSlices = slices / g.group;
    return {operandOf(stream, a, g.aAt, first, slices, layout.a16),
            operandOf(stream, b, g.bAt, kvFirst, kvSlices, layout.b16),
            operandOf(stream, v, g.vAt, kvFirst, kvSlices, layout.v16)};
  }
  /// C = alpha op(A) op(B) over a chunk of `slices` query slices where B
  /// is the keys or v (one kv slice per head group): once per member of a
  /// group, A and C every group-th slice from it.
  void productWithKv(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                     int64_t slices, const Matrices &queries,
                     const Matrices &kv, const Matrices &c,
                     float alpha = 1.0f) const {
    for (int64_t r = 0; r < g.group; ++r)
      product()(transA, transB, m, n, k, slices / g.group,
                queries.member(r, g.group), kv, c.member(r, g.group), alpha);
  }
  /// The chunk's scores, then its probabilities (row kernel): stats found
  /// (the forward) or read (the backward).
  void probabilities(cudaStream_t stream, const ChunkOperands &in,
                     int64_t first, int64_t slices, float *stats,
                     bool findStats, bool keepFloat) const {
    // b is the keys (n x k) where the heads interleave: read transposed.
    productWithKv(false, g.interleaved, g.m, g.n, g.k, slices, in.a, in.b,
                  Matrices::floats(scores(), g.m, g.n), scale);
    probabilityRows<<<slices * g.m, threadsForRow(g.n), 0, stream>>>(
        scores(), first * g.m, g.n, bias, format, zeroNanRows, stats, findStats,
        probabilities16(), keepFloat);
    launched("attention softmax");
  }
  /// The chunk's probabilities as the second product reads them (2-byte
  /// under narrow_operands), or dS after softmaxGradRows.
  Matrices probabilityMatrices() const {
    uint16_t *p16 = probabilities16();
    return p16 ? Matrices::narrow(p16, g.m, g.n)
               : Matrices::floats(scores(), g.m, g.n);
  }
  /// `slices` matrices of `x` from slice `first` (laid out as `at`),
  /// copied as contiguous 2-byte values to `offset` in the block.
  Matrices twoBytes(cudaStream_t stream, const float *x, const SliceLayout &at,
                    int64_t first, int64_t slices, size_t offset) const {
    auto *to = reinterpret_cast<uint16_t *>(block(offset));
    int64_t n = slices * at.rows * at.cols;
    twoByteSlices<<<blocksFor(n), kThreads, 0, stream>>>(
        x + at.offset(first), to, n, at.rows * at.cols, at.cols, at.ld,
        at.stride(), format == NarrowFormat::Bfloat16);
    launched("attention operands");
    return Matrices::narrow(to, at.rows, at.cols);
  }
};

/// Rounds a float32 result to `format` (a 2-byte one holds rounded values).
void roundWhole(cudaStream_t stream, NarrowFormat format, const TensorView &t) {
  if (format == NarrowFormat::None || t.numel() == 0 || storedInTwoBytes(t))
    return;
  roundInPlace<<<blocksFor(t.numel()), kThreads, 0, stream>>>(
      t.f32(), t.numel(), format);
  launched("attention rounding");
}

std::function<void(const StepContext &)>
attentionKernel(const KernelArgs &args) {
  AttentionSetup t(args, 0, 3, /*backward=*/false);
  TensorView out = args.outputs[0], stats = args.outputs[1];
  NarrowFormat rounding = roundingOf(args);
  return [t, out, stats, rounding](const StepContext &context) {
    const AttentionGeometry &g = t.g;
    if (g.count == 0 || g.m == 0)
      return;
    cudaStream_t stream = streamOf(context);
    bool p16 = t.probabilities16() != nullptr;
    for (int64_t first = 0, c = 0; first < g.count; first += c) {
      c = t.chunkAt(first);
      ChunkOperands in = t.operandsOf(stream, first, c);
      t.probabilities(stream, in, first, c, stats.f32(), /*findStats=*/true,
                      /*keepFloat=*/!p16);
      t.productWithKv(false, false, g.m, g.d, g.n, c, t.probabilityMatrices(),
                      in.v, Matrices::of(out, g.outAt, first));
    }
    roundWhole(stream, rounding, out);
  };
}

std::function<void(const StepContext &)>
attentionGradKernel(const KernelArgs &args) {
  AttentionSetup t(args, 1, 5, /*backward=*/true);
  TensorView grad = args.inputs[0], stats = args.inputs[4],
             da = args.outputs[0], db = args.outputs[1], dv = args.outputs[2];
  TensorView dbias = args.outputs.size() > 3 ? args.outputs[3] : TensorView();
  std::vector<int64_t> biasStrides =
      dbias.present() ? broadcastStrides(args.inputs[5].shape, t.g.scores)
                      : std::vector<int64_t>();
  if (dbias.present() &&
      (biasStrides.back() != 1 || biasStrides[biasStrides.size() - 2] != t.g.n))
    args.fail("the GPU's attention_grad sums a bias's gradient only for a "
              "bias spanning the scores' last two dimensions whole");
  return [=](const StepContext &context) {
    const AttentionGeometry &g = t.g;
    cudaStream_t stream = streamOf(context);
    if (dbias.present())
      checkCuda(cudaMemsetAsync(dbias.data, 0, byteSize(dbias), stream),
                "memset");
    if (g.count == 0 || g.m == 0)
      return;
    ChunkProduct product = t.product();
    float *s = t.scores();
    auto *ds = reinterpret_cast<float *>(t.block(t.layout.gradScores));
    uint16_t *p16 = t.probabilities16();
    int64_t mn = g.m * g.n;
    for (int64_t first = 0, c = 0; first < g.count; first += c) {
      c = t.chunkAt(first);
      ChunkOperands in = t.operandsOf(stream, first, c);
      Matrices dout =
          t.operandOf(stream, grad, g.outAt, first, c, t.layout.grad16);
      t.probabilities(stream, in, first, c, stats.f32(), /*findStats=*/false,
                      /*keepFloat=*/true);
      // dV = P^T dO, with P as the forward multiplied it (per query slice).
      product(true, false, g.n, g.d, g.m, c, t.probabilityMatrices(), dout,
              Matrices::of(dv, g.vGradAt, first));
      // dP = dO V^T, then dS (p16 now holds dS's 2-byte copy).
      t.productWithKv(false, true, g.m, g.n, g.d, c, dout, in.v,
                      Matrices::floats(ds, g.m, g.n));
      softmaxGradRows<<<c * g.m, threadsForRow(g.n), 0, stream>>>(
          s, ds, g.n, t.format, p16, /*keepFloat=*/!p16 || dbias.present());
      launched("attention softmax gradient");
      Matrices dsRead = p16 ? Matrices::narrow(p16, g.m, g.n)
                            : Matrices::floats(ds, g.m, g.n);
      // dA = scale dS B^T: the keys (n x k, interleaved heads) are B^T.
      t.productWithKv(false, !g.interleaved, g.m, g.k, g.n, c, dsRead, in.b,
                      Matrices::of(da, g.aAt, first), t.scale);
      // dB = scale A^T dS, or its transpose dS^T A where the keys' gradient
      // is stored n x k (per query slice).
      if (g.interleaved)
        product(true, false, g.n, g.k, g.m, c, dsRead, in.a,
                Matrices::of(db, g.bGradAt, first), t.scale);
      else
        product(true, false, g.k, g.n, g.m, c, in.a, dsRead,
                Matrices::of(db, g.bGradAt, first), t.scale);
      if (dbias.present()) {
        addBiasGrad<<<blocksFor(mn), kThreads, 0, stream>>>(
            ds, dbias.f32(), t.bias.at, first, c, mn);
        launched("attention bias gradient");
      }
    }
    for (const TensorView *result : {&da, &db, &dv})
      roundWhole(stream, t.format, *result);
  };
}

} // namespace

void registerAttention(KernelRegistry &registry) {
  addKernel(registry, "attention", Launches::SameEveryStep, attentionKernel);
  addKernel(registry, "attention_grad", Launches::SameEveryStep,
            attentionGradKernel);
}

} // namespace cdp::runtime::cuda
