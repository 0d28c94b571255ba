//===- Elementwise.cpp - element-wise CPU kernels -------------------------===//

#include "BroadcastReduction.h"
#include "CpuKernels.h"
#include "cdp/Runtime/OpTable.h"

#include "../Activations.h"
#include "../DropoutStream.h"
#include "../NarrowFloat.h"
#include "../NarrowOperands.h"
#include "../Rotary.h"
#include "VectorMath.h"

#include <cmath>

namespace cdp::runtime::cpu {

namespace {

constexpr float kTwoOverSqrtPi = 1.1283791670955126f;

/// Element-wise kernels' chunks: each read into float32 once (a 2-byte
/// operand widened into the thread's buffer, a float32 one where it lies),
/// computed and stored (rounded, or packed into a 2-byte result) while it
/// is in the cache, one pass over memory where widening the input, the
/// function and rounding its result were a pass each.
constexpr int64_t kElementChunk = 4096;

/// Calls `chunk(from, count)` over [0, n) in chunks, on the threads.
template <typename Chunk> void forEachChunk(int64_t n, Chunk chunk) {
#pragma omp parallel for if (n > 65536)
  for (int64_t from = 0; from < n; from += kElementChunk)
    chunk(from, std::min(kElementChunk, n - from));
}

template <typename T, typename Fn>
std::function<void(const StepContext &)> binary(const KernelArgs &args, Fn fn) {
  TensorView a = args.inputs[0], b = args.inputs[1], y = args.outputs[0];
  int64_t n = y.numel();
  if (a.numel() == n && b.numel() == n)
    return [=](const StepContext &) {
      const T *pa = static_cast<const T *>(a.data);
      const T *pb = static_cast<const T *>(b.data);
      T *py = static_cast<T *>(y.data);
#pragma omp parallel for if (n > 65536)
      for (int64_t i = 0; i < n; ++i)
        py[i] = fn(pa[i], pb[i]);
    };
  if (b.numel() == 1 && a.numel() == n)
    return [=](const StepContext &) {
      const T *pa = static_cast<const T *>(a.data);
      T vb = *static_cast<const T *>(b.data);
      T *py = static_cast<T *>(y.data);
#pragma omp parallel for if (n > 65536)
      for (int64_t i = 0; i < n; ++i)
        py[i] = fn(pa[i], vb);
    };
  auto walk = std::make_shared<const BroadcastWalk>(
      std::vector<std::vector<int64_t>>{a.shape, b.shape}, y.shape);
  return [=](const StepContext &) {
    const T *pa = static_cast<const T *>(a.data);
    const T *pb = static_cast<const T *>(b.data);
    T *py = static_cast<T *>(y.data);
    int64_t rows = walk->rows(), length = walk->rowLength();
    int64_t sa = walk->step(0), sb = walk->step(1);
#pragma omp parallel for if (n > 65536)
    for (int64_t row = 0; row < rows; ++row) {
      const T *ra = pa + walk->rowStart(0, row);
      const T *rb = pb + walk->rowStart(1, row);
      T *ry = py + row * length;
      for (int64_t i = 0; i < length; ++i)
        ry[i] = fn(ra[i * sa], rb[i * sb]);
    }
  };
}

/// A float binary op's kernel; `round_result` rounds each value as it is
/// written (the cdp.round_to cdp-fuse-roundings moved into the op).
template <typename Fn>
std::function<void(const StepContext &)> floatBinary(const KernelArgs &args,
                                                     Fn fn) {
  switch (roundingOf(args)) {
  case NarrowFormat::Bfloat16:
    return binary<float>(
        args, [fn](float a, float b) { return roundToBfloat16(fn(a, b)); });
  case NarrowFormat::Float16:
    return binary<float>(
        args, [fn](float a, float b) { return roundToFloat16(fn(a, b)); });
  default:
    return binary<float>(args, fn);
  }
}

bool twoBytes(const TensorView &view) {
  return view.dtype == plan::BF16 || view.dtype == plan::F16;
}

/// Whether a binary op's operands are elements of the result (a the
/// result's shape, b too or a scalar), which narrowBinary takes.
bool inChunks(const KernelArgs &args) {
  int64_t n = args.outputs[0].numel();
  return args.inputs[0].numel() == n &&
         (args.inputs[1].numel() == n || args.inputs[1].numel() == 1);
}

/// A float binary op whose operands or result the plan stores in 2 bytes,
/// in one pass: chunks read once into float32, computed, rounded or packed
/// in the cache (before: each 2-byte operand widened into scratch, the
/// result computed into more, then packed; GPT-2 small bf16's 48 products
/// of q and k by their scale a step).
template <typename Fn>
std::function<void(const StepContext &)> narrowBinary(const KernelArgs &args,
                                                      Fn fn) {
  TensorView a = args.inputs[0], b = args.inputs[1], y = args.outputs[0];
  int64_t n = y.numel();
  bool scalar = b.numel() == 1 && n != 1;
  NarrowFormat rounding = roundingOf(args);
  return [=](const StepContext &) {
    float bValue = scalar ? loadValue(b.data, 0, storedFormatOf(b)) : 0.0f;
    forEachChunk(n, [&](int64_t from, int64_t count) {
      alignas(64) float inA[kElementChunk], inB[kElementChunk],
          out[kElementChunk];
      const float *pa = floatsOf(a, from, count, inA);
      float *results = resultsOf(y, from, out);
      // Two loops, so that neither chooses its b per element (which kept
      // the loop scalar: a load of b the compiler may not hoist).
      if (scalar) {
        for (int64_t i = 0; i < count; ++i)
          results[i] = fn(pa[i], bValue);
      } else {
        const float *pb = floatsOf(b, from, count, inB);
        for (int64_t i = 0; i < count; ++i)
          results[i] = fn(pa[i], pb[i]);
      }
      storeRow(results, count, rounding, y, from);
    });
  };
}

template <typename Fn>
void addBinary(KernelRegistry &registry, const std::string &op, Fn fn) {
  registry.add(
      op, Backend::CPU,
      [fn](const KernelArgs &args) -> std::unique_ptr<Kernel> {
        auto floats = [fn](float a, float b) {
          return static_cast<float>(fn(a, b));
        };
        if (args.outputs[0].dtype == plan::I64)
          return std::make_unique<FunctionKernel>(
              binary<int64_t>(args, [fn](int64_t a, int64_t b) {
                return static_cast<int64_t>(fn(a, b));
              }));
        // cdp.mul under round_result may read and store 2-byte values:
        // in chunks where the shapes agree (or b is a scalar), else
        // widened into, and computed in, float32 buffers.
        bool narrow = twoBytes(args.inputs[0]) || twoBytes(args.inputs[1]) ||
                      twoBytes(args.outputs[0]);
        if (narrow && inChunks(args))
          return std::make_unique<FunctionKernel>(narrowBinary(args, floats));
        if (narrow)
          return narrowResultKernel(args,
                                    [floats](const KernelArgs &wide) {
                                      return binary<float>(wide, floats);
                                    },
                                    {0, 1});
        return std::make_unique<FunctionKernel>(floatBinary(args, floats));
      });
}

template <typename Fn>
std::function<void(const StepContext &)> unary(const KernelArgs &args, Fn fn) {
  TensorView x = args.inputs[0], y = args.outputs[0];
  int64_t n = y.numel();
  return [=](const StepContext &) {
    const float *px = x.f32();
    float *py = y.f32();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i)
      py[i] = fn(px[i]);
  };
}

template <typename Fn>
void addUnary(KernelRegistry &registry, const std::string &op, Fn fn) {
  addKernel(registry, op,
            [fn](const KernelArgs &args) { return unary(args, fn); });
}

/// Calls `use` with a reader of `view`'s value i as float: float32 storage,
/// or the 2-byte patterns a --precision plan stores (widened exactly), or,
/// where `rounding` names a format, float32 values rounded to it as read.
template <typename Use>
void withReader(const TensorView &view, NarrowFormat rounding, Use use) {
  if (storedFormatOf(view) == NarrowFormat::Bfloat16) {
    auto *bits = static_cast<const uint16_t *>(view.data);
    return use([bits](int64_t i) { return floatOfBfloat16(bits[i]); });
  }
  if (storedFormatOf(view) == NarrowFormat::Float16) {
    auto *bits = static_cast<const uint16_t *>(view.data);
    return use([bits](int64_t i) { return floatOfFloat16(bits[i]); });
  }
  const float *values = view.f32();
  if (rounding == NarrowFormat::Bfloat16)
    return use([values](int64_t i) { return roundToBfloat16(values[i]); });
  if (rounding == NarrowFormat::Float16)
    return use([values](int64_t i) { return roundToFloat16(values[i]); });
  return use([values](int64_t i) { return values[i]; });
}

/// Calls `use` with a writer of value i into `view`: float32, or, for a
/// result cdp-narrow-results stores in 2 bytes, the value rounded to that
/// format.
template <typename Use> void withWriter(const TensorView &view, Use use) {
  if (storedInTwoBytes(view)) {
    auto *bits = static_cast<uint16_t *>(view.data);
    bool bf16 = storedFormatOf(view) == NarrowFormat::Bfloat16;
    return use(
        [bits, bf16](int64_t i, float x) { bits[i] = narrowBitsOf(x, bf16); });
  }
  float *values = view.f32();
  return use([values](int64_t i, float x) { values[i] = x; });
}

/// dx = dy where y > 0, else 0. Both are read unconditionally and each
/// thread takes its own copies of the accessors (firstprivate), so that no
/// store can alias their pointers: the loop vectorizes.
template <typename Grad, typename Output, typename Write>
void reluGradientLoop(Grad grad, Output output, Write write, int64_t n) {
#pragma omp parallel for if (n > 65536) firstprivate(grad, output, write)
  for (int64_t i = 0; i < n; ++i) {
    float g = grad(i);
    write(i, output(i) > 0.0f ? g : 0.0f);
  }
}

/// ReLU's gradient, dx = dy where the saved output y > 0, else 0, in one
/// pass whatever the storage: a --precision plan's y is the backward's
/// 2-byte copy, dy may be one, and dx is rounded (round_result) or stored
/// in 2 bytes. Rounding dy as read rounds dx: 0 is exact.
std::function<void(const StepContext &)> reluGradient(const KernelArgs &args) {
  TensorView dy = args.inputs[0], saved = args.inputs[1], dx = args.outputs[0];
  NarrowFormat rounding =
      storedInTwoBytes(dx) ? NarrowFormat::None : roundingOf(args);
  int64_t n = dx.numel();
  return [=](const StepContext &) {
    withReader(dy, rounding, [&](auto grad) {
      withReader(saved, NarrowFormat::None, [&](auto output) {
        withWriter(
            dx, [&](auto write) { reluGradientLoop(grad, output, write, n); });
      });
    });
  };
}

} // namespace

