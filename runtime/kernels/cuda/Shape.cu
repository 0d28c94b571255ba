//===- Shape.cu - data movement and reductions on the GPU -----------------===//

#include "../GatherGeometry.h"
#include "CudaKernels.h"
#include "Reduce.cuh"

namespace cdp::runtime::cuda {

namespace {

/// Iterating a slice's output, the offset of its element in the input.
IndexMap sliceMap(const KernelArgs &args, const std::vector<int64_t> &input,
                  const std::vector<int64_t> &output) {
  size_t rank = input.size();
  std::vector<int64_t> start(rank, 0), step(rank, 1);
  std::vector<int64_t> starts = args.ints("starts"), axes = args.ints("axes"),
                       steps = args.ints("steps");
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t axis = normalizeAxis(axes[i], rank), dim = input[axis];
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    s = steps[i] > 0 ? std::clamp<int64_t>(s, 0, dim)
                     : std::clamp<int64_t>(s, 0, dim - 1);
    start[axis] = s;
    step[axis] = steps[i];
  }
  std::vector<int64_t> inStrides = stridesOf(input), strides(rank);
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d) {
    base += start[d] * inStrides[d];
    strides[d] = step[d] * inStrides[d];
  }
  return stridedMap(args, output, strides, base);
}

__global__ void scatterKernel(const float *x, float *y, int64_t n,
                              IndexMap map) {
  CDP_FOR_EACH(i, n) { y[map(i)] = x[i]; }
}

template <typename T> __global__ void fillKernel(T *y, int64_t n, T value) {
  CDP_FOR_EACH(i, n) { y[i] = value; }
}

template <typename T>
__global__ void scatterAnyKernel(const T *x, T *y, int64_t n, IndexMap map) {
  CDP_FOR_EACH(i, n) { y[map(i)] = x[i]; }
}

/// Where element e of a gather's result (outer x count x inner, in units
/// of T) comes from: `row` gives o * dim * inner + j and `slot` k, so that
/// it reads unit `row(e) + indices[k] * inner` (no division by the row's
/// length in 64 bits per element; IndexMap's dividers).
struct GatherMaps {
  IndexMap row, slot;
  int64_t dim = 0, inner = 0, total = 0;

  GatherMaps(const KernelArgs &args, int64_t outer, int64_t count, int64_t dim,
             int64_t inner)
      : row(stridedMap(args, {outer, count, inner}, {dim * inner, 0, 1})),
        slot(coordinateMap(args, {outer, count, inner}, 1)), dim(dim),
        inner(inner), total(outer * count * inner) {}
};

template <typename T>
__global__ void gatherRowsKernel(const T *data, const int64_t *indices, T *y,
                                 GatherMaps at, int *status) {
  CDP_FOR_EACH(e, at.total) {
    int64_t index = indices[at.slot(e)];
    if (index < -at.dim || index >= at.dim) {
      atomicOr(status, kIndexOutOfRange);
      y[e] = 0;
      continue;
    }
    if (index < 0)
      index += at.dim;
    y[e] = data[at.row(e) + index * at.inner];
  }
}

__global__ void gatherGradKernel(const float *dy, const int64_t *indices,
                                 float *dx, GatherMaps at, int64_t padding) {
  CDP_FOR_EACH(e, at.total) {
    int64_t index = indices[at.slot(e)];
    if (index < 0)
      index += at.dim;
    if (index >= 0 && index < at.dim && index != padding)
      atomicAdd(dx + at.row(e) + index * at.inner, dy[e]);
  }
}

