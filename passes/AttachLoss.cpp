//===- AttachLoss.cpp - add the training loss to @main --------------------===//

#include "cdp/Dialect/Graph/GraphBuilder.h"
#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cdp {
#define GEN_PASS_DEF_ATTACHLOSS
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// Every input cut into micro-batches must hold the same number of samples
/// along its batch axis: else each micro-batch pairs other rows of one with
/// other rows of another (an (S, N, E) input under the default axis 0
/// against labels of N).
LogicalResult checkBatches(func::FuncOp func) {
  StringRef firstName;
  int64_t firstBatch = -1, firstAxis = -1;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto axis = func.getArgAttrOfType<IntegerAttr>(i, "cdp.batch_axis");
    auto type = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
    if (!axis || axis.getInt() < 0 || !type || axis.getInt() >= type.getRank())
      continue;
    auto name = func.getArgAttrOfType<StringAttr>(i, "cdp.name");
    int64_t batch = type.getDimSize(axis.getInt());
    if (firstBatch < 0) {
      firstName = name ? name.getValue() : "?";
      firstBatch = batch;
      firstAxis = axis.getInt();
      continue;
    }
    if (batch != firstBatch)
      return func.emitError("graph inputs disagree on the batch: '")
             << firstName << "' has " << firstBatch << " along its batch axis "
             << firstAxis << ", '" << (name ? name.getValue() : "?") << "' "
             << batch << " along axis " << axis.getInt()
             << " (give the right axis with --batch-axis NAME=A)";
  }
  return success();
}

/// The `cdp.name` of result `index`, or "" when it has none.
StringRef resultName(func::FuncOp func, unsigned index) {
  if (auto name = func.getResultAttrOfType<StringAttr>(index, "cdp.name"))
    return name.getValue();
  return "";
}

