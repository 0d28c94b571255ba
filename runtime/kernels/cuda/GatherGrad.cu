//===- GatherGrad.cu - an embedding's gradient, the same bits every run ---===//
//
// gather_grad adds each looked-up row's gradient into its table row. Added
// with atomics, a token seen twice gets its two rows summed in whichever
// order the GPU ran them: a resumed language model would not equal the
// uninterrupted run. Here the positions are grouped by table row, in
// position order (each position's rank among the earlier ones of its row,
// a count per row, an exclusive scan, a scatter: a stable counting sort),
// and one thread per (row run, column) adds the run's values from zero in
// that order: exactly the CPU kernel's sums (zeros, then += in position
// order), so the GPU's gradient equals the CPU's bit for bit.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "Reduce.cuh"

namespace cdp::runtime::cuda {

namespace {

constexpr int64_t kMostPositions = 131072;

/// What a gradient's positions are sorted by: its table row, or `dim` for
/// one that adds nothing (out of range, or the padding row).
__device__ int32_t rowKey(const int64_t *indices, int64_t k, int64_t dim,
                          int64_t padding) {
  int64_t index = indices[k];
  if (index < 0)
    index += dim;
  bool adds = index >= 0 && index < dim && index != padding;
  return static_cast<int32_t>(adds ? index : dim);
}

/// Position k's key, its rank among the earlier positions of that key, and
/// the key's count (integer atomics: the same counts every run). The
/// earlier keys pass through shared memory a tile at a time.
__global__ void rankPositions(const int64_t *indices, int64_t count,
                              int64_t dim, int64_t padding, int32_t *keys,
                              int32_t *ranks, int32_t *counts) {
  __shared__ int32_t tile[kThreads];
  int64_t first = blockIdx.x * int64_t(blockDim.x), k = first + threadIdx.x;
  int32_t key = k < count ? rowKey(indices, k, dim, padding) : -1;
  int32_t rank = 0;
  for (int64_t start = 0; start <= first; start += blockDim.x) {
    int64_t t = start + threadIdx.x;
    tile[threadIdx.x] = t < count ? rowKey(indices, t, dim, padding) : -2;
    __syncthreads();
    for (int i = 0; i < static_cast<int>(blockDim.x); ++i)
      rank += start + i < k && tile[i] == key;
    __syncthreads();
  }
  if (k < count) {
    keys[k] = key;
    ranks[k] = rank;
    atomicAdd(counts + key, 1);
  }
}

/// counts[0..n) into their exclusive prefix sums, in place: one block, each
/// thread a contiguous run.
__global__ void exclusiveScan(int32_t *counts, int64_t n) {
  __shared__ int32_t runs[kThreads];
  int64_t per = (n + blockDim.x - 1) / blockDim.x;
  int64_t begin = threadIdx.x * per, end = min(n, begin + per);
  int32_t sum = 0;
  for (int64_t i = begin; i < end; ++i)
    sum += counts[i];
  runs[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t running = 0;
    for (int i = 0; i < static_cast<int>(blockDim.x); ++i) {
      int32_t own = runs[i];
      runs[i] = running;
      running += own;
    }
  }
  __syncthreads();
  int32_t running = runs[threadIdx.x];
  for (int64_t i = begin; i < end; ++i) {
    int32_t own = counts[i];
    counts[i] = running;
    running += own;
  }
}

__global__ void placePositions(const int32_t *keys, const int32_t *ranks,
                               const int32_t *offsets, int64_t count,
                               int32_t *order) {
  CDP_FOR_EACH(k, count) { order[offsets[keys[k]] + ranks[k]] = k; }
}

/// Thread (s, o, j): where sorted slot s starts a run of one table row,
/// that row's gradient at (o, j) is the run's values added from zero in
/// position order.
struct RunSums {
  IndexMap slot, gradient, table; ///< of (s, o, j): s, dy's o, j, dx's o, j
  int64_t count = 0, dim = 0, inner = 0, total = 0;
};

__global__ void sumRuns(RunSums r, const int32_t *keys, const int32_t *order,
                        const float *dy, float *dx) {
  CDP_FOR_EACH(e, r.total) {
    int64_t s = r.slot(e);
    int32_t key = keys[order[s]];
    if (key == r.dim || (s > 0 && keys[order[s - 1]] == key))
      continue;
    const float *from = dy + r.gradient(e);
    float sum = 0.0f;
    for (int64_t t = s; t < r.count && keys[order[t]] == key; ++t)
      sum += from[order[t] * r.inner];
    dx[r.table(e) + key * r.inner] = sum;
  }
}

} // namespace

std::function<void(const StepContext &)>
gatherGradInOrder(const KernelArgs &args, int64_t outer, int64_t dim,
                  int64_t inner, int64_t padding) {
  TensorView dy = args.inputs[0], indices = args.inputs[1],
             dx = args.outputs[0];
  int64_t count = indices.numel();
  // The ranks compare every pair of positions: a language model's batch of
  // tokens (4096 for GPT-2 at batch 8, sequence 512) costs microseconds;
  // beyond kMostPositions the atomic adds stay.
  if (count > kMostPositions || dim >= INT32_MAX)
    return nullptr;
  RunSums r;
  r.count = count, r.dim = dim, r.inner = inner;
  r.total = count * outer * inner;
  std::vector<int64_t> sizes = {count, outer, inner};
  r.slot = coordinateMap(args, sizes, 0);
  r.gradient = stridedMap(args, sizes, {0, count * inner, 1});
  r.table = stridedMap(args, sizes, {0, dim * inner, 1});
  // keys, ranks, order (a position each), counts (a row each and the
  // sentinel's), in one scratch block.
  int64_t slots = 3 * count + dim + 1;
  auto scratch = std::make_shared<Scratch>(
      deviceOf(args),
      static_cast<size_t>(std::max<int64_t>(slots, 1)) * sizeof(int32_t));
  return [=](const StepContext &context) {
    cudaStream_t stream = streamOf(context);
    checkCuda(cudaMemsetAsync(dx.data, 0, byteSize(dx), stream), "memset");
    if (r.total == 0)
      return;
    int32_t *keys = scratch->as<int32_t>(), *ranks = keys + count,
            *order = ranks + count, *counts = order + count;
    checkCuda(cudaMemsetAsync(counts, 0, (dim + 1) * sizeof(int32_t), stream),
              "memset");
    unsigned blocks = static_cast<unsigned>((count + kThreads - 1) / kThreads);
    rankPositions<<<blocks, kThreads, 0, stream>>>(
        indices.i64(), count, dim, padding, keys, ranks, counts);
    exclusiveScan<<<1, kThreads, 0, stream>>>(counts, dim + 1);
    placePositions<<<blocksFor(count), kThreads, 0, stream>>>(
        keys, ranks, counts, count, order);
    sumRuns<<<blocksFor(r.total), kThreads, 0, stream>>>(r, keys, order,
                                                         dy.f32(), dx.f32());
    launched("gather_grad");
  };
}

} // namespace cdp::runtime::cuda
