//===- OpTable.h - the graph ops as the runtime knows them ------*- C++ -*-===//
//
// Generated from the graph dialect's ODS (cdp-tblgen -gen-op-table): each
// op's arity, its attributes' kinds, and a struct per op with attributes
// whose fields carry the ODS defaults. A kernel reads
// `GemmAttributes::read(args)`; the CPU and the CUDA kernel of an op read
// the same struct, and the signatures check the arity from the same table.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_OPTABLE_H
#define CDP_RUNTIME_OPTABLE_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cdp::ops {

/// How the plan holds an attribute.
enum class AttrKind { Bool, Int, Real, Text, Ints, Reals, Type, Unit, Tensor };

struct AttributeInfo {
  const char *name;
  AttrKind kind;
  bool required; ///< neither optional nor defaulted in the ODS
};

/// An op's inputs and results: least and most (-1: variadic, no bound).
struct OpInfo {
  const char *name;
  int minInputs, maxInputs, minResults, maxResults;
  std::vector<AttributeInfo> attributes;
};

/// The graph op of that plan name, or nullptr (the runtime's own ops:
/// sends, reductions, accumulations).
const OpInfo *opInfo(std::string_view name);

/// Every graph op, ordered by the name of its ODS definition.
const std::vector<OpInfo> &allOps();

#define CDP_OP_STRUCTS
#include "cdp/Ops/OpTable.inc"

} // namespace cdp::ops

#endif // CDP_RUNTIME_OPTABLE_H