struct AttachLossPass : public cdp::impl::AttachLossBase<AttachLossPass> {
  using AttachLossBase::AttachLossBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func) {
      getOperation().emitError("no func.func @main to attach a loss to");
      return signalPassFailure();
    }
    if (func->hasAttr("cdp.loss_index")) {
      func.emitError("@main already has a loss");
      return signalPassFailure();
    }
    if (failed(attach(func)))
      signalPassFailure();
  }

  /// Whether the scores' classes are their last axis (the loss reads them
  /// in place, `classes_last`) rather than axis 1: rank 2 reads (N, C);
  /// rank 3 or more as --class-axis says.
  FailureOr<bool> classesLast(func::FuncOp func, Value scores) {
    auto type = cast<RankedTensorType>(scores.getType());
    int64_t rank = type.getRank();
    if (rank < 2) {
      func.emitError("softmax-cross-entropy needs scores of rank >= 2 "
                     "(N, C, ...); the first output has type ")
          << type;
      return failure();
    }
    if (classAxis != "" && classAxis != "1" && classAxis != "last") {
      func.emitError("class-axis must be 1 or last, got '") << classAxis << "'";
      return failure();
    }
    // (N, C) and images' (N, C, H, W, ...) read one way; (N, S, V) is a
    // language model's as often as a 1-D segmentation's (N, C, L).
    if (rank == 2 || (rank != 3 && classAxis.empty()) || classAxis == "1")
      return false;
    if (classAxis.empty()) {
      func.emitError("the first output has shape [")
          << llvm::make_range(type.getShape().begin(), type.getShape().end())
          << "]: say where its classes are with --class-axis 1 (N, C, d1, "
             "...: images) or --class-axis last (N, ..., C: Hugging Face's "
             "language-model logits)";
      return failure();
    }
    return true;
  }

  LogicalResult attach(func::FuncOp func) {
    auto returnOp = cast<func::ReturnOp>(func.getBody().back().getTerminator());
    unsigned numResults = func.getNumResults();
    if (loss == "none") {
      for (unsigned i = 0; i < numResults; ++i) {
        if (resultName(func, i) != lossOutput)
          continue;
        auto type = dyn_cast<RankedTensorType>(func.getResultTypes()[i]);
        if (!type || !type.getElementType().isF32() ||
            type.getNumElements() != 1)
          return func.emitError("loss output '")
                 << lossOutput << "' must be a float32 scalar, got "
                 << func.getResultTypes()[i];
        func->setAttr("cdp.loss_index", OpBuilder(func).getI64IntegerAttr(i));
        return success();
      }
      return func.emitError("--loss=none needs --loss-output naming a graph "
                            "output; no output is named '")
             << lossOutput << "'";
    }
    if (loss != "softmax-cross-entropy" && loss != "mse")
      return func.emitError("unknown loss '") << loss << "'";
    if (numResults == 0)
      return func.emitError("the model has no output to attach a loss to");
    for (BlockArgument arg : func.getArguments())
      if (auto name =
              func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "cdp.name"))
        if (name.getValue() == labelsName)
          return func.emitError("the model already has an input named '")
                 << labelsName << "'; choose another --labels-name";

    Value scores = returnOp.getOperand(0);
    auto scoresType = cast<RankedTensorType>(scores.getType());
    if (!scoresType.getElementType().isF32())
      return func.emitError("the first output must be float32 to train on");
    OpBuilder builder(returnOp);
    Type labelsType;
    bool last = false;
    if (loss == "mse") {
      labelsType = scoresType;
    } else {
      FailureOr<bool> classes = classesLast(func, scores);
      if (failed(classes))
        return failure();
      last = *classes;
      int64_t classAxis = last ? scoresType.getRank() - 1 : 1;
      SmallVector<int64_t> shape{scoresType.getDimSize(0)};
      for (int64_t d = 1; d < scoresType.getRank(); ++d)
        if (d != classAxis)
          shape.push_back(scoresType.getDimSize(d));
      labelsType = RankedTensorType::get(shape, builder.getI64Type());
    }
    unsigned labelsIndex = func.getNumArguments();
    func.insertArgument(
        labelsIndex, labelsType,
        builder.getDictionaryAttr(
            {builder.getNamedAttr("cdp.name",
                                  builder.getStringAttr(labelsName)),
             builder.getNamedAttr("cdp.batch_axis",
                                  builder.getI64IntegerAttr(0))}),
        func.getLoc());
    Value labels = func.getArgument(labelsIndex);
    if (failed(checkBatches(func)))
      return failure();

    Location loc = NameLoc::get(builder.getStringAttr("loss"));
    std::string error;
    Value lossValue;
    if (loss == "mse") {
      Operation *diff = createInferred(builder, loc, SubOp::getOperationName(),
                                       {scores, labels}, {}, 1, error);
      Operation *square =
          diff ? createInferred(builder, loc, MulOp::getOperationName(),
                                {diff->getResult(0), diff->getResult(0)}, {}, 1,
                                error)
               : nullptr;
      Operation *mean =
          square
              ? createInferred(builder, loc, ReduceMeanOp::getOperationName(),
                               {square->getResult(0)},
                               {builder.getNamedAttr(
                                    "axes", builder.getDenseI64ArrayAttr({})),
                                builder.getNamedAttr(
                                    "keepdims", builder.getBoolAttr(false))},
                               1, error)
              : nullptr;
      if (!mean)
        return func.emitError("cannot build the mse loss: ") << error;
      lossValue = mean->getResult(0);
    } else {
      SmallVector<NamedAttribute> attrs{builder.getNamedAttr(
          "ignore_index", builder.getI64IntegerAttr(ignoreIndex))};
      if (last)
        attrs.push_back(
            builder.getNamedAttr("classes_last", builder.getBoolAttr(true)));
      Operation *sce = createInferred(
          builder, loc, SoftmaxCrossEntropyLossOp::getOperationName(),
          {scores, labels}, attrs, 2, error);
      if (!sce)
        return func.emitError("cannot build the loss: ") << error;
      lossValue = sce->getResult(0);
    }
    returnOp->insertOperands(returnOp.getNumOperands(), lossValue);
    func.insertResult(numResults, lossValue.getType(),
                      builder.getDictionaryAttr({builder.getNamedAttr(
                          "cdp.name", builder.getStringAttr("loss"))}));
    func->setAttr("cdp.loss_index", builder.getI64IntegerAttr(numResults));
    func->setAttr("cdp.labels_index", builder.getI64IntegerAttr(labelsIndex));
    return success();
  }
};

} // namespace
