//===- CpuKernels.h - shared helpers of the CPU kernels ---------*- C++ -*-===//

#ifndef CDP_RUNTIME_KERNELS_CPU_CPUKERNELS_H
#define CDP_RUNTIME_KERNELS_CPU_CPUKERNELS_H

#include "../MessageBuffers.h"
#include "../NarrowOperands.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Device.h"
#include "cdp/Runtime/Kernel.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>

namespace cdp::runtime::cpu {

void registerElementwise(KernelRegistry &registry);
/// A kernel's memory for values that live only while it runs (operands
/// widened from 2 bytes, a result before it is packed, per-thread
/// matrices): on a device, in the device's scratch block, which its kernels
/// share as they run one after another (Device::reserveScratch; before, each
/// kernel held its own: 8 GB beside GPT-2 small's 2.6 GB arena at 8 x 512
/// in bf16); where the kernel runs on none (made alone, as the unit tests
/// do), buffers of its own, filled with 0xFF bytes (NaNs) so that a value
/// read before the run writes it shows.
class KernelScratch {
public:
  explicit KernelScratch(const KernelArgs &args);
  /// `bytes` more of it, 64-byte aligned, the kernel's while it runs.
  std::shared_ptr<void> take(size_t bytes);
  /// Bytes the kernel holds of its own (none in the device's block): its
  /// workspace.
  int64_t ownBytes() const { return own; }

private:
  Device *device = nullptr;
  size_t used = 0;
  int64_t own = 0;
};
/// `n` bf16 (or fp16) 2-byte values widened into float32, exactly: what
/// unpack_narrow does and a product reading 2-byte operands does first.
void widenNarrow(const uint16_t *in, float *out, int64_t n, bool bf16);
/// `n` float32 values stored as bf16 (or fp16) bits, rounded to nearest
/// even: what pack_narrow does and a 2-byte result's kernel does last.
void packNarrow(const float *in, uint16_t *out, int64_t n, bool bf16);
/// to[i] = roundedTo(format, x[i]) for i < n (`to` may be `x`): one row on
/// the calling thread, in vectors where the processor has them.
void roundedRow(const float *x, int64_t n, NarrowFormat format, float *to);
/// bits[i] = the bf16 (else fp16) bits of x[i], rounded to nearest even,
/// for i < n: one row on the calling thread, in vectors where the processor
/// has them.
void narrowRowBits(const float *x, int64_t n, bool bf16, uint16_t *bits);
/// to[i] = x[i]'s float value for i < n (bf16, else fp16, bits), exactly:
/// one row on the calling thread, in vectors where the processor has
/// them.
void widenedRow(const uint16_t *x, int64_t n, bool bf16, float *to);
/// Values [from, from + count) of `view` as float32: where they lie, or,
/// for a 2-byte view, widened into `buffer` (on the calling thread).
const float *floatsOf(const TensorView &view, int64_t from, int64_t count,
                      float *buffer);
/// Where values of `y` from element `from` are computed before storeRow
/// stores them: y's own float32 values, or `buffer` where y holds 2-byte
/// values.
float *resultsOf(const TensorView &y, int64_t from, float *buffer);
/// `count` values of a row into `y` from element `to`: rounded to
/// `rounding` where y is float32, else stored as the bits of y's 2-byte
/// format (rounded to it), on the calling thread.
void storeRow(const float *values, int64_t count, NarrowFormat rounding,
              const TensorView &y, int64_t to);
/// `n` float32 values rounded in place to `format` (nothing for None), as
/// round_to does: an op's round_result. Threads share only a long array: a
/// short one (a kernel's row or channel, rounded inside the kernel's own
/// parallel loop) enters no OpenMP region, whose cost per call would
/// exceed the rounding's.
void roundInPlace(NarrowFormat format, float *values, int64_t n);
/// `body`, then its first output rounded in place where the op has a
/// `round_result` (the cdp.round_to cdp-fuse-roundings moved into it): for
/// kernels whose loops do not round as they write (products, GELU and the
/// gradients of activations, softmax and the loss).
std::function<void(const StepContext &)>
roundedResult(const KernelArgs &args,
              std::function<void(const StepContext &)> body);
/// A kernel's result that the plan stores in 2 bytes (cdp-narrow-results)
/// and the kernel computes in float32: the view is pointed at a float32
/// buffer of the kernel's scratch, which `store` packs into
/// the result after each run (rounding to nearest even, as round_result
/// says). A float32 result is left alone (`active` false).
class NarrowedResult {
public:
  NarrowedResult(TensorView &view, KernelScratch &scratch);
  bool active() const { return values != nullptr; }
  void store() const;

private:
  TensorView narrow;
  std::shared_ptr<void> values;
};
/// The kernel of an op whose first output `make` computes in float32:
/// rounded where the op has round_result, and where that output is a
/// 2-byte tensor (cdp-narrow-results) computed into a float32 buffer of the
/// kernel's scratch, then stored 2 bytes a value.
/// Inputs `widenedInputs` that the plan stores in 2 bytes are widened into
/// float32 buffers of the kernel's scratch before each run (WidenedOperands).
std::unique_ptr<Kernel> narrowResultKernel(
    const KernelArgs &args,
    std::function<std::function<void(const StepContext &)>(const KernelArgs &)>
        make,
    const std::vector<size_t> &widenedInputs = {});
void registerLinalg(KernelRegistry &registry);
/// A kernel's operands that the plan stores in 2 bytes
/// (cdp-read-narrow-operands) and the kernel reads in float32: each view is
/// pointed at a float32 buffer of the kernel's scratch, which `widen`
/// refills, exactly, before each run.
class WidenedOperands {
public:
  /// Points `view` at a float32 buffer of the kernel's scratch where it
  /// holds 2-byte values.
  void add(TensorView &view, KernelScratch &scratch);
  void widen() const;
  bool empty() const { return operands.empty(); }

private:
  struct Operand {
    TensorView narrow;
    std::shared_ptr<void> values;
  };
  std::vector<Operand> operands;
};
/// C = alpha * op(A) * op(B) + beta * C, row-major, through oneDNN's sgemm.
void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, const float *b, float beta, float *c);
/// Checks the narrow_operands mark of a product or convolution (a GPU, or
/// the CPU's bf16 dot products, multiply marked operands in the narrow
/// format) on its first runs: a value of operand 0 or 1 the format does not
/// hold fails the step in one line naming the instruction, the operand and
/// the element. A wrong mark is the compiler's and shows in any step;
/// checking every step would add a pass over both operands to every
/// product.
class NarrowOperandsCheck {
public:
  /// `first` and `second` name operands 0 and 1 in the error.
  NarrowOperandsCheck(const KernelArgs &args, const char *first,
                      const char *second);
  bool active() const { return format != NarrowFormat::None; }
  void operator()();

private:
  NarrowFormat format;
  TensorView operands[2];
  std::string names[2];
  std::string where;
  int runs = 0;
};
/// A product's body; empty where it does not apply.
using NativeProduct = std::function<void(const StepContext &)>;
/// Whether the processor has bf16 dot products oneDNN uses (AVX512_BF16,
/// AMX), as oneDNN reports them (ONEDNN_MAX_CPU_ISA can hide them).
bool processorHasBf16DotProducts();
/// Whether kernels made from now on multiply bf16-marked products on them:
/// where the processor has them, unless a test compares the products
/// without them (useBf16DotProducts(false)).
bool bf16DotProductsUsed();
void useBf16DotProducts(bool use);
/// C = alpha op(A) op(B) (+ beta C) of bf16 A and B, laid out as sgemm takes
/// float32 ones (row-major, contiguous; C float32 m x n), on the processor's
/// bf16 dot products: one oneDNN matmul made at load, run from any thread with
/// that thread's scratchpad. Each OpenMP thread of the process's team keeps
/// its own stream and argument memories, made at load, so that a run
/// allocates nothing (the CPU attention runs a few thousand a step).
class Bf16Gemm {
public:
  /// Null where bf16DotProductsUsed() is false, the product is too small to
  /// pay for a primitive, or oneDNN has only its reference code for it.
  static std::shared_ptr<const Bf16Gemm> make(bool transA, bool transB,
                                              int64_t m, int64_t n, int64_t k,
                                              float alpha, float beta = 0.0f);
  size_t scratchpadBytes() const { return pad.get_size(); }
  void run(const uint16_t *a, const uint16_t *b, float *c,
           void *scratchpad) const;

private:
  Bf16Gemm() = default;
  struct Bound {
    dnnl::stream stream;
    std::unordered_map<int, dnnl::memory> arguments;
  };
  std::unordered_map<int, dnnl::memory> unboundArguments() const;
  dnnl::memory::desc a, b, c, pad;
  dnnl::matmul primitive;
  /// One per thread of an OpenMP team (omp_get_max_threads at load).
  std::vector<std::shared_ptr<Bound>> bound;
};
/// A gemm or matmul marked narrow_operands = bf16 as oneDNN's matmul on
/// bf16 operands (Bf16Products.cpp), where the processor has bf16 dot
/// products and the product is large enough (its packed operands in
/// `scratch`); no body elsewhere. It writes
/// a result the plan stores in bf16 itself; a float32 result's
/// round_result is the caller's.
NativeProduct nativeBf16Product(const KernelArgs &args, KernelScratch &scratch);
/// How many of those were made as oneDNN's inner-product weight gradients
/// (Y = A^T B, 2-D, nothing added) so far (tests).
int64_t bf16WeightGradientsMade();
/// cdp.attention and attention_grad.
void registerAttention(KernelRegistry &registry);
/// Whether attention kernels made from now on skip the scores a mask zeroes
/// (AttentionBlocks.h; on by default): off, tests compare with every score
/// computed.
void skipMaskedAttentionScores(bool skip);
/// conv, conv_grad_input and conv_grad_weight on oneDNN (DnnlConv.cpp): in
/// bf16 where marked narrow_operands = bf16 and the processor has bf16 dot
/// products.
void registerDnnlConvolution(KernelRegistry &registry);
/// How many convolution kernels were made on bf16 operands so far (tests).
int64_t bf16ConvolutionsMade();
void registerDnnlPrimitives(KernelRegistry &registry);
void registerPooling(KernelRegistry &registry);
/// Direct kernels preferred over oneDNN's where they apply (registered last).
void registerPoolingFastPaths(KernelRegistry &registry);
void registerNormalization(KernelRegistry &registry);
void registerShape(KernelRegistry &registry);
/// Where, comparisons, logic, IsNaN and IsInf.
void registerSelection(KernelRegistry &registry);
/// GatherElements, GatherND, CumSum, Trilu and the gathers' gradients.
void registerIndexing(KernelRegistry &registry);
void registerLoss(KernelRegistry &registry);
void registerOptimizer(KernelRegistry &registry);
/// ZeRO stage 1: a stage's update on its shard, then an all-gather.
void registerShardUpdate(KernelRegistry &registry);
void registerCommunication(KernelRegistry &registry);
/// laysa: error feedback, top-k selection and the mean of the selections.
void registerSparseExchange(KernelRegistry &registry);