/// Element-wise arithmetic and activations, broadcasting.
static std::function<void(const StepContext &)>
unaryGrad(const KernelArgs &args);
static std::function<void(const StepContext &)>
dropoutKernel(const KernelArgs &args);
static std::function<void(const StepContext &)>
geluKernel(const KernelArgs &args);
static std::function<void(const StepContext &)>
geluGradKernel(const KernelArgs &args);

static void registerArithmetic(KernelRegistry &registry) {
  addBinary(registry, "add", [](auto a, auto b) { return a + b; });
  addBinary(registry, "sub", [](auto a, auto b) { return a - b; });
  addBinary(registry, "mul", [](auto a, auto b) { return a * b; });
  addKernel(registry, "div", [](const KernelArgs &args) {
    if (args.outputs[0].dtype == plan::I64)
      return binary<int64_t>(args, [](int64_t a, int64_t b) {
        return b == 0 ? int64_t(0) : a / b;
      });
    return floatBinary(args, [](float a, float b) { return a / b; });
  });
  // NaN wins, as torch.minimum/maximum (std::min would keep the first).
  addBinary(registry, "min", [](auto a, auto b) {
    return a != a ? a : b != b ? b : (b < a ? b : a);
  });
  addBinary(registry, "max", [](auto a, auto b) {
    return a != a ? a : b != b ? b : (b > a ? b : a);
  });
  addKernel(registry, "pow", [](const KernelArgs &args) {
    return floatBinary(args, [](float a, float b) {
      return b == 2.0f ? a * a : std::pow(a, b);
    });
  });

  addUnary(registry, "relu", [](float x) { return reluOf(x); });
  addUnary(registry, "erf", [](float x) { return std::erf(x); });
  addUnary(registry, "tanh", [](float x) { return std::tanh(x); });
  addUnary(registry, "sigmoid", [](float x) { return sigmoidOf(x); });
  addUnary(registry, "silu", [](float x) { return siluOf(x); });
  addUnary(registry, "sqrt", [](float x) { return std::sqrt(x); });
  addUnary(registry, "reciprocal", [](float x) { return 1.0f / x; });
  addUnary(registry, "sin", [](float x) { return std::sin(x); });
  addUnary(registry, "cos", [](float x) { return std::cos(x); });
  addUnary(registry, "abs", [](float x) { return std::fabs(x); });
  addUnary(registry, "exp", [](float x) { return std::exp(x); });
  addUnary(registry, "log", [](float x) { return std::log(x); });
  addUnary(registry, "hard_swish", [](float x) {
    return x * std::min(1.0f, std::max(0.0f, x / 6.0f + 0.5f));
  });
  addKernel(registry, "clip", [](const KernelArgs &args) {
    ops::ClipAttributes attrs = ops::ClipAttributes::read(args);
    float low = static_cast<float>(attrs.min),
          high = static_cast<float>(attrs.max);
    return unary(args,
                 [=](float x) { return std::min(std::max(x, low), high); });
  });
  addKernel(registry, "round_to", [](const KernelArgs &args) {
    // Lambdas, not the functions' addresses: the loop inlines and
    // vectorizes them (an indirect call per element took twice as long).
    if (ops::RoundToAttributes::read(args).format == "bf16")
      return unary(args, [](float x) { return roundToBfloat16(x); });
    return unary(args, [](float x) { return roundToFloat16(x); });
  });
  // A bf16 or fp16 tensor: each value's 2-byte pattern.
  addKernel(registry, "pack_narrow", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], packed = args.outputs[0];
    bool bf16 = ops::PackNarrowAttributes::read(args).format == "bf16";
    int64_t n = x.numel();
    return [=](const StepContext &) {
      packNarrow(x.f32(), static_cast<uint16_t *>(packed.data), n, bf16);
    };
  });
  addKernel(registry, "unpack_narrow", [](const KernelArgs &args) {
    TensorView packed = args.inputs[0], y = args.outputs[0];
    bool bf16 = ops::UnpackNarrowAttributes::read(args).format == "bf16";
    int64_t n = y.numel();
    return [=](const StepContext &) {
      widenNarrow(static_cast<const uint16_t *>(packed.data), y.f32(), n, bf16);
    };
  });
  addKernel(registry, "hard_sigmoid", [](const KernelArgs &args) {
    ops::HardSigmoidAttributes attrs = ops::HardSigmoidAttributes::read(args);
    float alpha = static_cast<float>(attrs.alpha),
          beta = static_cast<float>(attrs.beta);
    return unary(args, [=](float x) {
      return std::min(1.0f, std::max(0.0f, alpha * x + beta));
    });
  });
  // The input may be the 2-byte copy the backward keeps, the result stored
  // in 2 bytes: one pass (geluKernel).
  addKernel(registry, "gelu", geluKernel);
  registry.add("unary_grad", Backend::CPU,
               [](const KernelArgs &args) -> std::unique_ptr<Kernel> {
                 std::string kind = args.s("kind", "");
                 if (kind == "relu")
                   return std::make_unique<FunctionKernel>(reluGradient(args));
                 if (kind == "gelu" || kind == "gelu_tanh")
                   return std::make_unique<FunctionKernel>(
                       geluGradKernel(args));
                 // A 2-byte gradient is widened into a float32 buffer first.
                 return narrowResultKernel(args, unaryGrad, {0});
               });
}

