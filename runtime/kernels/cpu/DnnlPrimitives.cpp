//===- DnnlPrimitives.cpp - eltwise, softmax and pooling through oneDNN ---===//
//
// oneDNN 2.x primitives for the activations (forward and backward), softmax
// and log-softmax (forward and backward), pooling (forward and backward) and
// batch normalization (forward),
// created once at load on the plan's plain layouts. Where oneDNN lacks the
// operation (erf) or its semantics differ from ONNX's (average pooling that
// counts padding, when ceil mode extends the window past it), the project
// kernels registered before stay in place.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "Dnnl.h"

#include <optional>

namespace cdp::runtime::cpu {

namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;

/// A plain (row-major) f32 descriptor of any rank.
memory::desc plain(const std::vector<int64_t> &shape) {
  memory::dims dims(shape.begin(), shape.end()), strides(shape.size(), 1);
  if (dims.empty()) {
    dims = {1};
    strides = {1};
  }
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * dims[i + 1];
  return memory::desc(dims, memory::data_type::f32, strides);
}

/// One primitive with its arguments bound at load, its scratchpad in the
/// kernel's scratch.
class PrimitiveKernel : public DnnlKernel {
public:
  PrimitiveKernel(const KernelArgs &args, dnnl::primitive primitive,
                  std::unordered_map<int, memory> arguments)
      : DnnlKernel(args), stream(engine()), primitive(std::move(primitive)),
        arguments(std::move(arguments)) {
    bindScratchpad(this->primitive, this->arguments);
  }
  void run(const StepContext &) override {
    primitive.execute(stream, arguments);
    stream.wait();
  }

private:
  dnnl::stream stream;
  dnnl::primitive primitive;
  std::unordered_map<int, memory> arguments;
};

memory bind(const TensorView &view) {
  return memory(plain(view.shape), engine(), view.data);
}

/// Registers `make` for `op`, falling back to the kernel registered before
/// when `make` returns null or oneDNN refuses the configuration, and where
/// the instruction rounds its result (round_result: the own kernels do).
void wrap(KernelRegistry &registry, const std::string &op,
          std::function<std::unique_ptr<Kernel>(const KernelArgs &)> make) {
  registerAhead(registry, op,
                [make](const KernelArgs &args) -> std::unique_ptr<Kernel> {
                  if (args.find("round_result"))
                    return nullptr;
                  try {
                    return make(args);
                  } catch (const dnnl::error &) {
                    return nullptr;
                  }
                });
}

/// Registers `make` for `op` as wrap does, and where the instruction reads
/// or writes 2-byte values or rounds its result (--precision): the
/// primitive then runs on float32 views (an eltwise primitive takes one
/// data type), inputs `widenedInputs` stored in 2 bytes widened into the
/// kernel's scratch before it, the result rounded (round_result) or stored
/// in 2 bytes after it (narrowResultKernel). `serves` says which
/// instructions oneDNN has a primitive for, before any buffer is taken.
void wrapOnFloat32Views(
    KernelRegistry &registry, const std::string &op,
    std::function<bool(const KernelArgs &)> serves,
    std::function<std::unique_ptr<Kernel>(const KernelArgs &)> make,
    std::vector<size_t> widenedInputs) {
  registerAhead(registry, op,
                [serves, make, widenedInputs](
                    const KernelArgs &args) -> std::unique_ptr<Kernel> {
                  if (!serves(args))
                    return nullptr;
                  auto onViews = [make](const KernelArgs &wide) {
                    std::shared_ptr<Kernel> kernel = make(wide);
                    return [kernel](const StepContext &context) {
                      kernel->run(context);
                    };
                  };
                  try {
                    return narrowResultKernel(args, onViews, widenedInputs);
                  } catch (const dnnl::error &) {
                    return nullptr;
                  }
                });
}

/// oneDNN's algorithm for unary_grad's `kind`, and whether its gradient
/// reads the forward's output (the use_dst algorithms: the saved value is
/// the output for sigmoid, tanh and sqrt); none for erf, relu and GELU (the
/// project kernels' one pass reads 2-byte operands and rounds as it
/// writes).
std::optional<std::pair<algorithm, bool>>
eltwiseBackwardOf(const std::string &kind) {
  if (kind == "sigmoid")
    return std::pair{algorithm::eltwise_logistic_use_dst_for_bwd, true};
  if (kind == "tanh")
    return std::pair{algorithm::eltwise_tanh_use_dst_for_bwd, true};
  if (kind == "sqrt")
    return std::pair{algorithm::eltwise_sqrt_use_dst_for_bwd, true};
  return std::nullopt;
}

std::unique_ptr<Kernel> eltwiseForward(const KernelArgs &args, algorithm alg) {
  memory src = bind(args.inputs[0]), dst = bind(args.outputs[0]);
  dnnl::eltwise_forward::desc desc(prop_kind::forward_training, alg,
                                   src.get_desc());
  dnnl::eltwise_forward::primitive_desc pd(desc, ownScratchpad(), engine());
  return std::make_unique<PrimitiveKernel>(
      args, dnnl::eltwise_forward(pd),
      std::unordered_map<int, memory>{{DNNL_ARG_SRC, src},
                                      {DNNL_ARG_DST, dst}});
}

struct PoolShape {
  memory::dims strides, kernel, dilation, padL, padR;
  bool extended = false; // ceil mode widened the end padding
};

PoolShape poolShape(const KernelArgs &args, const std::vector<int64_t> &in,
                    const std::vector<int64_t> &out) {
  PoolShape p;
  std::vector<int64_t> k = args.ints("kernel_shape"), pads = args.ints("pads"),
                       s = args.ints("strides"), d = args.ints("dilations");
  size_t spatial = k.size();
  if (d.empty())
    d.assign(spatial, 1);
  p.kernel.assign(k.begin(), k.end());
  p.strides.assign(s.begin(), s.end());
  p.padL.assign(pads.begin(), pads.begin() + spatial);
  p.padR.assign(pads.begin() + spatial, pads.end());
  for (size_t i = 0; i < spatial; ++i)
    p.dilation.push_back(d[i] - 1);
  // oneDNN sizes the output with floor; ceil mode's extra window needs
  // more end padding, which never wins a maximum.
  for (size_t i = 0; i < spatial; ++i) {
    int64_t span = (k[i] - 1) * d[i] + 1;
    int64_t need = (out[2 + i] - 1) * s[i] + span - in[2 + i] - pads[i];
    if (need > p.padR[i]) {
      p.padR[i] = need;
      p.extended = true;
    }
  }
  return p;
}

algorithm poolAlgorithm(const KernelArgs &args, bool isMax, const PoolShape &p,
                        bool &supported) {
  supported = true;
  if (isMax)
    return algorithm::pooling_max;
  if (args.i("count_include_pad", 0)) {
    // ONNX counts the declared padding, not the ceil-mode extension.
    supported = !p.extended;
    return algorithm::pooling_avg_include_padding;
  }
  return algorithm::pooling_avg_exclude_padding;
}

/// The pooling forward's primitive: `kind` forward_training where a
/// backward's hint needs it (max pooling's keeps where each maximum was in
/// a workspace), forward_inference for the forward op itself, which then
/// writes no workspace: the backward recomputes its own.
dnnl::pooling_v2_forward::primitive_desc
poolForwardDesc(const KernelArgs &args, bool isMax, const TensorView &src,
                const TensorView &dst, bool &supported,
                prop_kind kind = prop_kind::forward_training) {
  PoolShape p = poolShape(args, src.shape, dst.shape);
  algorithm alg = poolAlgorithm(args, isMax, p, supported);
  dnnl::pooling_v2_forward::desc desc(kind, alg, plain(src.shape),
                                      plain(dst.shape), p.strides, p.kernel,
                                      p.dilation, p.padL, p.padR);
  return dnnl::pooling_v2_forward::primitive_desc(desc, ownScratchpad(),
                                                  engine());
}

/// Max pooling backward needs the forward's workspace (where each maximum
/// was): the kernel reruns the forward on the saved input first.
class MaxPoolBackward : public DnnlKernel {
public:
  explicit MaxPoolBackward(const KernelArgs &args)
      : DnnlKernel(args), stream(engine()) {
    const TensorView &dy = args.inputs[0], &x = args.inputs[1],
                     &dx = args.outputs[0];
    bool supported = true;
    auto forwardPd = poolForwardDesc(args, true, x, dy, supported);
    PoolShape p = poolShape(args, x.shape, dy.shape);
    dnnl::pooling_v2_backward::desc desc(algorithm::pooling_max, plain(x.shape),
                                         plain(dy.shape), p.strides, p.kernel,
                                         p.dilation, p.padL, p.padR);
    dnnl::pooling_v2_backward::primitive_desc pd(desc, ownScratchpad(),
                                                 engine(), forwardPd);
    forward = dnnl::pooling_v2_forward(forwardPd);
    backward = dnnl::pooling_v2_backward(pd);
    // The forward's maxima and result live only while the kernel runs.
    memory workspace = scratchMemory(forwardPd.workspace_desc());
    memory scratchDst = scratchMemory(forwardPd.dst_desc());
    forwardArgs = {{DNNL_ARG_SRC, bind(x)},
                   {DNNL_ARG_DST, scratchDst},
                   {DNNL_ARG_WORKSPACE, workspace}};
    backwardArgs = {{DNNL_ARG_DIFF_DST, bind(dy)},
                    {DNNL_ARG_DIFF_SRC, bind(dx)},
                    {DNNL_ARG_WORKSPACE, workspace}};
    bindScratchpad(forward, forwardArgs);
    bindScratchpad(backward, backwardArgs);
  }
  void run(const StepContext &) override {
    forward.execute(stream, forwardArgs);
    backward.execute(stream, backwardArgs);
    stream.wait();
  }

private:
  dnnl::stream stream;
  dnnl::pooling_v2_forward forward;
  dnnl::pooling_v2_backward backward;
  std::unordered_map<int, memory> forwardArgs, backwardArgs;
};

/// Batch normalization in inference mode: oneDNN normalizes with the running
/// statistics, which pass through unchanged. Training mode stays with the
/// project kernel: its batch statistics are accumulated in double, two-pass,
/// as PyTorch's CPU kernel does, and its backward recomputes them the same
/// way; oneDNN's float statistics differ from those enough to move
/// gradients of ill-conditioned channels (tiny batch variance) by percents.
class BatchNormInference : public DnnlKernel {
public:
  explicit BatchNormInference(const KernelArgs &args)
      : DnnlKernel(args), stream(engine()), mean(args.inputs[3]),
        var(args.inputs[4]), runMean(args.outputs[1]), runVar(args.outputs[2]) {
    float epsilon = static_cast<float>(args.f("epsilon", 1e-5));
    auto flags = dnnl::normalization_flags::use_scale |
                 dnnl::normalization_flags::use_shift |
                 dnnl::normalization_flags::use_global_stats;
    memory src = bind(args.inputs[0]), dst = bind(args.outputs[0]);
    dnnl::batch_normalization_forward::desc desc(
        prop_kind::forward_inference, src.get_desc(), epsilon, flags);
    dnnl::batch_normalization_forward::primitive_desc pd(desc, ownScratchpad(),
                                                         engine());
    primitive = dnnl::batch_normalization_forward(pd);
    arguments = {{DNNL_ARG_SRC, src},
                 {DNNL_ARG_DST, dst},
                 {DNNL_ARG_SCALE, bind(args.inputs[1])},
                 {DNNL_ARG_SHIFT, bind(args.inputs[2])},
                 {DNNL_ARG_MEAN, bind(mean)},
                 {DNNL_ARG_VARIANCE, bind(var)}};
    bindScratchpad(primitive, arguments);
  }
  void run(const StepContext &) override {
    primitive.execute(stream, arguments);
    stream.wait();
    std::copy_n(mean.f32(), mean.numel(), runMean.f32());
    std::copy_n(var.f32(), var.numel(), runVar.f32());
  }

private:
  dnnl::stream stream;
  dnnl::batch_normalization_forward primitive;
  std::unordered_map<int, memory> arguments;
  TensorView mean, var, runMean, runVar;
};

} // namespace

