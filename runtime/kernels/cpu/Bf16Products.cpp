//===- Bf16Products.cpp - bf16 products on the processor's dot products ---===//
//
// A product marked narrow_operands = bf16 (--precision bf16) multiplies
// values that bf16 holds exactly and sums in float32, as a GPU's tensor
// cores do. Where the processor has bf16 dot products (AVX512_BF16 or AMX:
// oneDNN's avx512_core_bf16 ISA and above), oneDNN's matmul on the 2-byte
// operands runs it at about twice the float32 GEMM's rate on the same values
// and reads half the bytes. Its float32 sums are added in another order than
// the float32 GEMM's (products of two bf16 values are exact in float32, the
// sums are not), as a GPU's are. Elsewhere (no such instructions, fp16
// marks, products too small to pay for a primitive, a layout oneDNN serves
// only by its reference code) Linalg.cpp's float32 path runs; so does it
// under ONEDNN_MAX_CPU_ISA=AVX512_CORE, oneDNN's own switch.
//
//===----------------------------------------------------------------------===//

#include "../MatMulGeometry.h"
#include "../NarrowOperands.h"
#include "CpuKernels.h"
#include "Dnnl.h"
#include "SmallMatMul.h"

#include <atomic>
#include <cstring>
#include <omp.h>
#include <optional>

namespace cdp::runtime::cpu {

namespace {

using dnnl::memory;

/// Products made as inner products' weight gradients
/// (bf16WeightGradientsMade).
std::atomic<int64_t> weightGradients{0};

/// An operand as bf16 bits: the plan's 2-byte values where it stores them
/// so, else its float32 values (exact in bf16: the mark says so, and the
/// kernel checks it on its first runs) packed into the kernel's scratch
/// before each run.
class Bf16Operand {
public:
  Bf16Operand(const TensorView &view, KernelScratch &scratch) : view(view) {
    if (view.dtype != plan::BF16)
      packed = scratch.take(view.numel() * sizeof(uint16_t));
  }
  void pack() const {
    if (packed)
      packNarrow(view.f32(), static_cast<uint16_t *>(packed.get()),
                 view.numel(), /*bf16=*/true);
  }
  void *bits() const { return packed ? packed.get() : view.data; }

private:
  TensorView view;
  std::shared_ptr<void> packed;
};

/// A (batch..., rows, cols) operand stored row-major as that, or, where
/// `transposed`, as (batch..., cols, rows).
memory::desc matrixDesc(const std::vector<int64_t> &batch, int64_t rows,
                        int64_t cols, bool transposed, memory::data_type type) {
  memory::dims dims(batch.begin(), batch.end());
  dims.push_back(rows);
  dims.push_back(cols);
  memory::dims strides(dims.size());
  size_t rank = dims.size();
  strides[rank - 1] = transposed ? rows : 1;
  strides[rank - 2] = transposed ? 1 : cols;
  int64_t stride = rows * cols;
  for (size_t d = batch.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= batch[d];
  }
  return memory::desc(dims, type, strides);
}

/// oneDNN's matmul of `a` by `b` into `y` (plus `bias` where it has one)
/// with `attributes`, its scratchpad the caller's; none where oneDNN
/// refuses it or has only its reference code for it.
std::optional<dnnl::matmul::primitive_desc>
matmulDesc(const memory::desc &a, const memory::desc &b,
           const memory::desc &bias, const memory::desc &y,
           dnnl::primitive_attr attributes) {
  try {
    attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, bias, y),
                                    attributes, engine());
    if (std::strncmp(pd.impl_info_str(), "ref", 3) == 0)
      return std::nullopt;
    return pd;
  } catch (const dnnl::error &) {
    return std::nullopt;
  }
}

struct ProductShape {
  std::vector<int64_t> aBatch, bBatch, batch;
  int64_t m, n, k;
  bool transA, transB;
};

