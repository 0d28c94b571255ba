//===- ConvGradWeight.cu - a convolution's weight gradient, few channels --===//
//
// cuDNN's deterministic backward-filter algorithms are slow where channels
// are few (a ResNet's 8 and 16): its fast ones add with atomics, whose
// order, and so whose bits, change from run to run. A weight's gradient
// is a sum over every output position of x * dy, so here each block takes
// one (output channel, input channel) pair and one part of the positions,
// every thread keeps a double per filter tap over the positions it visits
// (dy read once, x's taps from cache), the block's sums land in partials,
// and a second kernel adds each weight's partials in order: the same bits
// every run, at least one block per pair and enough parts to fill a large
// GPU. Filters of 1x1, 3x3, 5x5 and 7x7 taps, groups, strides, padding and
// dilation; other filters keep cuDNN.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "Reduce.cuh"
#include "cdp/Runtime/OpTable.h"

namespace cdp::runtime::cuda {

namespace {

/// Pairs beyond which cuDNN's own algorithms are left to it.
constexpr int64_t kMostPairs = 1024;

struct DirectGeometry {
  int64_t inC, inH, inW, outC, outH, outW;
  int64_t strideH, strideW, padH, padW, dilationH, dilationW;
  int64_t groupIn, groupOut; ///< channels per group
  int64_t positions, chunk, parts;
  IndexMap batchOf, rowOf, columnOf; ///< of an output position
};

template <int KH, int KW>
__global__ void convGradWeightPartials(DirectGeometry g, const float *x,
                                       const float *dy, double *partials) {
  constexpr int kTaps = KH * KW;
  int64_t pair = blockIdx.x, part = blockIdx.y;
  int64_t co = pair / g.groupIn, ci = pair % g.groupIn;
  int64_t channel = co / g.groupOut * g.groupIn + ci;
  double sums[kTaps] = {};
  int64_t end = min(g.positions, (part + 1) * g.chunk);
  for (int64_t r = part * g.chunk + threadIdx.x; r < end; r += blockDim.x) {
    int64_t n = g.batchOf(r), oh = g.rowOf(r), ow = g.columnOf(r);
    double d = dy[((n * g.outC + co) * g.outH + oh) * g.outW + ow];
    const float *plane = x + (n * g.inC + channel) * g.inH * g.inW;
#pragma unroll
    for (int kh = 0; kh < KH; ++kh) {
      int64_t ih = oh * g.strideH - g.padH + kh * g.dilationH;
#pragma unroll
      for (int kw = 0; kw < KW; ++kw) {
        int64_t iw = ow * g.strideW - g.padW + kw * g.dilationW;
        if (ih >= 0 && ih < g.inH && iw >= 0 && iw < g.inW)
          sums[kh * KW + kw] += plane[ih * g.inW + iw] * d;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTaps; ++t) {
    double total = blockSum(sums[t]);
    if (threadIdx.x == 0)
      partials[(pair * g.parts + part) * kTaps + t] = total;
  }
}

/// dw[pair, tap] = the pair's partials for the tap, added in part order.
__global__ void convGradWeightFinish(const double *partials, int64_t weights,
                                     int64_t taps, int64_t parts, float *dw) {
  CDP_FOR_EACH(e, weights) {
    int64_t pair = e / taps, t = e % taps;
    double sum = 0;
    for (int64_t part = 0; part < parts; ++part)
      sum += partials[(pair * parts + part) * taps + t];
    dw[e] = static_cast<float>(sum);
  }
}

using PartialsKernel = void (*)(DirectGeometry, const float *, const float *,
                                double *);

PartialsKernel partialsFor(int64_t kh, int64_t kw) {
  if (kh != kw)
    return nullptr;
  switch (kh) {
  case 1:
    return convGradWeightPartials<1, 1>;
  case 3:
    return convGradWeightPartials<3, 3>;
  case 5:
    return convGradWeightPartials<5, 5>;
  case 7:
    return convGradWeightPartials<7, 7>;
  default:
    return nullptr;
  }
}

} // namespace

std::function<void(const StepContext &)>
directConvGradWeight(const KernelArgs &args) {
  TensorView dy = args.inputs[0], x = args.inputs[1], dw = args.outputs[0];
  if (x.rank() != 4 || dw.rank() != 4 || dy.rank() != 4)
    return nullptr;
  PartialsKernel partials = partialsFor(dw.shape[2], dw.shape[3]);
  int64_t pairs = dw.shape[0] * dw.shape[1];
  if (!partials || pairs == 0 || pairs > kMostPairs)
    return nullptr;
  ops::ConvAttributes attrs = ops::ConvAttributes::read(args);
  DirectGeometry g{};
  g.inC = x.shape[1], g.inH = x.shape[2], g.inW = x.shape[3];
  g.outC = dy.shape[1], g.outH = dy.shape[2], g.outW = dy.shape[3];
  g.strideH = attrs.strides[0], g.strideW = attrs.strides[1];
  g.padH = attrs.pads[0], g.padW = attrs.pads[1];
  g.dilationH = attrs.dilations[0], g.dilationW = attrs.dilations[1];
  g.groupIn = dw.shape[1];
  g.groupOut = dw.shape[0] / std::max<int64_t>(attrs.group, 1);
  g.positions = dy.shape[0] * g.outH * g.outW;
  // Enough blocks for a large GPU, parts of at least 1024 positions.
  g.parts = std::clamp<int64_t>(
      1024 / pairs, 1, std::clamp<int64_t>(g.positions / 1024, 1, 65535));
  g.chunk = (g.positions + g.parts - 1) / g.parts;
  std::vector<int64_t> sizes = {dy.shape[0], g.outH, g.outW};
  g.batchOf = coordinateMap(args, sizes, 0);
  g.rowOf = coordinateMap(args, sizes, 1);
  g.columnOf = coordinateMap(args, sizes, 2);
  int64_t taps = dw.shape[2] * dw.shape[3], weights = dw.numel();
  auto scratch = std::make_shared<Scratch>(
      deviceOf(args),
      static_cast<size_t>(pairs * g.parts * taps) * sizeof(double));
  return [=](const StepContext &context) {
    cudaStream_t stream = streamOf(context);
    if (g.positions == 0) {
      checkCuda(cudaMemsetAsync(dw.data, 0, byteSize(dw), stream), "memset");
      return;
    }
    partials<<<dim3(static_cast<unsigned>(pairs),
                    static_cast<unsigned>(g.parts)),
               kThreads, 0, stream>>>(g, x.f32(), dy.f32(),
                                      scratch->as<double>());
    convGradWeightFinish<<<blocksFor(weights), kThreads, 0, stream>>>(
        scratch->as<double>(), weights, taps, g.parts, dw.f32());
    launched("conv_grad_weight");
  };
}

} // namespace cdp::runtime::cuda
