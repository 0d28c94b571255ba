//===- StorageBytes.h - the bytes a tensor value takes in a plan -*- C++
//-*-===//
//
// How plans store each element type: float32 and int32 4 bytes, bf16 and
// f16 2, a bool 1, int64 8. The memory planner and the stage partitioner's
// memory estimate count with this one rule.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_DIALECT_GRAPH_STORAGEBYTES_H
#define CDP_DIALECT_GRAPH_STORAGEBYTES_H

#include "mlir/IR/BuiltinTypes.h"

#include <algorithm>
#include <cstdint>

namespace cdp {

/// Bytes a tensor of `type` takes (a bool a byte).
inline int64_t storageBytes(mlir::RankedTensorType type) {
  int64_t width = std::max<int64_t>(type.getElementTypeBitWidth() / 8, 1);
  return type.getNumElements() * width;
}

} // namespace cdp

#endif // CDP_DIALECT_GRAPH_STORAGEBYTES_H