/// oneDNN's matmul of bf16 A and B into Y (float32, or bf16 where the
/// plan stores the result in 2 bytes: rounded to nearest even from the
/// float32 sums, as round_result and the pack after it would), with
/// `attributes` (Gemm's alpha, beta and ReLU) and a float32 bias row of n
/// values where `biased`; null where oneDNN has only its reference code.
class Bf16Matmul {
public:
  static std::shared_ptr<Bf16Matmul> make(const ProductShape &s,
                                          dnnl::primitive_attr attributes,
                                          memory::data_type result, bool biased,
                                          KernelScratch &scratch) {
    memory::desc a = matrixDesc(s.aBatch, s.m, s.k, s.transA,
                                memory::data_type::bf16),
                 b = matrixDesc(s.bBatch, s.k, s.n, s.transB,
                                memory::data_type::bf16),
                 y = matrixDesc(s.batch, s.m, s.n, false, result);
    memory::desc bias;
    if (biased)
      bias = matrixDesc({}, 1, s.n, false, memory::data_type::f32);
    std::optional<dnnl::matmul::primitive_desc> pd =
        matmulDesc(a, b, bias, y, attributes);
    if (!pd)
      return nullptr;
    return std::shared_ptr<Bf16Matmul>(new Bf16Matmul(dnnl::matmul(*pd),
                                                      {{DNNL_ARG_SRC, a},
                                                       {DNNL_ARG_WEIGHTS, b},
                                                       {DNNL_ARG_DST, y},
                                                       {DNNL_ARG_BIAS, bias}},
                                                      scratch));
  }

  /// Y = A^T B of a 2-D A stored k x m and B stored k x n, as a weight's
  /// gradient X^T dY is: oneDNN's inner product backward-weights (src B,
  /// diff_dst A, diff_weights Y), whose GEMM kernel reads A^T where it lies.
  /// The matmul primitive copies A^T first: on a 2-core AVX512_BF16 machine
  /// (2026-12-02) GPT-2 small's weight gradients (k = 4096 tokens) took
  /// 10-20 % longer through it, the tied LM head's 1278 ms against 817.
  /// Null where oneDNN has only its reference code.
  static std::shared_ptr<Bf16Matmul>
  makeWeightGradient(const ProductShape &s, memory::data_type result,
                     KernelScratch &scratch) {
    using tag = memory::format_tag;
    memory::desc x({s.k, s.n}, memory::data_type::bf16, tag::ab),
        dy({s.k, s.m}, memory::data_type::bf16, tag::ab),
        dw({s.m, s.n}, result, tag::ab);
    try {
      dnnl::inner_product_forward::primitive_desc hint(
          dnnl::inner_product_forward::desc(
              dnnl::prop_kind::forward_training, x,
              memory::desc({s.m, s.n}, memory::data_type::bf16, tag::any), dy),
          engine());
      dnnl::primitive_attr attributes;
      attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::inner_product_backward_weights::primitive_desc pd(
          dnnl::inner_product_backward_weights::desc(x, dw, dy), attributes,
          engine(), hint);
      if (std::strncmp(pd.impl_info_str(), "ref", 3) == 0)
        return nullptr;
      ++weightGradients;
      return std::shared_ptr<Bf16Matmul>(
          new Bf16Matmul(dnnl::inner_product_backward_weights(pd),
                         {{DNNL_ARG_DIFF_DST, dy},
                          {DNNL_ARG_SRC, x},
                          {DNNL_ARG_DIFF_WEIGHTS, dw},
                          {DNNL_ARG_BIAS, memory::desc()}},
                         scratch));
    } catch (const dnnl::error &) {
      return nullptr;
    }
  }

  void run(void *a, void *b, const float *bias, void *y) {
    arguments[roles[0]].set_data_handle(a);
    arguments[roles[1]].set_data_handle(b);
    arguments[roles[2]].set_data_handle(y);
    if (bias)
      arguments[DNNL_ARG_BIAS].set_data_handle(const_cast<float *>(bias));
    primitive.execute(stream, arguments);
    stream.wait();
  }

private:
  /// The primitive's argument for A, B, Y and the bias (absent where its
  /// desc is empty), with their descs.
  using Roles = std::vector<std::pair<int, memory::desc>>;
  Bf16Matmul(const dnnl::primitive &primitive, const Roles &described,
             KernelScratch &scratch)
      : stream(engine()), primitive(primitive) {
    for (int i = 0; i < 4; ++i) {
      roles[i] = described[i].first;
      if (!described[i].second.is_zero())
        arguments[roles[i]] =
            memory(described[i].second, engine(), DNNL_MEMORY_NONE);
    }
    bindScratchpad(primitive, arguments, scratch, held);
  }
  dnnl::stream stream;
  dnnl::primitive primitive;
  int roles[4];
  std::unordered_map<int, memory> arguments;
  HeldBuffers held;
};

