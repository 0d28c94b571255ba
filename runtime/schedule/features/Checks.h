//===- Checks.h - what the layout's and features' checks share --*- C++ -*-===//
//
// A refusal ends a check: it is thrown as a LayoutProblem and returned as
// one line by checkLayout and checkFeatures (Layout.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_SCHEDULE_FEATURES_CHECKS_H
#define CDP_RUNTIME_SCHEDULE_FEATURES_CHECKS_H

#include "cdp/Schedule/Layout.h"

namespace cdp::layout {

struct LayoutProblem {
  std::string message;
};

[[noreturn]] inline void refuse(const std::string &message) {
  throw LayoutProblem{message};
}

/// "--FLAG applies to WHERE": a flag given where it means nothing.
[[noreturn]] inline void refuseFlag(const std::string &flag,
                                    const std::string &where) {
  refuse("--" + flag + " applies to " + where);
}

/// A count flag's value in [least, most], else refused.
int64_t count(const std::string &flag, const std::string &text, int64_t least,
              int64_t most);

/// A real flag's value (finite), else refused.
double real(const std::string &flag, const std::string &text);

} // namespace cdp::layout

#endif // CDP_RUNTIME_SCHEDULE_FEATURES_CHECKS_H
