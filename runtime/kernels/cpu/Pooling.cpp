//===- Pooling.cpp - pooling on the CPU -----------------------------------===//

#include "CpuKernels.h"

#include <limits>

namespace cdp::runtime::cpu {

namespace {

struct PoolGeometry {
  int64_t planes, height, width, outH, outW;
  int64_t kernelH, kernelW, padTop, padLeft, padBottom, padRight;
  int64_t strideH, strideW, dilationH, dilationW;
  bool countIncludePad;

  PoolGeometry(const KernelArgs &args, const std::vector<int64_t> &input,
               const std::vector<int64_t> &output) {
    planes = input[0] * input[1];
    height = input[2];
    width = input[3];
    outH = output[2];
    outW = output[3];
    std::vector<int64_t> kernel = args.ints("kernel_shape"),
                         pads = args.ints("pads"),
                         strides = args.ints("strides"),
                         dilations = args.ints("dilations");
    kernelH = kernel[0];
    kernelW = kernel[1];
    padTop = pads[0];
    padLeft = pads[1];
    padBottom = pads[2];
    padRight = pads[3];
    strideH = strides[0];
    strideW = strides[1];
    dilationH = dilations.empty() ? 1 : dilations[0];
    dilationW = dilations.empty() ? 1 : dilations[1];
    countIncludePad = args.i("count_include_pad", 0) != 0;
  }

  /// Calls fn(index) for every input position of the window of (oh, ow);
  /// returns the divisor of average pooling.
  template <typename Fn> int64_t window(int64_t oh, int64_t ow, Fn fn) const {
    int64_t h0 = oh * strideH - padTop, w0 = ow * strideW - padLeft;
    int64_t valid = 0, padded = 0;
    for (int64_t kh = 0; kh < kernelH; ++kh) {
      int64_t ih = h0 + kh * dilationH;
      if (ih >= height + padBottom)
        break; // past the end padding (ceil mode): not counted
      for (int64_t kw = 0; kw < kernelW; ++kw) {
        int64_t iw = w0 + kw * dilationW;
        if (iw >= width + padRight)
          break;
        ++padded;
        if (ih < 0 || ih >= height || iw < 0 || iw >= width)
          continue;
        ++valid;
        fn(ih * width + iw);
      }
    }
    return countIncludePad ? padded : valid;
  }
};

} // namespace

void registerPooling(KernelRegistry &registry) {
  addKernel(registry, "max_pool", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0];
    PoolGeometry g(args, x.shape, y.shape);
    return [=](const StepContext &) {
#pragma omp parallel for
      for (int64_t p = 0; p < g.planes; ++p) {
        const float *in = x.f32() + p * g.height * g.width;
        float *out = y.f32() + p * g.outH * g.outW;
        for (int64_t oh = 0; oh < g.outH; ++oh)
          for (int64_t ow = 0; ow < g.outW; ++ow) {
            float best = -std::numeric_limits<float>::infinity();
            g.window(oh, ow, [&](int64_t i) { best = std::max(best, in[i]); });
            out[oh * g.outW + ow] = best;
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
        const float *in = x.f32() + p * g.height * g.width;
        float *grad = dx.f32() + p * g.height * g.width;
        const float *out = dy.f32() + p * g.outH * g.outW;
        for (int64_t oh = 0; oh < g.outH; ++oh)
          for (int64_t ow = 0; ow < g.outW; ++ow) {
            float best = -std::numeric_limits<float>::infinity();
            int64_t where = -1;
            g.window(oh, ow, [&](int64_t i) {
              if (where < 0 || in[i] > best) {
                best = in[i];
                where = i;
              }
            });
            if (where >= 0)
              grad[where] += out[oh * g.outW + ow];
          }
      }
    };
  });

  addKernel(registry, "average_pool", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0];
    PoolGeometry g(args, x.shape, y.shape);
    return [=](const StepContext &) {
#pragma omp parallel for
      for (int64_t p = 0; p < g.planes; ++p) {
        const float *in = x.f32() + p * g.height * g.width;
        float *out = y.f32() + p * g.outH * g.outW;
        for (int64_t oh = 0; oh < g.outH; ++oh)
          for (int64_t ow = 0; ow < g.outW; ++ow) {
            float sum = 0.0f;
            int64_t count = g.window(oh, ow, [&](int64_t i) { sum += in[i]; });
            out[oh * g.outW + ow] = count ? sum / count : 0.0f;
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
        float *grad = dx.f32() + p * g.height * g.width;
        const float *out = dy.f32() + p * g.outH * g.outW;
        for (int64_t oh = 0; oh < g.outH; ++oh)
          for (int64_t ow = 0; ow < g.outW; ++ow) {
            int64_t count = g.window(oh, ow, [](int64_t) {});
            if (!count)
              continue;
            float share = out[oh * g.outW + ow] / count;
            g.window(oh, ow, [&](int64_t i) { grad[i] += share; });
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

} // namespace cdp::runtime::cpu
