//===- Printable.h - text from inputs, made safe to print -------*- C++ -*-===//
//
// Names in a model or plan are the user's bytes: a newline in one would
// split a one-line error in two, a terminal escape would act on the
// user's screen. Both tools print their messages through printable().
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_PRINTABLE_H
#define CDP_PLAN_PRINTABLE_H

#include <string>

namespace cdp {

/// `text` with control characters escaped: \n, \r, \t, \e (escape) and
/// \xNN for the rest of C0 and DEL. Other bytes (UTF-8 included) pass.
inline std::string printable(const std::string &text) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c >= 0x20 && c != 0x7f) {
      out.push_back(static_cast<char>(c));
      continue;
    }
    out.push_back('\\');
    switch (c) {
    case '\n':
      out.push_back('n');
      break;
    case '\r':
      out.push_back('r');
      break;
    case '\t':
      out.push_back('t');
      break;
    case 0x1b:
      out.push_back('e');
      break;
    default:
      out += {'x', digits[c >> 4], digits[c & 15]};
    }
  }
  return out;
}

} // namespace cdp

#endif // CDP_PLAN_PRINTABLE_H