void registerCopies(KernelRegistry &registry) {
  for (const char *op : {"reshape", "flatten", "squeeze", "unsqueeze",
                         "identity", "master_copy"})
    addKernel(registry, op, Launches::SameEveryStep,
              [](const KernelArgs &args) {
                TensorView x = args.inputs[0], y = args.outputs[0];
                size_t bytes = byteSize(y);
                return [=](const StepContext &context) {
                  if (x.data != y.data && bytes)
                    checkCuda(cudaMemcpyAsync(y.data, x.data, bytes,
                                              cudaMemcpyDeviceToDevice,
                                              streamOf(context)),
                              "reshape copy");
                };
              });

  addKernel(
      registry, "transpose", Launches::SameEveryStep,
      [](const KernelArgs &args) {
        TensorView x = args.inputs[0], y = args.outputs[0];
        std::vector<int64_t> perm = args.ints("perm"), in = stridesOf(x.shape);
        std::vector<int64_t> strides(perm.size());
        for (size_t d = 0; d < perm.size(); ++d)
          strides[d] = in[perm[d]];
        IndexMap map = stridedMap(args, y.shape, strides);
        size_t width = plan::dtypeSize(y.dtype);
        return [=](const StepContext &context) {
          gatherCopy(streamOf(context), x.data, y.data, y.numel(), width, map);
        };
      });

  // Concat and split copy rows of bytes: one 2-D copy per input or output.
  for (bool concat : {true, false})
    addKernel(
        registry, concat ? "concat" : "split", Launches::SameEveryStep,
        [concat](const KernelArgs &args) {
          std::vector<TensorView> parts = concat ? args.inputs : args.outputs;
          TensorView whole = concat ? args.outputs[0] : args.inputs[0];
          int64_t axis = normalizeAxis(args.i("axis", 0), whole.rank());
          int64_t outer = product(whole.shape, 0, axis);
          size_t width = plan::dtypeSize(whole.dtype);
          size_t wholeRow = product(whole.shape, axis) * width;
          return [=](const StepContext &context) {
            size_t offset = 0;
            for (const TensorView &part : parts) {
              size_t row = product(part.shape, axis) * width;
              char *at = static_cast<char *>(whole.data) + offset;
              if (row && outer)
                checkCuda(
                    concat
                        ? cudaMemcpy2DAsync(at, wholeRow, part.data, row, row,
                                            outer, cudaMemcpyDeviceToDevice,
                                            streamOf(context))
                        : cudaMemcpy2DAsync(part.data, row, at, wholeRow, row,
                                            outer, cudaMemcpyDeviceToDevice,
                                            streamOf(context)),
                    "concat/split copy");
              offset += row;
            }
          };
        });

  addKernel(
      registry, "slice", Launches::SameEveryStep, [](const KernelArgs &args) {
        TensorView x = args.inputs[0], y = args.outputs[0];
        IndexMap map = sliceMap(args, x.shape, y.shape);
        size_t width = plan::dtypeSize(y.dtype);
        return [=](const StepContext &context) {
          gatherCopy(streamOf(context), x.data, y.data, y.numel(), width, map);
        };
      });

  // A slice's elements are distinct: the gradient is a scatter into zeros.
  addKernel(registry, "slice_grad", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView dy = args.inputs[0], dx = args.outputs[0];
              IndexMap map = sliceMap(args, dx.shape, dy.shape);
              return [=](const StepContext &context) {
                cudaStream_t stream = streamOf(context);
                checkCuda(cudaMemsetAsync(dx.data, 0, byteSize(dx), stream),
                          "memset");
                if (dy.numel() == 0)
                  return;
                scatterKernel<<<blocksFor(dy.numel()), kThreads, 0, stream>>>(
                    dy.f32(), dx.f32(), dy.numel(), map);
                launched("slice_grad");
              };
            });
}

/// Pad's input element i lands at map(i) of the output.
IndexMap padMap(const KernelArgs &args, const TensorView &x,
                const TensorView &y) {
  std::vector<int64_t> pads = args.ints("pads"), strides = stridesOf(y.shape);
  int64_t base = 0;
  for (size_t d = 0; d < x.shape.size(); ++d)
    base += pads[d] * strides[d];
  return stridedMap(args, x.shape, strides, base);
}

