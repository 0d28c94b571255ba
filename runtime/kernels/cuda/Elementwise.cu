//===- Elementwise.cu - element-wise CUDA kernels -------------------------===//
//
// The same formulas as the CPU kernels, one thread per element; dropout
// draws from the same counter-based stream, so masks match the CPU's bit
// for bit.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "Reduce.cuh"
#include "cdp/Runtime/OpTable.h"

#include "../Activations.h"
#include "../DropoutStream.h"
#include "../NarrowFloat.h"
#include "../NarrowOperands.h"
#include "../Rotary.h"

#include <functional>

namespace cdp::runtime::cuda {

namespace {

constexpr float kSqrt1_2 = 0.70710678118654752f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kTwoOverSqrtPi = 1.1283791670955126f;

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Min, Max };

template <typename T> __device__ T apply(BinaryOp op, T a, T b) {
  switch (op) {
  case BinaryOp::Add:
    return a + b;
  case BinaryOp::Sub:
    return a - b;
  case BinaryOp::Mul:
    return a * b;
  case BinaryOp::Div:
    if constexpr (std::is_integral_v<T>)
      return b == 0 ? T(0) : a / b;
    else
      return a / b;
  case BinaryOp::Min: // NaN wins, as torch.minimum
    return a != a ? a : b != b ? b : (b < a ? b : a);
  case BinaryOp::Max:
    return a != a ? a : b != b ? b : (b > a ? b : a);
  default:
    if constexpr (std::is_integral_v<T>)
      return a;
    else
      return b == 2.0f ? a * a : powf(a, b);
  }
}

/// What a binary op does to its float results as it writes them
/// (round_result: the cdp.round_to after it).
template <typename T> __device__ T rounded(NarrowFormat rounding, T value) {
  if constexpr (std::is_integral_v<T>)
    return value;
  else
    return roundedTo(rounding, value);
}

template <typename T>
__global__ void binaryKernel(BinaryOp op, const T *a, const T *b, T *y,
                             int64_t n, IndexMap ia, IndexMap ib, bool same,
                             NarrowFormat rounding) {
  CDP_FOR_EACH(i, n) {
    y[i] = rounded(rounding, same ? apply(op, a[i], b[i])
                                  : apply(op, a[ia(i)], b[ib(i)]));
  }
}

/// A float binary op reading operands stored as `sa` and `sb` (2-byte ones
/// widened as read) and storing its result in 2 bytes where `twoBytes`
/// (cdp.mul under round_result).
__global__ void narrowBinaryKernel(BinaryOp op, const void *a, NarrowFormat sa,
                                   const void *b, NarrowFormat sb, void *y,
                                   int64_t n, IndexMap ia, IndexMap ib,
                                   bool same, NarrowFormat rounding,
                                   bool twoBytes) {
  CDP_FOR_EACH(i, n) {
    float value = apply(op, loadValue(a, same ? i : ia(i), sa),
                        loadValue(b, same ? i : ib(i), sb));
    storeResult(y, i, value, rounding, twoBytes);
  }
}

void addBinary(KernelRegistry &registry, const std::string &name, BinaryOp op) {
  addKernel(
      registry, name, Launches::SameEveryStep, [op](const KernelArgs &args) {
        TensorView a = args.inputs[0], b = args.inputs[1], y = args.outputs[0];
        IndexMap ia = broadcastMap(args, a.shape, y.shape),
                 ib = broadcastMap(args, b.shape, y.shape);
        bool same = a.shape == y.shape && b.shape == y.shape;
        int64_t n = y.numel();
        bool integer = y.dtype == plan::I64;
        NarrowFormat rounding = roundingOf(args);
        NarrowFormat sa = storedFormatOf(a), sb = storedFormatOf(b);
        bool twoBytes = storedFormatOf(y) != NarrowFormat::None;
        bool narrow =
            sa != NarrowFormat::None || sb != NarrowFormat::None || twoBytes;
        return [=](const StepContext &context) {
          if (n == 0)
            return;
          if (narrow)
            narrowBinaryKernel<<<blocksFor(n), kThreads, 0,
                                 streamOf(context)>>>(op, a.data, sa, b.data,
                                                      sb, y.data, n, ia, ib,
                                                      same, rounding, twoBytes);
          else if (integer)
            binaryKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
                op, a.i64(), b.i64(), y.i64(), n, ia, ib, same,
                NarrowFormat::None);
          else
            binaryKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
                op, a.f32(), b.f32(), y.f32(), n, ia, ib, same, rounding);
          launched("binary");
        };
      });
}

