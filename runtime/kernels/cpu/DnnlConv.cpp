//===- DnnlConv.cpp - convolution through oneDNN primitives ---------------===//
//
// Forward, backward-data and backward-weights convolution as oneDNN 2.x
// primitives, created once when the plan is loaded. The primitives pick
// their own (blocked) layouts; the plan's tensors are plain NCHW/OIHW, so
// reorders into and out of the primitive's layout run around it, into
// buffers in the kernel's scratch (the device's block, which its kernels
// share: they live only while the kernel runs). A convolution whose
// operands the plan marks exact in bf16 (narrow_operands) runs on bf16
// copies of them, made by those reorders, where the processor has bf16 dot
// products: float32 sums and a float32 result, the float32 convolution of
// the same values up to the order of the sums. Where oneDNN refuses a
// configuration (or has only its reference code for the bf16 one), the
// float32 primitive, then the im2col kernels of Linalg.cpp, serve it.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "Dnnl.h"
#include "cdp/Runtime/OpTable.h"

#include <omp.h>

#include <atomic>
#include <cstring>
#include <optional>

namespace cdp::runtime::cpu {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DT = memory::data_type;

/// Convolution kernels made on bf16 operands (bf16ConvolutionsMade).
std::atomic<int64_t> bf16Convolutions{0};

/// A weight gradient of fewer multiply-adds than this is computed on one
/// thread (see ConvBackwardWeights).
constexpr double kSerialWeightGradientMacs = 4e6;

/// OpenMP's thread count while it lives (oneDNN sizes a primitive's work
/// for the threads there are when it is made), restored after.
class OpenMpThreads {
public:
  explicit OpenMpThreads(int threads) : previous(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~OpenMpThreads() { omp_set_num_threads(previous); }
  OpenMpThreads(const OpenMpThreads &) = delete;
  OpenMpThreads &operator=(const OpenMpThreads &) = delete;

private:
  int previous;
};

/// oneDNN has only its reference code for a bf16 convolution: the
/// float32 primitive serves it.
struct ReferenceOnly {};

/// `pd`, refused (ReferenceOnly) where it convolves in bf16 with oneDNN's
/// reference code.
template <typename PrimitiveDesc>
PrimitiveDesc native(PrimitiveDesc pd, DT operands) {
  if (operands == DT::bf16 && std::strncmp(pd.impl_info_str(), "ref", 3) == 0)
    throw ReferenceOnly();
  return pd;
}

struct ConvShapes {
  memory::dims src, weights, dst, bias, strides, dilates, padL, padR;
  Tag weightsTag;
  /// What the two operands are convolved in (bf16 or f32); sums and
  /// results are float32.
  DT operands;

  ConvShapes(const KernelArgs &args, const std::vector<int64_t> &input,
             const std::vector<int64_t> &weight,
             const std::vector<int64_t> &output, DT operands)
      : operands(operands) {
    // conv and its two gradients declare the same window attributes.
    ops::ConvAttributes attrs = ops::ConvAttributes::read(args);
    int64_t group = attrs.group;
    const std::vector<int64_t> &pads = attrs.pads, &s = attrs.strides,
                               &d = attrs.dilations;
    src = {input[0], input[1], input[2], input[3]};
    dst = {output[0], output[1], output[2], output[3]};
    bias = {weight[0]};
    if (group > 1) {
      weights = {group, weight[0] / group, weight[1], weight[2], weight[3]};
      weightsTag = Tag::goihw;
    } else {
      weights = {weight[0], weight[1], weight[2], weight[3]};
      weightsTag = Tag::oihw;
    }
    strides = {s[0], s[1]};
    dilates = {d[0] - 1, d[1] - 1}; // oneDNN counts extra gaps
    padL = {pads[0], pads[1]};
    padR = {pads[2], pads[3]};
  }
  /// Multiply-adds of the weight gradient: every output element of every
  /// sample times the weights of one group.
  double weightGradientMacs() const {
    double outputs = 1, perOutput = 1;
    for (int64_t d : dst)
      outputs *= static_cast<double>(d);
    for (size_t i = weights.size() - 3; i < weights.size(); ++i)
      perOutput *= static_cast<double>(weights[i]); // (ic per group) x kh x kw
    return outputs * perOutput;
  }
  /// `dims` in the layout the primitive picks, of the operands' type.
  memory::desc operand(const memory::dims &dims) const {
    return memory::desc(dims, operands, Tag::any);
  }
  /// `dims` in the layout the primitive picks, float32.
  memory::desc result(const memory::dims &dims) const {
    return memory::desc(dims, DT::f32, Tag::any);
  }
  dnnl::convolution_forward::primitive_desc forward(bool withBias) const {
    dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
        operand(src), operand(weights),
        withBias ? memory::desc(bias, DT::f32, Tag::x) : memory::desc(),
        result(dst), strides, dilates, padL, padR);
    return native(dnnl::convolution_forward::primitive_desc(
                      desc, ownScratchpad(), engine()),
                  operands);
  }
};

/// A plain user tensor and, when the primitive wants another layout, a
/// buffer in that layout with the reorder between them.
struct Binding {
  memory user, internal;
  dnnl::reorder reorder;
  std::unordered_map<int, memory> reorderArguments;
  bool input;