/// Copies float tensors one after another from `in` (a collective's
/// contiguous buffer) into the tensors.
inline void unpack(const float *in, const std::vector<TensorView> &views) {
  for (const TensorView &v : views) {
    std::memcpy(v.data, in, v.numel() * sizeof(float));
    in += v.numel();
  }
}

/// The link of the device a kernel runs on where `carries` says the
/// communicator takes that device's memory for the kernel's traffic (a
/// GPU's, which then runs this kernel on the GPU's tensors), else null:
/// host memory. The MPI fabric takes it for messages and for ZeRO's and
/// laysa's collectives alone, the in-process fabric for everything.
inline DeviceLink *linkCarrying(const KernelArgs &args,
                                bool (Communicator::*carries)() const) {
  if (!args.runsOn || !args.communicator || !(args.communicator->*carries)())
    return nullptr;
  return args.runsOn->link();
}

/// A reduction's link; a send's, recv's, chain hop's or replica sum's; a
/// collective's.
inline DeviceLink *reductionLinkFor(const KernelArgs &args) {
  return linkCarrying(args, &Communicator::carriesDeviceMemory);
}
inline DeviceLink *messageLinkFor(const KernelArgs &args) {
  return linkCarrying(args, &Communicator::carriesDeviceMessages);
}
inline DeviceLink *collectiveLinkFor(const KernelArgs &args) {
  return linkCarrying(args, &Communicator::carriesDeviceCollectives);
}

