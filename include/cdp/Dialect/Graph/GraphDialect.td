//===- GraphDialect.td - the cdp graph dialect -------------*- tablegen -*-===//
//
// The graph level of cdp: typed ops on statically shaped tensors with ONNX
// semantics. One op maps to one runtime kernel.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_DIALECT_GRAPH_GRAPHDIALECT_TD
#define CDP_DIALECT_GRAPH_GRAPHDIALECT_TD

include "mlir/IR/OpBase.td"

def CDP_Dialect : Dialect {
  let name = "cdp";
  let summary = "Training graphs on statically shaped tensors, ONNX semantics";
  let description = [{
    The `cdp` dialect holds the graph an ONNX model describes, with every
    tensor statically shaped. Forward ops follow the ONNX operator of the same
    name; the importer resolves everything that depends on input values
    (shape computations, `auto_pad`, `-1` in Reshape, negative axes) so that
    ops carry only static attributes. Each op infers its result types from its
    operands and attributes; the verifier checks that the printed types agree.

    Element types: `f32` for values, `i64` for labels, indices and shapes,
    `i1` for masks.
  }];
  let cppNamespace = "::cdp";
  let hasConstantMaterializer = 1;
  // Inherent attributes stay in the attribute dictionary, so that generic
  // builders (the importer's) and the parser treat them alike.
  let usePropertiesForAttributes = 0;
}

#endif // CDP_DIALECT_GRAPH_GRAPHDIALECT_TD
