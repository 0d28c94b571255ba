//===- Checked.h - integer arithmetic that cannot overflow ------*- C++ -*-===//
//
// Sizes read from files (a plan, a model, a feed) are attacker-chosen: a
// product of dimensions or an offset plus a size may wrap, and a wrapped
// size passes a bounds check it should fail. Every such sum and product
// goes through these helpers.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_CHECKED_H
#define CDP_PLAN_CHECKED_H

#include <cstdint>
#include <limits>
#include <optional>

namespace cdp {

/// a * b, or nothing when it overflows.
inline std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t result;
  if (__builtin_mul_overflow(a, b, &result))
    return std::nullopt;
  return result;
}

/// a + b, or nothing when it overflows.
inline std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t result;
  if (__builtin_add_overflow(a, b, &result))
    return std::nullopt;
  return result;
}

/// a * b, or INT64_MAX when it overflows: a size so computed fails every
/// comparison with a real one.
inline int64_t saturatingMul(int64_t a, int64_t b) {
  return checkedMul(a, b).value_or(std::numeric_limits<int64_t>::max());
}

inline int64_t saturatingAdd(int64_t a, int64_t b) {
  return checkedAdd(a, b).value_or(std::numeric_limits<int64_t>::max());
}

/// The number of elements of a shape: nothing when a dimension is negative
/// or the product overflows.
template <typename Dims> std::optional<int64_t> elementCount(const Dims &dims) {
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 0)
      return std::nullopt;
    std::optional<int64_t> next = checkedMul(count, d);
    if (!next)
      return std::nullopt;
    count = *next;
  }
  return count;
}

} // namespace cdp

#endif // CDP_PLAN_CHECKED_H