/// Runs body(i) for every i in [0, count) on `threads` threads. With one
/// thread no parallel region opens at all: oneDNN called inside an inactive
/// (one-thread) region starts a nested team of its own, whose threads are
/// created and destroyed on every call (measured: a 0.1 ms GEMM took 4 ms
/// on two cores).
template <typename Body>
void forEachIndex(int64_t count, int threads, const Body &body) {
  if (threads <= 1) {
    for (int64_t i = 0; i < count; ++i)
      body(i);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < count; ++i)
    body(i);
}

/// Adds a kernel whose factory returns the step function directly.
template <typename Factory>
void addKernel(KernelRegistry &registry, const std::string &op, Factory make) {
  registry.add(op, Backend::CPU,
               [make](const KernelArgs &args) -> std::unique_ptr<Kernel> {
                 return std::make_unique<FunctionKernel>(make(args));
               });
}

/// Registers `make` for `op` ahead of the kernel registered before, which
/// serves what `make` declines (returns null for); with none before, a
/// declined configuration fails in one line.
inline void
registerAhead(KernelRegistry &registry, const std::string &op,
              std::function<std::unique_ptr<Kernel>(const KernelArgs &)> make) {
  const KernelFactory *previous = registry.lookup(op, Backend::CPU);
  KernelFactory fallback = previous ? *previous : KernelFactory();
  registry.add(
      op, Backend::CPU,
      [make, fallback, op](const KernelArgs &args) -> std::unique_ptr<Kernel> {
        if (std::unique_ptr<Kernel> kernel = make(args))
          return kernel;
        if (!fallback)
          args.fail("no CPU kernel for this configuration of " + op);
        return fallback(args);
      });
}

