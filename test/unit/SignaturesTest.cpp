//===- SignaturesTest.cpp - every kernel's op has a signature that bites --===//

#include "cdp/Runtime/Signatures.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace cdp::runtime {
namespace {

TEST(Signatures, EveryCpuKernelHasOne) {
  std::vector<std::string> signed_ = signedOps();
  for (const std::string &op : KernelRegistry::instance().ops(Backend::CPU))
    EXPECT_NE(std::find(signed_.begin(), signed_.end(), op), signed_.end())
        << "op '" << op << "' has a kernel but no signature";
}

/// A gemm instruction bound to views of the given shapes (no data needed:
/// signatures look at shapes, types and attributes only).
struct Gemm {
  plan::Instruction instruction;
  float storage[64] = {};
  KernelArgs args;
  Gemm(std::vector<int64_t> a, std::vector<int64_t> b, std::vector<int64_t> y) {
    instruction.set_op("gemm");
    args.instruction = &instruction;
    for (auto *shape : {&a, &b})
      args.inputs.push_back(TensorView{storage, *shape, plan::F32});
    args.outputs.push_back(TensorView{storage, y, plan::F32});
  }
};

TEST(Signatures, GemmShapesMustMultiply) {
  EXPECT_NO_THROW(checkSignature(Gemm({2, 3}, {3, 4}, {2, 4}).args));
  EXPECT_THROW(checkSignature(Gemm({2, 3}, {5, 4}, {2, 4}).args), RuntimeError);
  EXPECT_THROW(checkSignature(Gemm({2, 3}, {3, 4}, {2, 5}).args), RuntimeError);
  Gemm missing({2, 3}, {3, 4}, {2, 4});
  missing.args.inputs.pop_back();
  EXPECT_THROW(checkSignature(missing.args), RuntimeError);
}

TEST(Signatures, AttributesKeepTheirType) {
  Gemm gemm({3, 2}, {3, 4}, {2, 4});
  plan::Attribute *trans = gemm.instruction.add_attributes();
  trans->set_name("trans_a");
  trans->set_i(1);
  EXPECT_NO_THROW(checkSignature(gemm.args));
  trans->set_s("1"); // an edit: the string is not read as the default 0
  EXPECT_THROW(checkSignature(gemm.args), RuntimeError);
}

TEST(Signatures, ConvolutionMarkNamesAKnownFormat) {
  plan::Instruction instruction;
  instruction.set_op("conv");
  auto addInts = [&](const char *name, std::vector<int64_t> values) {
    plan::Attribute *attribute = instruction.add_attributes();
    attribute->set_name(name);
    for (int64_t v : values)
      attribute->mutable_ints()->add_values(v);
  };
  addInts("pads", {0, 0, 0, 0});
  addInts("strides", {1, 1});
  addInts("dilations", {1, 1});
  float storage[9] = {};
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = {TensorView{storage, {1, 1, 3, 3}, plan::F32},
                 TensorView{storage, {1, 1, 3, 3}, plan::F32}};
  args.outputs = {TensorView{storage, {1, 1, 1, 1}, plan::F32}};
  plan::Attribute *mark = instruction.add_attributes();
  mark->set_name("narrow_operands");
  mark->set_s("bf16");
  EXPECT_NO_THROW(checkSignature(args));
  mark->set_s("fp8"); // a backend ignoring it would convolve in float32
  try {
    checkSignature(args);
    FAIL() << "a convolution marked with an unknown format passed";
  } catch (const RuntimeError &error) {
    EXPECT_NE(std::string(error.what())
                  .find("narrow_operands must be bf16 or f16, got 'fp8'"),
              std::string::npos)
        << error.what();
  }
}

} // namespace
} // namespace cdp::runtime
