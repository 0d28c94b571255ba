//===- Data.h - reading and writing tensors and data sets -------*- C++ -*-===//

#ifndef CDP_RUNTIME_DATA_H
#define CDP_RUNTIME_DATA_H

#include "cdp/Runtime/Kernel.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cdp::runtime {

/// Elements that stay in their file, read and converted as they are needed
/// (a .npy feed: a file of any size costs no memory).
class ArraySource {
public:
  virtual ~ArraySource() = default;
  /// Elements [first, first + count), converted, into `out`; safe from
  /// several threads at once. Throws RuntimeError naming the file.
  virtual void read(int64_t first, int64_t count, char *out) const = 0;
};

/// An array: its elements in host memory (`bytes`), or left in a file
/// (`source`, with `bytes` empty).
struct Array {
  plan::DType dtype = plan::F32;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
  std::shared_ptr<const ArraySource> source;
  int64_t numel() const;
  /// Elements [first, first + count), in `dtype`, into `out`.
  void readElements(int64_t first, int64_t count, char *out) const;
};

/// A whole regular file (a FIFO or device is refused: its read would not
/// end). Throws RuntimeError naming the file.
std::string readFileBytes(const std::string &path);

/// How a `.npy` file's elements become an input's: integers and bool
/// become float32 (times `scale`, plus `offset`: 1/255 for image bytes),
/// int64 or bool (non-zero is true); floats become float32 and refuse the
/// integer and bool targets.
struct Conversion {
  plan::DType target = plan::F32;
  double scale = 1, offset = 0;
};

/// Reads `.npy` (C order; little-endian float16/32/64, int8 to int64,
/// uint8 to uint64, bool) or an ONNX TensorProto `.pb`, by extension,
/// whole: floats become float32, integers int64, and bool and uint8 bool.
/// Throws RuntimeError naming the file.
Array readArray(const std::string &path);

/// Reads `array` through once, a million elements at a time, handing
/// `visit` each chunk's first index, count and elements (in `dtype`): a
/// streamed array is never held whole.
void forEachChunk(const Array &array,
                  const std::function<void(int64_t first, int64_t count,
                                           const char *)> &visit);

/// A feed's array: a `.npy` file streamed (its header checked now, its
/// rows read and converted as they are staged; float data refused for an
/// integer input here, before training), a `.pb` read whole.
Array readFeedArray(const std::string &path, const Conversion &into);

/// The shards of a folder fed as one array (`--feed NAME=DIR`): its
/// regular .npy files, in name order. Throws RuntimeError naming it.
std::vector<std::string> shardFiles(const std::string &dir);

/// The same from a file's bytes (`what` names it in errors): what the
/// fuzz targets call.
Array parseNpy(const std::string &bytes, const std::string &what,
               const Conversion *into = nullptr);
Array parseTensorProto(const std::string &bytes, const std::string &what);

/// The `.npy` header of an array of `view`'s shape and dtype (its data
/// follows it in the file; `view.data` is not read).
std::string npyHeader(const TensorView &view);
/// A host view of 2-byte floats (bf16 or fp16) as the float32 values they
/// stand for (exact): a plan's output stored narrower than the model's.
Array widenedToFloat32(const TensorView &view);
/// Writes a `.npy` file.
void writeNpy(const std::string &path, const TensorView &view);
/// What writeNpy writes, to a file descriptor (false when a write
/// fails): the header, then the data straight from the view's memory, never
/// the whole file as bytes. The view must outlive it.
std::function<bool(int)> npyWriter(const TensorView &view);

/// An IDX data set split: images as float32 in [0, 1], (N, pixels), and
/// labels as int64, (N).
struct Dataset {
  Array images, labels;
};

/// The paths of a split's images and labels in `dir`: each file, or its
/// .gz (a RuntimeError naming the one missing).
std::vector<std::string> idxSplitFiles(const std::string &dir,
                                       const std::string &prefix);

/// Reads `<prefix>-images-idx3-ubyte[.gz]` and
/// `<prefix>-labels-idx1-ubyte[.gz]` from `dir` (prefix: train or t10k),
/// refusing files that hold (decompressed) more than `maxBytes` of tensor.
Dataset readIdxSplit(const std::string &dir, const std::string &prefix,
                     int64_t maxBytes = int64_t(16) << 30);

/// The same from the two files' (decompressed) bytes.
Dataset parseIdx(const std::string &images, const std::string &labels,
                 const std::string &prefix);

/// ONNX names made file names: characters outside [A-Za-z0-9._-] become _,
/// and a repeated name gets _1, _2, ...
class FileNamer {
public:
  std::string name(const std::string &onnxName);

private:
  std::vector<std::string> used;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_DATA_H
