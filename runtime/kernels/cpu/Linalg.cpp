//===- Linalg.cpp - matrix products and convolution on the CPU ------------===//
//
// Matrix products go through oneDNN's sgemm (row-major, JIT kernels, its own
// threading); tiny ones through a loop of our own (SmallMatMul.h). Convolutions
// are im2col + sgemm per image and group, with the column buffer sized once at
// load.
//
//===----------------------------------------------------------------------===//

#include "../Activations.h"
#include "../MatMulGeometry.h"
#include "../NarrowOperands.h"
#include "CpuKernels.h"
#include "SmallMatMul.h"
#include "cdp/Runtime/OpTable.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

namespace cdp::runtime::cpu {

KernelScratch::KernelScratch(const KernelArgs &args) : device(args.runsOn) {
  if (device && !device->reserveScratch(0))
    device = nullptr; // a device without a scratch block
}

std::shared_ptr<void> KernelScratch::take(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  if (device) {
    char *block = static_cast<char *>(device->reserveScratch(used + rounded));
    void *at = block + used;
    used += rounded;
    return std::shared_ptr<void>(at, [](void *) {});
  }
  void *memory = std::aligned_alloc(64, rounded);
  if (!memory)
    throw RuntimeError("cannot allocate " + std::to_string(bytes) +
                       " bytes of host memory");
  std::memset(memory, 0xFF, rounded);
  own += static_cast<int64_t>(bytes);
  return std::shared_ptr<void>(memory, std::free);
}

void WidenedOperands::add(TensorView &view, KernelScratch &scratch) {
  if (!storedInTwoBytes(view))
    return;
  std::shared_ptr<void> values = scratch.take(view.numel() * sizeof(float));
  operands.push_back({view, values});
  view.data = values.get();
  view.dtype = plan::F32;
}

void WidenedOperands::widen() const {
  for (const Operand &operand : operands)
    widenNarrow(static_cast<const uint16_t *>(operand.narrow.data),
                static_cast<float *>(operand.values.get()),
                operand.narrow.numel(), operand.narrow.dtype == plan::BF16);
}

void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, const float *b, float beta, float *c) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) { // an empty product: oneDNN refuses the leading dimensions
    for (int64_t i = 0; i < m * n; ++i)
      c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  dnnl_status_t status =
      dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', m, n, k, alpha, a,
                 transA ? m : k, b, transB ? k : n, beta, c, n);
  if (status != dnnl_success)
    throw RuntimeError("oneDNN sgemm failed with status " +
                       std::to_string(static_cast<int>(status)));
}

GemmAddend::GemmAddend(const TensorView &c, const std::vector<int64_t> &yShape)
    : c(c), walk({c.shape}, yShape) {}

void GemmAddend::writeInto(float *y) const {
  for (int64_t row = 0, length = walk.rowLength(); row < walk.rows(); ++row) {
    const float *from = c.f32() + walk.rowStart(0, row);
    float *to = y + row * length;
    if (walk.step(0))
      std::copy(from, from + length, to);
    else
      std::fill(to, to + length, *from);
  }
}

namespace {

struct ConvGeometry {
  int64_t batch, channels, height, width;
  int64_t filters, kernelH, kernelW;
  int64_t outH, outW;
  int64_t padTop, padLeft, strideH, strideW, dilationH, dilationW;
  int64_t group;

