//===- Reduce.cuh - block-wide reductions for the CUDA kernels ---*- CUDA
//-*-===//
//
// Sums and maxima over a thread block (blockDim a multiple of 32, at most
// 1024): warp shuffles, then one warp over the warps' results. The order is
// fixed by the launch, so a result does not change from run to run.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_CUDA_REDUCE_CUH
#define CDP_RUNTIME_KERNELS_CUDA_REDUCE_CUH

namespace cdp::runtime::cuda {

template <typename T, typename Op>
__device__ T blockReduce(T value, T identity, Op op) {
  __shared__ T partial[32];
  __shared__ T result;
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2)
    value = op(value, __shfl_down_sync(0xffffffffu, value, offset));
  if (lane == 0)
    partial[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : identity;
    for (int offset = 16; offset > 0; offset /= 2)
      value = op(value, __shfl_down_sync(0xffffffffu, value, offset));
    if (lane == 0)
      result = value;
  }
  __syncthreads();
  T total = result;
  __syncthreads(); // the shared slots may be reused by the next call
  return total;
}

template <typename T> __device__ T blockSum(T value) {
  return blockReduce(value, T(0), [](T a, T b) { return a + b; });
}

template <typename T> __device__ T blockMax(T value) {
  return blockReduce(value, -INFINITY, [](T a, T b) { return a > b ? a : b; });
}

/// A softmax row of `n` values `value(c)` spread over a block: its maximum
/// and the sum of exp(value - maximum) in double, every thread given both.
template <typename Value>
__device__ void rowMaxAndExpSum(Value value, int64_t n, float &top,
                                double &sum) {
  top = -INFINITY;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
    top = fmaxf(top, value(c));
  top = blockMax(top);
  sum = 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
    sum += exp(static_cast<double>(value(c) - top));
  sum = blockSum(sum);
}

/// Grid-stride loop over [0, n).
#define CDP_FOR_EACH(i, n)                                                     \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

} // namespace cdp::runtime::cuda

#endif // CDP_RUNTIME_KERNELS_CUDA_REDUCE_CUH