/// Dropout's loop, float32 out (narrowResultKernel rounds or packs).
static std::function<void(const StepContext &)>
dropoutKernel(const KernelArgs &args) {
  TensorView x = args.inputs[0], y = args.outputs[0], mask = args.outputs[1];
  ops::DropoutAttributes attrs = ops::DropoutAttributes::read(args);
  float ratio = static_cast<float>(attrs.ratio);
  bool training = attrs.training_mode;
  DropoutStream draw(args);
  int64_t n = y.numel();
  return [=](const StepContext &context) {
    const float *px = x.f32();
    float *py = y.f32();
    uint8_t *pm = mask.b8();
    if (!training || ratio == 0.0f) {
      if (py != px)
        std::memcpy(py, px, n * sizeof(float));
      std::memset(pm, 1, n);
      return;
    }
    float keepScale = 1.0f / (1.0f - ratio);
    uint64_t seed = draw.seedOf(context);
    for (int64_t i = 0; i < n; ++i) {
      bool keep = dropoutUniform(seed, draw.stream, i) >= ratio;
      pm[i] = keep;
      py[i] = keep ? px[i] * keepScale : 0.0f;
    }
  };
}

/// GELU (either form) in one pass over x and y, whatever their storage.
static std::function<void(const StepContext &)>
geluKernel(const KernelArgs &args) {
  TensorView x = args.inputs[0], y = args.outputs[0];
  bool tanh = ops::GeluAttributes::read(args).approximate == "tanh";
  NarrowFormat rounding = roundingOf(args);
  int64_t n = y.numel();
  return [=](const StepContext &) {
    forEachChunk(n, [&](int64_t from, int64_t count) {
      alignas(64) float in[kElementChunk], out[kElementChunk];
      float *results = resultsOf(y, from, out);
      geluRow(floatsOf(x, from, count, in), results, count, tanh);
      storeRow(results, count, rounding, y, from);
    });
  };
}