/// What a gemm adds to its product: nothing, a bias row (oneDNN's bias,
/// added to the float32 sums), or C broadcast into Y first and summed
/// (beta) by oneDNN's sum post-op, which a 2-byte Y cannot hold exactly.
struct Addend {
  TensorView bias;
  std::shared_ptr<const GemmAddend> written;
};

/// The product's body: pack the float32 operands, write C, the matmul.
/// `plain`: no alpha, beta or ReLU in `attributes`.
NativeProduct bf16Product(const KernelArgs &args, KernelScratch &scratch,
                          const ProductShape &shape, bool plain,
                          const dnnl::primitive_attr &attributes,
                          const Addend &addend = {}) {
  TensorView y = args.outputs[0];
  if (y.dtype != plan::F32 && y.dtype != plan::BF16)
    return {};
  if (y.dtype == plan::BF16 && addend.written)
    return {};
  memory::data_type result =
      y.dtype == plan::BF16 ? memory::data_type::bf16 : memory::data_type::f32;
  std::shared_ptr<Bf16Matmul> matmul;
  if (plain && shape.transA && !shape.transB && shape.batch.empty() &&
      !addend.bias.present() && !addend.written)
    matmul = Bf16Matmul::makeWeightGradient(shape, result, scratch);
  if (!matmul)
    matmul = Bf16Matmul::make(shape, attributes, result, addend.bias.present(),
                              scratch);
  if (!matmul)
    return {};
  Bf16Operand a(args.inputs[0], scratch), b(args.inputs[1], scratch);
  return [=](const StepContext &) {
    a.pack();
    b.pack();
    if (addend.written)
      addend.written->writeInto(y.f32());
    matmul->run(a.bits(), b.bits(),
                addend.bias.present() ? addend.bias.f32() : nullptr, y.data);
  };
}

NativeProduct matMul(const KernelArgs &args, KernelScratch &scratch) {
  MatMulGeometry g(args, args.inputs[0].shape, args.inputs[1].shape);
  int64_t count = g.count();
  bool oneGemm = count == 1 || g.rowsStack();
  if (count == 0 || g.m == 0 || g.n == 0 || g.k == 0 ||
      (oneGemm ? count : 1) * g.m * g.n * g.k <= kSmallMatMulVolume)
    return {};
  ProductShape shape{g.aBatch, g.bBatch, g.batch,  g.m,
                     g.n,      g.k,      g.transA, g.transB};
  if (oneGemm) // a Linear over a sequence: one GEMM of count * m rows
    shape = {{}, {}, {}, count * g.m, g.n, g.k, g.transA, g.transB};
  return bf16Product(args, scratch, shape, /*plain=*/true,
                     dnnl::primitive_attr());
}

/// Whether Gemm's C is one row of n values added once (beta 1): a bias.
bool isBiasRow(const TensorView &c, float beta, int64_t n) {
  return beta == 1.0f && c.numel() == n &&
         (c.shape.size() == 1 || (c.shape.size() == 2 && c.shape[0] == 1));
}

NativeProduct gemm(const KernelArgs &args, KernelScratch &scratch) {
  GemmGeometry g(args);
  if (g.m == 0 || g.n == 0 || g.k == 0 || g.m * g.n * g.k <= kSmallMatMulVolume)
    return {};
  TensorView c = args.inputs.size() > 2 ? args.inputs[2] : TensorView();
  if (c.present() && c.dtype != plan::F32)
    return {};
  dnnl::primitive_attr attributes;
  if (g.alpha != 1.0f)
    attributes.set_output_scales(0, {g.alpha});
  Addend addend;
  dnnl::post_ops post;
  if (c.present() && isBiasRow(c, g.beta, g.n) && g.alpha == 1.0f) {
    addend.bias = c;
  } else if (c.present() && g.beta != 0.0f) {
    addend.written =
        std::make_shared<const GemmAddend>(c, args.outputs[0].shape);
    post.append_sum(g.beta);
  }
  if (g.relu)
    post.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  attributes.set_post_ops(post);
  ProductShape shape{{}, {}, {}, g.m, g.n, g.k, g.transA, g.transB};
  bool plain = g.alpha == 1.0f && !g.relu && !addend.written;
  return bf16Product(args, scratch, shape, plain, attributes, addend);
}

} // namespace