  ConvGeometry(const KernelArgs &args, const std::vector<int64_t> &input,
               const std::vector<int64_t> &weight,
               const std::vector<int64_t> &output) {
    batch = input[0];
    channels = input[1];
    height = input[2];
    width = input[3];
    filters = weight[0];
    kernelH = weight[2];
    kernelW = weight[3];
    outH = output[2];
    outW = output[3];
    // conv and its two gradients declare the same window attributes.
    ops::ConvAttributes attrs = ops::ConvAttributes::read(args);
    const std::vector<int64_t> &pads = attrs.pads, &strides = attrs.strides,
                               &dilations = attrs.dilations;
    padTop = pads[0];
    padLeft = pads[1];
    strideH = strides[0];
    strideW = strides[1];
    dilationH = dilations[0];
    dilationW = dilations[1];
    group = attrs.group;
  }
  int64_t groupChannels() const { return channels / group; }
  int64_t groupFilters() const { return filters / group; }
  int64_t columnRows() const { return groupChannels() * kernelH * kernelW; }
  int64_t columnCols() const { return outH * outW; }
};

/// Unfolds the input patches of one image and group into `column`
/// (rows: channel x kernel position, columns: output positions).
void im2col(const ConvGeometry &g, const float *image, float *column) {
  int64_t cols = g.columnCols();
  for (int64_t c = 0; c < g.groupChannels(); ++c)
    for (int64_t kh = 0; kh < g.kernelH; ++kh)
      for (int64_t kw = 0; kw < g.kernelW; ++kw) {
        float *row = column + ((c * g.kernelH + kh) * g.kernelW + kw) * cols;
        const float *plane = image + c * g.height * g.width;
        for (int64_t oh = 0; oh < g.outH; ++oh) {
          int64_t ih = oh * g.strideH - g.padTop + kh * g.dilationH;
          float *out = row + oh * g.outW;
          if (ih < 0 || ih >= g.height) {
            std::fill(out, out + g.outW, 0.0f);
            continue;
          }
          for (int64_t ow = 0; ow < g.outW; ++ow) {
            int64_t iw = ow * g.strideW - g.padLeft + kw * g.dilationW;
            out[ow] = iw >= 0 && iw < g.width ? plane[ih * g.width + iw] : 0.0f;
          }
        }
      }
}

/// The adjoint of im2col: adds `column` back into `image`.
void col2im(const ConvGeometry &g, const float *column, float *image) {
  int64_t cols = g.columnCols();
  for (int64_t c = 0; c < g.groupChannels(); ++c)
    for (int64_t kh = 0; kh < g.kernelH; ++kh)
      for (int64_t kw = 0; kw < g.kernelW; ++kw) {
        const float *row =
            column + ((c * g.kernelH + kh) * g.kernelW + kw) * cols;
        float *plane = image + c * g.height * g.width;
        for (int64_t oh = 0; oh < g.outH; ++oh) {
          int64_t ih = oh * g.strideH - g.padTop + kh * g.dilationH;
          if (ih < 0 || ih >= g.height)
            continue;
          for (int64_t ow = 0; ow < g.outW; ++ow) {
            int64_t iw = ow * g.strideW - g.padLeft + kw * g.dilationW;
            if (iw >= 0 && iw < g.width)
              plane[ih * g.width + iw] += row[oh * g.outW + ow];
          }
        }
      }
}

/// Products small enough that a call into oneDNN costs more than the
/// arithmetic (see SmallMatMul.h). B is packed row-major first when it is
/// read transposed; the products are split over threads when there is
/// enough work for more than one.
std::function<void(const StepContext &)>
smallMatMulKernel(const MatMulGeometry &g, TensorView a, TensorView b,
                  TensorView y, int threadLimit,
                  std::shared_ptr<std::vector<int64_t>> ia,
                  std::shared_ptr<std::vector<int64_t>> ib) {
  int64_t m = g.m, n = g.n, k = g.k, count = g.count();
  bool transA = g.transA, transB = g.transB;
  int64_t aRow = transA ? 1 : k, aCol = transA ? m : 1;
  constexpr int64_t kWorkPerThread = 32 * 1024;
  int threads = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(threadLimit, count * m * n * k / kWorkPerThread)));
  auto packed =
      std::make_shared<std::vector<float>>(transB ? threads * k * n : 0);
  return [=](const StepContext &) {
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int64_t i = 0; i < count; ++i) {
      const float *bi = b.f32() + (*ib)[i] * k * n;
      if (transB) { // stored n x k
        float *dst = packed->data() + omp_get_thread_num() * k * n;
        for (int64_t p = 0; p < k; ++p)
          for (int64_t j = 0; j < n; ++j)
            dst[p * n + j] = bi[j * k + p];
        bi = dst;
      }
      smallMatMul(m, n, k, a.f32() + (*ia)[i] * m * k, aRow, aCol, bi,
                  y.f32() + i * m * n);
    }
  };
}

