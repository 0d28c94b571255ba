//===- SignatureCheck.h - the checks signatures are made of ---*- C++ -*-===//
//
// What the signature rules of Signatures.cpp and SelectionSignatures.cpp
// share: Check (arity, types, shapes and attributes of one instruction,
// each failure naming it) and the rule table's types.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_SIGNATURECHECK_H
#define CDP_RUNTIME_KERNELS_SIGNATURECHECK_H

#include "cdp/Plan/Checked.h"
#include "cdp/Plan/PlanCheck.h"
#include "cdp/Runtime/Kernel.h"
#include "cdp/Runtime/OpTable.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace cdp::runtime::signatures {

constexpr int kMany = 1 << 20;
using plan::kMostTagField;

inline std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

inline const char *dtypeName(plan::DType type) {
  switch (type) {
  case plan::F32:
    return "f32";
  case plan::I64:
    return "i64";
  case plan::I32:
    return "i32";
  case plan::BOOL:
    return "bool";
  case plan::BF16:
    return "bf16";
  case plan::F16:
    return "f16";
  default:
    return "an unknown type";
  }
}

/// The checks a rule is written with; each failure names the instruction.
class Check {
public:
  explicit Check(const KernelArgs &args) : args(args) {}

  void arity(int leastIn, int mostIn, int leastOut, int mostOut) const {
    int in = static_cast<int>(args.inputs.size()),
        out = static_cast<int>(args.outputs.size());
    if (in < leastIn || in > mostIn || out < leastOut || out > mostOut)
      fail("has " + std::to_string(in) + " inputs and " + std::to_string(out) +
           " outputs; the op takes " + range(leastIn, mostIn) + " and " +
           range(leastOut, mostOut));
    for (int k = 0; k < out; ++k)
      if (!args.outputs[k].present())
        fail("output " + std::to_string(k) + " is absent");
  }
  /// What the op's ODS declares (the generated op table), for a graph op
  /// whose plan form is the IR's: its arity, and its required attributes
  /// present (a kernel would read a stand-in in their place).
  void declared() const {
    const ops::OpInfo *info = ops::opInfo(args.instruction->op());
    if (!info)
      fail("is not a graph op (internal: its rule names no arity)");
    auto bound = [](int most) { return most < 0 ? kMany : most; };
    arity(info->minInputs, bound(info->maxInputs), info->minResults,
          bound(info->maxResults));
    for (const ops::AttributeInfo &attribute : info->attributes)
      if (attribute.required && !args.find(attribute.name))
        fail(std::string("lacks its attribute '") + attribute.name + "'");
  }
  /// Input k, which must be present.
  const TensorView &in(size_t k) const {
    if (k >= args.inputs.size() || !args.inputs[k].present())
      fail("input " + std::to_string(k) + " is absent");
    return args.inputs[k];
  }
  /// Input k when the instruction has it; null when absent.
  const TensorView *optional(size_t k) const {
    return k < args.inputs.size() && args.inputs[k].present() ? &args.inputs[k]
                                                              : nullptr;
  }
  const TensorView &out(size_t k) const { return args.outputs.at(k); }

  void type(const TensorView &v, plan::DType want) const {
    if (v.dtype != want)
      fail(std::string("a tensor is ") + dtypeName(v.dtype) +
           ", the op needs " + dtypeName(want));
  }
  /// Every present input and output is f32.
  void allF32() const {
    for (const auto *list : {&args.inputs, &args.outputs})
      for (const TensorView &v : *list)
        if (v.present())
          type(v, plan::F32);
  }
  void sameType(const TensorView &a, const TensorView &b) const {
    if (a.dtype != b.dtype)
      fail(std::string("tensors of types ") + dtypeName(a.dtype) + " and " +
           dtypeName(b.dtype) + " where the op needs one type");
  }
  void same(const TensorView &a, const TensorView &b) const {
    if (a.shape != b.shape)
      fail("shapes " + shapeText(a.shape) + " and " + shapeText(b.shape) +
           " differ where the op needs one shape");
  }
  void count(const TensorView &v, int64_t want) const {
    if (v.numel() != want)
      fail("a tensor of shape " + shapeText(v.shape) + " where the op needs " +
           std::to_string(want) + " elements");
  }
  void rank(const TensorView &v, int64_t least, int64_t most) const {
    if (v.rank() < least || v.rank() > most)
      fail("a tensor of rank " + std::to_string(v.rank()) +
           " where the op needs " + range(least, most));
  }
  /// `from` broadcasts (numpy rules) to `to`.
  void broadcasts(const TensorView &from, const TensorView &to) const {
    bool fits = from.rank() <= to.rank();
    for (int64_t d = 1; fits && d <= from.rank(); ++d) {
      int64_t f = from.shape[from.rank() - d], t = to.shape[to.rank() - d];
      fits = f == t || f == 1;
    }
    if (!fits)
      fail("shape " + shapeText(from.shape) + " does not broadcast to " +
           shapeText(to.shape));
  }
  bool has(const std::string &name) const { return args.find(name); }
  void require(bool condition, const std::string &message) const {
    if (!condition)
      fail(message);
  }
  /// Integer attribute `name` (or `fallback`) within [least, most].
  int64_t attribute(const std::string &name, int64_t fallback, int64_t least,
                    int64_t most) const {
    int64_t value = args.i(name, fallback);
    if (value < least || value > most)
      fail("attribute '" + name + "' is " + std::to_string(value) +
           ", outside " + range(least, most));
    return value;
  }
  /// Text attribute `name` (or `fallback`).
  std::string text(const std::string &name, const std::string &fallback) const {
    return args.s(name, fallback);
  }
  /// An axis attribute of a tensor of rank `r`, normalized.
  int64_t axis(const std::string &name, int64_t fallback, int64_t r) const {
    int64_t a = attribute(name, fallback, -std::max<int64_t>(r, 1),
                          std::max<int64_t>(r, 1) - 1);
    return a < 0 ? a + r : a;
  }
  /// A list attribute of exactly `size` entries, each within [least, most].
  std::vector<int64_t> ints(const std::string &name, size_t size, int64_t least,
                            int64_t most) const {
    std::vector<int64_t> values = args.ints(name);
    if (values.size() != size)
      fail("attribute '" + name + "' has " + std::to_string(values.size()) +
           " entries, the op needs " + std::to_string(size));
    for (int64_t v : values)
      if (v < least || v > most)
        fail("attribute '" + name + "' holds " + std::to_string(v) +
             ", outside " + range(least, most));
    return values;
  }
  [[noreturn]] void fail(const std::string &message) const {
    args.fail(message);
  }

private:
  static std::string range(int64_t least, int64_t most) {
    if (least == most)
      return std::to_string(least);
    return most >= kMany
               ? "at least " + std::to_string(least)
               : std::to_string(least) + " to " + std::to_string(most);
  }
  const KernelArgs &args;
};

inline int64_t product(const std::vector<int64_t> &shape, size_t begin,
                       size_t end = ~size_t(0)) {
  int64_t n = 1;
  for (size_t i = begin; i < std::min(end, shape.size()); ++i)
    n *= shape[i]; // the plan validator bounded every tensor's elements
  return n;
}

using Rule = std::function<void(const Check &)>;

using Rules = std::map<std::string,
                       std::function<void(const Check &, const KernelArgs &)>>;

/// Where, comparisons, logic, the NaN tests and the indexing ops
/// (SelectionSignatures.cpp).
void addSelectionRules(Rules &rules);

} // namespace cdp::runtime::signatures

#endif // CDP_RUNTIME_KERNELS_SIGNATURECHECK_H
