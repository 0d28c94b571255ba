//===- SharedStorage.cpp - values that lie over one arena block -----------===//

#include "cdp/Passes/SharedStorage.h"

#include "cdp/Dialect/Graph/GraphOps.h"

using namespace mlir;

namespace cdp {

namespace {

/// Some op writes into `value` in place, after it was made.
bool writtenInPlace(Value value) {
  return llvm::any_of(value.getUsers(), [](Operation *user) {
    return isa<UnscaleGradsOp, ClipGradNormOp>(user);
  });
}

} // namespace

Value storageSharedWith(Operation &op) {
  if (!op.hasTrait<ViewOfInput>() || op.getNumResults() != 1 ||
      op.getNumOperands() != 1)
    return nullptr;
  Value input = op.getOperand(0);
  Operation *producer = input.getDefiningOp();
  if (!producer || isa<ParamOp, ConstantOp>(producer))
    return nullptr;
  if (writtenInPlace(input) || writtenInPlace(op.getResult(0)))
    return nullptr;
  return input;
}

SharedStorage::SharedStorage(func::FuncOp func) {
  for (Operation &op : func.getBody().front()) {
    Value input = storageSharedWith(op);
    if (!input)
      continue;
    Value root = ownerOf(input);
    owner[op.getResult(0)] = root;
    auto &group = members[root];
    if (group.empty())
      group.push_back(root);
    group.push_back(op.getResult(0));
  }
}

Value SharedStorage::ownerOf(Value value) const {
  auto it = owner.find(value);
  return it == owner.end() ? value : it->second;
}

SmallVector<Value, 2> SharedStorage::groupOf(Value value) const {
  auto it = members.find(ownerOf(value));
  if (it == members.end())
    return {value};
  return it->second;
}

} // namespace cdp
