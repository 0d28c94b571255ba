//===- cdp-compile.cpp - ONNX model to cdp IR and plans -------------------===//
//
// Imports an ONNX model and compiles it into a training (or inference)
// plan for a parallel strategy, or prints its IR, schedule or report; the
// work is the compiler library's (cdp::driver::compileMain). Every error is
// one line, `cdp-compile: error: ...`, with exit status 1.
//
//===----------------------------------------------------------------------===//

#include "cdp/Driver/CompileMain.h"

#include "llvm/Support/InitLLVM.h"

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  return cdp::driver::compileMain(argc, argv);
}
