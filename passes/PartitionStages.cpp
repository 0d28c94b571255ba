//===- PartitionStages.cpp - contiguous cost-balanced stages --------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"

namespace cdp {
#define GEN_PASS_DEF_PARTITIONSTAGES
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

int64_t elements(Value value) {
  return cast<RankedTensorType>(value.getType()).getNumElements();
}

/// Multiply-adds for the products, elements written for the rest.
double costOf(Operation *op) {
  auto shape = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getShape();
  };
  if (auto gemm = dyn_cast<GemmOp>(op)) {
    auto a = shape(gemm.getA());
    return double(elements(gemm.getOutput())) *
           (gemm.getTransA() ? a[0] : a[1]);
  }
  if (auto matmul = dyn_cast<MatMulOp>(op))
    return double(elements(matmul.getOutput())) * shape(matmul.getA()).back();
  if (auto conv = dyn_cast<ConvOp>(op)) {
    auto w = shape(conv.getWeight());
    return double(elements(conv.getOutput())) * w[1] * w[2] * w[3];
  }
  double total = 0;
  for (Value result : op->getResults())
    total += elements(result);
  return total;
}

std::string nodeName(Operation *op) {
  if (auto name = dyn_cast<NameLoc>(op->getLoc()))
    return name.getName().str();
  return "";
}

struct PartitionStagesPass
    : public cdp::impl::PartitionStagesBase<PartitionStagesPass> {
  using PartitionStagesBase::PartitionStagesBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func) {
      getOperation().emitError("no func.func @main");
      return signalPassFailure();
    }
    SmallVector<Operation *> ops;
    int64_t withParams = 0;
    for (Operation &op : func.getBody().front().without_terminator()) {
      if (isa<ParamOp, ConstantOp>(op))
        continue;
      ops.push_back(&op);
      if (llvm::any_of(op.getOperands(), [](Value v) {
            auto param = v.getDefiningOp<ParamOp>();
            return param && !param.getBuffer();
          }))
        ++withParams;
    }
    if (ops.empty()) {
      func.emitError("the model has no ops to place on stages");
      return signalPassFailure();
    }
    int64_t count = stages;
    if (!boundaries.empty()) {
      if (count && count != static_cast<int64_t>(boundaries.size()) + 1) {
        func.emitError("--stages ")
            << count << " does not match the " << boundaries.size() + 1
            << " stages that --stage-boundaries cuts";
        return signalPassFailure();
      }
      count = boundaries.size() + 1;
    }
    if (count == 0)
      count = std::max<int64_t>(1, std::min<int64_t>(4, withParams));
    if (count > static_cast<int64_t>(ops.size())) {
      func.emitError("cannot cut ")
          << ops.size() << " ops into " << count << " stages";
      return signalPassFailure();
    }

    SmallVector<int64_t> stageOf(ops.size(), 1);
    if (!boundaries.empty()) {
      llvm::StringMap<size_t> position;
      for (auto [i, op] : llvm::enumerate(ops))
        if (std::string name = nodeName(op); !name.empty())
          position[name] = i; // the last op a node made
      SmallVector<size_t> cuts;
      for (const std::string &name : boundaries) {
        auto it = position.find(name);
        if (it == position.end()) {
          func.emitError("--stage-boundaries names '")
              << name << "', which is not a node of the model";
          return signalPassFailure();
        }
        cuts.push_back(it->second);
      }
      if (!llvm::is_sorted(cuts) ||
          std::adjacent_find(cuts.begin(), cuts.end()) != cuts.end() ||
          cuts.back() + 1 >= ops.size()) {
        func.emitError("--stage-boundaries must name distinct nodes in graph "
                       "order, none of them the last");
        return signalPassFailure();
      }
      int64_t stage = 1;
      for (size_t i = 0, c = 0; i < ops.size(); ++i) {
        stageOf[i] = stage;
        if (c < cuts.size() && i == cuts[c]) {
          ++stage;
          ++c;
        }
      }
    } else {
      double total = 0;
      SmallVector<double> prefix;
      for (Operation *op : ops)
        prefix.push_back(total += costOf(op));
      int64_t stage = 1;
      for (size_t i = 0; i < ops.size(); ++i) {
        stageOf[i] = stage;
        // Cut once this stage reached its share, leaving an op for every
        // remaining stage.
        bool reached = prefix[i] >= total * stage / count;
        bool room = ops.size() - (i + 1) >= static_cast<size_t>(count - stage);
        if (stage < count && reached && room)
          ++stage;
        else if (stage < count &&
                 ops.size() - (i + 1) == static_cast<size_t>(count - stage))
          ++stage;
      }
    }
    OpBuilder builder(func.getContext());
    for (auto [op, stage] : llvm::zip(ops, stageOf))
      op->setAttr("cdp.stage", builder.getI64IntegerAttr(stage));
    func->setAttr("cdp.stages", builder.getI64IntegerAttr(count));
  }
};

} // namespace
