//===- Convolution.cu - 2-D convolutions through cuDNN --------------------===//
//
// Forward, backward-data and backward-filter use cuDNN's convolution API
// with the deterministic algorithm its heuristics rank first for the shapes
// (chosen once at load, with its workspace). Math is float32 FMA unless
// --allow-tf32. cuDNN pads symmetrically: a plan whose end padding differs from
// its begin padding is refused at load.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "Reduce.cuh"
#include "cdp/Runtime/OpTable.h"

namespace cdp::runtime::cuda {

namespace {

/// The descriptors of one convolution: input x, filter w, output y.
struct ConvDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  ConvDescriptors(const KernelArgs &args, const std::vector<int64_t> &input,
                  const std::vector<int64_t> &weight,
                  const std::vector<int64_t> &output) {
    if (input.size() != 4)
      args.fail("the CUDA backend runs 2-D convolutions only");
    // conv and its two gradients declare the same window attributes.
    ops::ConvAttributes attrs = ops::ConvAttributes::read(args);
    const std::vector<int64_t> &pads = attrs.pads, &strides = attrs.strides,
                               &dilations = attrs.dilations;
    if (pads.size() == 4 && (pads[0] != pads[2] || pads[1] != pads[3]))
      args.fail("pads differ at the two ends, which cuDNN cannot run");
    auto narrow = [&](int64_t v) {
      if (v > INT32_MAX)
        args.fail("a dimension exceeds cuDNN's 32-bit sizes");
      return static_cast<int>(v);
    };
    checkCudnn(cudnnCreateTensorDescriptor(&x), "cudnn tensor");
    checkCudnn(cudnnCreateTensorDescriptor(&y), "cudnn tensor");
    checkCudnn(cudnnCreateFilterDescriptor(&w), "cudnn filter");
    checkCudnn(cudnnCreateConvolutionDescriptor(&conv), "cudnn convolution");
    checkCudnn(cudnnSetTensor4dDescriptor(
                   x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, narrow(input[0]),
                   narrow(input[1]), narrow(input[2]), narrow(input[3])),
               "cudnn input");
    checkCudnn(cudnnSetTensor4dDescriptor(
                   y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, narrow(output[0]),
                   narrow(output[1]), narrow(output[2]), narrow(output[3])),
               "cudnn output");
    checkCudnn(cudnnSetFilter4dDescriptor(
                   w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, narrow(weight[0]),
                   narrow(weight[1]), narrow(weight[2]), narrow(weight[3])),
               "cudnn filter");
    checkCudnn(cudnnSetConvolution2dDescriptor(
                   conv, narrow(pads[0]), narrow(pads[1]), narrow(strides[0]),
                   narrow(strides[1]), narrow(dilations[0]),
                   narrow(dilations[1]), CUDNN_CROSS_CORRELATION,
                   CUDNN_DATA_FLOAT),
               "cudnn convolution");
    checkCudnn(
        cudnnSetConvolutionGroupCount(conv, static_cast<int>(attrs.group)),
        "cudnn groups");
    checkCudnn(cudnnSetConvolutionMathType(conv, CudaDevice::tf32Allowed()
                                                     ? CUDNN_DEFAULT_MATH
                                                     : CUDNN_FMA_MATH),
               "cudnn math");
    int dims[4];
    checkCudnn(cudnnGetConvolutionNdForwardOutputDim(conv, x, w, 4, dims),
               "cudnn output size");
    for (int d = 0; d < 4; ++d)
      if (dims[d] != output[d])
        args.fail("output dimension " + std::to_string(d) + " is " +
                  std::to_string(output[d]) + ", cuDNN computes " +
                  std::to_string(dims[d]));
  }
  ~ConvDescriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
};

/// The first of cuDNN's ranked algorithms that it can run and that gives
/// the same bits every run (so that a resumed run equals an uninterrupted
/// one, as on the CPU); a non-deterministic one only where there is no
/// other, or where --allow-nondeterministic lets the first-ranked run.
template <typename Perf>
Perf pick(const KernelArgs &args, const Perf *perf, int returned) {
  bool anyBits = CudaDevice::nondeterministicAllowed();
  for (int i = 0; i < returned; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS &&
        (anyBits || perf[i].determinism == CUDNN_DETERMINISTIC))
      return perf[i];
  for (int i = 0; i < returned; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS)
      return perf[i];
  args.fail("cuDNN has no algorithm for this convolution");
}

/// y[i] += the bias of i's filter (`filter`: its output channel).
__global__ void biasKernel(float *y, const float *bias, int64_t n,
                           IndexMap filter) {
  CDP_FOR_EACH(i, n) { y[i] += bias[filter(i)]; }
}

/// cuDNN's workspace for a convolution: the device's shared block, reserved
/// at load. Its kernels run one after another on its stream, so one block
/// serves them all (the largest workspace, where each convolution held its
/// own before: their sum); its address is read when the kernel runs, as a
/// later reservation may move it.
CudaDevice *workspaceFor(CudaDevice &device, size_t bytes) {
  device.reserveShared(bytes);
  return &device;
}

constexpr int kRanked = 16;

} // namespace

