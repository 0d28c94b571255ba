//===- CompileMain.h - cdp-compile as a library ----------------*- C++ -*-===//
//
// cdp-compile's whole work, as mlir-opt's is MlirOptMain: the flags parsed
// and checked, the model imported and compiled for its strategy, and the
// plan, report or IR written. The tool's main only calls it.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_DRIVER_COMPILEMAIN_H
#define CDP_DRIVER_COMPILEMAIN_H

namespace cdp::driver {

/// Runs cdp-compile on its command line; returns the exit status. A bad
/// flag, model or combination ends the process with status 1 and one line
/// on stderr (`cdp-compile: error: ...`).
int compileMain(int argc, char **argv);

} // namespace cdp::driver

#endif // CDP_DRIVER_COMPILEMAIN_H