enum class UnaryOp {
  Relu,
  Erf,
  Tanh,
  Sigmoid,
  Sqrt,
  HardSwish,
  Clip,
  HardSigmoid,
  Gelu,
  GeluTanh,
  Reciprocal,
  Sin,
  Cos,
  Abs,
  Exp,
  Log,
  RoundBfloat16,
  RoundFloat16,
  Silu
};

__device__ float applyUnary(UnaryOp op, float x, float p, float q) {
  switch (op) {
  case UnaryOp::Relu:
    return reluOf(x);
  case UnaryOp::Erf:
    return erff(x);
  case UnaryOp::Tanh:
    return tanhf(x);
  case UnaryOp::Sigmoid:
    return sigmoidOf(x);
  case UnaryOp::Silu:
    return siluOf(x);
  case UnaryOp::Sqrt:
    return sqrtf(x);
  case UnaryOp::HardSwish:
    return x * fminf(1.0f, fmaxf(0.0f, x / 6.0f + 0.5f));
  case UnaryOp::Clip:
    return fminf(fmaxf(x, p), q);
  case UnaryOp::HardSigmoid:
    return fminf(1.0f, fmaxf(0.0f, p * x + q));
  case UnaryOp::Gelu:
    return 0.5f * x * (1.0f + erff(x * kSqrt1_2));
  case UnaryOp::Reciprocal:
    return 1.0f / x;
  case UnaryOp::Sin:
    return sinf(x);
  case UnaryOp::Cos:
    return cosf(x);
  case UnaryOp::Abs:
    return fabsf(x);
  case UnaryOp::Exp:
    return expf(x);
  case UnaryOp::Log:
    return logf(x);
  case UnaryOp::RoundBfloat16:
    return roundToBfloat16(x);
  case UnaryOp::RoundFloat16:
    return roundToFloat16(x);
  default:
    return 0.5f * x *
           (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  }
}

/// `rounding`: the op's round_result (GELU's; None for the others); `x`
/// stored as `stored` (GELU may read the backward's 2-byte copy) and `y` in
/// 2 bytes where `twoBytes` (GELU's result cdp-narrow-results stores so).
__global__ void unaryKernel(UnaryOp op, const void *x, NarrowFormat stored,
                            void *y, int64_t n, float p, float q,
                            NarrowFormat rounding, bool twoBytes) {
  CDP_FOR_EACH(i, n) {
    storeResult(y, i, applyUnary(op, loadValue(x, i, stored), p, q), rounding,
                twoBytes);
  }
}

void addUnary(KernelRegistry &registry, const std::string &name,
              std::function<UnaryOp(const KernelArgs &)> pick,
              std::function<std::pair<float, float>(const KernelArgs &)>
                  params = nullptr) {
  addKernel(registry, name, Launches::SameEveryStep,
            [pick, params](const KernelArgs &args) {
              TensorView x = args.inputs[0], y = args.outputs[0];
              UnaryOp op = pick(args);
              std::pair<float, float> pq =
                  params ? params(args) : std::pair<float, float>{0, 0};
              float p = pq.first, q = pq.second;
              int64_t n = y.numel();
              NarrowFormat rounding = roundingOf(args);
              NarrowFormat stored = storedFormatOf(x);
              bool twoBytes = storedInTwoBytes(y);
              return [=](const StepContext &context) {
                if (n == 0)
                  return;
                unaryKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
                    op, x.data, stored, y.data, n, p, q, rounding, twoBytes);
                launched("unary");
              };
            });
}

enum class GradOp {
  Relu,
  Gelu,
  GeluTanh,
  Erf,
  Clip,
  HardSigmoid,
  HardSwish,
  Sigmoid,
  Tanh,
  Sqrt,
  Reciprocal,
  Sin,
  Cos,
  Abs,
  Exp,
  Log,
  Silu
};

