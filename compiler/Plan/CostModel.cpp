//===- CostModel.cpp - predicted step times of a plan ---------------------===//

#include "cdp/Plan/CostModel.h"

#include "cdp/Plan/InPlaceViews.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Support/Profile.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <map>
#include <memory>

namespace cdp {

bool parseHardware(const std::string &text, Hardware &hw, std::string &error) {
  std::optional<llvm::json::Value> json = parseJson(text, error);
  if (!json)
    return false;
  const llvm::json::Object *object = json->getAsObject();
  if (!object) {
    error = "expected a JSON object";
    return false;
  }
  std::map<std::string, double *> fields = {
      {"flops_per_s", &hw.flopsPerSecond},
      {"memory_bytes", &hw.memoryBytes},
      {"memory_bandwidth_bytes_per_s", &hw.memoryBandwidth},
      {"link_bandwidth_bytes_per_s", &hw.linkBandwidth},
      {"link_latency_s", &hw.linkLatency}};
  for (const auto &[key, value] : *object) {
    auto field = fields.find(key.str());
    std::optional<double> number = value.getAsNumber();
    if (field == fields.end()) {
      error = "unknown key '" + key.str() +
              "' (known: flops_per_s, memory_bytes, "
              "memory_bandwidth_bytes_per_s, link_bandwidth_bytes_per_s, "
              "link_latency_s)";
      return false;
    }
    if (!number || *number <= 0) {
      error = "'" + key.str() + "' must be a positive number";
      return false;
    }
    *field->second = *number;
  }
  return true;
}

namespace {

double elementsOf(const plan::Tensor &tensor) {
  double n = 1;
  for (int64_t d : tensor.shape())
    n *= static_cast<double>(d);
  return n;
}

/// Floating-point operations of a compute instruction (see hardwareCost).
double flopsOf(const plan::Plan &plan, const plan::Instruction &instruction) {
  auto tensor = [&](int id) -> const plan::Tensor & {
    return plan.tensors(id);
  };
  llvm::StringRef op = instruction.op();
  double out = elementsOf(tensor(instruction.outputs(0)));
  if ((op == "gemm" || op == "matmul") && instruction.inputs_size() >= 2) {
    // The reduced dimension: A's elements over the output's rows.
    const auto &shape = tensor(instruction.outputs(0)).shape();
    double rows = 1;
    for (int d = 0; d + 1 < shape.size(); ++d)
      rows *= static_cast<double>(shape[d]);
    return 2 * out * elementsOf(tensor(instruction.inputs(0))) /
           std::max(rows, 1.0);
  }
  if ((op == "conv" || op == "conv_grad_input" || op == "conv_grad_weight") &&
      instruction.inputs_size() >= 2) {
    // Per element of the forward's output (dY for the gradients): the
    // filter's elements over its output channels.
    int filter = op == "conv_grad_weight" ? instruction.outputs(0)
                                          : instruction.inputs(1);
    double perOutput = elementsOf(tensor(filter)) /
                       std::max<double>(1, tensor(filter).shape(0));
    return 2 * perOutput *
           (op == "conv" ? out : elementsOf(tensor(instruction.inputs(0))));
  }
  return out;
}

} // namespace

InstructionCost hardwareCost(const Hardware &hw) {
  return [hw](const plan::Plan &plan, const plan::Instruction &instruction) {
    // A view over its input's bytes copies nothing.
    if (plan::isInPlaceView(
            instruction.op(), instruction.inputs(), instruction.outputs(),
            [&](int id) -> const plan::Tensor & { return plan.tensors(id); }))
      return 0.0;
    double bytes = 0;
    for (int id : instruction.inputs())
      if (id >= 0)
        bytes += plan.tensors(id).bytes();
    for (int id : instruction.outputs())
      if (id >= 0)
        bytes += plan.tensors(id).bytes();
    if (instruction.op() == "send")
      return 1e3 *
             (hw.linkLatency +
              plan.tensors(instruction.inputs(0)).bytes() / hw.linkBandwidth);
    if (instruction.op() == "replica_sum" && instruction.inputs_size() > 0) {
      // Per other replica: the gradient sent, theirs received and added.
      double gradient = plan.tensors(instruction.inputs(0)).bytes();
      // The replicas it adds over: its `peers`.
      double replicas = plan::listSize(instruction, "peers", 1);
      return 1e3 * (replicas - 1) *
             (hw.linkLatency + gradient / hw.linkBandwidth +
              3 * gradient / hw.memoryBandwidth);
    }
    if (instruction.outputs_size() == 0 || instruction.inputs_size() == 0)
      return 1e3 * bytes / hw.memoryBandwidth;
    return 1e3 * std::max(flopsOf(plan, instruction) / hw.flopsPerSecond,
                          bytes / hw.memoryBandwidth);
  };
}

InstructionCost profileCost(const std::string &path, std::string &error) {
  std::vector<ProfileEntry> entries;
  if (!readProfile(path, entries, error))
    return nullptr;
  auto measured =
      std::make_shared<std::map<std::pair<std::string, std::string>, double>>();
  for (const ProfileEntry &entry : entries)
    measured->try_emplace({entry.location, entry.op}, entry.ms);
  return [measured](const plan::Plan &, const plan::Instruction &instruction) {
    auto it = measured->find({instruction.location(), instruction.op()});
    return it == measured->end() ? -1.0 : it->second;
  };
}

plan::SimulatedTime predictStepMs(const plan::Plan &plan,
                                  const InstructionCost &cost, int64_t steps) {
  auto pipelineOnly = [](const plan::Instruction &instruction) {
    llvm::StringRef op = instruction.op();
    return op == "send" || op == "recv" || op == "load" || op == "accumulate" ||
           op == "assign" || op == "replica_sum" ||
           (op == "add" && llvm::StringRef(instruction.phase()) == "update");
  };
  plan::SimulatedTime time = plan::simulateTime(
      plan, steps, [&](int, const plan::Instruction &instruction) {
        double ms = cost(plan, instruction);
        return ms < 0 && pipelineOnly(instruction) ? 0.0 : ms;
      });
  time.end /= steps;
  return time;
}

} // namespace cdp
