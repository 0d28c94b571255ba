//===- Linalg.cu - matrix products through cuBLAS -------------------------===//
//
// cuBLAS is column-major; a row-major C = op(A) op(B) is the column-major
// C^T = op(B)^T op(A)^T, so every call swaps the operands. Products run in
// float32 (CUBLAS_DEFAULT_MATH: no TF32) unless --allow-tf32 chose tensor
// cores. A product marked narrow_operands (its operands exact in bf16 or
// fp16: cdp-mark-narrow-products) copies float32 operands into 2-byte
// values in the device's shared block, reads operands the plan stores in 2
// bytes (cdp-read-narrow-operands) where they are, and multiplies on tensor
// cores with float32 sums and a float32 result
// (cublasGemmStridedBatchedEx), as autocast does.
//
//===----------------------------------------------------------------------===//

#include "../../device/Cublas.h"
#include "../Activations.h"
#include "../MatMulGeometry.h"
#include "../NarrowOperands.h"
#include "CudaKernels.h"
#include "Reduce.cuh"
#include "cdp/Runtime/OpTable.h"

namespace cdp::runtime::cuda {

namespace {

/// Row-major C = alpha op(A) op(B) + beta C on the handle's stream.
void sgemm(cublasHandle_t blas, bool transA, bool transB, int64_t m, int64_t n,
           int64_t k, float alpha, const float *a, const float *b, float beta,
           float *c) {
  checkCublas(cublas().sgemm(blas, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                             transA ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                             &alpha, b, transB ? k : n, a, transA ? m : k,
                             &beta, c, n),
              "cublasSgemm");
}

__global__ void scaleKernel(float *y, int64_t n, float beta) {
  CDP_FOR_EACH(i, n) { y[i] = beta == 0.0f ? 0.0f : beta * y[i]; }
}

__global__ void roundKernel(float *y, int64_t n, NarrowFormat format) {
  CDP_FOR_EACH(i, n) { y[i] = roundedTo(format, y[i]); }
}

/// cdp.relu's values in place.
__global__ void reluKernel(float *y, int64_t n) {
  CDP_FOR_EACH(i, n) { y[i] = reluOf(y[i]); }
}

/// The product's `round_result` (the cdp.round_to cdp-fuse-roundings
/// moved into it) on its `n` result values, in place after cuBLAS wrote
/// them.
void roundResult(cudaStream_t stream, NarrowFormat format, float *y,
                 int64_t n) {
  if (format == NarrowFormat::None || n == 0)
    return;
  roundKernel<<<blocksFor(n), kThreads, 0, stream>>>(y, n, format);
  launched("round_result");
}

/// 2-byte patterns of `total` values, value i read at `from` + map(i) (a
/// broadcast operand's matrices repeated), rounded to nearest: a marked
/// operand's values are exact in the format, so the patterns hold them
/// whole; a gemm's C written into a 2-byte result is rounded as that
/// result is.
__global__ void narrowMatrices(const float *from, uint16_t *to, int64_t total,
                               IndexMap map, bool bf16) {
  CDP_FOR_EACH(i, total) { to[i] = narrowBitsOf(from[map(i)], bf16); }
}

/// The 2-byte patterns of `total` values, value i read at `from` + map(i).
__global__ void gatherMatrices(const uint16_t *from, uint16_t *to,
                               int64_t total, IndexMap map) {
  CDP_FOR_EACH(i, total) { to[i] = from[map(i)]; }
}

/// How a narrow product's operand reaches cuBLAS.
enum class NarrowSource {
  Convert,   ///< float32 values, copied into 2-byte ones in the shared block
  InPlace,   ///< 2-byte values the plan stores, matrix after matrix
  OneForAll, ///< 2-byte values of one matrix every product reads
  Gather,    ///< 2-byte values broadcasting repeats: gathered into the block
};

/// `operand`'s source in a product of `count` matrices whose batch
/// dimensions broadcast from `operandBatch` to `batch`.
NarrowSource narrowSourceOf(const TensorView &operand, int64_t count,
                            const std::vector<int64_t> &operandBatch,
                            const std::vector<int64_t> &batch) {
  if (operand.dtype != plan::BF16 && operand.dtype != plan::F16)
    return NarrowSource::Convert;
  int64_t matrices = 1;
  for (int64_t d : operandBatch)
    matrices *= d;
  if (count == 1 || operandBatch == batch)
    return NarrowSource::InPlace;
  return matrices == 1 ? NarrowSource::OneForAll : NarrowSource::Gather;
}

/// A product of operands exact in a narrow format: each operand's `count`
/// matrices in 2-byte values (read where the plan stores them so, else
/// copied into the device's shared block), then one strided batched
/// product of them with float32 sums into float32 Y.
struct NarrowProduct {
  NarrowFormat format = NarrowFormat::None;
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0, count = 1;
  /// Value i of the product's A (B), its matrices one after another,
  /// reads the operand's value map(i).
  IndexMap aMap, bMap;
  NarrowSource aSource = NarrowSource::Convert, bSource = NarrowSource::Convert;

