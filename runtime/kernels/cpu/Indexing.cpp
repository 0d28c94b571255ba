//===- Indexing.cpp - GatherElements, GatherND, CumSum, Trilu -------------===//
//
// The indexing ops of ONNX that exporters emit for positions and masks,
// with the scatter-adds their gradients are. Indices are checked as they
// are read (they are data): one out of range fails the run with the
// instruction's location.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

namespace cdp::runtime::cpu {

namespace {

using Body = std::function<void(const StepContext &)>;

size_t widthOf(const TensorView &v) {
  return v.dtype == plan::F32 ? 4 : v.dtype == plan::BOOL ? 1 : 8;
}

[[noreturn]] void outOfRange(const std::string &op, const std::string &where,
                             int64_t index, int64_t dim) {
  throw RuntimeError(op + " at '" + where + "': index " +
                     std::to_string(index) + " is out of range for " +
                     std::to_string(dim) + " entries");
}

/// For GatherElements: element i of `indices` (shape `shape`) reads
/// `data` at this offset, its axis coordinate replaced by the index.
struct ElementsGeometry {
  std::vector<int64_t> shape, dataStrides, ownStrides;
  int64_t axis = 0, dim = 0;
  std::string where;

  ElementsGeometry(const KernelArgs &args, const std::vector<int64_t> &index,
                   const std::vector<int64_t> &data)
      : shape(index), dataStrides(stridesOf(data)),
        ownStrides(stridesOf(index)), where(args.instruction->location()) {
    int64_t rank = static_cast<int64_t>(data.size());
    axis = args.i("axis", 0);
    if (axis < -rank || axis >= rank || index.size() != data.size())
      args.fail("axis or index rank does not fit the data");
    axis += axis < 0 ? rank : 0;
    dim = data[axis];
  }

  int64_t offset(int64_t i, int64_t index) const {
    if (index < -dim || index >= dim)
      outOfRange("gather_elements", where, index, dim);
    index += index < 0 ? dim : 0;
    int64_t at = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      int64_t coordinate = (i / ownStrides[d]) % shape[d];
      at += (static_cast<int64_t>(d) == axis ? index : coordinate) *
            dataStrides[d];
    }
    return at;
  }
};

/// For GatherND: `batches` x `tuples` index tuples of length `depth`, each
/// selecting a slice of `slice` elements of data.
struct NDGeometry {
  int64_t batches = 1, tuples = 1, depth = 0, slice = 1, batchStride = 1;
  std::vector<int64_t> dims, strides; ///< the indexed axes of data
  std::string where;

  NDGeometry(const KernelArgs &args, const std::vector<int64_t> &data,
             const std::vector<int64_t> &index)
      : where(args.instruction->location()) {
    int64_t b = args.i("batch_dims", 0);
    depth = index.empty() ? 0 : index.back();
    if (b < 0 || depth < 1 || b + depth > static_cast<int64_t>(data.size()))
      args.fail("indices do not fit the data");
    batches = product(data, 0, b);
    tuples = product(index, b, index.size() - 1);
    slice = product(data, b + depth);
    batchStride = product(data, b);
    std::vector<int64_t> all = stridesOf(data);
    for (int64_t d = b; d < b + depth; ++d) {
      dims.push_back(data[d]);
      strides.push_back(all[d]);
    }
  }