__device__ float applyGrad(GradOp op, float g, float x, float p, float q) {
  switch (op) {
  case GradOp::Relu:
    return x > 0.0f ? g : 0.0f;
  case GradOp::Gelu: {
    float cdf = 0.5f * (1.0f + erff(x * kSqrt1_2));
    float pdf = expf(-0.5f * x * x) * 0.3989422804014327f;
    return g * (cdf + x * pdf);
  }
  case GradOp::GeluTanh: {
    float inner = kSqrt2OverPi * (x + 0.044715f * x * x * x);
    float t = tanhf(inner);
    float dinner = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
    return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner);
  }
  case GradOp::Erf:
    return g * kTwoOverSqrtPi * expf(-x * x);
  case GradOp::Clip:
    return x > p && x < q ? g : 0.0f;
  case GradOp::HardSigmoid: {
    float z = p * x + q;
    return z > 0.0f && z < 1.0f ? g * p : 0.0f;
  }
  case GradOp::HardSwish:
    return x < -3.0f ? 0.0f : x <= 3.0f ? g * (x / 3.0f + 0.5f) : g;
  case GradOp::Sigmoid:
    return g * x * (1.0f - x);
  case GradOp::Silu:
    return siluGradOf(g, x);
  case GradOp::Tanh:
    return g * (1.0f - x * x);
  case GradOp::Reciprocal: // x holds the result y here
    return -g * x * x;
  case GradOp::Sin:
    return g * cosf(x);
  case GradOp::Cos:
    return -g * sinf(x);
  case GradOp::Abs:
    return x > 0.0f ? g : x < 0.0f ? -g : 0.0f;
  case GradOp::Exp: // x holds the result y here
    return g * x;
  case GradOp::Log:
    return g / x;
  default:
    return g * 0.5f / x;
  }
}

/// `x`, the saved value, stored as `stored` (the backward's 2-byte copy,
/// widened as read, or float32); `g` stored as `gradStored` likewise (a
/// product's rounded result cdp-narrow-results stores so).
__global__ void gradKernel(GradOp op, const void *g, NarrowFormat gradStored,
                           const void *x, NarrowFormat stored, void *dx,
                           int64_t n, float p, float q, NarrowFormat rounding,
                           bool twoBytes) {
  CDP_FOR_EACH(i, n) {
    storeResult(dx, i,
                applyGrad(op, loadValue(g, i, gradStored),
                          loadValue(x, i, stored), p, q),
                rounding, twoBytes);
  }
}

GradOp gradOf(const KernelArgs &args, const std::string &kind) {
  static const std::pair<const char *, GradOp> kinds[] = {
      {"relu", GradOp::Relu},
      {"gelu", GradOp::Gelu},
      {"gelu_tanh", GradOp::GeluTanh},
      {"erf", GradOp::Erf},
      {"clip", GradOp::Clip},
      {"hard_sigmoid", GradOp::HardSigmoid},
      {"hard_swish", GradOp::HardSwish},
      {"sigmoid", GradOp::Sigmoid},
      {"tanh", GradOp::Tanh},
      {"sqrt", GradOp::Sqrt},
      {"reciprocal", GradOp::Reciprocal},
      {"sin", GradOp::Sin},
      {"cos", GradOp::Cos},
      {"abs", GradOp::Abs},
      {"exp", GradOp::Exp},
      {"log", GradOp::Log},
      {"silu", GradOp::Silu}};
  for (auto [name, op] : kinds)
    if (kind == name)
      return op;
  args.fail("unknown activation '" + kind + "'");
}

/// `x` stored as `stored` (2-byte values widened as read) and `y` in 2 bytes
/// where `twoBytes` (cdp-narrow-results).
__global__ void dropoutKernel(const void *x, NarrowFormat stored, void *y,
                              uint8_t *mask, int64_t n, float ratio,
                              uint64_t seed, uint64_t stream,
                              NarrowFormat rounding, bool twoBytes) {
  float keepScale = 1.0f / (1.0f - ratio);
  CDP_FOR_EACH(i, n) {
    bool keep = ratio == 0.0f || dropoutUniform(seed, stream, i) >= ratio;
    mask[i] = keep;
    float value = loadValue(x, i, stored);
    storeResult(y, i, keep ? (ratio == 0.0f ? value : value * keepScale) : 0.0f,
                rounding, twoBytes);
  }
}

