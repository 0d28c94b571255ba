//===- Bf16Values.h - operands for the bf16 kernels' tests ------*- C++ -*-===//
//
// Random operands exact in bf16 (the values a narrow_operands mark
// promises) and float32 views of them, shared by the products' and the
// convolutions' tests.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_TEST_UNIT_BF16VALUES_H
#define CDP_TEST_UNIT_BF16VALUES_H

#include "../../runtime/kernels/NarrowFloat.h"
#include "cdp/Runtime/Kernel.h"

#include <random>
#include <vector>

namespace cdp::test {

/// n standard normal values rounded to bf16.
inline std::vector<float> bf16Normal(std::mt19937 &rng, int64_t n) {
  std::normal_distribution<float> normal;
  std::vector<float> values(n);
  for (float &v : values)
    v = roundToBfloat16(normal(rng));
  return values;
}

/// A float32 view of `data` as a tensor of `shape`.
inline runtime::TensorView viewOf(std::vector<float> &data,
                                  std::vector<int64_t> shape) {
  runtime::TensorView v;
  v.data = data.data();
  v.shape = std::move(shape);
  v.dtype = plan::F32;
  return v;
}

} // namespace cdp::test

#endif // CDP_TEST_UNIT_BF16VALUES_H
