//===- OptimizerConformanceTest.cpp - update kernels against ONNX's data --===//
//
// ONNX's ai.onnx.preview.training Momentum and Adam tests, run through cdp's
// update kernel where the semantics coincide:
//  - Momentum, mode standard: at T = 0 ONNX forces beta to 1, giving
//    v' = alpha v + (g + wd x), x' = x - r v'; that is PyTorch's SGD with
//    momentum alpha past its first step with buffer v. The kernel is seeded
//    with v and a step count of 1.
//  - Adam at T = 0 applies no bias correction; PyTorch's correction factors
//    tend to 1 as the step count grows, so the kernel is seeded with the
//    moments and a step count of 10^6 (0.95^10^6 and 0.999^10^6 underflow).
// Not covered, with the reason: Adagrad (no such cdp optimizer), Nesterov
// momentum (not a cdp mode), Momentum with T > 0 and beta != 1 (dampening,
// which cdp's PyTorch-style momentum does not have).
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Data.h"
#include "cdp/Runtime/Kernel.h"

#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#ifndef CDP_SHARED_DIR
#error "CDP_SHARED_DIR must point at ../shared"
#endif

using namespace cdp;
using namespace cdp::runtime;

namespace {

std::string testDir(const std::string &name) {
  return std::string(CDP_SHARED_DIR) + "/onnx-node-tests/node/" + name;
}

onnx::NodeProto loadNode(const std::string &name) {
  std::ifstream in(testDir(name) + "/model.onnx", std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(buffer.str())) << name;
  return model.graph().node_size() ? model.graph().node(0) : onnx::NodeProto();
}

float attr(const onnx::NodeProto &node, const std::string &name,
           float fallback) {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return a.f();
  return fallback;
}

Array data(const std::string &test, const std::string &file) {
  return readArray(testDir(test) + "/test_data_set_0/" + file);
}

TensorView viewOf(Array &array) {
  TensorView view;
  view.data = array.bytes.data();
  view.shape = array.shape;
  view.dtype = array.dtype;
  return view;
}

plan::Attribute *add(plan::Instruction &instruction, const std::string &name) {
  plan::Attribute *a = instruction.add_attributes();
  a->set_name(name);
  return a;
}

/// Runs ONNX test `name` (one node over `tensors` groups of X, G, V[, H])
/// through the update kernel.
void check(const std::string &name, bool adam, int groups) {
  // A clean failure, not a crash, where the data are missing (a checkout
  // without the shared/ folder beside it).
  ASSERT_TRUE(std::ifstream(testDir(name) + "/model.onnx").good())
      << testDir(name) << ": ONNX's conformance data are missing";
  onnx::NodeProto node = loadNode(name);
  Array r = data(name, "input_0.pb");
  Array t = data(name, "input_1.pb");
  // The mapping above holds at T = 0 only.
  ASSERT_EQ(reinterpret_cast<int64_t *>(t.bytes.data())[0], 0) << name;
  float lr = reinterpret_cast<float *>(r.bytes.data())[0];
  for (int k = 0; k < groups; ++k) {
    // Inputs: R, T, X1..Xn, G1..Gn, V1..Vn[, H1..Hn]; outputs X_new1..n,
    // V_new1..n[, H_new1..n].
    Array x = data(name, "input_" + std::to_string(2 + k) + ".pb");
    Array g = data(name, "input_" + std::to_string(2 + groups + k) + ".pb");
    Array v = data(name, "input_" + std::to_string(2 + 2 * groups + k) + ".pb");
    Array h =
        adam ? data(name, "input_" + std::to_string(2 + 3 * groups + k) + ".pb")
             : Array();
    Array xWant = data(name, "output_" + std::to_string(k) + ".pb");
    Array vWant = data(name, "output_" + std::to_string(groups + k) + ".pb");
    plan::Instruction instruction;
    instruction.set_op("update");
    instruction.set_location(name);
    add(instruction, "optimizer")->set_s(adam ? "adam" : "sgd");
    add(instruction, "lr")->set_f(lr);
    add(instruction, "weight_decay")->set_f(attr(node, "norm_coefficient", 0));
    if (adam) {
      add(instruction, "beta1")->set_f(attr(node, "alpha", 0.9f));
      add(instruction, "beta2")->set_f(attr(node, "beta", 0.999f));
      add(instruction, "epsilon")->set_f(attr(node, "epsilon", 1e-8f));
    } else {
      add(instruction, "momentum")->set_f(attr(node, "alpha", 0.9f));
    }
    KernelArgs args;
    args.instruction = &instruction;
    args.inputs = {viewOf(x), viewOf(g)};
    auto kernel =
        (*KernelRegistry::instance().lookup("update", Backend::CPU))(args);
    KernelState state = kernel->state();
    ASSERT_EQ(state.tensors.size(), adam ? 2u : 1u);
    std::memcpy(state.tensors[0].second.data, v.bytes.data(), v.bytes.size());
    if (adam)
      std::memcpy(state.tensors[1].second.data, h.bytes.data(), h.bytes.size());
    *state.counter = adam ? 1000000 : 1;
    kernel->run(StepContext());
    auto expectNear = [&](const float *got, Array &want,
                          const std::string &what) {
      const float *w = reinterpret_cast<const float *>(want.bytes.data());
      for (int64_t i = 0; i < want.numel(); ++i)
        EXPECT_NEAR(got[i], w[i], 1e-6 + 1e-5 * std::fabs(w[i]))
            << name << " " << what << "[" << i << "]";
    };
    expectNear(reinterpret_cast<float *>(x.bytes.data()), xWant, "X_new");
    expectNear(state.tensors[0].second.f32(), vWant, "V_new");
    if (adam) {
      Array hWant =
          data(name, "output_" + std::to_string(2 * groups + k) + ".pb");
      expectNear(state.tensors[1].second.f32(), hWant, "H_new");
    }
  }
}

TEST(OptimizerConformance, Momentum) { check("test_momentum", false, 1); }
TEST(OptimizerConformance, MomentumMultiple) {
  check("test_momentum_multiple", false, 2);
}
TEST(OptimizerConformance, Adam) { check("test_adam", true, 1); }
TEST(OptimizerConformance, AdamMultiple) {
  check("test_adam_multiple", true, 2);
}

} // namespace
