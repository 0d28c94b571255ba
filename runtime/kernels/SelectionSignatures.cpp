//===- SelectionSignatures.cpp - signatures of selection and indexing ops -===//
//
// Where, the comparisons and logic, the NaN/Inf tests and the indexing ops
// (GatherElements, GatherND, CumSum, Trilu) with their gradients.
//
//===----------------------------------------------------------------------===//

#include "SignatureCheck.h"

namespace cdp::runtime::signatures {

/// A bool result from operands that broadcast to it.
static void boolResult(const Check &c, int operands) {
  c.arity(operands, operands, 1, 1);
  c.type(c.out(0), plan::BOOL);
  for (int k = 0; k < operands; ++k)
    c.broadcasts(c.in(k), c.out(0));
}

/// Where, comparisons, logic, the NaN tests and the indexing ops.
void addSelectionRules(Rules &rules) {
  auto plain = [](Rule rule) {
    return [rule](const Check &c, const KernelArgs &) { rule(c); };
  };
  rules["where"] = plain([](const Check &c) {
    c.declared();
    c.type(c.in(0), plan::BOOL);
    c.require(c.out(0).dtype == plan::F32 || c.out(0).dtype == plan::I64,
              "the result is neither f32 nor i64");
    for (int k = 0; k < 3; ++k)
      c.broadcasts(c.in(k), c.out(0));
    c.sameType(c.in(1), c.out(0));
    c.sameType(c.in(2), c.out(0));
  });
  for (const char *op :
       {"equal", "less", "less_or_equal", "greater", "greater_or_equal"})
    rules[op] = plain([](const Check &c) {
      boolResult(c, 2);
      c.sameType(c.in(0), c.in(1));
      c.require(c.in(0).dtype != plan::I32, "i32 operands");
    });
  for (const char *op : {"and", "or", "xor", "not"})
    rules[op] = plain([op](const Check &c) {
      boolResult(c, std::string(op) == "not" ? 1 : 2);
      c.type(c.in(0), plan::BOOL);
      if (std::string(op) != "not")
        c.type(c.in(1), plan::BOOL);
    });
  rules["is_nan"] = rules["is_inf"] = plain([](const Check &c) {
    boolResult(c, 1);
    c.type(c.in(0), plan::F32);
    c.same(c.in(0), c.out(0));
  });
  rules["gather_elements"] = rules["gather_elements_grad"] =
      plain([](const Check &c) {
        c.declared();
        c.type(c.in(1), plan::I64);
        const TensorView &data =
            c.in(0).shape == c.in(1).shape ? c.out(0) : c.in(0);
        c.axis("axis", 0, data.rank());
        c.require(c.in(1).rank() == data.rank(),
                  "indices and data ranks differ");
      });
  rules["gather_nd"] = rules["gather_nd_grad"] = plain([](const Check &c) {
    c.declared();
    c.type(c.in(1), plan::I64);
    c.attribute("batch_dims", 0, 0, kMany);
  });
  rules["cum_sum"] = rules["trilu"] = plain([](const Check &c) {
    c.declared();
    c.sameType(c.in(0), c.out(0));
    c.same(c.in(0), c.out(0));
  });
}

} // namespace cdp::runtime::signatures
