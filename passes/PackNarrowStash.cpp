//===- PackNarrowStash.cpp - narrow values kept in 2 bytes ---------------===//
//
// Under --precision bf16 or fp16 the backends compute in float32 and round
// where autocast would compute narrow: a rounded value is exact in 2 bytes
// but stored in 4. What the backward reads lives from the forward to the
// backward (a pipeline stashes it per micro-batch), and where stages run on
// devices of their own what another stage reads is a message; so this pass
// keeps those copies packed: each such value is packed after its op and
// unpacked before the first reader of each stage and phase that needs it
// (a pipeline's next stage then receives, and stashes, 2 bytes a value).
// The unpacked values are the same bits.
//
//===----------------------------------------------------------------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Dialect/Sched/SchedOps.h"
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

/// The narrow format `op`'s results are exact in, or "" (a cdp.round_to,
/// or an op cdp-autocast marks as moving narrow values).
StringRef narrowFormatOf(Operation *op) {
  if (auto round = dyn_cast<RoundToOp>(op))
    return round.getFormat();
  if (auto mark = op->getAttrOfType<StringAttr>("cdp.narrow"))
    return mark.getValue();
  return "";
}

/// Readers of a value that read one unpacked copy: those of one stage and
/// one phase (forward or backward).
struct ReaderGroup {
  Attribute stage;
  bool backward;
  SmallVector<OpOperand *> uses;
};

class NarrowPacker {
public:
  NarrowPacker(MLIRContext *context, bool stagesExchange)
      : builder(context), stagesExchange(stagesExchange) {}

  /// Packs `value` after its op when a reader would otherwise hold or
  /// receive it in 4 bytes: its own stage's backward (a forward value the
  /// backward reads), or, where stages exchange messages, another stage.
  /// Each such group of readers reads an unpacked copy made before the
  /// first of them; the producer's own phase reads the value as it is.
  void pack(Value value, StringRef format) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type || !type.hasStaticShape() || !type.getElementType().isF32() ||
        type.getNumElements() < 2)
      return;
    Operation *producer = value.getDefiningOp();
    if (producer->hasAttr("cdp.phase") && !isBackward(producer))
      return; // the optimizer's values are read where they are made
    auto groups = readerGroups(value, producer);
    if (!groups || groups->empty())
      return;
    builder.setInsertionPointAfter(producer);
    Type element = format == "bf16" ? Type(builder.getBF16Type())
                                    : Type(builder.getF16Type());
    auto packedType = RankedTensorType::get(type.getShape(), element);
    auto packed = builder.create<PackNarrowOp>(producer->getLoc(), packedType,
                                               value, format);
    place(packed, producer->getAttr("cdp.stage"), isBackward(producer));
    for (ReaderGroup &group : *groups)
      unpackFor(group, packed, type, format);
  }

private:
  /// The groups that read an unpacked copy; none (std::nullopt) when a
  /// reader rules the packing out.
  std::optional<SmallVector<ReaderGroup>> readerGroups(Value value,
                                                       Operation *producer) {
    Attribute home = producer->getAttr("cdp.stage");
    bool backwardValue = isBackward(producer);
    SmallVector<ReaderGroup> groups;
    for (OpOperand &use : value.getUses()) {
      Operation *reader = use.getOwner();
      Attribute stage = reader->getAttr("cdp.stage");
      bool backward = isBackward(reader);
      if (stage == home) {
        // The producer's phase reads the value itself; a backward value
        // has no later phase to keep it for.
        if (backward == backwardValue)
          continue;
        if (backwardValue)
          return std::nullopt;
      } else if (!stagesExchange) {
        // Values another stage of the device reads stay as they are.
        return std::nullopt;
      }
      auto group = llvm::find_if(groups, [&](const ReaderGroup &g) {
        return g.stage == stage && g.backward == backward;
      });
      if (group == groups.end()) {
        groups.push_back({stage, backward, {}});
        group = std::prev(groups.end());
      }
      group->uses.push_back(&use);
    }
    return groups;
  }

  void unpackFor(ReaderGroup &group, Value packed, RankedTensorType type,
                 StringRef format) {
    Operation *first = group.uses.front()->getOwner();
    for (OpOperand *use : group.uses)
      if (use->getOwner()->isBeforeInBlock(first))
        first = use->getOwner();
    builder.setInsertionPoint(first);
    auto unpack =
        builder.create<UnpackNarrowOp>(first->getLoc(), type, packed, format);
    place(unpack, group.stage, group.backward);
    for (OpOperand *use : group.uses)
      use->set(unpack);
  }

  /// Gives `op` the stage and phase of the ops it serves.
  void place(Operation *op, Attribute stage, bool backward) {
    if (stage)
      op->setAttr("cdp.stage", stage);
    if (backward)
      op->setAttr("cdp.phase", builder.getStringAttr("backward"));
  }

  OpBuilder builder;
  bool stagesExchange;
};

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
    auto strategy =
        getOperation()->getAttrOfType<sched::StrategyAttr>("sched.strategy");
    NarrowPacker packer(
        &getContext(),
        strategy && inScope(StrategyScope::Pipeline, strategy.getValue()));
    for (auto [value, format] : narrow)
      packer.pack(value, format);
  }
};

} // namespace