/// GELU's gradient (unary_grad "gelu" or "gelu_tanh") in one pass over the
/// incoming gradient, the saved input and the result, whatever their
/// storage.
static std::function<void(const StepContext &)>
geluGradKernel(const KernelArgs &args) {
  TensorView dy = args.inputs[0], saved = args.inputs[1], dx = args.outputs[0];
  bool tanh = args.s("kind", "") == "gelu_tanh";
  NarrowFormat rounding = roundingOf(args);
  int64_t n = dx.numel();
  return [=](const StepContext &) {
    forEachChunk(n, [&](int64_t from, int64_t count) {
      alignas(64) float g[kElementChunk], x[kElementChunk], out[kElementChunk];
      float *results = resultsOf(dx, from, out);
      geluGradRow(floatsOf(dy, from, count, g), floatsOf(saved, from, count, x),
                  results, count, tanh);
      storeRow(results, count, rounding, dx, from);
    });
  };
}

/// unary_grad's loop for its activation.
static std::function<void(const StepContext &)>
unaryGrad(const KernelArgs &args) {
  TensorView dy = args.inputs[0], saved = args.inputs[1], dx = args.outputs[0];
  std::string kind = args.s("kind", "");
  int64_t n = dx.numel();
  // The saved value may be the backward's 2-byte copy, widened as read.
  NarrowFormat stored = storedFormatOf(saved);
  // One loop per activation, so each inlines and vectorizes.
  using Body = std::function<void(const StepContext &)>;
  auto loop = [=](auto local) -> Body {
    return [=](const StepContext &) {
      const float *pg = dy.f32();
      float *px = dx.f32();
      if (stored == NarrowFormat::None) {
        const float *ps = saved.f32();
#pragma omp parallel for if (n > 65536)
        for (int64_t i = 0; i < n; ++i)
          px[i] = local(pg[i], ps[i]);
        return;
      }
#pragma omp parallel for if (n > 65536)
      for (int64_t i = 0; i < n; ++i)
        px[i] = local(pg[i], loadValue(saved.data, i, stored));
    };
  };
  if (kind == "erf")
    return loop(
        [](float g, float x) { return g * kTwoOverSqrtPi * std::exp(-x * x); });
  std::vector<double> params = args.floats("params");
  bool bounded = kind == "clip" || kind == "hard_sigmoid";
  if (bounded && params.size() != 2)
    args.fail("activation '" + kind + "' needs two params");
  if (kind == "clip") { // PyTorch's hardtanh: zero at the bounds
    float low = params[0], high = params[1];
    return loop(
        [=](float g, float x) { return x > low && x < high ? g : 0.0f; });
  }
  if (kind == "hard_sigmoid") { // PyTorch: alpha inside (0, 1) only
    float alpha = params[0], beta = params[1];
    return loop([=](float g, float x) {
      float z = alpha * x + beta;
      return z > 0.0f && z < 1.0f ? g * alpha : 0.0f;
    });
  }
  if (kind == "hard_swish") // PyTorch's hardswish_backward
    return loop([](float g, float x) {
      return x < -3.0f ? 0.0f : x <= 3.0f ? g * (x / 3.0f + 0.5f) : g;
    });
  if (kind == "sigmoid")
    return loop([](float g, float y) { return g * y * (1.0f - y); });
  if (kind == "silu")
    return loop([](float g, float x) { return siluGradOf(g, x); });
  if (kind == "tanh")
    return loop([](float g, float y) { return g * (1.0f - y * y); });
  if (kind == "sqrt")
    return loop([](float g, float y) { return g * 0.5f / y; });
  // torch's rules: d(1/x) = -g y^2, |x|' = sign(x) (0 at 0).
  if (kind == "reciprocal")
    return loop([](float g, float y) { return -g * y * y; });
  if (kind == "sin")
    return loop([](float g, float x) { return g * std::cos(x); });
  if (kind == "cos")
    return loop([](float g, float x) { return -g * std::sin(x); });
  if (kind == "abs")
    return loop([](float g, float x) {
      return x > 0.0f ? g : x < 0.0f ? -g : 0.0f;
    });
  if (kind == "exp")
    return loop([](float g, float y) { return g * y; });
  if (kind == "log")
    return loop([](float g, float x) { return g / x; });
  args.fail("unknown activation '" + kind + "'");
}

