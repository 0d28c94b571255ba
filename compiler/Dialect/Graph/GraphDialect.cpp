//===- GraphDialect.cpp - the cdp graph dialect ---------------------------===//

#include "cdp/Dialect/Graph/GraphDialect.h"
#include "cdp/Dialect/Graph/GraphOps.h"

using namespace mlir;
using namespace cdp;

#include "cdp/Dialect/Graph/GraphDialect.cpp.inc"

void CDPDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "cdp/Dialect/Graph/GraphOps.cpp.inc"
      >();
}

Operation *CDPDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                           Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, type, elements);
}