std::shared_ptr<const Bf16Gemm> Bf16Gemm::make(bool transA, bool transB,
                                               int64_t m, int64_t n, int64_t k,
                                               float alpha, float beta) {
  if (!bf16DotProductsUsed() || m * n * k <= kSmallMatMulVolume)
    return nullptr;
  dnnl::primitive_attr attributes;
  if (alpha != 1.0f)
    attributes.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops sum;
    sum.append_sum(beta);
    attributes.set_post_ops(sum);
  }
  auto gemm = std::shared_ptr<Bf16Gemm>(new Bf16Gemm());
  gemm->a = matrixDesc({}, m, k, transA, memory::data_type::bf16);
  gemm->b = matrixDesc({}, k, n, transB, memory::data_type::bf16);
  gemm->c = matrixDesc({}, m, n, false, memory::data_type::f32);
  std::optional<dnnl::matmul::primitive_desc> pd =
      matmulDesc(gemm->a, gemm->b, memory::desc(), gemm->c, attributes);
  if (!pd)
    return nullptr;
  gemm->pad = pd->scratchpad_desc();
  gemm->primitive = dnnl::matmul(*pd);
  for (int t = 0; t < omp_get_max_threads(); ++t)
    gemm->bound.push_back(std::make_shared<Bound>(
        Bound{dnnl::stream(engine()), gemm->unboundArguments()}));
  return gemm;
}

std::unordered_map<int, memory> Bf16Gemm::unboundArguments() const {
  std::unordered_map<int, memory> arguments{
      {DNNL_ARG_SRC, memory(a, engine(), DNNL_MEMORY_NONE)},
      {DNNL_ARG_WEIGHTS, memory(b, engine(), DNNL_MEMORY_NONE)},
      {DNNL_ARG_DST, memory(c, engine(), DNNL_MEMORY_NONE)}};
  if (pad.get_size() != 0)
    arguments[DNNL_ARG_SCRATCHPAD] = memory(pad, engine(), DNNL_MEMORY_NONE);
  return arguments;
}

void Bf16Gemm::run(const uint16_t *x, const uint16_t *y, float *z,
                   void *scratchpad) const {
  size_t thread = static_cast<size_t>(omp_get_thread_num());
  // A thread beyond the team at load (a nested team) binds its own.
  std::shared_ptr<Bound> own =
      thread < bound.size() ? bound[thread]
                            : std::make_shared<Bound>(Bound{
                                  dnnl::stream(engine()), unboundArguments()});
  own->arguments[DNNL_ARG_SRC].set_data_handle(const_cast<uint16_t *>(x));
  own->arguments[DNNL_ARG_WEIGHTS].set_data_handle(const_cast<uint16_t *>(y));
  own->arguments[DNNL_ARG_DST].set_data_handle(z);
  if (pad.get_size() != 0)
    own->arguments[DNNL_ARG_SCRATCHPAD].set_data_handle(scratchpad);
  primitive.execute(own->stream, own->arguments);
  own->stream.wait();
}

int64_t bf16WeightGradientsMade() { return weightGradients; }

namespace {
bool bf16DotProductsOn = true;
} // namespace

void useBf16DotProducts(bool use) { bf16DotProductsOn = use; }

bool bf16DotProductsUsed() {
  return bf16DotProductsOn && processorHasBf16DotProducts();
}

bool processorHasBf16DotProducts() {
  auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

NativeProduct nativeBf16Product(const KernelArgs &args,
                                KernelScratch &scratch) {
  if (narrowOperandsOf(args) != NarrowFormat::Bfloat16 ||
      !bf16DotProductsUsed())
    return {};
  for (int i : {0, 1})
    if (args.inputs[i].dtype != plan::F32 && args.inputs[i].dtype != plan::BF16)
      return {};
  const std::string &op = args.instruction->op();
  return op == "gemm"     ? gemm(args, scratch)
         : op == "matmul" ? matMul(args, scratch)
                          : NativeProduct();
}

} // namespace cdp::runtime::cpu