void registerPadAndFill(KernelRegistry &registry) {
  addKernel(
      registry, "pad", Launches::SameEveryStep, [](const KernelArgs &args) {
        TensorView x = args.inputs[0], y = args.outputs[0];
        IndexMap map = padMap(args, x, y);
        double value = args.f("value", 0.0);
        size_t width = plan::dtypeSize(y.dtype);
        if (width != 8 && width != 4 && width != 2 && width != 1)
          args.fail("pads " + std::to_string(width) +
                    "-byte elements, which the GPU's pad does not take");
        return [=](const StepContext &context) {
          cudaStream_t stream = streamOf(context);
          int64_t n = y.numel(), m = x.numel();
          if (n == 0)
            return;
          if (y.dtype == plan::I64) {
            fillKernel<<<blocksFor(n), kThreads, 0, stream>>>(
                y.i64(), n, static_cast<int64_t>(value));
            if (m)
              scatterAnyKernel<<<blocksFor(m), kThreads, 0, stream>>>(
                  x.i64(), y.i64(), m, map);
          } else if (y.dtype == plan::F32) {
            fillKernel<<<blocksFor(n), kThreads, 0, stream>>>(
                y.f32(), n, static_cast<float>(value));
            if (m)
              scatterAnyKernel<<<blocksFor(m), kThreads, 0, stream>>>(
                  x.f32(), y.f32(), m, map);
          } else { // every byte 0 or 1, as the CPU fills; elements copied whole
            checkCuda(cudaMemsetAsync(y.data, value != 0 ? 1 : 0, byteSize(y),
                                      stream),
                      "pad fill");
            if (m && width == 4)
              scatterAnyKernel<<<blocksFor(m), kThreads, 0, stream>>>(
                  static_cast<const uint32_t *>(x.data),
                  static_cast<uint32_t *>(y.data), m, map);
            else if (m && width == 2)
              scatterAnyKernel<<<blocksFor(m), kThreads, 0, stream>>>(
                  static_cast<const uint16_t *>(x.data),
                  static_cast<uint16_t *>(y.data), m, map);
            else if (m)
              scatterAnyKernel<<<blocksFor(m), kThreads, 0, stream>>>(
                  x.b8(), y.b8(), m, map);
          }
          launched("pad");
        };
      });

  // Values known at load (shape, constant_of_shape) wait in scratch memory
  // and are copied into the tensor each step, as the CPU writes them.
  auto constant = [](const KernelArgs &args, const std::string &bytes) {
    TensorView y = args.outputs[0];
    auto source = std::make_shared<Scratch>(deviceOf(args), bytes.size());
    checkCuda(cudaMemcpy(source->as<char>(), bytes.data(), bytes.size(),
                         cudaMemcpyHostToDevice),
              "constant upload");
    return [=](const StepContext &context) {
      if (!bytes.empty())
        checkCuda(cudaMemcpyAsync(y.data, source->as<char>(), bytes.size(),
                                  cudaMemcpyDeviceToDevice, streamOf(context)),
                  "constant copy");
    };
  };
  addKernel(registry, "constant_of_shape", Launches::SameEveryStep,
            [constant](const KernelArgs &args) {
              TensorView y = args.outputs[0];
              const plan::Tensor *value = args.tensor("value");
              if (!value || value->data().size() !=
                                static_cast<size_t>(plan::dtypeSize(y.dtype)))
                args.fail("needs a one-element value of the result's type");
              std::string bytes;
              for (int64_t i = 0; i < y.numel(); ++i)
                bytes += value->data();
              return constant(args, bytes);
            });
  addKernel(registry, "shape", Launches::SameEveryStep,
            [constant](const KernelArgs &args) {
              TensorView x = args.inputs[0], y = args.outputs[0];
              int64_t start = args.i("start", 0);
              if (start < 0)
                start = std::max<int64_t>(0, start + x.rank());
              std::vector<int64_t> dims(y.numel());
              for (int64_t i = 0; i < y.numel(); ++i)
                dims[i] = x.shape[start + i];
              return constant(args,
                              std::string(reinterpret_cast<char *>(dims.data()),
                                          dims.size() * sizeof(int64_t)));
            });
}

} // namespace

