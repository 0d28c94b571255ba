//===- Shape.cpp - data movement and reductions on the CPU ----------------===//

#include "../GatherGeometry.h"
#include "CpuKernels.h"
#include "Transposition.h"

#include <algorithm>
#include <array>
#include <optional>

namespace cdp::runtime::cpu {

namespace {

/// Resolved ONNX slice parameters per dimension: start and step (count is
/// the output's dimension).
struct SliceMap {
  std::vector<int64_t> start, step;
  SliceMap(const KernelArgs &args, const std::vector<int64_t> &input) {
    size_t rank = input.size();
    start.assign(rank, 0);
    step.assign(rank, 1);
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
  }
  /// Input index of every output element.
  std::vector<int64_t> indices(const std::vector<int64_t> &input,
                               const std::vector<int64_t> &output) const {
    std::vector<int64_t> strides = stridesOf(input);
    int64_t count = product(output);
    std::vector<int64_t> result(count);
    std::vector<int64_t> position(output.size(), 0);
    for (int64_t i = 0; i < count; ++i) {
      int64_t offset = 0;
      for (size_t d = 0; d < output.size(); ++d)
        offset += (start[d] + position[d] * step[d]) * strides[d];
      result[i] = offset;
      for (int64_t d = static_cast<int64_t>(output.size()) - 1; d >= 0; --d) {
        if (++position[d] < output[d])
          break;
        position[d] = 0;
      }
    }
    return result;
  }
};

/// Index of the reduced element each input element adds to.
std::vector<int64_t> reductionIndex(const std::vector<int64_t> &shape,
                                    const std::vector<int64_t> &axes) {
  std::vector<int64_t> kept(shape);
  for (size_t d = 0; d < shape.size(); ++d)
    if (axes.empty() || std::find(axes.begin(), axes.end(),
                                  static_cast<int64_t>(d)) != axes.end())
      kept[d] = 1;
  return broadcastIndex(kept, shape);
}

/// An element map (out[i] takes in[index[i]]) as runs of consecutive
/// elements on both sides, found once at load: a slice along the last
/// dimension moves whole row pieces, which one memcpy or loop each moves
/// instead of one call per element.
struct CopyRuns {
  struct Run {
    int64_t out, in, length;
  };
  std::vector<Run> runs;