/// `dx` in 2 bytes where `twoBytes` (cdp-narrow-results).
__global__ void dropoutGradKernel(const float *dy, const uint8_t *mask,
                                  void *dx, int64_t n, float keepScale,
                                  NarrowFormat rounding, bool twoBytes) {
  CDP_FOR_EACH(i, n) {
    storeResult(dx, i, mask[i] ? dy[i] * keepScale : 0.0f, rounding, twoBytes);
  }
}

template <typename From, typename To>
__global__ void castKernel(const From *x, To *y, int64_t n) {
  CDP_FOR_EACH(i, n) {
    if constexpr (std::is_same_v<To, uint8_t>)
      y[i] = x[i] != From(0);
    else
      y[i] = static_cast<To>(x[i]);
  }
}

/// cdp.pack_narrow and cdp.unpack_narrow (the CPU kernels say what they
/// mean), a thread per value.
__global__ void packNarrowKernel(const float *x, uint16_t *packed, int64_t n,
                                 bool bf16) {
  CDP_FOR_EACH(i, n) { packed[i] = narrowBitsOf(x[i], bf16); }
}

__global__ void unpackNarrowKernel(const uint16_t *packed, float *y, int64_t n,
                                   bool bf16) {
  CDP_FOR_EACH(i, n) {
    y[i] = bf16 ? floatOfBfloat16(packed[i]) : floatOfFloat16(packed[i]);
  }
}

template <typename From>
void castFrom(cudaStream_t stream, const From *x, const TensorView &y,
              int64_t n) {
  if (y.dtype == plan::F32)
    castKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, y.f32(), n);
  else if (y.dtype == plan::I64)
    castKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, y.i64(), n);
  else
    castKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, y.b8(), n);
}

void registerActivations(KernelRegistry &registry) {
  auto fixed = [](UnaryOp op) {
    return [op](const KernelArgs &) { return op; };
  };
  addUnary(registry, "relu", fixed(UnaryOp::Relu));
  addUnary(registry, "erf", fixed(UnaryOp::Erf));
  addUnary(registry, "tanh", fixed(UnaryOp::Tanh));
  addUnary(registry, "sigmoid", fixed(UnaryOp::Sigmoid));
  addUnary(registry, "sqrt", fixed(UnaryOp::Sqrt));
  addUnary(registry, "hard_swish", fixed(UnaryOp::HardSwish));
  addUnary(registry, "silu", fixed(UnaryOp::Silu));
  addUnary(registry, "reciprocal", fixed(UnaryOp::Reciprocal));
  addUnary(registry, "sin", fixed(UnaryOp::Sin));
  addUnary(registry, "cos", fixed(UnaryOp::Cos));
  addUnary(registry, "abs", fixed(UnaryOp::Abs));
  addUnary(registry, "exp", fixed(UnaryOp::Exp));
  addUnary(registry, "log", fixed(UnaryOp::Log));
  addUnary(registry, "round_to", [](const KernelArgs &args) {
    return ops::RoundToAttributes::read(args).format == "bf16"
               ? UnaryOp::RoundBfloat16
               : UnaryOp::RoundFloat16;
  });
  addUnary(registry, "clip", fixed(UnaryOp::Clip), [](const KernelArgs &args) {
    ops::ClipAttributes attrs = ops::ClipAttributes::read(args);
    return std::pair<float, float>(static_cast<float>(attrs.min),
                                   static_cast<float>(attrs.max));
  });
  addUnary(registry, "hard_sigmoid", fixed(UnaryOp::HardSigmoid),
           [](const KernelArgs &args) {
             ops::HardSigmoidAttributes attrs =
                 ops::HardSigmoidAttributes::read(args);
             return std::pair<float, float>(static_cast<float>(attrs.alpha),
                                            static_cast<float>(attrs.beta));
           });
  addUnary(registry, "gelu", [](const KernelArgs &args) {
    return ops::GeluAttributes::read(args).approximate == "tanh"
               ? UnaryOp::GeluTanh
               : UnaryOp::Gelu;
  });
  addKernel(registry, "unary_grad", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView dy = args.inputs[0], saved = args.inputs[1],
                         dx = args.outputs[0];
              std::string kind = args.s("kind", "");
              GradOp op = gradOf(args, kind);
              float p = 0, q = 0;
              if (kind == "clip" || kind == "hard_sigmoid") {
                std::vector<double> params = args.floats("params");
                if (params.size() != 2)
                  args.fail("activation '" + kind + "' needs two params");
                p = static_cast<float>(params[0]);
                q = static_cast<float>(params[1]);
              }
              int64_t n = dx.numel();
              NarrowFormat rounding = roundingOf(args);
              bool twoBytes = storedInTwoBytes(dx);
              NarrowFormat stored = storedFormatOf(saved),
                           gradStored = storedFormatOf(dy);
              return [=](const StepContext &context) {
                if (n == 0)
                  return;
                gradKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
                    op, dy.data, gradStored, saved.data, stored, dx.data, n, p,
                    q, rounding, twoBytes);
                launched("unary_grad");
              };
            });
}

