//===- Kernel.cpp - the kernel registry -----------------------------------===//

#include "cdp/Runtime/Kernel.h"

namespace cdp::runtime {

const plan::Attribute *KernelArgs::find(const std::string &name) const {
  for (const plan::Attribute &attribute : instruction->attributes())
    if (attribute.name() == name)
      return &attribute;
  return nullptr;
}

namespace {

/// What an attribute's value is, for errors.
std::string describe(plan::Attribute::ValueCase value) {
  switch (value) {
  case plan::Attribute::kI:
    return "an integer";
  case plan::Attribute::kF:
    return "a real number";
  case plan::Attribute::kS:
    return "a string";
  case plan::Attribute::kInts:
    return "a list of integers";
  case plan::Attribute::kFloats:
    return "a list of reals";
  case plan::Attribute::kType:
    return "a data type";
  case plan::Attribute::kTensor:
    return "a tensor";
  default:
    return "set";
  }
}

} // namespace

const plan::Attribute *
KernelArgs::find(const std::string &name,
                 plan::Attribute::ValueCase expected) const {
  const plan::Attribute *a = find(name);
  if (a && a->value_case() == plan::Attribute::VALUE_NOT_SET)
    return nullptr; // an empty list, as protobuf keeps it
  if (a && a->value_case() != expected)
    fail("attribute '" + name + "' is not " + describe(expected));
  return a;
}

int64_t KernelArgs::i(const std::string &name, int64_t fallback) const {
  const plan::Attribute *a = find(name, plan::Attribute::kI);
  return a ? a->i() : fallback;
}

double KernelArgs::f(const std::string &name, double fallback) const {
  const plan::Attribute *a = find(name, plan::Attribute::kF);
  return a ? a->f() : fallback;
}

std::string KernelArgs::s(const std::string &name,
                          const std::string &fallback) const {
  const plan::Attribute *a = find(name, plan::Attribute::kS);
  return a ? a->s() : fallback;
}

std::vector<int64_t> KernelArgs::ints(const std::string &name) const {
  const plan::Attribute *a = find(name, plan::Attribute::kInts);
  if (!a)
    return {};
  return {a->ints().values().begin(), a->ints().values().end()};
}

std::vector<double> KernelArgs::floats(const std::string &name) const {
  const plan::Attribute *a = find(name, plan::Attribute::kFloats);
  if (!a)
    return {};
  return {a->floats().values().begin(), a->floats().values().end()};
}

plan::DType KernelArgs::type(const std::string &name) const {
  const plan::Attribute *a = find(name, plan::Attribute::kType);
  if (!a)
    fail("missing type attribute '" + name + "'");
  return a->type();
}

const plan::Tensor *KernelArgs::tensor(const std::string &name) const {
  const plan::Attribute *a = find(name, plan::Attribute::kTensor);
  return a ? &a->tensor() : nullptr;
}

void KernelArgs::fail(const std::string &message) const {
  throw RuntimeError("instruction '" + instruction->op() + "' at '" +
                     instruction->location() + "': " + message);
}

KernelRegistry &KernelRegistry::instance() {
  static KernelRegistry *registry = [] {
    auto *r = new KernelRegistry();
    registerCpuKernels(*r);
    registerCudaKernels(*r);
    return r;
  }();
  return *registry;
}

void KernelRegistry::add(const std::string &op, Backend backend,
                         KernelFactory factory) {
  factories[{op, backend}] = std::move(factory);
}

const KernelFactory *KernelRegistry::lookup(const std::string &op,
                                            Backend backend) const {
  auto it = factories.find({op, backend});
  return it == factories.end() ? nullptr : &it->second;
}

std::vector<std::string> KernelRegistry::ops(Backend backend) const {
  std::vector<std::string> names;
  for (const auto &entry : factories)
    if (entry.first.second == backend)
      names.push_back(entry.first.first);
  return names;
}

} // namespace cdp::runtime
