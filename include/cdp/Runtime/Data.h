//===- Data.h - reading and writing tensors and data sets -------*- C++ -*-===//

#ifndef CDP_RUNTIME_DATA_H
#define CDP_RUNTIME_DATA_H

#include "cdp/Runtime/Kernel.h"

#include <string>
#include <vector>

namespace cdp::runtime {

/// A whole array in host memory.
struct Array {
  plan::DType dtype = plan::F32;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
  int64_t numel() const;
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
/// uint8 to uint64, bool) or an ONNX TensorProto `.pb`, by extension.
/// Without `into`, floats become float32, integers int64, and bool and
/// uint8 bool. Throws RuntimeError naming the file.
Array readArray(const std::string &path, const Conversion *into = nullptr);

/// The same from a file's bytes (`what` names it in errors): what the
/// fuzz targets call.
Array parseNpy(const std::string &bytes, const std::string &what,
               const Conversion *into = nullptr);
Array parseTensorProto(const std::string &bytes, const std::string &what);

/// Writes a `.npy` file.
void writeNpy(const std::string &path, const TensorView &view);
/// The bytes writeNpy writes.
std::string npyBytes(const TensorView &view);

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