void registerDropout(KernelRegistry &registry) {
  addKernel(registry, "dropout", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0], mask = args.outputs[1];
    ops::DropoutAttributes attrs = ops::DropoutAttributes::read(args);
    float ratio = static_cast<float>(attrs.ratio);
    bool training = attrs.training_mode;
    DropoutStream draw(args);
    int64_t n = y.numel();
    NarrowFormat rounding = roundingOf(args), stored = storedFormatOf(x);
    bool twoBytes = storedInTwoBytes(y);
    return [=](const StepContext &context) {
      if (n == 0)
        return;
      dropoutKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
          x.data, stored, y.data, mask.b8(), n, training ? ratio : 0.0f,
          draw.seedOf(context), draw.stream, rounding, twoBytes);
      launched("dropout");
    };
  });
  // The mask the forward drew decides; no seed of its own.
  addKernel(
      registry, "dropout_grad", Launches::SameEveryStep,
      [](const KernelArgs &args) {
        TensorView dy = args.inputs[0], mask = args.inputs[1],
                   dx = args.outputs[0];
        float keepScale = dropoutGradKeepScale(args);
        int64_t n = dx.numel();
        NarrowFormat rounding = roundingOf(args);
        bool twoBytes = storedInTwoBytes(dx);
        return [=](const StepContext &context) {
          if (n == 0)
            return;
          dropoutGradKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
              dy.f32(), mask.b8(), dx.data, n, keepScale, rounding, twoBytes);
          launched("dropout_grad");
        };
      });
}

} // namespace

/// cdp.rotary, one thread an element: its position along the row (32-bit
/// division where the tensor allows), its partner D/2 away in the row.
__global__ void rotaryKernel(const float *x, const float *cos, const float *sin,
                             float *y, int64_t n, int64_t dim, bool adjoint,
                             NarrowFormat format, IndexMap cosAt,
                             IndexMap sinAt) {
  int64_t half = dim / 2;
  bool small = n < (int64_t(1) << 31);
  CDP_FOR_EACH(i, n) {
    int64_t d = small ? int64_t(uint32_t(i) % uint32_t(dim)) : i % dim;
    bool first = d < half;
    int64_t p = first ? i + half : i - half;
    y[i] = adjoint ? rotaryAdjointOf(x[i], x[p], first, cos[cosAt(i)],
                                     sin[sinAt(p)], format)
                   : rotaryOf(x[i], x[p], first, cos[cosAt(i)], sin[sinAt(i)]);
  }
}

void registerRotary(KernelRegistry &registry) {
  addKernel(registry, "rotary", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView x = args.inputs[0], cos = args.inputs[1],
                         sin = args.inputs[2], y = args.outputs[0];
              bool adjoint = ops::RotaryAttributes::read(args).adjoint;
              NarrowFormat format = narrowOperandsOf(args);
              IndexMap cosAt = broadcastMap(args, cos.shape, x.shape),
                       sinAt = broadcastMap(args, sin.shape, x.shape);
              int64_t n = x.numel(), dim = x.shape.back();
              return [=](const StepContext &context) {
                if (n == 0)
                  return;
                rotaryKernel<<<blocksFor(n), kThreads, 0, streamOf(context)>>>(
                    x.f32(), cos.f32(), sin.f32(), y.f32(), n, dim, adjoint,
                    format, cosAt, sinAt);
                launched("rotary");
              };
            });
}