void registerDnnlPrimitives(KernelRegistry &registry) {
  wrap(registry, "batch_norm",
       [](const KernelArgs &args) -> std::unique_ptr<Kernel> {
         if (args.i("training_mode", 0) != 0 || args.find("activation"))
           return nullptr; // the project kernel (see BatchNormInference)
         return std::make_unique<BatchNormInference>(args);
       });
  // Not relu: oneDNN's gives 0 for NaN, where torch keeps NaN visible
  // (the project kernel in Elementwise.cpp does).
  for (auto [op, alg] : {std::pair{"tanh", algorithm::eltwise_tanh},
                         {"sigmoid", algorithm::eltwise_logistic},
                         {"sqrt", algorithm::eltwise_sqrt}})
    wrap(registry, op, [alg = alg](const KernelArgs &args) {
      return eltwiseForward(args, alg);
    });

  // unary_grad: its incoming gradient and saved value may be 2-byte copies.
  wrapOnFloat32Views(
      registry, "unary_grad",
      [](const KernelArgs &args) {
        return eltwiseBackwardOf(args.s("kind", "")).has_value();
      },
      [](const KernelArgs &args) -> std::unique_ptr<Kernel> {
        auto [alg, useDst] = *eltwiseBackwardOf(args.s("kind", ""));
        memory dy = bind(args.inputs[0]), saved = bind(args.inputs[1]),
               dx = bind(args.outputs[0]);
        dnnl::eltwise_forward::desc hintDesc(prop_kind::forward_training, alg,
                                             saved.get_desc());
        dnnl::eltwise_forward::primitive_desc hint(hintDesc, engine());
        dnnl::eltwise_backward::desc desc(alg, dy.get_desc(), saved.get_desc());
        dnnl::eltwise_backward::primitive_desc pd(desc, ownScratchpad(),
                                                  engine(), hint);
        return std::make_unique<PrimitiveKernel>(
            args, dnnl::eltwise_backward(pd),
            std::unordered_map<int, memory>{
                {DNNL_ARG_DIFF_DST, dy},
                {useDst ? DNNL_ARG_DST : DNNL_ARG_SRC, saved},
                {DNNL_ARG_DIFF_SRC, dx}});
      },
      {0, 1});

  for (bool log : {false, true}) {
    wrap(registry, log ? "log_softmax" : "softmax",
         [log](const KernelArgs &args) -> std::unique_ptr<Kernel> {
           if (args.i("zero_nan_rows", 0) != 0 || args.inputs.size() > 1)
             return nullptr; // no such post-op, no bias: the own kernel
           memory src = bind(args.inputs[0]), dst = bind(args.outputs[0]);
           int axis = static_cast<int>(
               normalizeAxis(args.i("axis", -1), args.inputs[0].rank()));
           if (log) {
             dnnl::logsoftmax_forward::desc desc(prop_kind::forward_training,
                                                 src.get_desc(), axis);
             return std::make_unique<PrimitiveKernel>(
                 args,
                 dnnl::logsoftmax_forward({desc, ownScratchpad(), engine()}),
                 std::unordered_map<int, memory>{{DNNL_ARG_SRC, src},
                                                 {DNNL_ARG_DST, dst}});
           }
           dnnl::softmax_forward::desc desc(prop_kind::forward_training,
                                            src.get_desc(), axis);
           return std::make_unique<PrimitiveKernel>(
               args, dnnl::softmax_forward({desc, ownScratchpad(), engine()}),
               std::unordered_map<int, memory>{{DNNL_ARG_SRC, src},
                                               {DNNL_ARG_DST, dst}});
         });
  }
  wrap(registry, "softmax_grad",
       [](const KernelArgs &args) -> std::unique_ptr<Kernel> {
         memory dy = bind(args.inputs[0]), y = bind(args.inputs[1]),
                dx = bind(args.outputs[0]);
         int axis = static_cast<int>(
             normalizeAxis(args.i("axis", -1), args.inputs[1].rank()));
         std::unordered_map<int, memory> arguments{{DNNL_ARG_DIFF_DST, dy},
                                                   {DNNL_ARG_DST, y},
                                                   {DNNL_ARG_DIFF_SRC, dx}};
         if (args.i("log", 0)) {
           dnnl::logsoftmax_forward::primitive_desc hint(
               {prop_kind::forward_training, y.get_desc(), axis}, engine());
           dnnl::logsoftmax_backward::desc desc(dy.get_desc(), y.get_desc(),
                                                axis);
           return std::make_unique<PrimitiveKernel>(
               args,
               dnnl::logsoftmax_backward(
                   {desc, ownScratchpad(), engine(), hint}),
               arguments);
         }
         dnnl::softmax_forward::primitive_desc hint(
             {prop_kind::forward_training, y.get_desc(), axis}, engine());
         dnnl::softmax_backward::desc desc(dy.get_desc(), y.get_desc(), axis);
         return std::make_unique<PrimitiveKernel>(
             args,
             dnnl::softmax_backward({desc, ownScratchpad(), engine(), hint}),
             arguments);
       });

  for (bool isMax : {true, false})
    wrap(registry, isMax ? "max_pool" : "average_pool",
         [isMax](const KernelArgs &args) -> std::unique_ptr<Kernel> {
           bool supported = true;
           auto pd =
               poolForwardDesc(args, isMax, args.inputs[0], args.outputs[0],
                               supported, prop_kind::forward_inference);
           if (!supported)
             return nullptr;
           std::unordered_map<int, memory> arguments{
               {DNNL_ARG_SRC, bind(args.inputs[0])},
               {DNNL_ARG_DST, bind(args.outputs[0])}};
           return std::make_unique<PrimitiveKernel>(
               args, dnnl::pooling_v2_forward(pd), arguments);
         });
  wrap(registry, "max_pool_grad",
       [](const KernelArgs &args) -> std::unique_ptr<Kernel> {
         return std::make_unique<MaxPoolBackward>(args);
       });
  wrap(registry, "average_pool_grad",
       [](const KernelArgs &args) -> std::unique_ptr<Kernel> {
         const TensorView &dy = args.inputs[0], &dx = args.outputs[0];
         bool supported = true;
         auto forwardPd = poolForwardDesc(args, false, dx, dy, supported);
         if (!supported)
           return nullptr;
         PoolShape p = poolShape(args, dx.shape, dy.shape);
         bool supportedAgain = true;
         algorithm alg = poolAlgorithm(args, false, p, supportedAgain);
         dnnl::pooling_v2_backward::desc desc(
             alg, plain(dx.shape), plain(dy.shape), p.strides, p.kernel,
             p.dilation, p.padL, p.padR);
         dnnl::pooling_v2_backward::primitive_desc pd(desc, ownScratchpad(),
                                                      engine(), forwardPd);
         return std::make_unique<PrimitiveKernel>(
             args, dnnl::pooling_v2_backward(pd),
             std::unordered_map<int, memory>{{DNNL_ARG_DIFF_DST, bind(dy)},
                                             {DNNL_ARG_DIFF_SRC, bind(dx)}});
       });
}

} // namespace cdp::runtime::cpu
