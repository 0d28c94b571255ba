//===- Common.cu - index maps, copies and segmented sums on the GPU -------===//

#include "../NarrowFloat.h"
#include "CudaKernels.h"
#include "Reduce.cuh"

namespace cdp::runtime::cuda {

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

// Walked by iterators, the end clamped once: GCC 12 warned
// (-Waggressive-loop-optimizations) of an "iteration 2^61" in the indexed
// loop it inlined into segmentsOf, as in the CPU kernels' product().
int64_t product(const std::vector<int64_t> &shape, size_t begin, size_t end) {
  end = std::min(end, shape.size());
  if (begin >= end)
    return 1;
  int64_t n = 1;
  for (auto it = shape.begin() + begin, last = shape.begin() + end; it != last;
       ++it)
    n *= *it;
  return n;
}

size_t byteSize(const TensorView &view) {
  return static_cast<size_t>(view.numel()) * plan::dtypeSize(view.dtype);
}

IndexMap stridedMap(const KernelArgs &args, const std::vector<int64_t> &out,
                    const std::vector<int64_t> &strides, int64_t base) {
  IndexMap map;
  if (!IndexMap::build(out, strides, base, map))
    args.fail("has " + std::to_string(out.size()) +
              " dimensions; the CUDA kernels take at most " +
              std::to_string(kMaxRank));
  return map;
}

std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &in,
                                      const std::vector<int64_t> &out) {
  std::vector<int64_t> strides(out.size(), 0), own = stridesOf(in);
  size_t shift = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    strides[d + shift] = in[d] == 1 ? 0 : own[d];
  return strides;
}

IndexMap coordinateMap(const KernelArgs &args,
                       const std::vector<int64_t> &sizes, size_t d) {
  std::vector<int64_t> strides(sizes.size(), 0);
  strides[d] = 1;
  return stridedMap(args, sizes, strides);
}

IndexMap channelMap(const KernelArgs &args, const std::vector<int64_t> &shape) {
  return coordinateMap(args, {shape[0], shape[1], product(shape, 2)}, 1);
}

IndexMap broadcastMap(const KernelArgs &args, const std::vector<int64_t> &in,
                      const std::vector<int64_t> &out) {
  return stridedMap(args, out, broadcastStrides(in, out));
}

Segments segmentsOf(const KernelArgs &args, const std::vector<int64_t> &shape,
                    const std::vector<bool> &reduced) {
  std::vector<int64_t> strides = stridesOf(shape), keptSize, keptStride,
                       innerSize, innerStride;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool inner = reduced[d];
    (inner ? innerSize : keptSize).push_back(shape[d]);
    (inner ? innerStride : keptStride).push_back(strides[d]);
  }
  Segments segments;
  segments.outer = stridedMap(args, keptSize, keptStride);
  segments.inner = stridedMap(args, innerSize, innerStride);
  segments.outputs = product(keptSize);
  segments.count = product(innerSize);
  return segments;
}

namespace {

template <typename T>
__global__ void gatherKernel(const T *x, T *y, int64_t n, IndexMap map) {
  CDP_FOR_EACH(i, n) { y[i] = x[map(i)]; }
}

__device__ double termOf(SegmentedSum::Term term, const float *x,
                         const float *z, int64_t at) {
  auto narrow = reinterpret_cast<const uint16_t *>(x);
  if (term == SegmentedSum::Term::Bfloat16Value)
    return floatOfBfloat16(narrow[at]);
  if (term == SegmentedSum::Term::Float16Value)
    return floatOfFloat16(narrow[at]);
  double v = x[at];
  return term == SegmentedSum::Term::Value    ? v
         : term == SegmentedSum::Term::Square ? v * v
                                              : v * z[at];
}

/// Block b sums chunk b % splits of segment b / splits.
__global__ void partialRowsKernel(Segments s, int64_t splits, int64_t chunk,
                                  const float *x, const float *z,
                                  SegmentedSum::Term term, double *partials) {
  int64_t o = blockIdx.x / splits, part = blockIdx.x % splits;
  int64_t base = s.outer(o), end = min(s.count, (part + 1) * chunk);
  double sum = 0;
  for (int64_t r = part * chunk + threadIdx.x; r < end; r += blockDim.x)
    sum += termOf(term, x, z, base + s.inner(r));
  sum = blockSum(sum);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = sum;
}

/// Thread t sums chunk t / outputs of segment t % outputs: neighbouring
/// threads read neighbouring segments (the kept dimension is innermost).
__global__ void partialColumnsKernel(Segments s, int64_t splits, int64_t chunk,
                                     const float *x, const float *z,
                                     SegmentedSum::Term term,
                                     double *partials) {
  CDP_FOR_EACH(t, s.outputs * splits) {
    int64_t o = t % s.outputs, part = t / s.outputs;
    int64_t base = s.outer(o), end = min(s.count, (part + 1) * chunk);
    double sum = 0;
    for (int64_t r = part * chunk; r < end; ++r)
      sum += termOf(term, x, z, base + s.inner(r));
    partials[o * splits + part] = sum;
  }
}

__global__ void finishSumsKernel(const double *partials, int64_t outputs,
                                 int64_t splits, double *out, float *y,
                                 double scale, NarrowFormat rounding) {
  CDP_FOR_EACH(o, outputs) {
    double sum = 0;
    for (int64_t part = 0; part < splits; ++part)
      sum += partials[o * splits + part];
    if (out)
      out[o] = sum;
    else
      y[o] = roundedTo(rounding, static_cast<float>(sum * scale));
  }
}

} // namespace