/// conv_grad_weight by our deterministic kernel where it takes the filter
/// (ConvGradWeight.cu), else null.
std::function<void(const StepContext &)>
directConvGradWeight(const KernelArgs &args);

void registerConvolution(KernelRegistry &registry) {
  addKernel(
      registry, "conv", Launches::SameEveryStep, [](const KernelArgs &args) {
        TensorView x = args.inputs[0], w = args.inputs[1], y = args.outputs[0];
        TensorView bias =
            args.inputs.size() > 2 ? args.inputs[2] : TensorView();
        auto d =
            std::make_shared<ConvDescriptors>(args, x.shape, w.shape, y.shape);
        CudaDevice &device = deviceOf(args);
        cudnnConvolutionFwdAlgoPerf_t perf[kRanked];
        int returned = 0;
        checkCudnn(cudnnGetConvolutionForwardAlgorithm_v7(
                       device.dnn(), d->x, d->w, d->conv, d->y, kRanked,
                       &returned, perf),
                   "cudnn forward algorithm");
        cudnnConvolutionFwdAlgoPerf_t chosen = pick(args, perf, returned);
        CudaDevice *workspace = workspaceFor(device, chosen.memory);
        cudnnHandle_t dnn = device.dnn();
        IndexMap filter = channelMap(args, y.shape);
        return [=](const StepContext &context) {
          float one = 1.0f, zero = 0.0f;
          checkCudnn(cudnnConvolutionForward(dnn, &one, d->x, x.data, d->w,
                                             w.data, d->conv, chosen.algo,
                                             workspace->shared(), chosen.memory,
                                             &zero, d->y, y.data),
                     "cudnnConvolutionForward");
          if (bias.present() && y.numel()) {
            biasKernel<<<blocksFor(y.numel()), kThreads, 0,
                         streamOf(context)>>>(y.f32(), bias.f32(), y.numel(),
                                              filter);
            launched("conv bias");
          }
        };
      });

  addKernel(registry, "conv_grad_input", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView dy = args.inputs[0], w = args.inputs[1],
                         dx = args.outputs[0];
              auto d = std::make_shared<ConvDescriptors>(args, dx.shape,
                                                         w.shape, dy.shape);
              CudaDevice &device = deviceOf(args);
              cudnnConvolutionBwdDataAlgoPerf_t perf[kRanked];
              int returned = 0;
              checkCudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                             device.dnn(), d->w, d->y, d->conv, d->x, kRanked,
                             &returned, perf),
                         "cudnn backward-data algorithm");
              cudnnConvolutionBwdDataAlgoPerf_t chosen =
                  pick(args, perf, returned);
              CudaDevice *workspace = workspaceFor(device, chosen.memory);
              cudnnHandle_t dnn = device.dnn();
              return [=](const StepContext &) {
                float one = 1.0f, zero = 0.0f;
                checkCudnn(cudnnConvolutionBackwardData(
                               dnn, &one, d->w, w.data, d->y, dy.data, d->conv,
                               chosen.algo, workspace->shared(), chosen.memory,
                               &zero, d->x, dx.data),
                           "cudnnConvolutionBackwardData");
              };
            });

  addKernel(
      registry, "conv_grad_weight", Launches::SameEveryStep,
      [](const KernelArgs &args) -> std::function<void(const StepContext &)> {
        TensorView dy = args.inputs[0], x = args.inputs[1],
                   dw = args.outputs[0];
        auto d = std::make_shared<ConvDescriptors>(args, x.shape, dw.shape,
                                                   dy.shape);
        // Few channels, the same bits every run: ours (ConvGradWeight.cu);
        // cuDNN's deterministic algorithms are slow there.
        if (!CudaDevice::nondeterministicAllowed())
          if (auto direct = directConvGradWeight(args))
            return direct;
        CudaDevice &device = deviceOf(args);
        cudnnConvolutionBwdFilterAlgoPerf_t perf[kRanked];
        int returned = 0;
        checkCudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                       device.dnn(), d->x, d->y, d->conv, d->w, kRanked,
                       &returned, perf),
                   "cudnn backward-filter algorithm");
        cudnnConvolutionBwdFilterAlgoPerf_t chosen = pick(args, perf, returned);
        CudaDevice *workspace = workspaceFor(device, chosen.memory);
        cudnnHandle_t dnn = device.dnn();
        return [=](const StepContext &) {
          float one = 1.0f, zero = 0.0f;
          checkCudnn(cudnnConvolutionBackwardFilter(
                         dnn, &one, d->x, x.data, d->y, dy.data, d->conv,
                         chosen.algo, workspace->shared(), chosen.memory, &zero,
                         d->w, dw.data),
                     "cudnnConvolutionBackwardFilter");
        };
      });
}

} // namespace cdp::runtime::cuda