/// gather_grad summing each table row's positions in order (GatherGrad.cu),
/// or null where there are too many positions.
std::function<void(const StepContext &)>
gatherGradInOrder(const KernelArgs &args, int64_t outer, int64_t dim,
                  int64_t inner, int64_t padding);

namespace {

void registerGather(KernelRegistry &registry) {
  addKernel(registry, "gather", Launches::SameEveryStep,
            [](const KernelArgs &args) {
              TensorView data = args.inputs[0], indices = args.inputs[1],
                         y = args.outputs[0];
              GatherGeometry g(args, data.shape);
              int64_t outer = g.outer, dim = g.dim, inner = g.inner;
              // Rows copied in 4-byte units where they are made of them, else
              // bytes.
              int64_t rowBytes = inner * plan::dtypeSize(data.dtype);
              bool words = rowBytes % 4 == 0;
              GatherMaps at(args, outer, indices.numel(), dim,
                            words ? rowBytes / 4 : rowBytes);
              int *status = deviceOf(args).status();
              return [=](const StepContext &context) {
                if (at.total == 0)
                  return;
                if (words)
                  gatherRowsKernel<<<blocksFor(at.total), kThreads, 0,
                                     streamOf(context)>>>(
                      static_cast<const uint32_t *>(data.data), indices.i64(),
                      static_cast<uint32_t *>(y.data), at, status);
                else
                  gatherRowsKernel<<<blocksFor(at.total), kThreads, 0,
                                     streamOf(context)>>>(
                      static_cast<const char *>(data.data), indices.i64(),
                      static_cast<char *>(y.data), at, status);
                launched("gather");
              };
            });
  addKernel(
      registry, "gather_grad", Launches::SameEveryStep,
      [](const KernelArgs &args) -> std::function<void(const StepContext &)> {
        TensorView dy = args.inputs[0], indices = args.inputs[1],
                   dx = args.outputs[0];
        GatherGeometry g(args, dx.shape);
        int64_t outer = g.outer, dim = g.dim, inner = g.inner,
                padding = g.padding;
        // In position order, as the CPU adds (GatherGrad.cu), where the
        // positions are few enough; else atomic adds, whose order varies.
        if (auto inOrder = gatherGradInOrder(args, outer, dim, inner, padding))
          return inOrder;
        GatherMaps at(args, outer, indices.numel(), dim, inner);
        return [=](const StepContext &context) {
          cudaStream_t stream = streamOf(context);
          checkCuda(cudaMemsetAsync(dx.data, 0, byteSize(dx), stream),
                    "memset");
          if (at.total == 0)
            return;
          gatherGradKernel<<<blocksFor(at.total), kThreads, 0, stream>>>(
              dy.f32(), indices.i64(), dx.f32(), at, padding);
          launched("gather_grad");
        };
      });
}

} // namespace

void registerShape(KernelRegistry &registry) {
  registerCopies(registry);
  registerPadAndFill(registry);
  registerGather(registry);
  for (bool mean : {false, true})
    addKernel(registry, mean ? "reduce_mean" : "reduce_sum",
              Launches::SameEveryStep, [mean](const KernelArgs &args) {
                TensorView x = args.inputs[0], y = args.outputs[0];
                std::vector<int64_t> axes = args.ints("axes");
                std::vector<bool> reduced(x.shape.size(), axes.empty());
                for (int64_t a : axes)
                  reduced[normalizeAxis(a, x.rank())] = true;
                auto sum =
                    std::make_shared<SegmentedSum>(args, x.shape, reduced);
                double scale = mean && x.numel()
                                   ? static_cast<double>(y.numel()) / x.numel()
                                   : 1.0;
                return [=](const StepContext &context) {
                  sum->sumInto(streamOf(context), x.f32(), y.f32(), scale);
                };
              });
}

} // namespace cdp::runtime::cuda
