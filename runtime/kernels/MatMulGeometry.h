//===- MatMulGeometry.h - a MatMul's shapes for every backend ---*- C++ -*-===//
//
// ONNX MatMul's numpy semantics as the kernels need them: 1-D operands
// promoted to matrices, the trans_a / trans_b flags (an operand read with its
// last two dimensions swapped), and the batch dimensions broadcast. One
// definition for the CPU and CUDA kernels.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_MATMULGEOMETRY_H
#define CDP_RUNTIME_KERNELS_MATMULGEOMETRY_H

#include "cdp/Runtime/Kernel.h"
#include "cdp/Runtime/OpTable.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace cdp::runtime {

struct MatMulGeometry {
  /// The product's sizes: op(A) is m x k, op(B) k x n.
  int64_t m = 0, n = 0, k = 0;
  bool transA = false, transB = false;
  /// Batch dimensions of the result, and each operand's batch dimensions
  /// left-padded with ones to the same rank (a 1 broadcasts).
  std::vector<int64_t> batch, aBatch, bBatch;

  MatMulGeometry(const KernelArgs &args, const std::vector<int64_t> &aShape,
                 const std::vector<int64_t> &bShape)
      : transA(args.i("trans_a", 0)), transB(args.i("trans_b", 0)) {
    std::vector<int64_t> as = aShape, bs = bShape;
    if (as.size() == 1)
      as.insert(as.begin(), 1);
    if (bs.size() == 1)
      bs.push_back(1);
    m = transA ? as.back() : as[as.size() - 2];
    k = transA ? as[as.size() - 2] : as.back();
    n = transB ? bs[bs.size() - 2] : bs.back();
    size_t rank = std::max(as.size(), bs.size()) - 2;
    aBatch = padded(as, rank);
    bBatch = padded(bs, rank);
    for (size_t d = 0; d < rank; ++d)
      batch.push_back(std::max(aBatch[d], bBatch[d]));
  }

  int64_t count() const {
    int64_t c = 1;
    for (int64_t d : batch)
      c *= d;
    return c;
  }
  /// Whether B is one matrix for every product and A's products are
  /// consecutive row blocks: then the whole MatMul is one GEMM of
  /// count * m rows.
  bool rowsStack() const {
    return !transA && std::all_of(bBatch.begin(), bBatch.end(), [](int64_t d) {
      return d == 1;
    }) && aBatch == batch;
  }

private:
  static std::vector<int64_t> padded(const std::vector<int64_t> &shape,
                                     size_t rank) {
    std::vector<int64_t> out(rank + 2 - shape.size(), 1);
    out.insert(out.end(), shape.begin(), shape.end() - 2);
    return out;
  }
};

/// ONNX Gemm's sizes and attributes, Y (m x n) = alpha op(A) op(B) + beta C,
/// for the CPU and CUDA kernels alike.
struct GemmGeometry {
  int64_t m = 0, n = 0, k = 0;
  bool transA = false, transB = false;
  float alpha = 1.0f, beta = 1.0f;
  /// `activation = "relu"`: relu applied to each value as it is written.
  bool relu = false;

  explicit GemmGeometry(const KernelArgs &args) {
    ops::GemmAttributes attrs = ops::GemmAttributes::read(args);
    relu = attrs.activation.value_or("") == "relu";
    transA = attrs.trans_a;
    transB = attrs.trans_b;
    alpha = static_cast<float>(attrs.alpha);
    beta = static_cast<float>(attrs.beta);
    const TensorView &a = args.inputs[0], &y = args.outputs[0];
    m = y.shape[0];
    n = y.shape[1];
    k = transA ? a.shape[0] : a.shape[1];
  }
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_MATMULGEOMETRY_H