  static bool copied(NarrowSource source) {
    return source == NarrowSource::Convert || source == NarrowSource::Gather;
  }
  /// The maps of values from those of matrices (matrix i of the product
  /// reads the operand's matrix ia(i), ib(i)); m, n and k set.
  void readMatrices(const KernelArgs &args, const IndexMap &ia,
                    const IndexMap &ib) {
    if (!IndexMap::ofBlocks(ia, m * k, aMap) ||
        !IndexMap::ofBlocks(ib, k * n, bMap))
      args.fail("broadcasts over more dimensions than the CUDA kernels take");
  }

  /// Where B's copy begins, in 2-byte values: 256-byte aligned, as
  /// cuBLAS's fastest tensor-core kernels want their operands.
  int64_t bOffset() const {
    return copied(aSource) ? (count * m * k + 127) / 128 * 128 : 0;
  }
  /// The shared block's bytes the copies take.
  int64_t bytes() const {
    return 2 * (bOffset() + (copied(bSource) ? count * k * n : 0));
  }

  /// Y = alpha op(A) op(B) + beta Y on `stream` (the device's); Y float32,
  /// or 2-byte values of the operands' format (a result cdp-narrow-results
  /// stores so: cuBLAS rounds the float32 sums to nearest as it writes).
  void run(CudaDevice &device, cudaStream_t stream, const void *a,
           const void *b, float alpha, float beta, void *y,
           bool narrowResult) const {
    auto [aIn, bIn] = operands(device, stream, a, b);
    cudaDataType type = dataType();
    checkCublas(cublas().gemmStridedBatchedEx(
                    device.blas(), transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                    transA ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, bIn,
                    type, transB ? k : n, strideOf(bSource, k * n), aIn, type,
                    transA ? m : k, strideOf(aSource, m * k), &beta, y,
                    narrowResult ? type : CUDA_R_32F, n, m * n, count,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                "cublasGemmStridedBatchedEx");
  }

  /// A and B as 2-byte matrices, copied into the shared block first where
  /// they must be.
  std::pair<const uint16_t *, const uint16_t *> operands(CudaDevice &device,
                                                         cudaStream_t stream,
                                                         const void *a,
                                                         const void *b) const {
    auto *a16 = static_cast<uint16_t *>(device.shared());
    return {prepare(aSource, a, a16, count * m * k, aMap, stream),
            prepare(bSource, b, a16 + bOffset(), count * k * n, bMap, stream)};
  }
  cudaDataType dataType() const {
    return format == NarrowFormat::Bfloat16 ? CUDA_R_16BF : CUDA_R_16F;
  }

private:
  static int64_t strideOf(NarrowSource source, int64_t size) {
    return source == NarrowSource::OneForAll ? 0 : size;
  }
  /// The operand's 2-byte matrices, copied into `block` where they must be.
  const uint16_t *prepare(NarrowSource source, const void *operand,
                          uint16_t *block, int64_t total, IndexMap map,
                          cudaStream_t stream) const {
    if (source == NarrowSource::Convert) {
      narrowMatrices<<<blocksFor(total), kThreads, 0, stream>>>(
          static_cast<const float *>(operand), block, total, map,
          format == NarrowFormat::Bfloat16);
      launched("narrow operands");
      return block;
    }
    if (source == NarrowSource::Gather) {
      gatherMatrices<<<blocksFor(total), kThreads, 0, stream>>>(
          static_cast<const uint16_t *>(operand), block, total, map);
      launched("narrow operands");
      return block;
    }
    return static_cast<const uint16_t *>(operand);
  }
};

/// The largest power of two (at most 256) that `address` is a multiple of:
/// the alignment cuBLASLt may assume of a matrix.
uint32_t alignmentOf(const void *address) {
  auto bits = reinterpret_cast<uintptr_t>(address);
  uint32_t alignment = 256;
  while (alignment > 1 && bits % alignment != 0)
    alignment /= 2;
  return alignment;
}

/// A gemm whose C is a bias (a row of n values added to every row, beta 1)
/// as one cuBLASLt product with the BIAS epilogue: the bias added as the
/// result is written, instead of broadcast into Y first and read back by
/// cuBLAS (beta 1): one write and one read of Y fewer. Set up at load;
/// where cuBLASLt has no algorithm for the product the gemm runs as before.
class BiasEpilogue {
public:
  struct Product {
    bool transA = false, transB = false;
    int64_t m = 0, n = 0, k = 0;
    cudaDataType operands = CUDA_R_32F, result = CUDA_R_32F;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    bool relu = false; ///< relu applied after the bias (RELU_BIAS)
  };
  /// `a`, `b`: where the operands lie (null: the device's shared block,
  /// aligned to 256 bytes); `bias`: n values of the result's type.
  BiasEpilogue(CudaDevice &device, const Product &p, const void *a,
               const void *b, const void *bias, const void *y)
      : device(device), api(cublasLt()), p(p) {
    if (api.descCreate(&desc, p.compute, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
      return;
    // Row-major Y = op(A) op(B) as column-major Y^T = op(B)^T op(A)^T:
    // cuBLASLt's A is our B.
    cublasOperation_t opA = p.transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                      opB = p.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue =
        p.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    bool described =
        set(CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)) &&
        set(CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)) &&
        set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)) &&
        set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)) &&
        layout(&aLayout, p.operands, p.transB ? p.k : p.n,
               p.transB ? p.n : p.k) &&
        layout(&bLayout, p.operands, p.transA ? p.m : p.k,
               p.transA ? p.k : p.m) &&
        layout(&yLayout, p.result, p.n, p.m);
    found = described && chooseAlgorithm(b, a, y);
  }
  ~BiasEpilogue() {
    if (aLayout)
      api.layoutDestroy(aLayout);
    if (bLayout)
      api.layoutDestroy(bLayout);
    if (yLayout)
      api.layoutDestroy(yLayout);
    if (desc)
      api.descDestroy(desc);
  }
  BiasEpilogue(const BiasEpilogue &) = delete;
  BiasEpilogue &operator=(const BiasEpilogue &) = delete;

  bool usable() const { return found; }

  /// Y = alpha op(A) op(B) + bias on `stream` (the device's).
  void run(cudaStream_t stream, float alpha, const void *a, const void *b,
           void *y) const {
    float zero = 0.0f;
    checkCublas(api.matmul(device.blasLt(), desc, &alpha, b, aLayout, a,
                           bLayout, &zero, y, yLayout, y, yLayout, &algo,
                           device.blasWorkspace(), device.blasWorkspaceBytes(),
                           stream),
                "cublasLtMatmul");
  }

