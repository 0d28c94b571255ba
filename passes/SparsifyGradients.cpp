//===- SparsifyGradients.cpp - laysa's top-k count per parameter ----------===//
//
// LaySA sends, per device and step, the k entries of each parameter's
// pending update with the largest magnitude (error feedback keeps the
// rest). How many is a decision of the compiled plan, so it is made here
// and written on the IR: the emitter sizes the communication buffers from
// it and the runtime selects exactly that many.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Schedule/Strategy.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace cdp {
#define GEN_PASS_DEF_SPARSIFYGRADIENTS
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

struct SparsifyGradientsPass
    : public cdp::impl::SparsifyGradientsBase<SparsifyGradientsPass> {
  using SparsifyGradientsBase::SparsifyGradientsBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func) {
      getOperation().emitError("no func.func @main");
      return signalPassFailure();
    }
    if (!(density > 0.0 && density <= 1.0) || denseBelow < 0) {
      func.emitError("--density must lie in (0, 1] and --dense-below be a "
                     "non-negative element count, got ")
          << density.getValue() << " and " << denseBelow.getValue();
      return signalPassFailure();
    }
    bool refused = false;
    func.walk([&](ClipGradNormOp clip) {
      clip.emitOpError("laysa does not clip yet: a device never holds the "
                       "step's mean gradient (drop --clip-grad-norm)");
      refused = true;
    });
    Builder builder(func.getContext());
    func.walk([&](UpdateOp update) {
      if (update.getOptimizer() != "sgd") {
        update.emitOpError("laysa's error feedback accumulates SGD steps; "
                           "use --optimizer sgd or momentum, not ")
            << update.getOptimizer();
        refused = true;
        return;
      }
      int64_t n =
          cast<RankedTensorType>(update.getParam().getType()).getNumElements();
      update->setAttr("cdp.sparse_count", builder.getI64IntegerAttr(sparseCount(
                                              n, density, denseBelow)));
    });
    if (refused)
      return signalPassFailure();
    func->setAttr(
        "cdp.sparse",
        builder.getDictionaryAttr(
            {builder.getNamedAttr("density", builder.getF64FloatAttr(density)),
             builder.getNamedAttr("dense_below",
                                  builder.getI64IntegerAttr(denseBelow)),
             builder.getNamedAttr(
                 "form",
                 builder.getStringAttr(residual ? "residual" : "mirror"))}));
  }
};

} // namespace
