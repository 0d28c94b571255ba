//===- FoldSoftmaxGuard.cpp - attention's NaN guard into its softmax ------===//
//
// torch's exporters write scaled_dot_product_attention's softmax as
//
//   %s = softmax(%x); %y = where(isnan(%s), 0, %s)
//
// so that a query whose keys are all masked (scores all -inf: the first rows
// of a left-padded batch under a causal mask) reads zeros, not NaN. Autodiff
// of that chain op by op gives the row NaN gradients: where's gradient zeroes
// the row's dy, but softmax_grad then multiplies it by the NaN output, and
// the step's update spreads the NaN over every weight. torch's own backward
// gives the row a zero gradient. Folding the guard into the softmax
// (zero_nan_rows: such a row comes out as zeros) keeps the forward's values
// and makes softmax_grad read zeros, so the row's gradient is zero.
//
// This is a question of what is trained, not of speed, so it runs whether or
// not the fusion passes do.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SplatConstant.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cdp {
#define GEN_PASS_DEF_FOLDSOFTMAXGUARD
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// The guard's parts around one softmax, when the softmax feeds exactly an
/// is_nan and the where that reads it, and nothing else.
struct Guard {
  IsNaNOp isNan;
  WhereOp where;
};

/// `softmax`'s guard: `where(is_nan(softmax), 0, softmax)` with a splat zero
/// (any shape that broadcasts to the softmax's) and a result typed as the
/// softmax's.
std::optional<Guard> guardOf(SoftmaxOp softmax) {
  Value output = softmax.getOutput();
  Guard guard{};
  for (Operation *user : output.getUsers()) {
    if (auto isNan = dyn_cast<IsNaNOp>(user); isNan && !guard.isNan)
      guard.isNan = isNan;
    else if (auto where = dyn_cast<WhereOp>(user); where && !guard.where)
      guard.where = where;
    else
      return std::nullopt;
  }
  if (!guard.isNan || !guard.where || !guard.isNan->hasOneUse())
    return std::nullopt;
  WhereOp where = guard.where;
  std::optional<float> zero = splatValue(where.getX());
  if (where.getCondition() != guard.isNan.getOutput() ||
      where.getY() != output || !zero || *zero != 0.0f ||
      where.getType() != output.getType())
    return std::nullopt;
  return guard;
}

struct FoldSoftmaxGuardPass
    : public cdp::impl::FoldSoftmaxGuardBase<FoldSoftmaxGuardPass> {
  void runOnOperation() override {
    SmallVector<SoftmaxOp> softmaxes;
    getOperation().walk([&](SoftmaxOp op) { softmaxes.push_back(op); });
    for (SoftmaxOp softmax : softmaxes) {
      std::optional<Guard> guard = guardOf(softmax);
      if (!guard)
        continue;
      Operation *zero = guard->where.getX().getDefiningOp();
      softmax.setZeroNanRows(true);
      guard->where.getOutput().replaceAllUsesWith(softmax.getOutput());
      guard->where->erase();
      guard->isNan->erase();
      if (zero->use_empty())
        zero->erase();
    }
  }
};

} // namespace
