//===- Pooling.cu - pooling on the GPU ------------------------------------===//
//
// The CPU's window arithmetic (1 to 3 spatial dimensions seen as 3, ceil
// mode's end padding, count_include_pad), one thread per output element;
// backward passes gather, one thread per input element over the windows
// that hold it, so that they need no atomic adds.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "Reduce.cuh"

#include "../PoolWindow.h"

namespace cdp::runtime::cuda {

namespace {

__global__ void maxPoolKernel(PoolGeometry g, const float *x, float *y,
                              int64_t *indices, bool columnMajor) {
  CDP_FOR_EACH(e, g.planes * g.outSize) {
    int64_t p = e / g.outSize, o = e % g.outSize;
    const float *plane = x + p * g.inSize;
    if (y) {
      float best = -INFINITY;
      g.window(o, [&](int64_t i) { best = fmaxf(best, plane[i]); });
      y[e] = best;
    }
    if (indices) {
      int64_t where = max(g.argmax(plane, o), int64_t(0));
      indices[e] = p * g.inSize + (columnMajor ? g.columnMajor(where) : where);
    }
  }
}

/// Calls fn(o) for every output position (within a plane) whose window
/// holds input position `i`, in a fixed order: a gradient gathered per input
/// element needs no atomic adds and gives the same bits every run.
template <typename Fn>
__device__ void windowsHolding(const PoolGeometry &g, int64_t i, Fn fn) {
  int64_t at[PoolGeometry::kDims];
  for (int d = PoolGeometry::kDims - 1; d >= 0; --d) {
    at[d] = i % g.in[d];
    i /= g.in[d];
  }
  auto outputOf = [&](int d, int64_t k, int64_t &o) {
    int64_t shifted = at[d] + g.padBegin[d] - k * g.dilation[d];
    if (shifted < 0 || shifted % g.stride[d])
      return false;
    o = shifted / g.stride[d];
    return o < g.out[d];
  };
  int64_t o0, o1, o2;
  for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
    if (!outputOf(0, kd, o0))
      continue;
    for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
      if (!outputOf(1, kh, o1))
        continue;
      for (int64_t kw = 0; kw < g.kernel[2]; ++kw)
        if (outputOf(2, kw, o2))
          fn((o0 * g.out[1] + o1) * g.out[2] + o2);
    }
  }
}

__global__ void maxPoolGradKernel(PoolGeometry g, const float *dy,
                                  const float *x, float *dx) {
  CDP_FOR_EACH(e, g.planes * g.inSize) {
    int64_t p = e / g.inSize, i = e % g.inSize;
    const float *plane = x + p * g.inSize;
    float sum = 0.0f;
    windowsHolding(g, i, [&](int64_t o) {
      if (g.argmax(plane, o) == i)
        sum += dy[p * g.outSize + o];
    });
    dx[e] = sum;
  }
}

__global__ void averagePoolKernel(PoolGeometry g, const float *x, float *y) {
  CDP_FOR_EACH(e, g.planes * g.outSize) {
    int64_t p = e / g.outSize, o = e % g.outSize;
    const float *plane = x + p * g.inSize;
    float sum = 0.0f;
    int64_t count = g.window(o, [&](int64_t i) { sum += plane[i]; });
    y[e] = count ? sum / count : 0.0f;
  }
}

__global__ void averagePoolGradKernel(PoolGeometry g, const float *dy,
                                      float *dx) {
  CDP_FOR_EACH(e, g.planes * g.inSize) {
    int64_t p = e / g.inSize, i = e % g.inSize;
    float sum = 0.0f;
    windowsHolding(g, i, [&](int64_t o) {
      if (int64_t count = g.window(o, [](int64_t) {}))
        sum += dy[p * g.outSize + o] / count;
    });
    dx[e] = sum;
  }
}

} // namespace

void registerPooling(KernelRegistry &registry) {
  for (bool indices : {false, true})
    addKernel(
        registry, indices ? "max_pool_indices" : "max_pool",
        Launches::SameEveryStep, [indices](const KernelArgs &args) {
          TensorView x = args.inputs[0], y = args.outputs[0];
          PoolGeometry g(args, x.shape, y.shape);
          bool columnMajor = args.i("storage_order", 0) == 1;
          return [=](const StepContext &context) {
            int64_t n = g.planes * g.outSize;
            if (n == 0)
              return;
            maxPoolKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
                g, x.f32(), indices ? nullptr : y.f32(),
                indices ? y.i64() : nullptr, columnMajor);
            launched("max_pool");
          };
        });

  addKernel(registry, "max_pool_grad", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView dy = args.inputs[0], x = args.inputs[1],
                         dx = args.outputs[0];
              PoolGeometry g(args, x.shape, dy.shape);
              return [=](const StepContext &context) {
                cudaStream_t stream = streamOf(context);
                int64_t n = g.planes * g.inSize;
                if (n == 0)
                  return;
                maxPoolGradKernel<<<blocksFor(n), kThreads, 0, stream>>>(
                    g, dy.f32(), x.f32(), dx.f32());
                launched("max_pool_grad");
              };
            });

  addKernel(
      registry, "average_pool", Launches::SameEveryStep,
      [](const KernelArgs &args) {
        TensorView x = args.inputs[0], y = args.outputs[0];
        PoolGeometry g(args, x.shape, y.shape);
        return [=](const StepContext &context) {
          int64_t n = g.planes * g.outSize;
          if (n == 0)
            return;
          averagePoolKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
              g, x.f32(), y.f32());
          launched("average_pool");
        };
      });

  addKernel(registry, "average_pool_grad", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView dy = args.inputs[0], dx = args.outputs[0];
              PoolGeometry g(args, dx.shape, dy.shape);
              return [=](const StepContext &context) {
                cudaStream_t stream = streamOf(context);
                int64_t n = g.planes * g.inSize;
                if (n == 0)
                  return;
                averagePoolGradKernel<<<blocksFor(n), kThreads, 0, stream>>>(
                    g, dy.f32(), dx.f32());
                launched("average_pool_grad");
              };
            });

  addKernel(registry, "global_average_pool", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView x = args.inputs[0], y = args.outputs[0];
              std::vector<bool> reduced(x.shape.size(), true);
              reduced[0] = reduced[1] = false;
              auto sum = std::make_shared<SegmentedSum>(args, x.shape, reduced);
              double scale = 1.0 / std::max<int64_t>(product(x.shape, 2), 1);
              return [=](const StepContext &context) {
                sum->sumInto(streamOf(context), x.f32(), y.f32(), scale);
              };
            });
}

} // namespace cdp::runtime::cuda
