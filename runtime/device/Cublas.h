//===- Cublas.h - cuBLAS, loaded when a GPU device is made ------*- C++ -*-===//
//
// cuBLAS (with cuBLASLt, which it loads) maps about 600 MB and applies some
// 400,000 relocations at load: about 80 ms of page faults at the start of
// every process linking it, on a GPU or not. cdp-run starts hundreds of
// times in a test suite and most runs are on the CPU, so it resolves the
// few entry points it calls the first time a CUDA device is made, as cuDNN
// loads its own sub-libraries.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_DEVICE_CUBLAS_H
#define CDP_RUNTIME_DEVICE_CUBLAS_H

#include <cublasLt.h>
#include <cublas_v2.h>

namespace cdp::runtime {

/// The cuBLAS entry points the CUDA backend calls (cublas_v2.h's names map
/// to their _v2 symbols; the loader resolves those).
struct CublasApi {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) setStream = nullptr;
  decltype(&cublasSetMathMode) setMathMode = nullptr;
  decltype(&cublasSetWorkspace) setWorkspace = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
  decltype(&cublasSgemmBatched) sgemmBatched = nullptr;
  /// cublasGemmStridedBatchedEx with a cublasComputeType_t (the header
  /// also declares an overload taking a cudaDataType, so no decltype).
  cublasStatus_t (*gemmStridedBatchedEx)(
      cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
      const void *, const void *, cudaDataType, int, long long, const void *,
      cudaDataType, int, long long, const void *, void *, cudaDataType, int,
      long long, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

/// The cuBLASLt entry points: products with an epilogue (a bias added as
/// the result is written).
struct CublasLtApi {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) descCreate = nullptr;
  decltype(&cublasLtMatmulDescDestroy) descDestroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) descSet = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layoutDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) preferenceCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) preferenceDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preferenceSet = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

/// The libraries' sonames (libcublas.so.<the toolkit's major version>,
/// libcublasLt.so.<the same>).
const char *cublasLibraryName();
const char *cublasLtLibraryName();

/// cuBLAS, loaded on the first call (thread-safe); a RuntimeError naming
/// the library, the loader's reason and what to do when it cannot be loaded
/// or lacks an entry point.
const CublasApi &cublas();
/// cuBLASLt, likewise.
const CublasLtApi &cublasLt();

} // namespace cdp::runtime

#endif // CDP_RUNTIME_DEVICE_CUBLAS_H