private:
  bool set(cublasLtMatmulDescAttributes_t attribute, const void *value,
           size_t bytes) {
    return api.descSet(desc, attribute, value, bytes) == CUBLAS_STATUS_SUCCESS;
  }
  /// A column-major matrix of `rows` x `cols`, its columns `rows` apart.
  bool layout(cublasLtMatrixLayout_t *matrix, cudaDataType type, int64_t rows,
              int64_t cols) {
    return api.layoutCreate(matrix, type, rows, cols, rows) ==
           CUBLAS_STATUS_SUCCESS;
  }
  /// cuBLASLt's first choice within the device's cuBLAS workspace and the
  /// matrices' alignment (its A is our B).
  bool chooseAlgorithm(const void *ltA, const void *ltB, const void *y) {
    cublasLtMatmulPreference_t preference = nullptr;
    if (api.preferenceCreate(&preference) != CUBLAS_STATUS_SUCCESS)
      return false;
    uint64_t workspace = device.blasWorkspaceBytes();
    uint32_t alignA = ltA ? alignmentOf(ltA) : 256,
             alignB = ltB ? alignmentOf(ltB) : 256, alignY = alignmentOf(y);
    // A 2-byte result is rounded once, from float32 sums (autocast's): no
    // split of k whose parts are added in the result's type.
    uint32_t schemes = p.result == CUDA_R_32F
                           ? CUBLASLT_REDUCTION_SCHEME_MASK
                           : CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute,
                      const auto &value) {
      return api.preferenceSet(preference, attribute, &value, sizeof(value)) ==
             CUBLAS_STATUS_SUCCESS;
    };
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    bool ok = prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace) &&
              prefer(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes) &&
              prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignA) &&
              prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignB) &&
              prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignY) &&
              prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignY) &&
              api.heuristic(device.blasLt(), desc, aLayout, bLayout, yLayout,
                            yLayout, preference, 1, &result,
                            &count) == CUBLAS_STATUS_SUCCESS &&
              count > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    api.preferenceDestroy(preference);
    if (ok)
      algo = result.algo;
    return ok;
  }

  CudaDevice &device;
  const CublasLtApi &api;
  Product p;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t aLayout = nullptr, bLayout = nullptr,
                         yLayout = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
};

