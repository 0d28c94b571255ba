//===- GraphBuilder.cpp - building cdp ops with inferred types ------------===//

#include "cdp/Dialect/Graph/GraphBuilder.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"

using namespace mlir;

Operation *cdp::createInferred(OpBuilder &builder, Location loc, StringRef name,
                               ValueRange operands,
                               ArrayRef<NamedAttribute> attributes,
                               unsigned numResults, std::string &error) {
  MLIRContext *context = builder.getContext();
  OperationState state(loc, name);
  state.addOperands(operands);
  state.addAttributes(attributes);
  state.addTypes(SmallVector<Type>(numResults, builder.getNoneType()));
  Operation *op = builder.create(state);
  error.clear();
  ScopedDiagnosticHandler handler(context, [&](Diagnostic &d) {
    if (error.empty())
      error = d.str();
    return success();
  });
  auto inferable = dyn_cast<InferTypeOpInterface>(op);
  SmallVector<Type> types;
  if (!inferable ||
      failed(inferable.inferReturnTypes(
          context, loc, op->getOperands(), op->getAttrDictionary(),
          op->getPropertiesStorage(), op->getRegions(), types)) ||
      types.size() != numResults) {
    if (error.empty())
      error = "shapes do not fit the op";
    op->erase();
    return nullptr;
  }
  for (auto [result, type] : llvm::zip(op->getResults(), types))
    result.setType(type);
  if (failed(mlir::verify(op, /*verifyRecursively=*/false))) {
    op->erase();
    return nullptr;
  }
  return op;
}