/// Cast, dropout and its gradient, reduce_to and expand.
static void registerConversions(KernelRegistry &registry) {
  addKernel(registry, "cast", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0];
    int64_t n = y.numel();
    return [=](const StepContext &) {
      for (int64_t i = 0; i < n; ++i) {
        double v = x.dtype == plan::F32   ? x.f32()[i]
                   : x.dtype == plan::I64 ? static_cast<double>(x.i64()[i])
                                          : x.b8()[i];
        if (y.dtype == plan::F32)
          y.f32()[i] =
              x.dtype == plan::F32 ? x.f32()[i] : static_cast<float>(v);
        else if (y.dtype == plan::I64)
          y.i64()[i] =
              x.dtype == plan::I64 ? x.i64()[i] : static_cast<int64_t>(v);
        else
          y.b8()[i] = v != 0;
      }
    };
  });

  // A 2-byte input widened first, the output rounded or stored in 2 bytes
  // (narrowResultKernel).
  registry.add("dropout", Backend::CPU, [](const KernelArgs &args) {
    return narrowResultKernel(args, dropoutKernel, {0});
  });

  // The result rounded, or stored in 2 bytes, by narrowResultKernel.
  registry.add("dropout_grad", Backend::CPU, [](const KernelArgs &args) {
    return narrowResultKernel(args, [](const KernelArgs &args) {
      TensorView dy = args.inputs[0], mask = args.inputs[1],
                 dx = args.outputs[0];
      float keepScale = dropoutGradKeepScale(args);
      int64_t n = dx.numel();
      return [=](const StepContext &) {
        for (int64_t i = 0; i < n; ++i)
          dx.f32()[i] = mask.b8()[i] ? dy.f32()[i] * keepScale : 0.0f;
      };
    });
  });

  // Sum over the dimensions `shape` broadcast (BroadcastReduction.h); a
  // A 2-byte input summed as it lies, each value widened as read; the
  // sums rounded under round_result.
  registry.add("reduce_to", Backend::CPU, [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0];
    NarrowFormat stored = storedFormatOf(x);
    auto reduction = std::make_shared<BroadcastReduction>(y.shape, x.shape);
    return std::make_unique<FunctionKernel>(
        roundedResult(args, [=](const StepContext &) {
          if (stored == NarrowFormat::None)
            reduction->run(x.f32(), y.f32());
          else
            reduction->run(static_cast<const uint16_t *>(x.data),
                           stored == NarrowFormat::Bfloat16, y.f32());
        }));
  });

  addKernel(registry, "expand", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0];
    auto walk = std::make_shared<const BroadcastWalk>(
        std::vector<std::vector<int64_t>>{x.shape}, y.shape);
    int64_t n = y.numel();
    size_t width = byteSize(y) / std::max<int64_t>(n, 1);
    return [=](const StepContext &) {
      const char *px = static_cast<const char *>(x.data);
      char *py = static_cast<char *>(y.data);
      int64_t length = walk->rowLength(), step = walk->step(0);
      for (int64_t row = 0; row < walk->rows(); ++row) {
        const char *from = px + walk->rowStart(0, row) * width;
        char *to = py + row * length * width;
        for (int64_t i = 0; i < length; ++i)
          std::memcpy(to + i * width, from + i * step * width, width);
      }
    };
  });
}

