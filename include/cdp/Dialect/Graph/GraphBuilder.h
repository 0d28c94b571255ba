//===- GraphBuilder.h - building cdp ops with inferred types ----*- C++ -*-===//
//
// The importer and the passes build ops by name and let each op's shape rule
// supply the result types, so that no caller computes shapes itself.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_DIALECT_GRAPH_GRAPHBUILDER_H
#define CDP_DIALECT_GRAPH_GRAPHBUILDER_H

#include "mlir/IR/Builders.h"

#include <string>

namespace cdp {

/// Creates op `name` at the builder's insertion point, infers its result
/// types and verifies it. On failure erases the op, sets `error` to the
/// first diagnostic and returns null.
mlir::Operation *createInferred(mlir::OpBuilder &builder, mlir::Location loc,
                                llvm::StringRef name, mlir::ValueRange operands,
                                llvm::ArrayRef<mlir::NamedAttribute> attributes,
                                unsigned numResults, std::string &error);

} // namespace cdp

#endif // CDP_DIALECT_GRAPH_GRAPHBUILDER_H
