//===- Selection.cpp - where, comparisons, logic and the NaN tests --------===//
//
// What exporters build attention masks and guards from at run time:
// `Where(mask, scores, -inf)`, `Where(IsNaN(p), 0, p)`, `And` of masks. The
// operands broadcast as in numpy (their read indices are computed once, at
// load); comparisons read f32 or i64 and write bool.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "cdp/Runtime/OpTable.h"

#include <cmath>

namespace cdp::runtime::cpu {

namespace {

using Body = std::function<void(const StepContext &)>;

/// Visits every element of `y` with the offsets of operands `walk` was
/// made for (three at most) without an index per element.
template <typename Visit>
inline void forEachElement(const BroadcastWalk &walk, size_t operands,
                           Visit visit) {
  int64_t length = walk.rowLength();
  for (int64_t row = 0; row < walk.rows(); ++row) {
    int64_t start[3] = {0, 0, 0};
    for (size_t k = 0; k < operands; ++k)
      start[k] = walk.rowStart(k, row);
    for (int64_t i = 0; i < length; ++i)
      visit(row * length + i, start[0] + i * walk.step(0),
            start[1] + i * walk.step(1),
            operands > 2 ? start[2] + i * walk.step(2) : 0);
  }
}

template <typename T> Body selectAs(const KernelArgs &args) {
  TensorView c = args.inputs[0], x = args.inputs[1], z = args.inputs[2],
             y = args.outputs[0];
  auto walk = std::make_shared<const BroadcastWalk>(
      std::vector<std::vector<int64_t>>{c.shape, x.shape, z.shape}, y.shape);
  return [=](const StepContext &) {
    const uint8_t *pc = c.b8();
    const T *px = static_cast<const T *>(x.data);
    const T *pz = static_cast<const T *>(z.data);
    T *py = static_cast<T *>(y.data);
    forEachElement(*walk, 3,
                   [&](int64_t i, int64_t ic, int64_t ix, int64_t iz) {
                     py[i] = pc[ic] ? px[ix] : pz[iz];
                   });
  };
}

/// A bool result from two operands of type T.
template <typename T, typename Fn>
Body compareAs(const KernelArgs &args, Fn fn) {
  TensorView a = args.inputs[0], b = args.inputs[1], y = args.outputs[0];
  auto walk = std::make_shared<const BroadcastWalk>(
      std::vector<std::vector<int64_t>>{a.shape, b.shape}, y.shape);
  return [=](const StepContext &) {
    const T *pa = static_cast<const T *>(a.data);
    const T *pb = static_cast<const T *>(b.data);
    uint8_t *py = y.b8();
    forEachElement(*walk, 2, [&](int64_t i, int64_t ia, int64_t ib, int64_t) {
      py[i] = fn(pa[ia], pb[ib]);
    });
  };
}

template <typename Fn>
void addComparison(KernelRegistry &registry, const std::string &op, Fn fn) {
  addKernel(registry, op, [fn](const KernelArgs &args) {
    if (args.inputs[0].dtype == plan::I64)
      return compareAs<int64_t>(args, fn);
    if (args.inputs[0].dtype == plan::BOOL)
      return compareAs<uint8_t>(args, fn);
    return compareAs<float>(args, fn);
  });
}

template <typename Fn>
void addTest(KernelRegistry &registry, const std::string &op, Fn make) {
  addKernel(registry, op, [make](const KernelArgs &args) -> Body {
    TensorView x = args.inputs[0], y = args.outputs[0];
    auto test = make(args);
    int64_t n = y.numel();
    return [=](const StepContext &) {
      for (int64_t i = 0; i < n; ++i)
        y.b8()[i] = test(x.f32()[i]);
    };
  });
}

} // namespace

void registerSelection(KernelRegistry &registry) {
  addKernel(registry, "where", [](const KernelArgs &args) {
    return args.outputs[0].dtype == plan::I64 ? selectAs<int64_t>(args)
                                              : selectAs<float>(args);
  });
  addComparison(registry, "equal", [](auto a, auto b) { return a == b; });
  addComparison(registry, "less", [](auto a, auto b) { return a < b; });
  addComparison(registry, "less_or_equal",
                [](auto a, auto b) { return a <= b; });
  addComparison(registry, "greater", [](auto a, auto b) { return a > b; });
  addComparison(registry, "greater_or_equal",
                [](auto a, auto b) { return a >= b; });
  addComparison(registry, "and",
                [](auto a, auto b) { return a != 0 && b != 0; });
  addComparison(registry, "or",
                [](auto a, auto b) { return a != 0 || b != 0; });
  addComparison(registry, "xor",
                [](auto a, auto b) { return (a != 0) != (b != 0); });
  addKernel(registry, "not", [](const KernelArgs &args) -> Body {
    TensorView x = args.inputs[0], y = args.outputs[0];
    int64_t n = y.numel();
    return [=](const StepContext &) {
      for (int64_t i = 0; i < n; ++i)
        y.b8()[i] = !x.b8()[i];
    };
  });
  addTest(registry, "is_nan", [](const KernelArgs &) {
    return [](float v) { return std::isnan(v); };
  });
  addTest(registry, "is_inf", [](const KernelArgs &args) {
    ops::IsInfAttributes attrs = ops::IsInfAttributes::read(args);
    bool positive = attrs.detect_positive, negative = attrs.detect_negative;
    return
        [=](float v) { return std::isinf(v) && (v > 0 ? positive : negative); };
  });
}

} // namespace cdp::runtime::cpu