/// ONNX MatMul (with the trans flags): one GEMM where B is one matrix and
/// A's products stack into rows (a Linear over a sequence), else the small
/// products' own loop, else one GEMM per product.
std::function<void(const StepContext &)> matMulKernel(const KernelArgs &args) {
  TensorView a = args.inputs[0], b = args.inputs[1], y = args.outputs[0];
  MatMulGeometry g(args, a.shape, b.shape);
  int64_t m = g.m, n = g.n, k = g.k, count = g.count();
  bool transA = g.transA, transB = g.transB;
  if (count == 0 || m == 0 || n == 0)
    return [](const StepContext &) {};
  if ((count == 1 || g.rowsStack()) && count * m * n * k > kSmallMatMulVolume)
    return [=](const StepContext &) {
      sgemm(transA, transB, count * m, n, k, 1.0f, a.f32(), b.f32(), 0.0f,
            y.f32());
    };
  auto ia =
      std::make_shared<std::vector<int64_t>>(broadcastIndex(g.aBatch, g.batch));
  auto ib =
      std::make_shared<std::vector<int64_t>>(broadcastIndex(g.bBatch, g.batch));
  if (m * n * k <= kSmallMatMulVolume)
    return smallMatMulKernel(g, a, b, y, args.threads, ia, ib);
  int threads =
      std::max(1, std::min<int>(args.threads, static_cast<int>(count)));
  return [=](const StepContext &) {
    // Many products: one per thread, each single-threaded inside.
    forEachIndex(count, threads, [&](int64_t i) {
      sgemm(transA, transB, m, n, k, 1.0f, a.f32() + (*ia)[i] * m * k,
            b.f32() + (*ib)[i] * k * n, 0.0f, y.f32() + i * m * n);
    });
  };
}

/// ONNX Gemm: C broadcast into Y, then one GEMM.
std::function<void(const StepContext &)> gemmKernel(const KernelArgs &args) {
  TensorView a = args.inputs[0], b = args.inputs[1], y = args.outputs[0];
  TensorView c = args.inputs.size() > 2 ? args.inputs[2] : TensorView();
  GemmGeometry g(args);
  bool transA = g.transA, transB = g.transB, relu = g.relu;
  float alpha = g.alpha, beta = g.beta;
  int64_t m = g.m, n = g.n, k = g.k;
  std::shared_ptr<const GemmAddend> addend;
  if (c.present())
    addend = std::make_shared<const GemmAddend>(c, y.shape);
  return [=](const StepContext &) {
    float *py = y.f32();
    if (addend)
      addend->writeInto(py);
    sgemm(transA, transB, m, n, k, alpha, a.f32(), b.f32(),
          addend ? beta : 0.0f, py);
    if (relu)
#pragma omp parallel for if (m * n > 65536)
      for (int64_t i = 0; i < m * n; ++i)
        py[i] = reluOf(py[i]);
  };
}

/// Fails the step unless every value of `operand` is exact in `format`.
void checkExact(NarrowFormat format, const TensorView &operand,
                const std::string &which, const std::string &where) {
  const float *values = operand.f32();
  int64_t n = operand.numel(), first = n;
#pragma omp parallel for reduction(min : first) if (n > 65536)
  for (int64_t i = 0; i < n; ++i)
    if (!exactIn(format, values[i]))
      first = std::min(first, i);
  if (first == n)
    return;
  throw RuntimeError(
      where + ": operand " + which + " holds " + std::to_string(values[first]) +
      " (element " + std::to_string(first) +
      "), which the plan's narrow_operands mark says it cannot (" +
      (format == NarrowFormat::Bfloat16 ? "bf16" : "f16") +
      "); a compiler fault: report the model and flags");
}

