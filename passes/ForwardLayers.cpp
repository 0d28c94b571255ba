//===- ForwardLayers.cpp - a forward's weights and layers -----------------===//
//
// Not a pass: the analysis cdp-recompute and cdp-partition-stages share
// (include/cdp/Passes/ForwardLayers.h).
//
//===----------------------------------------------------------------------===//

#include "cdp/Passes/ForwardLayers.h"

#include "cdp/Dialect/Graph/GraphOps.h"

#include "llvm/ADT/DenseMap.h"

using namespace mlir;

namespace cdp {

bool isBackward(Operation *op) {
  auto phase = op->getAttrOfType<StringAttr>("cdp.phase");
  return phase && phase.getValue() == "backward";
}

WeightFlow::WeightFlow(Block &body) {
  for (Operation &op : body.without_terminator())
    classify(op);
}

void WeightFlow::classify(Operation &op) {
  if (auto param = dyn_cast<ParamOp>(op)) {
    if (!param.getBuffer())
      weightOnly.insert(param);
    return;
  }
  if (isa<ConstantOp>(op) || op.getNumOperands() == 0 || isBackward(&op))
    return;
  bool fromWeights = llvm::all_of(op.getOperands(), [&](Value v) {
    return weightOnly.contains(v) ||
           isa_and_nonnull<ConstantOp>(v.getDefiningOp());
  });
  bool dependent = llvm::any_of(op.getOperands(), [&](Value v) {
    return weightOnly.contains(v) || weightDependent.contains(v);
  });
  for (Value result : op.getResults())
    if (fromWeights)
      weightOnly.insert(result);
    else if (dependent)
      weightDependent.insert(result);
}

bool WeightFlow::readsWeight(Operation *op) const {
  return op->getNumResults() > 0 && !weightOnly.contains(op->getResult(0)) &&
         !op->hasTrait<ElementwiseInPlace>() &&
         llvm::any_of(op->getOperands(),
                      [&](Value v) { return weightOnly.contains(v); });
}

bool WeightFlow::cheapToRecompute(Operation *op) const {
  auto product = dyn_cast<MatMulOp>(op);
  return op->hasTrait<ElementwiseInPlace>() ||
         isa<SoftmaxOp, LayerNormOp, RotaryOp>(op) ||
         (product && !weightOnly.contains(product.getA()) &&
          !weightOnly.contains(product.getB()));
}

std::vector<bool> narrowPoints(ArrayRef<Operation *> ops,
                               const WeightFlow &flow) {
  size_t n = ops.size();
  llvm::DenseMap<Operation *, size_t> index;
  for (size_t i = 0; i < n; ++i)
    index[ops[i]] = i;
  std::vector<int64_t> delta(n + 1, 0);
  for (size_t i = 0; i < n; ++i)
    for (Value result : ops[i]->getResults()) {
      if (!flow.weightDependent.contains(result))
        continue;
      size_t last = i;
      for (Operation *user : result.getUsers()) {
        if (isBackward(user))
          continue;
        auto it = index.find(user);
        last = std::max(last, it == index.end() ? n : it->second);
      }
      if (last > i) {
        ++delta[i];
        --delta[last];
      }
    }
  std::vector<bool> narrow(n);
  for (int64_t open = 0, i = 0; i < static_cast<int64_t>(n); ++i)
    narrow[i] = (open += delta[i]) <= 1;
  return narrow;
}

std::vector<int64_t> layersOf(ArrayRef<Operation *> ops, const WeightFlow &flow,
                              int64_t first) {
  std::vector<bool> narrow = narrowPoints(ops, flow);
  std::vector<int64_t> layer(ops.size(), first);
  int64_t current = first;
  bool holdsWeight = false;
  int64_t lastNarrow = -1; // since the layer's last weight-reading op
  for (size_t i = 0; i < ops.size(); ++i) {
    if (flow.readsWeight(ops[i])) {
      if (holdsWeight && lastNarrow >= 0) {
        ++current;
        for (size_t j = lastNarrow + 1; j < i; ++j)
          layer[j] = current;
      }
      holdsWeight = true;
      lastNarrow = -1;
    }
    layer[i] = current;
    if (narrow[i] && holdsWeight)
      lastNarrow = i;
  }
  return layer;
}

} // namespace cdp
