//===- GraphDialect.h - the cdp graph dialect -------------------*- C++ -*-===//

#ifndef CDP_DIALECT_GRAPH_GRAPHDIALECT_H
#define CDP_DIALECT_GRAPH_GRAPHDIALECT_H

#include "mlir/IR/Dialect.h"

#include "cdp/Dialect/Graph/GraphDialect.h.inc"

#endif // CDP_DIALECT_GRAPH_GRAPHDIALECT_H
