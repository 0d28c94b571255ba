//===- OpTableTest.cpp - the op table generated from the ODS --------------===//
//
// The table cdp-tblgen writes from GraphOps.td: arities with optional and
// variadic operands, attribute kinds and which are required, the typed
// structs' ODS defaults and their reading from a plan instruction, and the
// signatures refusing what the table declares missing.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/OpTable.h"
#include "cdp/Runtime/Kernel.h"
#include "cdp/Runtime/Signatures.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace cdp::runtime {
namespace {

const ops::AttributeInfo *attributeOf(const ops::OpInfo &op,
                                      const std::string &name) {
  for (const ops::AttributeInfo &attribute : op.attributes)
    if (name == attribute.name)
      return &attribute;
  return nullptr;
}

TEST(OpTable, AritiesCountOptionalAndVariadicOperands) {
  const ops::OpInfo *gemm = ops::opInfo("gemm");
  ASSERT_TRUE(gemm);
  EXPECT_EQ(gemm->minInputs, 2); // a, b
  EXPECT_EQ(gemm->maxInputs, 3); // and the optional c
  EXPECT_EQ(gemm->minResults, 1);
  EXPECT_EQ(gemm->maxResults, 1);
  const ops::OpInfo *concat = ops::opInfo("concat");
  ASSERT_TRUE(concat);
  EXPECT_EQ(concat->maxInputs, -1); // variadic
  const ops::OpInfo *batchNorm = ops::opInfo("batch_norm");
  ASSERT_TRUE(batchNorm);
  EXPECT_EQ(batchNorm->minResults, 3); // y and the running statistics
  EXPECT_FALSE(ops::opInfo("send"));   // the runtime's own op
  EXPECT_GE(ops::allOps().size(), 80u);
}

TEST(OpTable, AttributesHaveKindsAndRequiredness) {
  const ops::OpInfo &gemm = *ops::opInfo("gemm");
  const ops::AttributeInfo *trans = attributeOf(gemm, "trans_a");
  ASSERT_TRUE(trans);
  EXPECT_EQ(trans->kind, ops::AttrKind::Bool);
  EXPECT_FALSE(trans->required); // defaulted
  const ops::AttributeInfo *low = attributeOf(*ops::opInfo("clip"), "min");
  ASSERT_TRUE(low);
  EXPECT_EQ(low->kind, ops::AttrKind::Real);
  EXPECT_TRUE(low->required);
  const ops::AttributeInfo *pads = attributeOf(*ops::opInfo("conv"), "pads");
  ASSERT_TRUE(pads);
  EXPECT_EQ(pads->kind, ops::AttrKind::Ints);
}

/// An instruction of `op` with the given attributes, as a kernel sees it.
struct Instruction {
  plan::Instruction instruction;
  KernelArgs args;
  explicit Instruction(const std::string &op) {
    instruction.set_op(op);
    args.instruction = &instruction;
  }
  plan::Attribute &add(const std::string &name) {
    plan::Attribute *attribute = instruction.add_attributes();
    attribute->set_name(name);
    return *attribute;
  }
};

TEST(OpTable, StructsReadWithTheOdsDefaults) {
  Instruction gemm("gemm");
  ops::GemmAttributes absent = ops::GemmAttributes::read(gemm.args);
  EXPECT_EQ(absent.alpha, 1.0);
  EXPECT_EQ(absent.beta, 1.0);
  EXPECT_FALSE(absent.trans_a);
  gemm.add("trans_b").set_i(1);
  gemm.add("alpha").set_f(0.5);
  ops::GemmAttributes given = ops::GemmAttributes::read(gemm.args);
  EXPECT_TRUE(given.trans_b);
  EXPECT_EQ(given.alpha, 0.5);
  ops::BatchNormAttributes norm =
      ops::BatchNormAttributes::read(Instruction("batch_norm").args);
  EXPECT_EQ(norm.epsilon, 1e-5); // ODS "1e-5f", read as the kernels did
  EXPECT_EQ(norm.momentum, 0.9);
  EXPECT_EQ(ops::GeluAttributes::read(Instruction("gelu").args).approximate,
            "none");
  Instruction dropout("dropout");
  EXPECT_FALSE(ops::DropoutAttributes::read(dropout.args).seed); // optional
  dropout.add("seed").set_i(7);
  EXPECT_EQ(ops::DropoutAttributes::read(dropout.args).seed, 7);
}

TEST(OpTable, SignaturesRefuseAMissingRequiredAttribute) {
  float storage[4] = {};
  Instruction clip("clip");
  clip.args.inputs.push_back(TensorView{storage, {4}, plan::F32});
  clip.args.outputs.push_back(TensorView{storage, {4}, plan::F32});
  clip.add("min").set_f(0);
  EXPECT_THROW(checkSignature(clip.args), RuntimeError); // no 'max'
  clip.add("max").set_f(6);
  EXPECT_NO_THROW(checkSignature(clip.args));
  clip.args.inputs.push_back(clip.args.inputs[0]); // one input too many
  EXPECT_THROW(checkSignature(clip.args), RuntimeError);
}

} // namespace
} // namespace cdp::runtime