// The row functions first: clang takes a target_clones function only
// before its first use. One loop per format in each, so that neither
// carries the format's branch per element and each vectorizes.
CDP_VECTOR_CLONES void narrowRowBits(const float *x, int64_t n, bool bf16,
                                     uint16_t *bits) {
  if (bf16)
    for (int64_t i = 0; i < n; ++i)
      bits[i] = narrowBitsOf(x[i], true);
  else
    for (int64_t i = 0; i < n; ++i)
      bits[i] = narrowBitsOf(x[i], false);
}

CDP_VECTOR_CLONES void widenedRow(const uint16_t *x, int64_t n, bool bf16,
                                  float *to) {
  if (bf16)
    for (int64_t i = 0; i < n; ++i)
      to[i] = floatOfBfloat16(x[i]);
  else
    for (int64_t i = 0; i < n; ++i)
      to[i] = floatOfFloat16(x[i]);
}

void widenNarrow(const uint16_t *in, float *out, int64_t n, bool bf16) {
  forEachChunk(n, [&](int64_t from, int64_t count) {
    widenedRow(in + from, count, bf16, out + from);
  });
}

void packNarrow(const float *in, uint16_t *out, int64_t n, bool bf16) {
  forEachChunk(n, [&](int64_t from, int64_t count) {
    narrowRowBits(in + from, count, bf16, out + from);
  });
}