  explicit CopyRuns(const std::vector<int64_t> &index) {
    for (int64_t i = 0; i < static_cast<int64_t>(index.size()); ++i) {
      if (!runs.empty() && runs.back().in + runs.back().length == index[i] &&
          runs.back().out + runs.back().length == i) {
        ++runs.back().length;
        continue;
      }
      runs.push_back({i, index[i], 1});
    }
  }
};

/// x seen as [outer, kept, inner] when the reduced axes are all but one
/// contiguous run of kept dimensions (a bias gradient's N, H, W around C):
/// the three extents, or none.
std::optional<std::array<int64_t, 3>>
keptRun(const std::vector<int64_t> &shape, const std::vector<int64_t> &axes) {
  int64_t rank = static_cast<int64_t>(shape.size()), first = rank, last = -1;
  for (int64_t d = 0; d < rank; ++d)
    if (!axes.empty() && std::find(axes.begin(), axes.end(), d) == axes.end()) {
      first = std::min(first, d);
      last = d;
    }
  for (int64_t d = first; d <= last; ++d)
    if (std::find(axes.begin(), axes.end(), d) != axes.end())
      return std::nullopt; // a reduced axis between kept ones
  if (last < 0)
    return std::array<int64_t, 3>{product(shape), 1, 1};
  return std::array<int64_t, 3>{product(shape, 0, first),
                                product(shape, first, last + 1),
                                product(shape, last + 1)};
}

/// sums[k] += x[o][k][i] over o and i, each sum in x's element order (as
/// the indexed loop adds), four channels at a time so that four
/// independent chains of double additions overlap.
void sumKeptRun(const float *x, std::array<int64_t, 3> extents, double *sums) {
  auto [outer, kept, inner] = extents;
  for (int64_t o = 0; o < outer; ++o) {
    const float *block = x + o * kept * inner;
    int64_t k = 0;
    for (; k + 4 <= kept; k += 4) {
      const float *r0 = block + k * inner;
      double s0 = sums[k], s1 = sums[k + 1], s2 = sums[k + 2], s3 = sums[k + 3];
      for (int64_t i = 0; i < inner; ++i) {
        s0 += r0[i];
        s1 += r0[inner + i];
        s2 += r0[2 * inner + i];
        s3 += r0[3 * inner + i];
      }
      sums[k] = s0;
      sums[k + 1] = s1;
      sums[k + 2] = s2;
      sums[k + 3] = s3;
    }
    for (; k < kept; ++k) {
      double s = sums[k];
      for (int64_t i = 0; i < inner; ++i)
        s += block[k * inner + i];
      sums[k] = s;
    }
  }
}

} // namespace

/// Bytes from which a concat or split shares its rows among the threads:
/// below, one thread copies faster than a team starts.
constexpr int64_t kParallelCopyBytes = int64_t(1) << 20;

/// A concat's or split's rows: `wide` holds `outer` rows of the parts' rows
/// side by side (parts[k]'s rows of rows[k] bytes). `join` copies the parts
/// into wide (concat), else wide into the parts (split). Rows on the
/// threads, each wide row copied whole with its parts' rows (GPT-2 small's
/// fused q, k, v and their gradients, 4096 x 2304 bf16 values: a split 4.5
/// -> 1.7 ms, a concat 5.0 -> 1.8 ms on two threads, where one thread
/// copied one part's rows after another).
static void copyRowParts(char *wide, const std::vector<char *> &parts,
                         const std::vector<int64_t> &rows, int64_t outer,
                         bool join) {
  int64_t wideRow = std::accumulate(rows.begin(), rows.end(), int64_t(0));
#pragma omp parallel for if (outer * wideRow > kParallelCopyBytes)
  for (int64_t o = 0; o < outer; ++o) {
    char *row = wide + o * wideRow;
    for (size_t k = 0; k < parts.size(); ++k) {
      char *part = parts[k] + o * rows[k];
      if (join)
        std::memcpy(row, part, rows[k]);
      else
        std::memcpy(part, row, rows[k]);
      row += rows[k];
    }
  }
}

/// The kernel of a concat (`join`) or split of `parts` with the tensor
/// `wide` along `axis`.
static std::function<void(const StepContext &)>
rowPartsKernel(const TensorView &wide, const std::vector<TensorView> &parts,
               int64_t axis, bool join) {
  int64_t outer = product(wide.shape, 0, axis);
  std::vector<char *> data;
  std::vector<int64_t> rows;
  for (const TensorView &part : parts) {
    data.push_back(static_cast<char *>(part.data));
    rows.push_back(product(part.shape, axis) * elementSize(wide));
  }
  auto *whole = static_cast<char *>(wide.data);
  return [=](const StepContext &) {
    copyRowParts(whole, data, rows, outer, join);
  };
}

/// Reshapes, transpose, concat and split: copies of their input.
static void registerCopies(KernelRegistry &registry) {
  for (const char *op :
       {"reshape", "flatten", "squeeze", "unsqueeze", "identity"})
    addKernel(registry, op, [](const KernelArgs &args) {
      TensorView x = args.inputs[0], y = args.outputs[0];
      size_t bytes = byteSize(y);
      return [=](const StepContext &) {
        if (x.data != y.data)
          std::memcpy(y.data, x.data, bytes);
      };
    });

  addKernel(registry, "transpose", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0];
    auto transposition = std::make_shared<Transposition>(
        x.shape, args.ints("perm"), static_cast<int64_t>(elementSize(y)));
    return [=](const StepContext &) { transposition->run(x.data, y.data); };
  });

  addKernel(registry, "concat", [](const KernelArgs &args) {
    TensorView y = args.outputs[0];
    return rowPartsKernel(y, args.inputs,
                          normalizeAxis(args.i("axis", 0), y.rank()), true);
  });
  addKernel(registry, "split", [](const KernelArgs &args) {
    TensorView x = args.inputs[0];
    return rowPartsKernel(x, args.outputs,
                          normalizeAxis(args.i("axis", 0), x.rank()), false);
  });
}

/// Slice, pad and the slice gradient.
static void registerSlicing(KernelRegistry &registry) {
  addKernel(registry, "slice", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0];
    auto runs = std::make_shared<CopyRuns>(
        SliceMap(args, x.shape).indices(x.shape, y.shape));
    size_t width = elementSize(y);
    return [=](const StepContext &) {
      for (const CopyRuns::Run &run : runs->runs)
        std::memcpy(static_cast<char *>(y.data) + run.out * width,
                    static_cast<const char *>(x.data) + run.in * width,
                    run.length * width);
    };
  });

  // Constant padding: fill with the value, then copy each input element to
  // its place, found once when the kernel is made.
  addKernel(registry, "pad", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0];
    std::vector<int64_t> pads = args.ints("pads");
    int64_t rank = x.rank();
    auto target = std::make_shared<std::vector<int64_t>>(x.numel());
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t rest = i, offset = 0, stride = 1;
      for (int64_t d = rank - 1; d >= 0; --d) {
        offset += (rest % x.shape[d] + pads[d]) * stride;
        rest /= x.shape[d];
        stride *= y.shape[d];
      }
      (*target)[i] = offset;
    }
    double value = args.f("value", 0.0);
    size_t width = elementSize(y);
    return [=](const StepContext &) {
      if (y.dtype == plan::I64)
        std::fill(y.i64(), y.i64() + y.numel(), static_cast<int64_t>(value));
      else if (y.dtype == plan::F32)
        std::fill(y.f32(), y.f32() + y.numel(), static_cast<float>(value));
      else
        std::memset(y.data, value != 0, y.numel() * width);
      const char *px = static_cast<const char *>(x.data);
      char *py = static_cast<char *>(y.data);
      for (int64_t i = 0; i < x.numel(); ++i)
        std::memcpy(py + (*target)[i] * width, px + i * width, width);
    };
  });

  addKernel(registry, "slice_grad", [](const KernelArgs &args) {
    TensorView dy = args.inputs[0], dx = args.outputs[0];
    auto runs = std::make_shared<CopyRuns>(
        SliceMap(args, dx.shape).indices(dx.shape, dy.shape));
    return [=](const StepContext &) {
      std::fill(dx.f32(), dx.f32() + dx.numel(), 0.0f);
      // Added to the zeros (not assigned), as before: -0 stays +0.
      for (const CopyRuns::Run &run : runs->runs) {
        float *to = dx.f32() + run.in;
        const float *from = dy.f32() + run.out;
        for (int64_t k = 0; k < run.length; ++k)
          to[k] += from[k];
      }
    };
  });
}

