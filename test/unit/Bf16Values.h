//===- Bf16Values.h - operands for the bf16 kernels' tests ------*- C++ -*-===//
//
// Random operands exact in bf16 (the values a narrow_operands mark
// promises), float32 views of them and the mark itself, shared by the
// products', the attention's and the convolutions' tests.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_TEST_UNIT_BF16VALUES_H
#define CDP_TEST_UNIT_BF16VALUES_H

#include "../../runtime/kernels/NarrowFloat.h"
#include "cdp/Runtime/Kernel.h"

#include <random>
#include <string>
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

/// Marks `instruction` narrow_operands = `format`, as the compiler marks
/// a product or convolution whose operands are exact in it.
inline void markNarrowOperands(plan::Instruction &instruction,
                               const std::string &format = "bf16") {
  plan::Attribute *mark = instruction.add_attributes();
  mark->set_name("narrow_operands");
  mark->set_s(format);
}

} // namespace cdp::test

#endif // CDP_TEST_UNIT_BF16VALUES_H