  /// The buffer in the primitive's layout lies in the kernel's scratch:
  /// reordered into before the primitive runs, or out of after.
  Binding(const memory::desc &plain, const memory::desc &wanted, void *data,
          bool input, KernelScratch &scratch, HeldBuffers &held)
      : input(input) {
    user = memory(plain, engine(), data);
    if (wanted == plain) {
      internal = user;
      return;
    }
    internal = scratchMemory(wanted, scratch, held);
    const memory &from = input ? user : internal, &to = input ? internal : user;
    reorder =
        dnnl::reorder(dnnl::reorder::primitive_desc(from, to, ownScratchpad()));
    reorderArguments = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    bindScratchpad(reorder, reorderArguments, scratch, held);
  }
  void in(dnnl::stream &stream) {
    if (reorder && input)
      reorder.execute(stream, reorderArguments);
  }
  void out(dnnl::stream &stream) {
    if (reorder && !input)
      reorder.execute(stream, reorderArguments);
  }
};

class ConvForward : public DnnlKernel {
public:
  ConvForward(const KernelArgs &args, DT operands)
      : DnnlKernel(args),
        shapes(args, args.inputs[0].shape, args.inputs[1].shape,
               args.outputs[0].shape, operands),
        stream(engine()) {
    bool withBias = args.inputs.size() > 2 && args.inputs[2].present();
    auto pd = shapes.forward(withBias);
    primitive = dnnl::convolution_forward(pd);
    src = std::make_unique<Binding>(
        memory::desc(shapes.src, DT::f32, Tag::nchw), pd.src_desc(),
        args.inputs[0].data, true, scratch, held);
    weights = std::make_unique<Binding>(
        memory::desc(shapes.weights, DT::f32, shapes.weightsTag),
        pd.weights_desc(), args.inputs[1].data, true, scratch, held);
    dst = std::make_unique<Binding>(
        memory::desc(shapes.dst, DT::f32, Tag::nchw), pd.dst_desc(),
        args.outputs[0].data, false, scratch, held);
    arguments = {{DNNL_ARG_SRC, src->internal},
                 {DNNL_ARG_WEIGHTS, weights->internal},
                 {DNNL_ARG_DST, dst->internal}};
    if (withBias)
      arguments[DNNL_ARG_BIAS] =
          memory(memory::desc(shapes.bias, DT::f32, Tag::x), engine(),
                 args.inputs[2].data);
    bindScratchpad(primitive, arguments);
  }

