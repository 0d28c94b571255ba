//===- StepWork.cpp - a device's work per training step -------------------===//

#include "cdp/Plan/StepWork.h"

#include "cdp/Plan/PlanIO.h"

namespace cdp::plan {

namespace {

double elements(const Tensor &tensor) {
  double count = 1;
  for (int64_t dim : tensor.shape())
    count *= static_cast<double>(dim);
  return count;
}

/// The product of a shape's dimensions from `first` on.
double trailing(const Tensor &tensor, int first) {
  double count = 1;
  for (int i = first; i < tensor.shape_size(); ++i)
    count *= static_cast<double>(tensor.shape(i));
  return count;
}

double instructionWork(const Plan &plan, const Instruction &instruction) {
  if (instruction.outputs().empty())
    return 0;
  const Tensor &out = plan.tensors(instruction.outputs(0));
  const std::string &op = instruction.op();
  auto input = [&](int i) -> const Tensor & {
    return plan.tensors(instruction.inputs(i));
  };
  if ((op == "gemm" || op == "matmul") && instruction.inputs_size() >= 2) {
    const Tensor &a = input(0);
    int rank = a.shape_size();
    if (rank == 0)
      return elements(out);
    bool transposed = intAttribute(instruction, "trans_a", 0) != 0;
    return elements(out) *
           a.shape(transposed && rank >= 2 ? rank - 2 : rank - 1);
  }
  if (op == "conv" && instruction.inputs_size() >= 2) // out x C/g x kH x kW
    return elements(out) * trailing(input(1), 1);
  if (op == "conv_grad_input" && instruction.inputs_size() >= 2)
    return elements(input(0)) * trailing(input(1), 1); // dY x C/g x kH x kW
  if (op == "conv_grad_weight" && instruction.inputs_size() >= 1 &&
      input(0).shape_size() >= 2) // dW's elements x N x OH x OW
    return elements(out) * elements(input(0)) / input(0).shape(1);
  return elements(out);
}

} // namespace

double stepWork(const Plan &plan, int d) {
  const Device &device = plan.devices(d);
  double work = 0;
  for (const Instruction &instruction : device.instructions())
    work += instructionWork(plan, instruction);
  for (const Run &run : device.runs())
    for (const Instruction &instruction :
         plan.templates(run.template_()).instructions())
      work += instructionWork(plan, instruction);
  return work;
}

} // namespace cdp::plan