void registerElementwise(KernelRegistry &registry) {
  registerRotary(registry);
  addBinary(registry, "add", BinaryOp::Add);
  addBinary(registry, "sub", BinaryOp::Sub);
  addBinary(registry, "mul", BinaryOp::Mul);
  addBinary(registry, "div", BinaryOp::Div);
  addBinary(registry, "pow", BinaryOp::Pow);
  addBinary(registry, "min", BinaryOp::Min);
  addBinary(registry, "max", BinaryOp::Max);
  registerActivations(registry);
  registerSelection(registry);
  registerDropout(registry);

  addKernel(registry, "cast", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView x = args.inputs[0], y = args.outputs[0];
              int64_t n = y.numel();
              return [=](const StepContext &context) {
                if (n == 0)
                  return;
                if (x.dtype == plan::F32)
                  castFrom(streamOf(context), x.f32(), y, n);
                else if (x.dtype == plan::I64)
                  castFrom(streamOf(context), x.i64(), y, n);
                else
                  castFrom(streamOf(context), x.b8(), y, n);
                launched("cast");
              };
            });

  addKernel(registry, "pack_narrow", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView x = args.inputs[0], packed = args.outputs[0];
              bool bf16 =
                  ops::PackNarrowAttributes::read(args).format == "bf16";
              int64_t n = x.numel();
              return [=](const StepContext &context) {
                cudaStream_t stream = streamOf(context);
                if (n)
                  packNarrowKernel<<<blocksFor(n), kThreads, 0, stream>>>(
                      x.f32(), static_cast<uint16_t *>(packed.data), n, bf16);
                launched("pack_narrow");
              };
            });
  addKernel(
      registry, "unpack_narrow", Launches::SameEveryStep,
      [](const KernelArgs &args) {
        TensorView packed = args.inputs[0], y = args.outputs[0];
        bool bf16 = ops::UnpackNarrowAttributes::read(args).format == "bf16";
        int64_t n = y.numel();
        return [=](const StepContext &context) {
          if (n)
            unpackNarrowKernel<<<blocksFor(n), kThreads, 0,
                                 streamOf(context)>>>(
                static_cast<const uint16_t *>(packed.data), y.f32(), n, bf16);
          launched("unpack_narrow");
        };
      });

  // Sum over the dimensions `y` broadcast in `x`.
  addKernel(registry, "reduce_to", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView x = args.inputs[0], y = args.outputs[0];
              size_t shift = x.shape.size() - y.shape.size();
              std::vector<bool> reduced(x.shape.size(), true);
              for (size_t d = 0; d < y.shape.size(); ++d)
                reduced[d + shift] = y.shape[d] == 1 && x.shape[d + shift] != 1;
              auto sum = std::make_shared<SegmentedSum>(args, x.shape, reduced);
              SegmentedSum::Term term =
                  x.dtype == plan::BF16  ? SegmentedSum::Term::Bfloat16Value
                  : x.dtype == plan::F16 ? SegmentedSum::Term::Float16Value
                                         : SegmentedSum::Term::Value;
              NarrowFormat rounding = roundingOf(args);
              return [=](const StepContext &context) {
                sum->sumInto(streamOf(context), x.data, y.f32(), 1.0, term,
                             rounding);
              };
            });

  addKernel(
      registry, "expand", Launches::SameEveryStep, [](const KernelArgs &args) {
        TensorView x = args.inputs[0], y = args.outputs[0];
        IndexMap map = broadcastMap(args, x.shape, y.shape);
        size_t width = plan::dtypeSize(y.dtype);
        return [=](const StepContext &context) {
          gatherCopy(streamOf(context), x.data, y.data, y.numel(), width, map);
        };
      });
}

} // namespace cdp::runtime::cuda
