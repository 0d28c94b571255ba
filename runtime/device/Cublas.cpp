//===- Cublas.cpp - cuBLAS, loaded when a GPU device is made --------------===//

#include "Cublas.h"

#include "cdp/Runtime/Kernel.h"

#include <dlfcn.h>

#include <string>

#define CDP_SYMBOL_NAME(name) CDP_SYMBOL_NAME_OF(name)
#define CDP_SYMBOL_NAME_OF(name) #name

namespace cdp::runtime {

namespace {

[[noreturn]] void cannotLoad(const char *name, const std::string &why) {
  throw RuntimeError(std::string("cannot load ") + name + " (" + why +
                     "): the CUDA backend needs cuBLAS of the toolkit cdp "
                     "was built with; put its folder on LD_LIBRARY_PATH");
}

/// The library, loaded for the process's life (handles outlive devices).
/// RTLD_LOCAL: nothing else in the process binds to its symbols.
void *open(const char *name) {
  void *library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *error = dlerror();
    cannotLoad(name, error ? error : "not found");
  }
  return library;
}

template <typename Function>
void resolve(void *library, const char *symbol, Function &entry,
             const char *name = cublasLibraryName()) {
  entry = reinterpret_cast<Function>(dlsym(library, symbol));
  if (!entry)
    cannotLoad(name, std::string("no ") + symbol);
}

CublasApi load() {
  void *library = open(cublasLibraryName());
  CublasApi api;
  // The macros of cublas_v2.h (cublasCreate -> cublasCreate_v2, ...) give
  // the symbols' real names.
  resolve(library, CDP_SYMBOL_NAME(cublasCreate), api.create);
  resolve(library, CDP_SYMBOL_NAME(cublasDestroy), api.destroy);
  resolve(library, CDP_SYMBOL_NAME(cublasSetStream), api.setStream);
  resolve(library, CDP_SYMBOL_NAME(cublasSetMathMode), api.setMathMode);
  resolve(library, CDP_SYMBOL_NAME(cublasSetWorkspace), api.setWorkspace);
  resolve(library, CDP_SYMBOL_NAME(cublasSgemm), api.sgemm);
  resolve(library, CDP_SYMBOL_NAME(cublasSgemmBatched), api.sgemmBatched);
  resolve(library, "cublasGemmStridedBatchedEx", api.gemmStridedBatchedEx);
  return api;
}

CublasLtApi loadLt() {
  const char *name = cublasLtLibraryName();
  void *library = open(name);
  CublasLtApi api;
  resolve(library, "cublasLtCreate", api.create, name);
  resolve(library, "cublasLtDestroy", api.destroy, name);
  resolve(library, "cublasLtMatmulDescCreate", api.descCreate, name);
  resolve(library, "cublasLtMatmulDescDestroy", api.descDestroy, name);
  resolve(library, "cublasLtMatmulDescSetAttribute", api.descSet, name);
  resolve(library, "cublasLtMatrixLayoutCreate", api.layoutCreate, name);
  resolve(library, "cublasLtMatrixLayoutDestroy", api.layoutDestroy, name);
  resolve(library, "cublasLtMatmulPreferenceCreate", api.preferenceCreate,
          name);
  resolve(library, "cublasLtMatmulPreferenceDestroy", api.preferenceDestroy,
          name);
  resolve(library, "cublasLtMatmulPreferenceSetAttribute", api.preferenceSet,
          name);
  resolve(library, "cublasLtMatmulAlgoGetHeuristic", api.heuristic, name);
  resolve(library, "cublasLtMatmul", api.matmul, name);
  return api;
}

} // namespace

const char *cublasLibraryName() { return CDP_CUBLAS_LIBRARY; }
const char *cublasLtLibraryName() { return CDP_CUBLASLT_LIBRARY; }

const CublasApi &cublas() {
  // A failed load throws out of the initializer, so the next call tries
  // again (and says the same).
  static const CublasApi api = load();
  return api;
}

const CublasLtApi &cublasLt() {
  static const CublasLtApi api = loadLt();
  return api;
}

} // namespace cdp::runtime