  void run(const StepContext &) override {
    src->in(stream);
    weights->in(stream);
    primitive.execute(stream, arguments);
    dst->out(stream);
    stream.wait();
  }

private:
  ConvShapes shapes;
  dnnl::stream stream;
  dnnl::convolution_forward primitive;
  std::unique_ptr<Binding> src, weights, dst;
  std::unordered_map<int, memory> arguments; // built once, at load
};

class ConvBackwardData : public DnnlKernel {
public:
  ConvBackwardData(const KernelArgs &args, DT operands)
      : DnnlKernel(args),
        shapes(args, args.outputs[0].shape, args.inputs[1].shape,
               args.inputs[0].shape, operands),
        stream(engine()) {
    auto hint = shapes.forward(false);
    dnnl::convolution_backward_data::desc desc(
        dnnl::algorithm::convolution_direct, shapes.result(shapes.src),
        shapes.operand(shapes.weights), shapes.operand(shapes.dst),
        shapes.strides, shapes.dilates, shapes.padL, shapes.padR);
    auto pd = native(dnnl::convolution_backward_data::primitive_desc(
                         desc, ownScratchpad(), engine(), hint),
                     operands);
    primitive = dnnl::convolution_backward_data(pd);
    diffDst = std::make_unique<Binding>(
        memory::desc(shapes.dst, DT::f32, Tag::nchw), pd.diff_dst_desc(),
        args.inputs[0].data, true, scratch, held);
    weights = std::make_unique<Binding>(
        memory::desc(shapes.weights, DT::f32, shapes.weightsTag),
        pd.weights_desc(), args.inputs[1].data, true, scratch, held);
    diffSrc = std::make_unique<Binding>(
        memory::desc(shapes.src, DT::f32, Tag::nchw), pd.diff_src_desc(),
        args.outputs[0].data, false, scratch, held);
    arguments = {{DNNL_ARG_DIFF_DST, diffDst->internal},
                 {DNNL_ARG_WEIGHTS, weights->internal},
                 {DNNL_ARG_DIFF_SRC, diffSrc->internal}};
    bindScratchpad(primitive, arguments);
  }

  void run(const StepContext &) override {
    diffDst->in(stream);
    weights->in(stream);
    primitive.execute(stream, arguments);
    diffSrc->out(stream);
    stream.wait();
  }

private:
  ConvShapes shapes;
  dnnl::stream stream;
  dnnl::convolution_backward_data primitive;
  std::unique_ptr<Binding> diffDst, weights, diffSrc;
  std::unordered_map<int, memory> arguments;
};

class ConvBackwardWeights : public DnnlKernel {
public:
  ConvBackwardWeights(const KernelArgs &args, DT operands)
      : DnnlKernel(args),
        shapes(args, args.inputs[1].shape, args.outputs[0].shape,
               args.inputs[0].shape, operands),
        stream(engine()) {
    auto hint = shapes.forward(false);
    dnnl::convolution_backward_weights::desc desc(
        dnnl::algorithm::convolution_direct, shapes.operand(shapes.src),
        shapes.result(shapes.weights), shapes.operand(shapes.dst),
        shapes.strides, shapes.dilates, shapes.padL, shapes.padR);
    // oneDNN splits the reduction over the batch among the threads it is
    // created for, so the bits of the gradient depend on --threads. A small
    // one gains nothing from threads (LeNet's: faster on one) and is made
    // for one thread: its bits are then the same for any --threads (the
    // demo's model trains to the same parameters at 1, 2 or 3 threads).
    std::optional<OpenMpThreads> serial;
    if (shapes.weightGradientMacs() < kSerialWeightGradientMacs)
      serial.emplace(1);
    auto pd = native(dnnl::convolution_backward_weights::primitive_desc(
                         desc, ownScratchpad(), engine(), hint),
                     operands);
    primitive = dnnl::convolution_backward_weights(pd);
    serial.reset();
    diffDst = std::make_unique<Binding>(
        memory::desc(shapes.dst, DT::f32, Tag::nchw), pd.diff_dst_desc(),
        args.inputs[0].data, true, scratch, held);
    src = std::make_unique<Binding>(
        memory::desc(shapes.src, DT::f32, Tag::nchw), pd.src_desc(),
        args.inputs[1].data, true, scratch, held);
    diffWeights = std::make_unique<Binding>(
        memory::desc(shapes.weights, DT::f32, shapes.weightsTag),
        pd.diff_weights_desc(), args.outputs[0].data, false, scratch, held);
    arguments = {{DNNL_ARG_DIFF_DST, diffDst->internal},
                 {DNNL_ARG_SRC, src->internal},
                 {DNNL_ARG_DIFF_WEIGHTS, diffWeights->internal}};
    bindScratchpad(primitive, arguments);
  }