/// A MatMul marked narrow_operands: one product of count * m rows where B
/// is one matrix for all (a Linear over a sequence), else `count` products
/// of each operand's matrices repeated as broadcasting reads them.
std::function<void(const StepContext &)> narrowMatMul(const KernelArgs &args,
                                                      const MatMulGeometry &g,
                                                      IndexMap ia,
                                                      IndexMap ib) {
  TensorView a = args.inputs[0], b = args.inputs[1], y = args.outputs[0];
  NarrowProduct narrow;
  narrow.format = narrowOperandsOf(args);
  narrow.transA = g.transA;
  narrow.transB = g.transB;
  bool stacked = g.rowsStack();
  narrow.m = stacked ? g.count() * g.m : g.m;
  narrow.n = g.n;
  narrow.k = g.k;
  narrow.count = stacked ? 1 : g.count();
  narrow.readMatrices(args, stacked ? IndexMap() : ia,
                      stacked ? IndexMap() : ib);
  narrow.aSource = narrowSourceOf(a, narrow.count, g.aBatch, g.batch);
  narrow.bSource = narrowSourceOf(b, narrow.count, g.bBatch, g.batch);
  CudaDevice &device = deviceOf(args);
  NarrowFormat rounding = roundingOf(args);
  bool narrowResult = storedInTwoBytes(y);
  if (narrow.count > 0 && narrow.m > 0 && narrow.n > 0)
    device.reserveShared(narrow.bytes());
  return [=, &device](const StepContext &context) {
    if (narrow.count == 0 || narrow.m == 0 || narrow.n == 0)
      return;
    if (narrow.k == 0) { // zeros in either width
      checkCuda(cudaMemsetAsync(y.data, 0, byteSize(y), streamOf(context)),
                "memset");
      return;
    }
    narrow.run(device, streamOf(context), a.data, b.data, 1.0f, 0.0f, y.data,
               narrowResult);
    if (!narrowResult)
      roundResult(streamOf(context), rounding, y.f32(), y.numel());
  };
}

