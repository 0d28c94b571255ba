//===- StepWorkTest.cpp - a device's multiply-adds per step
//----------------===//
//
// stepWork counts what the default thread count is sized by: a product's
// output elements times the reduced dimension, a convolution's (and its
// gradients') multiply-adds, one operation per output element elsewhere;
// a template's instructions once per run.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/StepWork.h"
#include "cdp/Plan/PlanIO.h"

#include <gtest/gtest.h>

using namespace cdp::plan;

namespace {

int addTensor(Plan &plan, std::vector<int64_t> shape) {
  Tensor *tensor = plan.add_tensors();
  tensor->set_id(plan.tensors_size() - 1);
  for (int64_t dim : shape)
    tensor->add_shape(dim);
  return tensor->id();
}

Instruction *add(google::protobuf::RepeatedPtrField<Instruction> &stream,
                 const std::string &op, std::vector<int> inputs, int output) {
  Instruction *instruction = stream.Add();
  instruction->set_op(op);
  for (int id : inputs)
    instruction->add_inputs(id);
  instruction->add_outputs(output);
  return instruction;
}

TEST(StepWorkTest, CountsMultiplyAddsOfProductsAndConvolutions) {
  Plan plan;
  int a = addTensor(plan, {3, 4}), w = addTensor(plan, {5, 3});
  int y = addTensor(plan, {4, 5});
  int x = addTensor(plan, {2, 1, 8, 8}), k = addTensor(plan, {4, 1, 3, 3});
  int c = addTensor(plan, {2, 4, 6, 6}), dk = addTensor(plan, {4, 1, 3, 3});
  Device *device = plan.add_devices();
  auto &stream = *device->mutable_instructions();
  // A is read transposed: the reduced dimension is its first (3).
  setIntAttribute(add(stream, "gemm", {a, w}, y), "trans_a", 1);
  add(stream, "conv", {x, k}, c);              // 288 outputs x 9
  add(stream, "relu", {c}, c);                 // 288
  add(stream, "conv_grad_weight", {c, x}, dk); // 36 x 2 x 6 x 6
  EXPECT_EQ(stepWork(plan, 0), 4 * 5 * 3 + 288 * 9 + 288 + 36 * 72);
}

TEST(StepWorkTest, CountsATemplateOncePerRun) {
  Plan plan;
  int a = addTensor(plan, {2, 3}), w = addTensor(plan, {3, 4});
  int y = addTensor(plan, {2, 4});
  add(*plan.add_templates()->mutable_instructions(), "matmul", {a, w}, y);
  Device *device = plan.add_devices();
  device->add_runs()->set_template_(0);
  device->add_runs()->set_template_(0);
  EXPECT_EQ(stepWork(plan, 0), 2 * (2 * 4 * 3));
}

} // namespace