/// The product of shape[begin, end) (end clamped to the rank). Walked by
/// iterators: GCC 12 warned (-Waggressive-loop-optimizations) of an
/// "iteration 2^61" in the indexed loop it inlined into broadcastIndex.
inline int64_t product(const std::vector<int64_t> &shape, size_t begin = 0,
                       size_t end = ~size_t(0)) {
  end = std::min(end, shape.size());
  if (begin >= end)
    return 1;
  int64_t n = 1;
  for (auto it = shape.begin() + begin, last = shape.begin() + end; it != last;
       ++it)
    n *= *it;
  return n;
}

/// Offsets into a broadcast operand of shape `in` as an index walks the
/// dimensions [begin, end) of `out` (its flat index over them): size-1 or
/// missing dimensions read with stride 0.
struct BroadcastOffsets {
  std::vector<int64_t> size, stride;
  BroadcastOffsets(const std::vector<int64_t> &in,
                   const std::vector<int64_t> &out, size_t begin, size_t end) {
    size_t shift = out.size() - in.size();
    for (size_t d = begin; d < end; ++d) {
      int64_t own = d < shift ? 1 : in[d - shift];
      size.push_back(out[d]);
      stride.push_back(own == 1 ? 0 : product(in, d - shift + 1));
    }
  }
  int64_t operator()(int64_t i) const {
    int64_t offset = 0;
    for (size_t d = size.size(); d-- > 0;) {
      offset += (i % size[d]) * stride[d];
      i /= size[d];
    }
    return offset;
  }
};

