//===- Cublas.cpp - cuBLAS, loaded when a GPU device is made --------------===//

#include "Cublas.h"

#include "cdp/Runtime/Kernel.h"

#include <dlfcn.h>

#include <string>

#define CDP_SYMBOL_NAME(name) CDP_SYMBOL_NAME_OF(name)
#define CDP_SYMBOL_NAME_OF(name) #name

namespace cdp::runtime {

namespace {

[[noreturn]] void cannotLoad(const std::string &why) {
  throw RuntimeError(std::string("cannot load ") + cublasLibraryName() + " (" +
                     why +
                     "): the CUDA backend needs cuBLAS of the toolkit cdp "
                     "was built with; put its folder on LD_LIBRARY_PATH");
}

template <typename Function>
void resolve(void *library, const char *symbol, Function &entry) {
  entry = reinterpret_cast<Function>(dlsym(library, symbol));
  if (!entry)
    cannotLoad(std::string("no ") + symbol);
}

CublasApi load() {
  // RTLD_LOCAL: nothing else in the process binds to its symbols; the
  // library stays loaded for the process's life (handles outlive devices).
  void *library = dlopen(cublasLibraryName(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *error = dlerror();
    cannotLoad(error ? error : "not found");
  }
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

} // namespace

const char *cublasLibraryName() { return CDP_CUBLAS_LIBRARY; }

const CublasApi &cublas() {
  // A failed load throws out of the initializer, so the next call tries
  // again (and says the same).
  static const CublasApi api = load();
  return api;
}

} // namespace cdp::runtime
