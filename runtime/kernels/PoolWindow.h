//===- PoolWindow.h - pooling windows for every backend ---------*- C++ -*-===//
//
// The window arithmetic of MaxPool and AveragePool (1 to 3 spatial
// dimensions, ceil mode's end padding, count_include_pad), one definition
// the CPU kernels run on the host and the CUDA kernels on the GPU.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_POOLWINDOW_H
#define CDP_RUNTIME_KERNELS_POOLWINDOW_H

#include "HostDevice.h"
#include "cdp/Runtime/Kernel.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace cdp::runtime {

/// A pooling window over 1 to 3 spatial dimensions, seen as 3 (D, H, W):
/// missing leading dimensions have size 1, kernel 1, stride 1, no padding.
struct PoolGeometry {
  static constexpr int kDims = 3;
  int64_t planes = 1, inSize = 1, outSize = 1;
  int64_t in[kDims], out[kDims], kernel[kDims], padBegin[kDims], padEnd[kDims],
      stride[kDims], dilation[kDims];
  bool countIncludePad = false;

  PoolGeometry(const KernelArgs &args, const std::vector<int64_t> &input,
               const std::vector<int64_t> &output) {
    planes = input[0] * input[1];
    int spatial = static_cast<int>(input.size()) - 2;
    if (spatial > kDims)
      args.fail("pools over more than 3 spatial dimensions");
    std::vector<int64_t> kernelShape = args.ints("kernel_shape"),
                         pads = args.ints("pads"),
                         strides = args.ints("strides"),
                         dilations = args.ints("dilations");
    for (int d = 0; d < kDims; ++d) {
      int s = d - (kDims - spatial); // the op's dimension, or < 0
      bool real = s >= 0;
      in[d] = real ? input[2 + s] : 1;
      out[d] = real ? output[2 + s] : 1;
      kernel[d] = real ? kernelShape[s] : 1;
      padBegin[d] = real ? pads[s] : 0;
      padEnd[d] = real ? pads[s + spatial] : 0;
      stride[d] = real ? strides[s] : 1;
      dilation[d] = real && !dilations.empty() ? dilations[s] : 1;
      inSize *= in[d];
      outSize *= out[d];
    }
    countIncludePad = args.i("count_include_pad", 0) != 0;
  }

  /// Calls fn(index) for every input position (within its plane) of the
  /// window of output position `o` (within its plane); returns the
  /// divisor of average pooling.
  template <typename Fn>
  CDP_HOST_DEVICE int64_t window(int64_t o, Fn fn) const {
    int64_t at[kDims];
    for (int d = kDims - 1; d >= 0; --d) {
      at[d] = o % out[d] * stride[d] - padBegin[d];
      o /= out[d];
    }
    int64_t valid = 0, padded = 0;
    for (int64_t kd = 0; kd < kernel[0]; ++kd) {
      int64_t id = at[0] + kd * dilation[0];
      if (id >= in[0] + padEnd[0])
        break; // past the end padding (ceil mode): not counted
      for (int64_t kh = 0; kh < kernel[1]; ++kh) {
        int64_t ih = at[1] + kh * dilation[1];
        if (ih >= in[1] + padEnd[1])
          break;
        for (int64_t kw = 0; kw < kernel[2]; ++kw) {
          int64_t iw = at[2] + kw * dilation[2];
          if (iw >= in[2] + padEnd[2])
            break;
          ++padded;
          if (id < 0 || id >= in[0] || ih < 0 || ih >= in[1] || iw < 0 ||
              iw >= in[2])
            continue;
          ++valid;
          fn((id * in[1] + ih) * in[2] + iw);
        }
      }
    }
    return countIncludePad ? padded : valid;
  }

  /// The first maximum of the window of output position `o` in `plane`
  /// (an index within the plane), or -1 for a window of padding only.
  CDP_HOST_DEVICE int64_t argmax(const float *plane, int64_t o) const {
    float best = -INFINITY;
    int64_t where = -1;
    window(o, [&](int64_t i) {
      if (where < 0 || plane[i] > best) {
        best = plane[i];
        where = i;
      }
    });
    return where;
  }

  /// `index` (within a plane, row-major) with the spatial dimensions in
  /// column-major order instead (MaxPool's storage_order 1).
  CDP_HOST_DEVICE int64_t columnMajor(int64_t index) const {
    int64_t w = index % in[2], h = index / in[2] % in[1],
            d = index / (in[1] * in[2]);
    return (w * in[1] + h) * in[0] + d;
  }
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_POOLWINDOW_H
