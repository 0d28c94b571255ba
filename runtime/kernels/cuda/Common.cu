//===- Common.cu - index maps, copies and segmented sums on the GPU -------===//

#include "CudaKernels.h"
#include "Reduce.cuh"

namespace cdp::runtime::cuda {

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

int64_t product(const std::vector<int64_t> &shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < std::min(end, shape.size()); ++i)
    n *= shape[i];
  return n;
}

size_t byteSize(const TensorView &view) {
  return static_cast<size_t>(view.numel()) * plan::dtypeSize(view.dtype);
}

IndexMap stridedMap(const KernelArgs &args, const std::vector<int64_t> &out,
                    const std::vector<int64_t> &strides, int64_t base) {
  if (out.size() > kMaxRank)
    args.fail("has " + std::to_string(out.size()) +
              " dimensions; the CUDA kernels take at most " +
              std::to_string(kMaxRank));
  IndexMap map;
  map.rank = static_cast<int>(out.size());
  map.base = base;
  for (size_t d = 0; d < out.size(); ++d) {
    map.size[d] = std::max<int64_t>(out[d], 1);
    map.stride[d] = strides[d];
  }
  return map;
}

IndexMap broadcastMap(const KernelArgs &args, const std::vector<int64_t> &in,
                      const std::vector<int64_t> &out) {
  std::vector<int64_t> strides(out.size(), 0), own = stridesOf(in);
  size_t shift = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    strides[d + shift] = in[d] == 1 ? 0 : own[d];
  return stridedMap(args, out, strides);
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

__global__ void segmentedSumKernel(const float *x, float *y, Segments s,
                                   double scale) {
  for (int64_t o = blockIdx.x; o < s.outputs; o += gridDim.x) {
    int64_t base = s.outer(o);
    double sum = 0;
    for (int64_t r = threadIdx.x; r < s.count; r += blockDim.x)
      sum += x[base + s.inner(r)];
    sum = blockSum(sum);
    if (threadIdx.x == 0)
      y[o] = static_cast<float>(sum * scale);
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
  else
    gatherKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const uint8_t *>(x), static_cast<uint8_t *>(y), n, map);
  launched("gather copy");
}

void segmentedSum(cudaStream_t stream, const float *x, float *y,
                  const Segments &segments, double scale) {
  if (segments.outputs == 0)
    return;
  unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>(segments.outputs, int64_t(1) << 20));
  segmentedSumKernel<<<blocks, kThreads, 0, stream>>>(x, y, segments, scale);
  launched("segmented sum");
}

} // namespace cdp::runtime::cuda