void gatherCopy(cudaStream_t stream, const void *x, void *y, int64_t n,
                size_t width, const IndexMap &map) {
  if (n == 0)
    return;
  unsigned blocks = blocksFor(n);
  if (width == 8)
    gatherKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const int64_t *>(x), static_cast<int64_t *>(y), n, map);
  else if (width == 4)
    gatherKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const float *>(x), static_cast<float *>(y), n, map);
  else if (width == 2) // bf16 and fp16 values a plan stores in 2 bytes
    gatherKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const uint16_t *>(x), static_cast<uint16_t *>(y), n, map);
  else if (width == 1)
    gatherKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const uint8_t *>(x), static_cast<uint8_t *>(y), n, map);
  else
    throw RuntimeError("a copy of " + std::to_string(width) +
                       "-byte elements, which the GPU's copies do not take");
  launched("gather copy");
}

SegmentedSum::SegmentedSum(const KernelArgs &args,
                           const std::vector<int64_t> &shape,
                           const std::vector<bool> &reduced)
    : segments(segmentsOf(args, shape, reduced)) {
  const IndexMap &inner = segments.inner;
  contiguous = inner.rank > 0 && inner.stride[inner.rank - 1] == 1;
  int64_t count = std::max<int64_t>(segments.count, 1),
          outputs = std::max<int64_t>(segments.outputs, 1);
  // Enough blocks (rows) or threads (columns) to fill a large GPU, but
  // chunks long enough that the partials stay few.
  if (contiguous)
    splits = std::clamp<int64_t>((1024 + outputs - 1) / outputs, 1,
                                 (count + 2047) / 2048);
  else
    splits = std::clamp<int64_t>((131072 + outputs - 1) / outputs, 1,
                                 (count + 63) / 64);
  chunk = (count + splits - 1) / splits;
  partials = std::make_shared<Scratch>(
      deviceOf(args), static_cast<size_t>(outputs * splits) * sizeof(double));
}

void SegmentedSum::partial(cudaStream_t stream, const float *x, const float *z,
                           Term term) const {
  double *into = partials->as<double>();
  if (contiguous)
    partialRowsKernel<<<static_cast<unsigned>(segments.outputs * splits),
                        kThreads, 0, stream>>>(segments, splits, chunk, x, z,
                                               term, into);
  else
    partialColumnsKernel<<<blocksFor(segments.outputs * splits), kThreads, 0,
                           stream>>>(segments, splits, chunk, x, z, term, into);
  launched("segmented sum");
}

void SegmentedSum::sums(cudaStream_t stream, const float *x, const float *z,
                        Term term, double *out) const {
  if (segments.outputs == 0)
    return;
  partial(stream, x, z, term);
  finishSumsKernel<<<blocksFor(segments.outputs), kThreads, 0, stream>>>(
      partials->as<double>(), segments.outputs, splits, out, nullptr, 1.0,
      NarrowFormat::None);
  launched("segmented sum");
}

void SegmentedSum::sumInto(cudaStream_t stream, const void *x, float *y,
                           double scale, Term term,
                           NarrowFormat rounding) const {
  if (segments.outputs == 0)
    return;
  partial(stream, static_cast<const float *>(x), nullptr, term);
  finishSumsKernel<<<blocksFor(segments.outputs), kThreads, 0, stream>>>(
      partials->as<double>(), segments.outputs, splits, nullptr, y, scale,
      rounding);
  launched("segmented sum");
}

} // namespace cdp::runtime::cuda