/// A softmax row of `n` values `value(c)`: its maximum and the sum of
/// exp(value - maximum) in double.
template <typename Value>
void rowMaxAndExpSum(Value value, int64_t n, float &top, double &sum) {
  top = value(0);
  for (int64_t c = 1; c < n; ++c)
    top = std::max(top, value(c));
  sum = 0;
  for (int64_t c = 0; c < n; ++c)
    sum += std::exp(static_cast<double>(value(c) - top));
}

inline std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

/// For every element of `outShape`, the index of the element of `inShape`
/// that numpy broadcasting reads. Computed once, at load.
inline std::vector<int64_t>
broadcastIndex(const std::vector<int64_t> &inShape,
               const std::vector<int64_t> &outShape) {
  size_t rank = outShape.size();
  std::vector<int64_t> inStrides(rank, 0);
  std::vector<int64_t> strides = stridesOf(inShape);
  size_t shift = rank - inShape.size();
  for (size_t d = 0; d < inShape.size(); ++d)
    inStrides[d + shift] = inShape[d] == 1 ? 0 : strides[d];
  int64_t count = product(outShape);
  std::vector<int64_t> index(count);
  std::vector<int64_t> position(rank, 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < count; ++i) {
    index[i] = offset;
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
      ++position[d];
      offset += inStrides[d];
      if (position[d] < outShape[d])
        break;
      offset -= inStrides[d] * position[d];
      position[d] = 0;
    }
  }
  return index;
}

/// NumPy broadcasting of several operands to `outShape` without an index
/// per element (a kernel's index vector was 8 bytes per output element,
/// held for the run: hundreds of MB per device on a transformer). The
/// output's axes are merged where every operand is contiguous across them
/// or repeated along both, then walked row by row: a row is the last
/// merged axis, along which each operand steps by 0 or 1.
class BroadcastWalk {
public:
  BroadcastWalk(const std::vector<std::vector<int64_t>> &inShapes,
                const std::vector<int64_t> &outShape);
  int64_t rows() const { return rowCount; }
  int64_t rowLength() const { return length; }
  /// Operand `k`'s step along a row: 0 (repeated) or 1.
  int64_t step(size_t k) const { return steps[k]; }
  /// Operand `k`'s offset of row `row`'s first element.
  int64_t rowStart(size_t k, int64_t row) const {
    int64_t offset = 0;
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
      offset += (row % sizes[d]) * strides[k][d];
      row /= sizes[d];
    }
    return offset;
  }

private:
  std::vector<int64_t> sizes;                ///< merged axes but the last
  std::vector<std::vector<int64_t>> strides; ///< per operand, per axis
  std::vector<int64_t> steps;
  int64_t length = 1, rowCount = 1;
};

/// Gemm's C broadcast into Y (m x n) row by row, before the product adds
/// beta * Y to its own (an index per element of Y was twice Y's bytes:
/// 226 MB of GPT-2 medium's biases).
class GemmAddend {
public:
  GemmAddend(const TensorView &c, const std::vector<int64_t> &yShape);
  void writeInto(float *y) const;

private:
  TensorView c;
  BroadcastWalk walk;
};

/// Splits `shape` around `axis` into (outer, axis length, inner).
inline void splitAxis(const std::vector<int64_t> &shape, int64_t axis,
                      int64_t &outer, int64_t &length, int64_t &inner) {
  outer = product(shape, 0, axis);
  length = shape[axis];
  inner = product(shape, axis + 1);
}

inline int64_t normalizeAxis(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

/// Bytes of one element of `view`, of the whole of it (the plan's widths:
/// a bf16 or fp16 value 2).
inline size_t elementSize(const TensorView &view) {
  return static_cast<size_t>(plan::dtypeSize(view.dtype));
}
inline size_t byteSize(const TensorView &view) {
  return static_cast<size_t>(view.numel()) * elementSize(view);
}

} // namespace cdp::runtime::cpu

#endif // CDP_RUNTIME_KERNELS_CPU_CPUKERNELS_H