const float *floatsOf(const TensorView &view, int64_t from, int64_t count,
                      float *buffer) {
  if (!storedInTwoBytes(view))
    return view.f32() + from;
  widenedRow(static_cast<const uint16_t *>(view.data) + from, count,
             view.dtype == plan::BF16, buffer);
  return buffer;
}

float *resultsOf(const TensorView &y, int64_t from, float *buffer) {
  return storedInTwoBytes(y) ? buffer : y.f32() + from;
}

CDP_VECTOR_CLONES void roundedRow(const float *x, int64_t n,
                                  NarrowFormat format, float *to) {
  if (format == NarrowFormat::Bfloat16)
    for (int64_t i = 0; i < n; ++i)
      to[i] = roundToBfloat16(x[i]);
  else if (format == NarrowFormat::Float16)
    for (int64_t i = 0; i < n; ++i)
      to[i] = roundToFloat16(x[i]);
  else if (to != x)
    std::copy(x, x + n, to);
}

void storeRow(const float *values, int64_t count, NarrowFormat rounding,
              const TensorView &y, int64_t to) {
  if (y.dtype == plan::F32)
    roundedRow(values, count, rounding, y.f32() + to);
  else
    narrowRowBits(values, count, y.dtype == plan::BF16,
                  static_cast<uint16_t *>(y.data) + to);
}