/// Batched products with numpy broadcasting of the batch dimensions in
/// float32: the pointers of every product are known at load (memory is
/// static), so they are uploaded once and one batched call runs them all.
std::function<void(const StepContext &)> floatMatMul(const KernelArgs &args,
                                                     const MatMulGeometry &g,
                                                     IndexMap ia, IndexMap ib) {
  TensorView a = args.inputs[0], b = args.inputs[1], y = args.outputs[0];
  int64_t m = g.m, n = g.n, k = g.k, count = g.count();
  bool transA = g.transA, transB = g.transB;
  std::vector<const float *> pointers(3 * count);
  for (int64_t i = 0; i < count; ++i) {
    pointers[i] = b.f32() + ib(i) * k * n; // cuBLAS's first operand
    pointers[count + i] = a.f32() + ia(i) * m * k;
    pointers[2 * count + i] = y.f32() + i * m * n;
  }
  CudaDevice &device = deviceOf(args);
  auto table = std::make_shared<Scratch>(
      device, std::max<size_t>(pointers.size(), 1) * sizeof(float *));
  checkCuda(cudaMemcpy(table->as<void>(), pointers.data(),
                       pointers.size() * sizeof(float *),
                       cudaMemcpyHostToDevice),
            "matmul pointer table");
  cublasHandle_t blas = device.blas();
  NarrowFormat rounding = roundingOf(args);
  return [=](const StepContext &context) {
    if (count == 0 || m == 0 || n == 0)
      return;
    if (k == 0) {
      checkCuda(cudaMemsetAsync(y.data, 0, byteSize(y), streamOf(context)),
                "memset");
      return;
    }
    float one = 1.0f, zero = 0.0f;
    const float **all = table->as<const float *>();
    checkCublas(cublas().sgemmBatched(
                    blas, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                    transA ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, all,
                    transB ? k : n, all + count, transA ? m : k, &zero,
                    const_cast<float **>(all + 2 * count), n, count),
                "cublasSgemmBatched");
    roundResult(streamOf(context), rounding, y.f32(), y.numel());
  };
}

} // namespace

/// Whether a gemm's C is a bias cuBLASLt's epilogue can add: one row of
/// the result's n values (shape (n) or (1, n)) added whole (beta 1).
bool addsBias(const TensorView &c, float beta, int64_t n) {
  return c.present() && beta == 1.0f && c.dtype == plan::F32 &&
         c.numel() == n && (c.shape.size() == 1 || c.shape.front() == 1);
}

/// A gemm's bias added by cuBLASLt's epilogue where it can (BiasEpilogue),
/// else null. A result stored in 2 bytes takes the bias in that format:
/// converted into `narrowBias` (n values) each step.
std::shared_ptr<BiasEpilogue>
biasEpilogueOf(const KernelArgs &args, const GemmGeometry &g,
               const NarrowProduct &narrow, bool narrowResult,
               std::shared_ptr<Scratch> &narrowBias) {
  TensorView a = args.inputs[0], b = args.inputs[1], y = args.outputs[0];
  TensorView c = args.inputs.size() > 2 ? args.inputs[2] : TensorView();
  if (!CudaDevice::epiloguesAllowed() || !addsBias(c, g.beta, g.n) ||
      g.m == 0 || g.n == 0 || g.k == 0)
    return nullptr;
  CudaDevice &device = deviceOf(args);
  BiasEpilogue::Product p;
  p.transA = g.transA;
  p.transB = g.transB;
  p.m = g.m;
  p.n = g.n;
  p.k = g.k;
  p.relu = g.relu;
  const void *aAt = a.data, *bAt = b.data, *bias = c.data;
  if (narrow.format != NarrowFormat::None) {
    p.operands = p.result = narrow.dataType();
    if (NarrowProduct::copied(narrow.aSource))
      aAt = nullptr; // in the shared block
    if (NarrowProduct::copied(narrow.bSource))
      bAt = nullptr;
  } else if (CudaDevice::tf32Allowed())
    p.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  if (!narrowResult)
    p.result = CUDA_R_32F;
  else {
    narrowBias = std::make_shared<Scratch>(device, g.n * 2);
    bias = narrowBias->as<void>();
  }
  auto epilogue =
      std::make_shared<BiasEpilogue>(device, p, aAt, bAt, bias, y.data);
  if (!epilogue->usable()) {
    narrowBias.reset(); // the gemm runs as before: no bias of its own
    return nullptr;
  }
  CudaDevice::countEpilogue();
  return epilogue;
}

