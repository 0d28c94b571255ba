//===- GradientInterface.td - an op's gradient rule --------*- tablegen -*-===//
//
// Each differentiable op carries its own reverse-mode rule, so that adding
// an op touches its definition and nothing in cdp-autodiff.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_DIALECT_GRAPH_GRADIENTINTERFACE_TD
#define CDP_DIALECT_GRAPH_GRADIENTINTERFACE_TD

include "mlir/IR/OpBase.td"

def CDP_DifferentiableOpInterface : OpInterface<"DifferentiableOp"> {
  let description = [{
    An op that cdp-autodiff can differentiate. `buildGradient` reads the
    gradients of the op's results from the builder (`gradOf`), and adds the
    gradient of every operand that needs one (`add`), building the ops that
    compute them at the builder's insertion point. It returns failure after
    reporting why a gradient cannot be built (an exponent's gradient, a
    result the rule does not differentiate through).
  }];
  let cppNamespace = "::cdp";
  let methods = [
    InterfaceMethod<
      "Adds the gradients of this op's operands to `gradients`.",
      "::mlir::LogicalResult", "buildGradient",
      (ins "::cdp::GradientBuilder &":$gradients)>
  ];
}

#endif // CDP_DIALECT_GRAPH_GRADIENTINTERFACE_TD
