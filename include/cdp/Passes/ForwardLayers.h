//===- ForwardLayers.h - a forward's weights and layers ---------*- C++ -*-===//
//
// What activation recomputation needs to know of a forward, shared by the
// pass that recomputes (cdp-recompute) and the partitioner that estimates
// the memory it leaves (cdp-partition-stages --device-memory): which values
// come from trained weights alone and which depend on one through the data,
// and where the forward's layers begin -- found from the graph, so that
// TorchScript and dynamo exports of a model get the same layers.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PASSES_FORWARDLAYERS_H
#define CDP_PASSES_FORWARDLAYERS_H

#include "mlir/IR/Block.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseSet.h"

#include <cstdint>
#include <vector>

namespace cdp {

/// Whether `op` belongs to the backward (cdp.phase = "backward").
bool isBackward(mlir::Operation *op);

/// The forward's values by where they come from: a trained weight alone (a
/// parameter, or a transpose of one) or the data through a weight.
struct WeightFlow {
  llvm::DenseSet<mlir::Value> weightOnly, weightDependent;

  /// Classifies the forward ops of `body` (backward ops left out).
  explicit WeightFlow(mlir::Block &body);
  /// Computes on the data with a trained weight: a product, a norm; not a
  /// transpose of the weight alone, nor an element-wise bias or scale
  /// (which belongs to the product before it).
  bool readsWeight(mlir::Operation *op) const;
  /// What selective recomputation redoes rather than keeps (Megatron's
  /// choice): element-wise results, softmax, and products of two
  /// activations (attention's QK^T and its scores times V); and layer
  /// norms (LayerNorm, RMSNorm: one read and one write of a row, as an
  /// element-wise op, where the unfused chain was element-wise ops).
  bool cheapToRecompute(mlir::Operation *op) const;

private:
  void classify(mlir::Operation &op);
};

/// After each of `ops` (forward ops in order), whether one
/// weight-dependent value alone is made at or before it and read by a
/// forward op after it (or outside `ops`).
std::vector<bool> narrowPoints(llvm::ArrayRef<mlir::Operation *> ops,
                               const WeightFlow &flow);

/// The layer of each of `ops`, numbered from `first`: a layer closes at the
/// last narrow point before the next op that reads a weight, once it holds
/// one (a transformer block is two: attention, then the MLP).
std::vector<int64_t> layersOf(llvm::ArrayRef<mlir::Operation *> ops,
                              const WeightFlow &flow, int64_t first);

} // namespace cdp

#endif // CDP_PASSES_FORWARDLAYERS_H
