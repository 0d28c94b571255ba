//===- PackNarrowStash.cpp - narrow values kept in 2 bytes ---------------===//
//
// Under --precision bf16 or fp16 the CPU backend (and, for now, the CUDA
// one) computes in float32 and rounds where autocast would compute narrow:
// a rounded value is exact in 2 bytes but stored in 4. What the backward
// reads lives from the forward to the backward (a pipeline stashes it per
// micro-batch), so this pass keeps that copy packed: each such value is
// packed after its forward op and unpacked before its first backward
// reader in each stage. The unpacked values are the same bits.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Passes/ForwardLayers.h"
#include "cdp/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cdp {
#define GEN_PASS_DEF_PACKNARROWSTASH
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// The narrow format `op`'s results are exact in, or "" (a forward
/// cdp.round_to, or an op cdp-autocast marks as moving narrow values;
/// forward ops carry no phase).
StringRef narrowFormatOf(Operation *op) {
  if (op->hasAttr("cdp.phase"))
    return "";
  if (auto round = dyn_cast<RoundToOp>(op))
    return round.getFormat();
  if (auto mark = op->getAttrOfType<StringAttr>("cdp.narrow"))
    return mark.getValue();
  return "";
}

/// Packs `value` after its op and gives its backward readers an unpacked
/// copy made before the first of them (values of one stage only).
void packForBackward(OpBuilder &builder, Value value, StringRef format) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || !type.hasStaticShape() || !type.getElementType().isF32() ||
      type.getNumElements() < 2)
    return;
  // Values another stage reads stay as they are: that stage receives the
  // float32 value once, for its forward and its backward alike.
  Operation *producer = value.getDefiningOp();
  Attribute stage = producer->getAttr("cdp.stage");
  SmallVector<OpOperand *> readers;
  for (OpOperand &use : value.getUses()) {
    if (use.getOwner()->getAttr("cdp.stage") != stage)
      return;
    if (isBackward(use.getOwner()))
      readers.push_back(&use);
  }
  if (readers.empty())
    return;
  builder.setInsertionPointAfter(producer);
  auto packedType = RankedTensorType::get({(type.getNumElements() + 1) / 2},
                                          builder.getF32Type());
  auto pack = builder.create<PackNarrowOp>(producer->getLoc(), packedType,
                                           value, format);
  Operation *first = readers.front()->getOwner();
  for (OpOperand *use : readers)
    if (use->getOwner()->isBeforeInBlock(first))
      first = use->getOwner();
  builder.setInsertionPoint(first);
  auto unpack =
      builder.create<UnpackNarrowOp>(first->getLoc(), type, pack, format);
  unpack->setAttr("cdp.phase", builder.getStringAttr("backward"));
  if (stage) {
    pack->setAttr("cdp.stage", stage);
    unpack->setAttr("cdp.stage", stage);
  }
  for (OpOperand *use : readers)
    use->set(unpack);
}

struct PackNarrowStashPass
    : public cdp::impl::PackNarrowStashBase<PackNarrowStashPass> {
  void runOnOperation() override {
    // Collected first: the walk must not visit the ops it adds.
    SmallVector<std::pair<Value, StringRef>> narrow;
    getOperation().walk([&](Operation *op) {
      StringRef format = narrowFormatOf(op);
      if (!format.empty())
        for (Value result : op->getResults())
          narrow.push_back({result, format});
    });
    OpBuilder builder(&getContext());
    for (auto [value, format] : narrow)
      packForBackward(builder, value, format);
  }
};

} // namespace