  void run(const StepContext &) override {
    diffDst->in(stream);
    src->in(stream);
    primitive.execute(stream, arguments);
    diffWeights->out(stream);
    stream.wait();
  }

private:
  ConvShapes shapes;
  dnnl::stream stream;
  dnnl::convolution_backward_weights primitive;
  std::unique_ptr<Binding> diffDst, src, diffWeights;
  std::unordered_map<int, memory> arguments;
};

/// `inner` after checking the plan's narrow_operands mark on its first
/// runs, whichever kernel serves the convolution.
class CheckedOperands : public Kernel {
public:
  CheckedOperands(std::unique_ptr<Kernel> inner, NarrowOperandsCheck check)
      : inner(std::move(inner)), check(std::move(check)) {}
  void run(const StepContext &context) override {
    check();
    inner->run(context);
  }
  KernelState state() override { return inner->state(); }
  int64_t workspaceBytes() const override { return inner->workspaceBytes(); }

private:
  std::unique_ptr<Kernel> inner;
  NarrowOperandsCheck check;
};

/// The oneDNN kernel: in bf16 where the plan marks the operands exact in
/// bf16 and the processor has bf16 dot products, else (or where oneDNN has
/// only reference code for that) in float32; where oneDNN refuses the
/// configuration, the registered fallback.
template <typename DnnlKernel>
std::unique_ptr<Kernel> convolutionKernel(const KernelArgs &args,
                                          const KernelFactory &im2col,
                                          const std::string &op) {
  if (narrowOperandsOf(args) == NarrowFormat::Bfloat16 &&
      bf16DotProductsUsed()) {
    try {
      auto kernel = std::make_unique<DnnlKernel>(args, DT::bf16);
      ++bf16Convolutions;
      return kernel;
    } catch (const dnnl::error &) {
    } catch (const ReferenceOnly &) {
    }
  }
  try {
    return std::make_unique<DnnlKernel>(args, DT::f32);
  } catch (const dnnl::error &) {
    if (!im2col)
      args.fail("oneDNN has no " + op + " for this configuration");
    return im2col(args);
  }
}

/// Registers the oneDNN kernel for `op` ahead of the fallback registered
/// before; operands 0 and 1 (named `first` and `second`) are the ones a
/// narrow_operands mark names.
template <typename DnnlKernel>
void wrap(KernelRegistry &registry, const std::string &op, const char *first,
          const char *second) {
  const KernelFactory *fallback = registry.lookup(op, Backend::CPU);
  KernelFactory im2col = fallback ? *fallback : KernelFactory();
  registry.add(op, Backend::CPU,
               [im2col, op, first,
                second](const KernelArgs &args) -> std::unique_ptr<Kernel> {
                 NarrowOperandsCheck check(args, first, second);
                 std::unique_ptr<Kernel> kernel =
                     convolutionKernel<DnnlKernel>(args, im2col, op);
                 if (!check.active())
                   return kernel;
                 return std::make_unique<CheckedOperands>(std::move(kernel),
                                                          std::move(check));
               });
}

} // namespace

int64_t bf16ConvolutionsMade() { return bf16Convolutions; }

void registerDnnlConvolution(KernelRegistry &registry) {
  wrap<ConvForward>(registry, "conv", "input", "weight");
  wrap<ConvBackwardData>(registry, "conv_grad_input", "gradient", "weight");
  wrap<ConvBackwardWeights>(registry, "conv_grad_weight", "gradient", "input");
}

} // namespace cdp::runtime::cpu
