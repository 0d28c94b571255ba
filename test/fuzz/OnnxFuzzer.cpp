//===- OnnxFuzzer.cpp - libFuzzer target: the ONNX importer ---------------===//
//
// The bytes as an ONNX model file, imported (shapes inferred, constants
// folded, initializers read). The importer reads a path, so each input is
// written to a file of this process's own folder first.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphDialect.h"
#include "cdp/Import/OnnxImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace {
std::string modelPath() {
  static std::string path = [] {
    char folder[] = "/tmp/cdp-onnx-fuzz-XXXXXX";
    if (!mkdtemp(folder))
      std::abort();
    return std::string(folder) + "/model.onnx";
  }();
  return path;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = modelPath();
  FILE *file = std::fopen(path.c_str(), "wb");
  if (!file)
    return 0;
  std::fwrite(data, 1, size, file);
  std::fclose(file);
  static mlir::MLIRContext context;
  context.loadDialect<cdp::CDPDialect, mlir::func::FuncDialect>();
  cdp::ImportOptions options;
  options.maxTensorBytes = int64_t(1) << 20;
  std::string error;
  cdp::importOnnxModel(context, path, options, error);
  return 0;
}
