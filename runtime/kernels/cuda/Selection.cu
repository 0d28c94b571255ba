//===- Selection.cu - where, comparisons, logic and NaN tests on the GPU --===//
//
// The CPU kernels' formulas (Selection.cpp), one thread per element, the
// operands read through numpy broadcasting maps.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "Reduce.cuh"
#include "cdp/Runtime/OpTable.h"

namespace cdp::runtime::cuda {

namespace {

template <typename T>
__global__ void whereKernel(const uint8_t *c, const T *x, const T *z, T *y,
                            int64_t n, IndexMap ic, IndexMap ix, IndexMap iz) {
  CDP_FOR_EACH(i, n) { y[i] = c[ic(i)] ? x[ix(i)] : z[iz(i)]; }
}

enum class Compare {
  Equal,
  Less,
  LessOrEqual,
  Greater,
  GreaterOrEqual,
  And,
  Or,
  Xor
};

template <typename T> __device__ bool compare(Compare op, T a, T b) {
  switch (op) {
  case Compare::Equal:
    return a == b;
  case Compare::Less:
    return a < b;
  case Compare::LessOrEqual:
    return a <= b;
  case Compare::Greater:
    return a > b;
  case Compare::GreaterOrEqual:
    return a >= b;
  case Compare::And:
    return a != T(0) && b != T(0);
  case Compare::Or:
    return a != T(0) || b != T(0);
  default:
    return (a != T(0)) != (b != T(0));
  }
}

template <typename T>
__global__ void compareKernel(Compare op, const T *a, const T *b, uint8_t *y,
                              int64_t n, IndexMap ia, IndexMap ib) {
  CDP_FOR_EACH(i, n) { y[i] = compare(op, a[ia(i)], b[ib(i)]); }
}

enum class Test { Not, IsNaN, IsInf };

__global__ void notKernel(const uint8_t *x, uint8_t *y, int64_t n) {
  CDP_FOR_EACH(i, n) { y[i] = !x[i]; }
}

__global__ void testKernel(Test op, const float *x, uint8_t *y, int64_t n,
                           bool positive, bool negative) {
  CDP_FOR_EACH(i, n) {
    float v = x[i];
    y[i] = op == Test::IsNaN ? isnan(v)
                             : isinf(v) && (v > 0.0f ? positive : negative);
  }
}

void addCompare(KernelRegistry &registry, const std::string &name, Compare op) {
  addKernel(
      registry, name, Launches::SameEveryStep, [op](const KernelArgs &args) {
        TensorView a = args.inputs[0], b = args.inputs[1], y = args.outputs[0];
        IndexMap ia = broadcastMap(args, a.shape, y.shape),
                 ib = broadcastMap(args, b.shape, y.shape);
        int64_t n = y.numel();
        return [=](const StepContext &context) {
          if (n == 0)
            return;
          cudaStream_t stream = streamOf(context);
          if (a.dtype == plan::I64)
            compareKernel<<<blocksFor(n), kThreads, 0, stream>>>(
                op, a.i64(), b.i64(), y.b8(), n, ia, ib);
          else if (a.dtype == plan::BOOL)
            compareKernel<<<blocksFor(n), kThreads, 0, stream>>>(
                op, a.b8(), b.b8(), y.b8(), n, ia, ib);
          else
            compareKernel<<<blocksFor(n), kThreads, 0, stream>>>(
                op, a.f32(), b.f32(), y.b8(), n, ia, ib);
          launched("compare");
        };
      });
}

void addTest(KernelRegistry &registry, const std::string &name, Test op) {
  addKernel(
      registry, name, Launches::SameEveryStep, [op](const KernelArgs &args) {
        TensorView x = args.inputs[0], y = args.outputs[0];
        ops::IsInfAttributes attrs = ops::IsInfAttributes::read(args);
        bool positive = attrs.detect_positive, negative = attrs.detect_negative;
        int64_t n = y.numel();
        return [=](const StepContext &context) {
          if (n == 0)
            return;
          if (op == Test::Not)
            notKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
                x.b8(), y.b8(), n);
          else
            testKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
                op, x.f32(), y.b8(), n, positive, negative);
          launched("test");
        };
      });
}

} // namespace

void registerSelection(KernelRegistry &registry) {
  addKernel(registry, "where", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView c = args.inputs[0], x = args.inputs[1],
                         z = args.inputs[2], y = args.outputs[0];
              IndexMap ic = broadcastMap(args, c.shape, y.shape),
                       ix = broadcastMap(args, x.shape, y.shape),
                       iz = broadcastMap(args, z.shape, y.shape);
              int64_t n = y.numel();
              return [=](const StepContext &context) {
                if (n == 0)
                  return;
                if (y.dtype == plan::I64)
                  whereKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
                      c.b8(), x.i64(), z.i64(), y.i64(), n, ic, ix, iz);
                else
                  whereKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
                      c.b8(), x.f32(), z.f32(), y.f32(), n, ic, ix, iz);
                launched("where");
              };
            });
  addCompare(registry, "equal", Compare::Equal);
  addCompare(registry, "less", Compare::Less);
  addCompare(registry, "less_or_equal", Compare::LessOrEqual);
  addCompare(registry, "greater", Compare::Greater);
  addCompare(registry, "greater_or_equal", Compare::GreaterOrEqual);
  addCompare(registry, "and", Compare::And);
  addCompare(registry, "or", Compare::Or);
  addCompare(registry, "xor", Compare::Xor);
  addTest(registry, "not", Test::Not);
  addTest(registry, "is_nan", Test::IsNaN);
  addTest(registry, "is_inf", Test::IsInf);
}

} // namespace cdp::runtime::cuda
