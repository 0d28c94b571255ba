//===- Pooling.cpp - pooling on the CPU -----------------------------------===//

#include "CpuKernels.h"

#include "../PoolWindow.h"
#include "MaxPool2d.h"

#include <limits>
#include <optional>

namespace cdp::runtime::cpu {

void registerPooling(KernelRegistry &registry) {
  addKernel(registry, "max_pool", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0];
    PoolGeometry g(args, x.shape, y.shape);
    return [=](const StepContext &) {
#pragma omp parallel for
      for (int64_t p = 0; p < g.planes; ++p) {
        const float *in = x.f32() + p * g.inSize;
        float *out = y.f32() + p * g.outSize;
        for (int64_t o = 0; o < g.outSize; ++o) {
          float best = -std::numeric_limits<float>::infinity();
          g.window(o, [&](int64_t i) { best = std::max(best, in[i]); });
          out[o] = best;
        }
      }
    };
  });

  addKernel(registry, "max_pool_indices", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0];
    PoolGeometry g(args, x.shape, y.shape);
    bool columnMajor = args.i("storage_order", 0) == 1;
    return [=](const StepContext &) {
#pragma omp parallel for
      for (int64_t p = 0; p < g.planes; ++p) {
        const float *in = x.f32() + p * g.inSize;
        int64_t *out = y.i64() + p * g.outSize;
        for (int64_t o = 0; o < g.outSize; ++o) {
          int64_t where = std::max<int64_t>(g.argmax(in, o), 0);
          out[o] = p * g.inSize + (columnMajor ? g.columnMajor(where) : where);
        }
      }
    };
  });

  addKernel(registry, "max_pool_grad", [](const KernelArgs &args) {
    TensorView dy = args.inputs[0], x = args.inputs[1], dx = args.outputs[0];
    PoolGeometry g(args, x.shape, dy.shape);
    return [=](const StepContext &) {
      std::fill(dx.f32(), dx.f32() + dx.numel(), 0.0f);
#pragma omp parallel for
      for (int64_t p = 0; p < g.planes; ++p) {
        const float *in = x.f32() + p * g.inSize;
        float *grad = dx.f32() + p * g.inSize;
        const float *out = dy.f32() + p * g.outSize;
        for (int64_t o = 0; o < g.outSize; ++o)
          if (int64_t where = g.argmax(in, o); where >= 0)
            grad[where] += out[o];
      }
    };
  });

  addKernel(registry, "average_pool", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0];
    PoolGeometry g(args, x.shape, y.shape);
    return [=](const StepContext &) {
#pragma omp parallel for
      for (int64_t p = 0; p < g.planes; ++p) {
        const float *in = x.f32() + p * g.inSize;
        float *out = y.f32() + p * g.outSize;
        for (int64_t o = 0; o < g.outSize; ++o) {
          float sum = 0.0f;
          int64_t count = g.window(o, [&](int64_t i) { sum += in[i]; });
          out[o] = count ? sum / count : 0.0f;
        }
      }
    };
  });

  addKernel(registry, "average_pool_grad", [](const KernelArgs &args) {
    TensorView dy = args.inputs[0], dx = args.outputs[0];
    PoolGeometry g(args, dx.shape, dy.shape);
    return [=](const StepContext &) {
      std::fill(dx.f32(), dx.f32() + dx.numel(), 0.0f);
#pragma omp parallel for
      for (int64_t p = 0; p < g.planes; ++p) {
        float *grad = dx.f32() + p * g.inSize;
        const float *out = dy.f32() + p * g.outSize;
        for (int64_t o = 0; o < g.outSize; ++o) {
          int64_t count = g.window(o, [](int64_t) {});
          if (!count)
            continue;
          float share = out[o] / count;
          g.window(o, [&](int64_t i) { grad[i] += share; });
        }
      }
    };
  });

  addKernel(registry, "global_average_pool", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0];
    int64_t planes = x.shape[0] * x.shape[1];
    int64_t size = product(x.shape, 2);
    return [=](const StepContext &) {
      for (int64_t p = 0; p < planes; ++p) {
        double sum = 0;
        for (int64_t i = 0; i < size; ++i)
          sum += x.f32()[p * size + i];
        y.f32()[p] = static_cast<float>(sum / size);
      }
    };
  });
}

namespace {

/// The MaxPool2d that serves a max_pool or max_pool_grad of input shape `x`
/// and output shape `y`, or none.
std::optional<MaxPool2d> maxPool2d(const KernelArgs &args,
                                   const std::vector<int64_t> &x,
                                   const std::vector<int64_t> &y) {
  std::vector<int64_t> kernel = args.ints("kernel_shape"),
                       strides = args.ints("strides"), pads = args.ints("pads");
  if (!MaxPool2d::fits(x, y, kernel, strides, pads, args.ints("dilations")))
    return std::nullopt;
  return MaxPool2d(x, y, kernel, strides, pads);
}

} // namespace

void registerPoolingFastPaths(KernelRegistry &registry) {
  registerAhead(registry, "max_pool",
                [](const KernelArgs &args) -> std::unique_ptr<Kernel> {
                  TensorView x = args.inputs[0], y = args.outputs[0];
                  std::optional<MaxPool2d> pool =
                      maxPool2d(args, x.shape, y.shape);
                  if (!pool)
                    return nullptr;
                  return std::make_unique<FunctionKernel>(
                      [x, y, pool = *pool](const StepContext &) {
                        pool.forward(x.f32(), y.f32());
                      });
                });
  registerAhead(registry, "max_pool_grad",
                [](const KernelArgs &args) -> std::unique_ptr<Kernel> {
                  TensorView dy = args.inputs[0], x = args.inputs[1],
                             dx = args.outputs[0];
                  std::optional<MaxPool2d> pool =
                      maxPool2d(args, x.shape, dy.shape);
                  if (!pool)
                    return nullptr;
                  return std::make_unique<FunctionKernel>(
                      [dy, x, dx, pool = *pool](const StepContext &) {
                        pool.backward(x.f32(), dy.f32(), dx.f32());
                      });
                });
}

} // namespace cdp::runtime::cpu