  /// The data offset of tuple `t` of batch `n` (its indices at `tuple`).
  int64_t offset(int64_t n, const int64_t *tuple) const {
    int64_t at = n * batchStride;
    for (int64_t k = 0; k < depth; ++k) {
      int64_t index = tuple[k];
      if (index < -dims[k] || index >= dims[k])
        outOfRange("gather_nd", where, index, dims[k]);
      at += (index < 0 ? index + dims[k] : index) * strides[k];
    }
    return at;
  }
};

void registerGathers(KernelRegistry &registry) {
  addKernel(registry, "gather_elements", [](const KernelArgs &args) -> Body {
    TensorView data = args.inputs[0], indices = args.inputs[1],
               y = args.outputs[0];
    auto g =
        std::make_shared<ElementsGeometry>(args, indices.shape, data.shape);
    size_t width = widthOf(data);
    return [=](const StepContext &) {
      for (int64_t i = 0, n = indices.numel(); i < n; ++i)
        std::memcpy(static_cast<char *>(y.data) + i * width,
                    static_cast<const char *>(data.data) +
                        g->offset(i, indices.i64()[i]) * width,
                    width);
    };
  });
  addKernel(
      registry, "gather_elements_grad", [](const KernelArgs &args) -> Body {
        TensorView dy = args.inputs[0], indices = args.inputs[1],
                   dx = args.outputs[0];
        auto g =
            std::make_shared<ElementsGeometry>(args, indices.shape, dx.shape);
        return [=](const StepContext &) {
          std::fill(dx.f32(), dx.f32() + dx.numel(), 0.0f);
          for (int64_t i = 0, n = indices.numel(); i < n; ++i)
            dx.f32()[g->offset(i, indices.i64()[i])] += dy.f32()[i];
        };
      });
  addKernel(registry, "gather_nd", [](const KernelArgs &args) -> Body {
    TensorView data = args.inputs[0], indices = args.inputs[1],
               y = args.outputs[0];
    auto g = std::make_shared<NDGeometry>(args, data.shape, indices.shape);
    size_t width = widthOf(data);
    return [=](const StepContext &) {
      for (int64_t n = 0; n < g->batches; ++n)
        for (int64_t t = 0; t < g->tuples; ++t) {
          int64_t k = n * g->tuples + t;
          std::memcpy(static_cast<char *>(y.data) + k * g->slice * width,
                      static_cast<const char *>(data.data) +
                          g->offset(n, indices.i64() + k * g->depth) * width,
                      g->slice * width);
        }
    };
  });
  addKernel(registry, "gather_nd_grad", [](const KernelArgs &args) -> Body {
    TensorView dy = args.inputs[0], indices = args.inputs[1],
               dx = args.outputs[0];
    auto g = std::make_shared<NDGeometry>(args, dx.shape, indices.shape);
    return [=](const StepContext &) {
      std::fill(dx.f32(), dx.f32() + dx.numel(), 0.0f);
      for (int64_t n = 0; n < g->batches; ++n)
        for (int64_t t = 0; t < g->tuples; ++t) {
          int64_t k = n * g->tuples + t;
          float *to = dx.f32() + g->offset(n, indices.i64() + k * g->depth);
          const float *from = dy.f32() + k * g->slice;
          for (int64_t j = 0; j < g->slice; ++j)
            to[j] += from[j];
        }
    };
  });
}

/// Running sums along an axis; float32 accumulates in double, as PyTorch's
/// CPU cumsum does.
template <typename T, typename Acc> Body cumSumAs(const KernelArgs &args) {
  TensorView x = args.inputs[0], y = args.outputs[0];
  int64_t rank = x.rank(), axis = args.i("axis", 0);
  if (axis < -rank || axis >= rank)
    args.fail("axis is out of range");
  axis += axis < 0 ? rank : 0;
  bool exclusive = args.i("exclusive", 0) != 0,
       reverse = args.i("reverse", 0) != 0;
  int64_t dim = x.shape[axis], inner = product(x.shape, axis + 1),
          outer = product(x.shape, 0, axis);
  return [=](const StepContext &) {
    const T *px = static_cast<const T *>(x.data);
    T *py = static_cast<T *>(y.data);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) {
        Acc sum = 0;
        for (int64_t k = 0; k < dim; ++k) {
          int64_t at = (o * dim + (reverse ? dim - 1 - k : k)) * inner + j;
          Acc value = px[at];
          py[at] = static_cast<T>(exclusive ? sum : sum + value);
          sum += value;
        }
      }
  };
}

template <typename T> Body triluAs(const KernelArgs &args) {
  TensorView x = args.inputs[0], y = args.outputs[0];
  if (x.rank() < 2)
    args.fail("needs rank 2 or more");
  int64_t k = args.i("k", 0), rows = x.shape[x.rank() - 2],
          cols = x.shape[x.rank() - 1], n = x.numel();
  bool upper = args.i("upper", 1) != 0;
  return [=](const StepContext &) {
    const T *px = static_cast<const T *>(x.data);
    T *py = static_cast<T *>(y.data);
    for (int64_t i = 0; i < n; ++i) {
      int64_t c = i % cols, r = (i / cols) % rows;
      bool keep = upper ? c - r >= k : c - r <= k;
      py[i] = keep ? px[i] : T(0);
    }
  };
}

} // namespace

void registerIndexing(KernelRegistry &registry) {
  registerGathers(registry);
  addKernel(registry, "cum_sum", [](const KernelArgs &args) {
    return args.inputs[0].dtype == plan::I64 ? cumSumAs<int64_t, int64_t>(args)
                                             : cumSumAs<float, double>(args);
  });
  addKernel(registry, "trilu", [](const KernelArgs &args) {
    return args.inputs[0].dtype == plan::I64 ? triluAs<int64_t>(args)
                                             : triluAs<float>(args);
  });
}

} // namespace cdp::runtime::cpu