/// `body` after checking the product's narrow_operands mark on its first
/// runs (NarrowOperandsCheck).
std::function<void(const StepContext &)>
checkingNarrowOperands(const KernelArgs &args,
                       std::function<void(const StepContext &)> body) {
  auto check = std::make_shared<NarrowOperandsCheck>(args, "A", "B");
  if (!check->active())
    return body;
  return [=](const StepContext &context) {
    (*check)();
    body(context);
  };
}

/// A gemm's or matmul's kernel: a bf16 product on the processor's bf16
/// dot products where it has them (Bf16Products.cpp; it writes a 2-byte
/// result itself), else made by `make` in float32: operands A and B that
/// hold 2-byte values (cdp-read-narrow-operands) are widened into float32
/// buffers of the kernel's scratch before each run, and the
/// float32 kernel multiplies those; a result stored in 2 bytes
/// (cdp-narrow-results) is computed into a float32 buffer of the kernel's
/// scratch too and packed, which rounds it as round_result says.
std::unique_ptr<Kernel> productKernel(
    const KernelArgs &args,
    std::function<std::function<void(const StepContext &)>(const KernelArgs &)>
        make) {
  KernelScratch scratch(args);
  if (NativeProduct native = nativeBf16Product(args, scratch)) {
    auto checked = checkingNarrowOperands(args, native);
    return std::make_unique<FunctionKernel>(storedInTwoBytes(args.outputs[0])
                                                ? checked
                                                : roundedResult(args, checked),
                                            scratch.ownBytes());
  }
  KernelArgs widenedArgs = args;
  WidenedOperands widened;
  for (int i : {0, 1})
    widened.add(widenedArgs.inputs[i], scratch);
  NarrowedResult result(widenedArgs.outputs[0], scratch);
  auto product = checkingNarrowOperands(widenedArgs, make(widenedArgs));
  std::function<void(const StepContext &)> body = roundedResult(args, product);
  if (result.active())
    body = [=](const StepContext &context) {
      product(context);
      result.store();
    };
  return std::make_unique<FunctionKernel>(
      [widened, body](const StepContext &context) {
        widened.widen();
        body(context);
      },
      scratch.ownBytes());
}

} // namespace

NarrowOperandsCheck::NarrowOperandsCheck(const KernelArgs &args,
                                         const char *first, const char *second)
    : format(narrowOperandsOf(args)), operands{args.inputs[0], args.inputs[1]},
      names{first, second}, where(args.instruction->op() + " at '" +
                                  args.instruction->location() + "'") {}

void NarrowOperandsCheck::operator()() {
  constexpr int kCheckedRuns = 3;
  if (!active() || runs == kCheckedRuns)
    return;
  ++runs;
  // 2-byte operands (read by the bf16 products as they lie) hold nothing
  // else.
  for (int i : {0, 1})
    if (!storedInTwoBytes(operands[i]))
      checkExact(format, operands[i], names[i], where);
}

