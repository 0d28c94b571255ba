//===- PlanText.cpp - a plan's instruction streams as text ----------------===//

#include "cdp/Plan/PlanText.h"
#include "cdp/Plan/PlanInstantiate.h"

namespace cdp::plan {

namespace {

const char *dtypeName(DType type) {
  switch (type) {
  case F32:
    return "f32";
  case I64:
    return "i64";
  case BOOL:
    return "bool";
  case I32:
    return "i32";
  case BF16:
    return "bf16";
  case F16:
    return "f16";
  default:
    return "?";
  }
}

template <typename Values>
void printList(std::ostream &os, const Values &values) {
  os << "[";
  bool first = true;
  for (const auto &v : values) {
    os << (first ? "" : ",") << v;
    first = false;
  }
  os << "]";
}

void printTensor(std::ostream &os, const Plan &plan, int id) {
  if (id < 0) {
    os << "_";
    return;
  }
  os << "%" << id;
  if (id < plan.tensors_size() && !plan.tensors(id).name().empty())
    os << ":" << plan.tensors(id).name();
}

void printAttribute(std::ostream &os, const Attribute &a) {
  os << a.name() << "=";
  switch (a.value_case()) {
  case Attribute::kI:
    os << a.i();
    break;
  case Attribute::kF:
    os << a.f();
    break;
  case Attribute::kS:
    os << '"' << a.s() << '"';
    break;
  case Attribute::kInts:
    printList(os, a.ints().values());
    break;
  case Attribute::kFloats:
    printList(os, a.floats().values());
    break;
  case Attribute::kType:
    os << dtypeName(a.type());
    break;
  case Attribute::kTensor:
    os << "tensor<" << dtypeName(a.tensor().dtype());
    printList(os, a.tensor().shape());
    os << ">";
    break;
  default:
    os << "none";
  }
}

void printInstruction(std::ostream &os, const Plan &plan,
                      const Instruction &instruction) {
  os << "  t=" << instruction.time_step() << " s=" << instruction.stage()
     << " mb=" << instruction.micro_batch();
  if (instruction.min_step())
    os << " min_step=" << instruction.min_step();
  if (instruction.drain())
    os << " drain";
  if (instruction.ahead())
    os << " ahead";
  if (instruction.next_step_only())
    os << " next_step_only";
  if (instruction.last_slot())
    os << " last_slot";
  os << " " << (instruction.phase().empty() ? "-" : instruction.phase()) << " "
     << instruction.op();
  for (int i = 0; i < instruction.inputs_size(); ++i) {
    os << (i ? ", " : " ");
    printTensor(os, plan, instruction.inputs(i));
  }
  os << " ->";
  for (int i = 0; i < instruction.outputs_size(); ++i) {
    os << (i ? ", " : " ");
    printTensor(os, plan, instruction.outputs(i));
  }
  if (instruction.attributes_size()) {
    os << " {";
    for (int i = 0; i < instruction.attributes_size(); ++i) {
      os << (i ? ", " : "");
      printAttribute(os, instruction.attributes(i));
    }
    os << "}";
  }
  if (!instruction.location().empty())
    os << " @" << instruction.location();
  os << "\n";
}

} // namespace

void printPlanText(const Plan &plan, std::ostream &os) {
  if (hasRuns(plan))
    return onInstantiated(
        plan, [&](const Plan &spelled) { printPlanText(spelled, os); });
  os << "plan " << plan.strategy() << " devices=" << plan.devices_size()
     << " micro_batches=" << plan.micro_batches()
     << " inference=" << (plan.inference() ? 1 : 0) << " loss=";
  printTensor(os, plan, plan.loss());
  os << "\n";
  for (const Device &device : plan.devices()) {
    os << "device " << device.index() << " arena=" << device.arena_bytes()
       << " instructions=" << device.instructions_size();
    if (!device.backend().empty() && device.backend() != "cpu")
      os << " backend=" << device.backend();
    os << "\n";
    for (const Instruction &instruction : device.instructions())
      printInstruction(os, plan, instruction);
  }
}

} // namespace cdp::plan
