//===- cdp-opt.cpp - opt-style driver for cdp IR --------------------------===//
//
// Parses, verifies, transforms and prints cdp IR; the driver of lit tests.
//
//===----------------------------------------------------------------------===//

#include "cdp/InitAll.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  cdp::registerAllDialects(registry);
  // Upstream passes that are useful on cdp IR (folding shape ops, cleanup).
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  cdp::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "cdp optimizer driver\n", registry));
}