void roundInPlace(NarrowFormat format, float *values, int64_t n) {
  constexpr int64_t kChunk = 65536;
  if (format == NarrowFormat::None)
    return;
  if (n <= kChunk) {
    roundedRow(values, n, format, values);
    return;
  }
#pragma omp parallel for
  for (int64_t start = 0; start < n; start += kChunk)
    roundedRow(values + start, std::min(kChunk, n - start), format,
               values + start);
}

std::function<void(const StepContext &)>
roundedResult(const KernelArgs &args,
              std::function<void(const StepContext &)> body) {
  NarrowFormat format = roundingOf(args);
  if (format == NarrowFormat::None)
    return body;
  TensorView y = args.outputs[0];
  return [=](const StepContext &context) {
    body(context);
    roundInPlace(format, y.f32(), y.numel());
  };
}

NarrowedResult::NarrowedResult(TensorView &view, KernelScratch &scratch)
    : narrow(view) {
  if (!storedInTwoBytes(view))
    return;
  values = scratch.take(view.numel() * sizeof(float));
  view.data = values.get();
  view.dtype = plan::F32;
}

void NarrowedResult::store() const {
  packNarrow(static_cast<const float *>(values.get()),
             static_cast<uint16_t *>(narrow.data), narrow.numel(),
             narrow.dtype == plan::BF16);
}

std::unique_ptr<Kernel> narrowResultKernel(
    const KernelArgs &args,
    std::function<std::function<void(const StepContext &)>(const KernelArgs &)>
        make,
    const std::vector<size_t> &widenedInputs) {
  KernelArgs wide = args;
  KernelScratch scratch(args);
  WidenedOperands widened;
  for (size_t k : widenedInputs)
    widened.add(wide.inputs[k], scratch);
  NarrowedResult result(wide.outputs[0], scratch);
  if (!result.active() && widened.empty())
    return std::make_unique<FunctionKernel>(roundedResult(args, make(args)));
  auto body = result.active() ? make(wide) : roundedResult(wide, make(wide));
  return std::make_unique<FunctionKernel>(
      [=](const StepContext &context) {
        widened.widen();
        body(context);
        if (result.active())
          result.store();
      },
      scratch.ownBytes());
}

/// cdp.rotary over rows of D values (the input's last axis): a row's cos
/// and sin from its index (BroadcastOffsets over the leading dimensions),
/// then one apart along it (none where a table's last axis is 1).
static std::function<void(const StepContext &)>
rotaryKernel(const KernelArgs &args) {
  TensorView x = args.inputs[0], cos = args.inputs[1], sin = args.inputs[2],
             y = args.outputs[0];
  bool adjoint = ops::RotaryAttributes::read(args).adjoint;
  NarrowFormat format = narrowOperandsOf(args);
  size_t rank = x.shape.size();
  int64_t dim = x.shape.back(), half = dim / 2;
  int64_t rows = dim == 0 ? 0 : x.numel() / dim;
  BroadcastOffsets cosRow(cos.shape, x.shape, 0, rank - 1),
      sinRow(sin.shape, x.shape, 0, rank - 1);
  auto stepOf = [](const TensorView &table) -> int64_t {
    return table.shape.empty() || table.shape.back() == 1 ? 0 : 1;
  };
  int64_t cosStep = stepOf(cos), sinStep = stepOf(sin);
  return [=](const StepContext &) {
#pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
      const float *in = x.f32() + r * dim, *c = cos.f32() + cosRow(r),
                  *s = sin.f32() + sinRow(r);
      float *out = y.f32() + r * dim;
      for (int64_t d = 0; d < dim; ++d) {
        bool first = d < half;
        int64_t p = first ? d + half : d - half;
        out[d] = adjoint ? rotaryAdjointOf(in[d], in[p], first, c[d * cosStep],
                                           s[p * sinStep], format)
                         : rotaryOf(in[d], in[p], first, c[d * cosStep],
                                    s[d * sinStep]);
      }
    }
  };
}

void registerElementwise(KernelRegistry &registry) {
  registerArithmetic(registry);
  registerConversions(registry);
  addKernel(registry, "rotary", rotaryKernel);
}

} // namespace cdp::runtime::cpu
