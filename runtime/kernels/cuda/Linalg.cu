//===- Linalg.cu - matrix products through cuBLAS -------------------------===//
//
// cuBLAS is column-major; a row-major C = op(A) op(B) is the column-major
// C^T = op(B)^T op(A)^T, so every call swaps the operands. Products run in
// float32 (CUBLAS_DEFAULT_MATH: no TF32) unless --allow-tf32 chose tensor
// cores.
//
//===----------------------------------------------------------------------===//

#include "../../device/Cublas.h"
#include "../MatMulGeometry.h"
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

} // namespace

void registerLinalg(KernelRegistry &registry) {
  addKernel(registry, "gemm", [](const KernelArgs &args) {
    TensorView a = args.inputs[0], b = args.inputs[1], y = args.outputs[0];
    TensorView c = args.inputs.size() > 2 ? args.inputs[2] : TensorView();
    ops::GemmAttributes attrs = ops::GemmAttributes::read(args);
    bool transA = attrs.trans_a, transB = attrs.trans_b;
    float alpha = static_cast<float>(attrs.alpha);
    float beta = static_cast<float>(attrs.beta);
    int64_t m = y.shape[0], n = y.shape[1];
    int64_t k = transA ? a.shape[0] : a.shape[1];
    IndexMap map =
        c.present() ? broadcastMap(args, c.shape, y.shape) : IndexMap();
    cublasHandle_t blas = deviceOf(args).blas();
    return [=](const StepContext &context) {
      if (m == 0 || n == 0)
        return;
      float effectiveBeta = c.present() ? beta : 0.0f;
      if (c.present())
        gatherCopy(streamOf(context), c.data, y.data, m * n, 4, map);
      if (k == 0) { // an empty product: C = beta C
        scaleKernel<<<blocksFor(m * n), kThreads, 0, streamOf(context)>>>(
            y.f32(), m * n, effectiveBeta);
        launched("gemm scale");
        return;
      }
      sgemm(blas, transA, transB, m, n, k, alpha, a.f32(), b.f32(),
            effectiveBeta, y.f32());
    };
  });

  // Batched products with numpy broadcasting of the batch dimensions: the
  // pointers of every product are known at load (memory is static), so
  // they are uploaded once and one batched call runs them all.
  addKernel(registry, "matmul", [](const KernelArgs &args) {
    TensorView a = args.inputs[0], b = args.inputs[1], y = args.outputs[0];
    MatMulGeometry g(args, a.shape, b.shape);
    int64_t m = g.m, n = g.n, k = g.k, count = g.count();
    bool transA = g.transA, transB = g.transB;
    IndexMap ia = broadcastMap(args, g.aBatch, g.batch),
             ib = broadcastMap(args, g.bBatch, g.batch);
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
    };
  });
}

} // namespace cdp::runtime::cuda