void registerLinalg(KernelRegistry &registry) {
  addKernel(
      registry, "gemm", Launches::SameEveryStep, [](const KernelArgs &args) {
        TensorView a = args.inputs[0], b = args.inputs[1], y = args.outputs[0];
        TensorView c = args.inputs.size() > 2 ? args.inputs[2] : TensorView();
        GemmGeometry g(args);
        bool transA = g.transA, transB = g.transB, relu = g.relu;
        float alpha = g.alpha, beta = g.beta;
        int64_t m = g.m, n = g.n, k = g.k;
        IndexMap map =
            c.present() ? broadcastMap(args, c.shape, y.shape) : IndexMap();
        CudaDevice &device = deviceOf(args);
        cublasHandle_t blas = device.blas();
        NarrowProduct narrow;
        narrow.format = narrowOperandsOf(args);
        narrow.transA = transA;
        narrow.transB = transB;
        narrow.m = m;
        narrow.n = n;
        narrow.k = k;
        narrow.aSource = narrowSourceOf(a, 1, {}, {});
        narrow.bSource = narrowSourceOf(b, 1, {}, {});
        narrow.readMatrices(args, IndexMap(), IndexMap());
        if (narrow.format != NarrowFormat::None)
          device.reserveShared(narrow.bytes());
        NarrowFormat rounding = roundingOf(args);
        // A result stored in 2 bytes (cdp-narrow-results, only under
        // narrow_operands): C is written into it in that format first (C, a
        // rounded bias, is exact in it), and cuBLAS rounds the sums as it
        // writes; or C is a bias cuBLASLt adds in that format as it writes.
        bool narrowResult = storedInTwoBytes(y);
        if (narrowResult && k == 0)
          args.fail("an empty product (k = 0) stored in 2 bytes");
        std::shared_ptr<Scratch> narrowBias;
        std::shared_ptr<BiasEpilogue> epilogue =
            biasEpilogueOf(args, g, narrow, narrowResult, narrowBias);
        IndexMap row;
        IndexMap::build({n}, {1}, 0, row);
        return [=, &device](const StepContext &context) {
          if (m == 0 || n == 0)
            return;
          cudaStream_t stream = streamOf(context);
          if (epilogue) {
            if (narrowBias) { // the bias in the result's 2-byte format
              narrowMatrices<<<blocksFor(n), kThreads, 0, stream>>>(
                  c.f32(), narrowBias->as<uint16_t>(), n, row,
                  y.dtype == plan::BF16);
              launched("gemm bias");
            }
            std::pair<const void *, const void *> in{a.data, b.data};
            if (narrow.format != NarrowFormat::None)
              in = narrow.operands(device, stream, a.data, b.data);
            epilogue->run(stream, alpha, in.first, in.second, y.data);
            if (!narrowResult)
              roundResult(stream, rounding, y.f32(), m * n);
            return;
          }
          float effectiveBeta = c.present() ? beta : 0.0f;
          if (c.present() && narrowResult) { // C as m * n one-value matrices
            narrowMatrices<<<blocksFor(m * n), kThreads, 0, stream>>>(
                c.f32(), static_cast<uint16_t *>(y.data), m * n, map,
                y.dtype == plan::BF16);
            launched("gemm C");
          } else if (c.present())
            gatherCopy(stream, c.data, y.data, m * n, 4, map);
          if (k == 0) { // an empty product: C = beta C
            scaleKernel<<<blocksFor(m * n), kThreads, 0, stream>>>(
                y.f32(), m * n, effectiveBeta);
            launched("gemm scale");
          } else if (narrow.format != NarrowFormat::None)
            narrow.run(device, stream, a.data, b.data, alpha, effectiveBeta,
                       y.data, narrowResult);
          else
            sgemm(blas, transA, transB, m, n, k, alpha, a.f32(), b.f32(),
                  effectiveBeta, y.f32());
          if (!narrowResult)
            roundResult(stream, rounding, y.f32(), m * n);
          if (relu) { // float32 products only (checked at load)
            reluKernel<<<blocksFor(m * n), kThreads, 0, stream>>>(y.f32(),
                                                                  m * n);
            launched("gemm relu");
          }
        };
      });

  addKernel(
      registry, "matmul", Launches::SameEveryStep, [](const KernelArgs &args) {
        MatMulGeometry g(args, args.inputs[0].shape, args.inputs[1].shape);
        IndexMap ia = broadcastMap(args, g.aBatch, g.batch),
                 ib = broadcastMap(args, g.bBatch, g.batch);
        if (narrowOperandsOf(args) != NarrowFormat::None)
          return narrowMatMul(args, g, ia, ib);
        return floatMatMul(args, g, ia, ib);
      });
}

} // namespace cdp::runtime::cuda