/// Gather and its gradient along one axis.
static void registerGathers(KernelRegistry &registry) {
  addKernel(registry, "gather", [](const KernelArgs &args) {
    TensorView data = args.inputs[0], indices = args.inputs[1],
               y = args.outputs[0];
    GatherGeometry g(args, data.shape);
    int64_t outer = g.outer, dim = g.dim, inner = g.inner;
    size_t width = elementSize(data);
    std::string location = args.instruction->location();
    return [=](const StepContext &) {
      int64_t count = indices.numel();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < count; ++k) {
          int64_t index = indices.i64()[k];
          if (index < -dim || index >= dim)
            throw RuntimeError("gather at '" + location + "': index " +
                               std::to_string(index) + " is out of range for " +
                               std::to_string(dim) + " entries");
          if (index < 0)
            index += dim;
          std::memcpy(static_cast<char *>(y.data) +
                          ((o * count + k) * inner) * width,
                      static_cast<const char *>(data.data) +
                          ((o * dim + index) * inner) * width,
                      inner * width);
        }
    };
  });

  addKernel(registry, "gather_grad", [](const KernelArgs &args) {
    TensorView dy = args.inputs[0], indices = args.inputs[1],
               dx = args.outputs[0];
    GatherGeometry g(args, dx.shape);
    int64_t outer = g.outer, dim = g.dim, inner = g.inner, padding = g.padding;
    return [=](const StepContext &) {
      std::fill(dx.f32(), dx.f32() + dx.numel(), 0.0f);
      int64_t count = indices.numel();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < count; ++k) {
          int64_t index = indices.i64()[k];
          if (index < 0)
            index += dim;
          if (index < 0 || index >= dim || index == padding)
            continue;
          float *to = dx.f32() + (o * dim + index) * inner;
          const float *from = dy.f32() + (o * count + k) * inner;
          for (int64_t j = 0; j < inner; ++j)
            to[j] += from[j];
        }
    };
  });
}

/// Constant-of-shape, shape, and the reductions over axes.
static void registerShapeQueries(KernelRegistry &registry) {
  addKernel(registry, "constant_of_shape", [](const KernelArgs &args) {
    TensorView y = args.outputs[0];
    const plan::Tensor *value = args.tensor("value");
    if (!value || value->data().size() != elementSize(y))
      args.fail("needs a one-element value of the result's type");
    std::string fill = value->data();
    return [=](const StepContext &) {
      size_t width = fill.size();
      for (int64_t i = 0; i < y.numel(); ++i)
        std::memcpy(static_cast<char *>(y.data) + i * width, fill.data(),
                    width);
    };
  });

  addKernel(registry, "shape", [](const KernelArgs &args) {
    TensorView x = args.inputs[0], y = args.outputs[0];
    int64_t start = args.i("start", 0);
    if (start < 0)
      start = std::max<int64_t>(0, start + x.rank());
    return [=](const StepContext &) {
      for (int64_t i = 0; i < y.numel(); ++i)
        y.i64()[i] = x.shape[start + i];
    };
  });

  for (bool mean : {false, true})
    addKernel(
        registry, mean ? "reduce_mean" : "reduce_sum",
        [mean](const KernelArgs &args) {
          TensorView x = args.inputs[0], y = args.outputs[0];
          std::vector<int64_t> axes = args.ints("axes");
          for (int64_t &a : axes)
            a = normalizeAxis(a, x.rank());
          std::optional<std::array<int64_t, 3>> run = keptRun(x.shape, axes);
          auto index = std::make_shared<std::vector<int64_t>>(
              run ? std::vector<int64_t>() : reductionIndex(x.shape, axes));
          double scale =
              mean ? static_cast<double>(y.numel()) / x.numel() : 1.0;
          auto sums = std::make_shared<std::vector<double>>(y.numel());
          return [=](const StepContext &) {
            std::fill(sums->begin(), sums->end(), 0.0);
            if (run)
              sumKeptRun(x.f32(), *run, sums->data());
            else
              for (int64_t i = 0; i < x.numel(); ++i)
                (*sums)[(*index)[i]] += x.f32()[i];
            for (int64_t i = 0; i < y.numel(); ++i)
              y.f32()[i] = static_cast<float>((*sums)[i] * scale);
          };
        });
}

void registerShape(KernelRegistry &registry) {
  registerCopies(registry);
  registerSlicing(registry);
  registerGathers(registry);
  registerShapeQueries(registry);
}

} // namespace cdp::runtime::cpu
