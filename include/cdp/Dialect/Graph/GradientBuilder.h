//===- GradientBuilder.h - what a gradient rule builds with -----*- C++ -*-===//
//
// The state of one reverse-mode sweep (which values need gradients, the
// gradient of each value so far) and the helpers every op's rule uses. The
// rules themselves live with the ops (DifferentiableOp, GraphGradients.cpp);
// cdp-autodiff owns the sweep.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_DIALECT_GRAPH_GRADIENTBUILDER_H
#define CDP_DIALECT_GRAPH_GRADIENTBUILDER_H

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace cdp {

class GradientBuilder {
public:
  explicit GradientBuilder(mlir::OpBuilder &builder) : builder(builder) {}

  /// The op whose rule runs now: new ops take its location, failures name it.
  void setOrigin(mlir::Operation *op) { origin = op; }
  mlir::Operation *getOrigin() const { return origin; }

  /// Marks `value` as depending on a trained parameter.
  void markNeeded(mlir::Value value) { needsGrad.insert(value); }
  /// Whether `value` depends on a trained parameter.
  bool needs(mlir::Value value) const { return needsGrad.contains(value); }
  /// The gradient of `value` so far, or null.
  mlir::Value gradOf(mlir::Value value) const { return grads.lookup(value); }
  /// Sets the seed gradient of `value`.
  void seed(mlir::Value value, mlir::Value grad) { grads[value] = grad; }
  /// Adds `grad` to the gradient of `value` (summed over its uses, which is
  /// what makes tied weights and skip connections right); ignored when
  /// `value` needs none or `grad` is null.
  void add(mlir::Value value, mlir::Value grad);
  /// `value` rounded to `format` (itself where it is such a rounding).
  mlir::Value roundTo(mlir::Value value, mlir::StringAttr format);

  /// Builds op `name` with inferred result types; on failure reports it
  /// against the origin, returns null, and `status()` fails from then on.
  mlir::Operation *makeOp(llvm::StringRef name, mlir::ValueRange operands,
                          llvm::ArrayRef<mlir::NamedAttribute> attributes,
                          unsigned numResults);
  mlir::Value make(llvm::StringRef name, mlir::ValueRange operands,
                   llvm::ArrayRef<mlir::NamedAttribute> attributes = {},
                   unsigned result = 0, unsigned numResults = 1);
  /// Failure once any build failed.
  mlir::LogicalResult status() const { return mlir::failure(failedBuild); }
  /// Reports `why` against the origin and fails.
  mlir::LogicalResult refuse(const llvm::Twine &why);
  /// Refuses when a result of the origin other than the first carries a
  /// gradient (statistics such as BatchNorm's are not differentiated).
  mlir::LogicalResult onlyThroughFirstResult();

  mlir::Value scalar(float value);
  mlir::Value zerosLike(mlir::Value value);
  mlir::Value scale(mlir::Value value, float factor);
  /// Sums `value` back to the shape of `type` (the adjoint of broadcasting).
  mlir::Value reduceTo(mlir::Value value, mlir::Type type);
  mlir::Value reshape(mlir::Value value, llvm::ArrayRef<int64_t> shape);
  /// Adds `dx = unary_grad(dy, saved)` of activation `kind` to operand 0 of
  /// the origin; `saved` is the op's input or result, as the kind needs.
  mlir::LogicalResult unary(mlir::Value dy, mlir::Value saved,
                            llvm::StringRef kind,
                            llvm::ArrayRef<float> params = {});

  mlir::NamedAttribute attr(llvm::StringRef name, mlir::Attribute value) {
    return builder.getNamedAttr(name, value);
  }
  mlir::DenseI64ArrayAttr i64s(llvm::ArrayRef<int64_t> values) {
    return builder.getDenseI64ArrayAttr(values);
  }
  mlir::OpBuilder &getBuilder() { return builder; }
  static llvm::ArrayRef<int64_t> shapeOf(mlir::Value value);

private:
  void placeAfterBoth(mlir::Value sum, mlir::Value previous);

  mlir::OpBuilder &builder;
  mlir::Operation *origin = nullptr;
  bool failedBuild = false;
  llvm::DenseSet<mlir::Value> needsGrad;
  llvm::DenseMap<mlir::Value, mlir::Value> grads;
};

} // namespace cdp

#endif // CDP_DIALECT_GRAPH_GRADIENTBUILDER_H