void registerLinalg(KernelRegistry &registry) {
  registry.add("gemm", Backend::CPU, [](const KernelArgs &args) {
    return productKernel(args, gemmKernel);
  });
  registry.add("matmul", Backend::CPU, [](const KernelArgs &args) {
    return productKernel(args, matMulKernel);
  });

  addKernel(registry, "conv", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], w = args.inputs[1], y = args.outputs[0];
    TensorView bias = args.inputs.size() > 2 ? args.inputs[2] : TensorView();
    ConvGeometry g(args, x.shape, w.shape, y.shape);
    int threads =
        std::max(1, std::min<int>(args.threads, static_cast<int>(g.batch)));
    auto columns = std::make_shared<std::vector<float>>(
        threads * g.columnRows() * g.columnCols());
    return [=](const StepContext &) {
      int64_t cols = g.columnCols(), rows = g.columnRows();
      // Images in parallel, each with its own column buffer; the small
      // per-image products run single-threaded inside.
      forEachIndex(g.batch, threads, [&](int64_t n) {
        float *column = columns->data() + omp_get_thread_num() * rows * cols;
        for (int64_t grp = 0; grp < g.group; ++grp) {
          const float *image =
              x.f32() +
              (n * g.channels + grp * g.groupChannels()) * g.height * g.width;
          im2col(g, image, column);
          float *out =
              y.f32() + (n * g.filters + grp * g.groupFilters()) * cols;
          sgemm(false, false, g.groupFilters(), cols, rows, 1.0f,
                w.f32() + grp * g.groupFilters() * rows, column, 0.0f, out);
        }
      });
      if (bias.present())
        for (int64_t n = 0; n < g.batch; ++n)
          for (int64_t f = 0; f < g.filters; ++f) {
            float *out = y.f32() + (n * g.filters + f) * cols;
            float value = bias.f32()[f];
            for (int64_t i = 0; i < cols; ++i)
              out[i] += value;
          }
    };
  });

  addKernel(registry, "conv_grad_input", [](const KernelArgs &args) {
    TensorView dy = args.inputs[0], w = args.inputs[1], dx = args.outputs[0];
    ConvGeometry g(args, dx.shape, w.shape, dy.shape);
    int threads =
        std::max(1, std::min<int>(args.threads, static_cast<int>(g.batch)));
    auto columns = std::make_shared<std::vector<float>>(
        threads * g.columnRows() * g.columnCols());
    return [=](const StepContext &) {
      int64_t cols = g.columnCols(), rows = g.columnRows();
      std::fill(dx.f32(), dx.f32() + dx.numel(), 0.0f);
      forEachIndex(g.batch, threads, [&](int64_t n) {
        float *column = columns->data() + omp_get_thread_num() * rows * cols;
        for (int64_t grp = 0; grp < g.group; ++grp) {
          const float *grad =
              dy.f32() + (n * g.filters + grp * g.groupFilters()) * cols;
          sgemm(true, false, rows, cols, g.groupFilters(), 1.0f,
                w.f32() + grp * g.groupFilters() * rows, grad, 0.0f, column);
          col2im(g, column,
                 dx.f32() + (n * g.channels + grp * g.groupChannels()) *
                                g.height * g.width);
        }
      });
    };
  });

  addKernel(registry, "conv_grad_weight", [](const KernelArgs &args) {
    TensorView dy = args.inputs[0], x = args.inputs[1], dw = args.outputs[0];
    ConvGeometry g(args, x.shape, dw.shape, dy.shape);
    int threads =
        std::max(1, std::min<int>(args.threads, static_cast<int>(g.batch)));
    int64_t weights = dw.numel();
    auto columns = std::make_shared<std::vector<float>>(
        threads * g.columnRows() * g.columnCols());
    // One partial weight gradient per thread, summed in a fixed order so the
    // result does not depend on scheduling.
    auto partials = std::make_shared<std::vector<float>>(threads * weights);
    return [=](const StepContext &) {
      int64_t cols = g.columnCols(), rows = g.columnRows();
      std::fill(partials->begin(), partials->end(), 0.0f);
      forEachIndex(g.batch, threads, [&](int64_t n) {
        int t = omp_get_thread_num();
        float *column = columns->data() + t * rows * cols;
        float *partial = partials->data() + t * weights;
        for (int64_t grp = 0; grp < g.group; ++grp) {
          im2col(g,
                 x.f32() + (n * g.channels + grp * g.groupChannels()) *
                               g.height * g.width,
                 column);
          const float *grad =
              dy.f32() + (n * g.filters + grp * g.groupFilters()) * cols;
          sgemm(false, true, g.groupFilters(), rows, cols, 1.0f, grad, column,
                1.0f, partial + grp * g.groupFilters() * rows);
        }
      });
      float *out = dw.f32();
      std::copy(partials->begin(), partials->begin() + weights, out);
      for (int t = 1; t < threads; ++t)
        for (int64_t i = 0; i < weights; ++i)
          out[i] += (*partials)[t * weights + i];
    };
  });
}

} // namespace cdp::runtime::cpu
