//===- MaxPool2d.h - 2-D max pooling without padding ------------*- C++ -*-===//
//
// The common cases of MaxPool in CNNs (LeNet's and VGG's 2 x 2, ResNet's
// padded 3 x 3 stem): two spatial dimensions, no dilation, padding smaller
// than the window, no window past the padded end. Direct
// loops over each plane's rows, forward and backward, replace oneDNN's plain
// (nchw) pooling, whose per-call cost dominated small CNN steps (LeNet's two
// pools were half its step), and whose backward recomputed the forward to
// get the argmax workspace. The window's first maximum in row-major order
// wins, a NaN always (PyTorch's rule); the backward finds the same element.
// A plane without NaNs (one vectorised pass says so) takes loops that need
// not look for them.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_CPU_MAXPOOL2D_H
#define CDP_RUNTIME_KERNELS_CPU_MAXPOOL2D_H

#include <cstdint>
#include <vector>

namespace cdp::runtime::cpu {

class MaxPool2d {
public:
  /// Whether the pooling is one this handles: x of rank 4 (N, C, H, W)
  /// pooled into y, `kernel`, `strides`, `pads` and `dilations` as the
  /// instruction's attributes (2 entries each; pads 4; dilations may be
  /// empty).
  static bool fits(const std::vector<int64_t> &x, const std::vector<int64_t> &y,
                   const std::vector<int64_t> &kernel,
                   const std::vector<int64_t> &strides,
                   const std::vector<int64_t> &pads,
                   const std::vector<int64_t> &dilations);
  MaxPool2d(const std::vector<int64_t> &x, const std::vector<int64_t> &y,
            const std::vector<int64_t> &kernel,
            const std::vector<int64_t> &strides,
            const std::vector<int64_t> &pads);

  void forward(const float *x, float *y) const;
  /// dx = the gradient of y = maxpool(x) given dy.
  void backward(const float *x, const float *dy, float *dx) const;

private:
  /// Input rows or columns [begin, end) of a window, clipped to the input:
  /// padding never wins (PyTorch's -inf).
  struct Span {
    int64_t begin, end;
  };
  Span rowsOf(int64_t oh) const { return clipped(oh * sH - padTop, kH, inH); }
  Span columnsOf(int64_t ow) const {
    return clipped(ow * sW - padLeft, kW, inW);
  }
  static Span clipped(int64_t first, int64_t window, int64_t size) {
    return {first < 0 ? 0 : first,
            first + window < size ? first + window : size};
  }
  /// The index within its plane of the maximum of output (oh, ow)'s window.
  int64_t argmax(const float *plane, int64_t oh, int64_t ow) const;
  /// One plane without NaNs (nearly all): the forward combines each
  /// window's rows as it goes, the backward finds each window's first
  /// maximum without branches; both much faster than argmax per output.
  void forwardWithoutNaN(const float *plane, float *out) const;
  void backwardWithoutNaN(const float *plane, const float *dy, float *dx) const;

  int64_t planes, inH, inW, outH, outW, kH, kW, sH, sW, padTop, padLeft;
  bool unpadded; ///< the 2 x 2 / stride-2 loops need it
};

} // namespace cdp::runtime::cpu

#endif // CDP_RUNTIME_KERNELS_CPU_MAXPOOL2D_H
