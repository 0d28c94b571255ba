//===- Data.cpp - reading and writing tensors and data sets ---------------===//

#include "cdp/Runtime/Data.h"
#include "Npy.h"

#include "../kernels/NarrowFloat.h"
#include "../kernels/SignatureCheck.h"

#include "cdp/Plan/Checked.h"

#include "cdp/Plan/Paths.h"
#include "cdp/Plan/PlanIO.h"

#include <onnx/onnx_pb.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <optional>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace cdp::runtime {

int64_t Array::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

void Array::readElements(int64_t first, int64_t count, char *out) const {
  if (source) {
    source->read(first, count, out);
    return;
  }
  int64_t width = plan::dtypeSize(dtype);
  if (count > 0) // an empty array's data may be null
    std::memcpy(out, bytes.data() + first * width, count * width);
}

std::string readFileBytes(const std::string &path) {
  std::string problem = checkInputFile(path);
  if (!problem.empty())
    throw RuntimeError(path + ": " + problem);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw RuntimeError(path + ": cannot open: " + std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

namespace {

void requireRegularFile(const std::string &path) {
  std::string problem = checkInputFile(path);
  if (!problem.empty())
    throw RuntimeError(path + ": " + problem);
}

bool endsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

} // namespace

Array parseNpy(const std::string &data, const std::string &path,
               const Conversion *into) {
  uint64_t end = npy::headerEnd(data, data.size(), path);
  npy::Header header = npy::parseHeader(data.substr(0, end), data.size(), path);
  Conversion natural{npy::naturalTarget(header.type)};
  const Conversion &conversion = into ? *into : natural;
  Array array;
  array.shape = header.shape;
  array.dtype = conversion.target;
  array.bytes.resize(header.count * plan::dtypeSize(array.dtype));
  npy::convert(data.data() + header.dataOffset, header.type, header.count,
               conversion, 0, array.bytes.data(), path);
  return array;
}

Array parseTensorProto(const std::string &data, const std::string &path) {
  onnx::TensorProto tensor;
  if (!tensor.ParseFromString(data))
    throw RuntimeError(path + ": not a serialized ONNX TensorProto");
  Array array;
  array.shape.assign(tensor.dims().begin(), tensor.dims().end());
  std::optional<int64_t> elements = elementCount(array.shape);
  if (!elements || *elements > static_cast<int64_t>(data.size()) * 8)
    throw RuntimeError(path + ": shape has a negative dimension or more "
                              "elements than the file holds");
  int64_t count = *elements;
  switch (tensor.data_type()) {
  case onnx::TensorProto::FLOAT:
    array.dtype = plan::F32;
    break;
  case onnx::TensorProto::INT64:
    array.dtype = plan::I64;
    break;
  case onnx::TensorProto::BOOL:
    array.dtype = plan::BOOL;
    break;
  default:
    throw RuntimeError(path + ": element type " +
                       std::to_string(tensor.data_type()) +
                       " is not supported (float32, int64 or bool)");
  }
  size_t bytes = static_cast<size_t>(count * plan::dtypeSize(array.dtype));
  if (tensor.has_raw_data()) {
    if (tensor.raw_data().size() != bytes)
      throw RuntimeError(path + ": raw data has " +
                         std::to_string(tensor.raw_data().size()) +
                         " bytes, expected " + std::to_string(bytes));
    array.bytes.assign(tensor.raw_data().begin(), tensor.raw_data().end());
    return array;
  }
  array.bytes.resize(bytes);
  if (count == 0)
    return array;
  if (array.dtype == plan::F32 && tensor.float_data_size() == count)
    std::memcpy(array.bytes.data(), tensor.float_data().data(), bytes);
  else if (array.dtype == plan::I64 && tensor.int64_data_size() == count)
    std::memcpy(array.bytes.data(), tensor.int64_data().data(), bytes);
  else if (array.dtype == plan::BOOL && tensor.int32_data_size() == count)
    for (int64_t i = 0; i < count; ++i)
      array.bytes[i] = tensor.int32_data(i) != 0;
  else
    throw RuntimeError(path + ": holds fewer values than its shape needs");
  return array;
}

namespace {

/// A file, decompressed when it is gzip; more than `maxBytes` of data
/// (after decompression) is refused before it is held.
std::string readMaybeGzip(const std::string &path, int64_t maxBytes) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file)
    throw RuntimeError(path + ": cannot open");
  std::string data;
  char buffer[1 << 16];
  int read;
  while ((read = gzread(file, buffer, sizeof(buffer))) > 0) {
    if (static_cast<int64_t>(data.size()) + read > maxBytes) {
      gzclose(file);
      throw RuntimeError(path + ": holds more than --max-tensor-bytes (" +
                         std::to_string(maxBytes) + ") of data");
    }
    data.append(buffer, read);
  }
  bool failed = read < 0;
  gzclose(file);
  if (failed)
    throw RuntimeError(path + ": corrupt gzip data");
  return data;
}

std::string findIdx(const std::string &dir, const std::string &stem) {
  for (const std::string &candidate :
       {dir + "/" + stem, dir + "/" + stem + ".gz"}) {
    struct stat info;
    if (stat(candidate.c_str(), &info) == 0)
      return candidate;
  }
  throw RuntimeError(dir + ": no " + stem +
                     "[.gz] (an IDX data set folder has "
                     "train- and t10k- images and labels)");
}

uint32_t bigEndian(const std::string &data, size_t at) {
  return (static_cast<uint32_t>(static_cast<unsigned char>(data[at])) << 24) |
         (static_cast<uint32_t>(static_cast<unsigned char>(data[at + 1]))
          << 16) |
         (static_cast<uint32_t>(static_cast<unsigned char>(data[at + 2]))
          << 8) |
         static_cast<uint32_t>(static_cast<unsigned char>(data[at + 3]));
}

} // namespace

namespace {

/// Reads `size` bytes at `offset` of `fd` whole; throws naming the file.
void readAt(int fd, uint64_t offset, size_t size, char *out,
            const std::string &path) {
  if (!preadAll(fd, out, size, offset))
    throw RuntimeError(
        path + ": " +
        (errno ? std::string("cannot read: ") + std::strerror(errno)
               : std::string("the file got shorter while "
                             "it was read")));
}

/// A .npy file's elements, read with pread as they are asked for and
/// converted into a buffer of the calling thread's own.
class NpyStream : public ArraySource {
public:
  NpyStream(int fd, npy::Header header, Conversion into, std::string path)
      : fd(fd), header(std::move(header)), into(into), path(std::move(path)) {}
  ~NpyStream() override { ::close(fd); }
  /// A large read is split over a few threads: one thread copies a file
  /// out of the page cache at 8-10 GB/s, so a 16 MB batch alone took as long
  /// as a GPU step of the GEMM-bound MLP, whose uploads it feeds.
  void read(int64_t first, int64_t count, char *out) const override {
    constexpr int64_t kPieceBytes = int64_t(4) << 20, kMaxPieces = 4;
    int64_t pieces = std::clamp<int64_t>(
        count * header.type.width / kPieceBytes, 1, kMaxPieces);
    int64_t each = (count + pieces - 1) / pieces;
    int outWidth = plan::dtypeSize(into.target);
    std::vector<std::future<void>> helpers;
    for (int64_t begin = each; begin < count; begin += each)
      helpers.push_back(std::async(std::launch::async, [=] {
        readPiece(first + begin, std::min(each, count - begin),
                  out + begin * outWidth);
      }));
    readPiece(first, std::min(each, count), out);
    for (std::future<void> &helper : helpers)
      helper.get(); // rethrows a helper's RuntimeError
  }

private:
  void readPiece(int64_t first, int64_t count, char *out) const {
    uint64_t at = header.dataOffset + first * header.type.width;
    size_t bytes = count * header.type.width;
    if (npy::sameBytes(header.type, into.target)) {
      readAt(fd, at, bytes, out, path);
      return;
    }
    thread_local std::vector<char> raw;
    raw.resize(bytes);
    readAt(fd, at, bytes, raw.data(), path);
    npy::convert(raw.data(), header.type, count, into, first, out, path);
  }

  int fd;
  npy::Header header;
  Conversion into;
  std::string path;
};

/// A folder's shards as one array, concatenated along their first axis:
/// elements [first, first + count) may span several shards.
class ShardedSource : public ArraySource {
public:
  explicit ShardedSource(std::vector<Array> shards)
      : shards(std::move(shards)) {
    int64_t end = 0;
    for (const Array &shard : this->shards)
      ends.push_back(end += shard.numel());
  }
  void read(int64_t first, int64_t count, char *out) const override {
    int64_t width = plan::dtypeSize(shards.front().dtype);
    size_t k = std::upper_bound(ends.begin(), ends.end(), first) - ends.begin();
    while (count > 0 && k < shards.size()) {
      int64_t begin = k ? ends[k - 1] : 0;
      int64_t n = std::min(count, ends[k] - first);
      shards[k].readElements(first - begin, n, out);
      out += n * width;
      first += n;
      count -= n;
      ++k;
    }
  }

private:
  std::vector<Array> shards;
  std::vector<int64_t> ends; ///< cumulative elements
};

/// A folder of .npy shards, in name order, read as one array along their
/// first axis (the samples); every shard streamed.
Array readShardFolder(const std::string &dir, const Conversion &into) {
  std::vector<std::string> names = shardFiles(dir);
  if (names.empty())
    throw RuntimeError(dir + ": a folder of shards holds no .npy file");
  std::vector<Array> shards;
  Array result;
  for (const std::string &name : names) {
    shards.push_back(readFeedArray(name, into));
    const Array &shard = shards.back();
    if (shard.shape.empty())
      throw RuntimeError(name + ": a shard needs a first axis to concatenate "
                                "along (it is a scalar)");
    if (shards.size() == 1) {
      result.dtype = shard.dtype;
      result.shape = shard.shape;
      continue;
    }
    if (!std::equal(shard.shape.begin() + 1, shard.shape.end(),
                    result.shape.begin() + 1, result.shape.end()))
      throw RuntimeError(name + ": shape " +
                         signatures::shapeText(shard.shape) +
                         " does not continue " + names.front() + "'s " +
                         signatures::shapeText(shards.front().shape) +
                         " (shards differ only along their first axis)");
    result.shape[0] += shard.shape[0];
  }
  result.source = std::make_shared<ShardedSource>(std::move(shards));
  return result;
}

} // namespace

void forEachChunk(const Array &array,
                  const std::function<void(int64_t first, int64_t count,
                                           const char *)> &visit) {
  constexpr int64_t kChunk = int64_t(1) << 20;
  int64_t n = array.numel();
  std::vector<char> buffer(std::min(kChunk, n) * plan::dtypeSize(array.dtype));
  for (int64_t first = 0; first < n; first += kChunk) {
    int64_t count = std::min(kChunk, n - first);
    array.readElements(first, count, buffer.data());
    visit(first, count, buffer.data());
  }
}

std::vector<std::string> shardFiles(const std::string &dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto &entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.is_regular_file(ec) && endsWith(entry.path().string(), ".npy"))
      names.push_back(entry.path().string());
  if (ec)
    throw RuntimeError(dir + ": cannot read the folder: " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

Array readFeedArray(const std::string &path, const Conversion &into) {
  if (std::filesystem::is_directory(path))
    return readShardFolder(path, into);
  if (!endsWith(path, ".npy"))
    return readArray(path);
  requireRegularFile(path);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw RuntimeError(path + ": cannot open: " + std::strerror(errno));
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    ::close(fd);
    throw RuntimeError(path + ": cannot read: " + std::strerror(errno));
  }
  uint64_t size = info.st_size;
  npy::Header header;
  try {
    std::string start(std::min<uint64_t>(size, 12), '\0');
    readAt(fd, 0, start.size(), start.data(), path);
    std::string prefix(npy::headerEnd(start, size, path), '\0');
    readAt(fd, 0, prefix.size(), prefix.data(), path);
    header = npy::parseHeader(prefix, size, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  Array array;
  array.dtype = into.target;
  array.shape = header.shape;
  array.source = std::make_shared<NpyStream>(fd, header, into, path);
  // What the conversion refuses is found before training, not in the
  // middle of it: floats into an integer input (at element 0), uint64
  // beyond int64 (wherever it is).
  bool mayRefuse = into.target != plan::F32 &&
                   (header.type.kind == 'f' ||
                    (header.type.kind == 'u' && header.type.width == 8));
  if (mayRefuse)
    forEachChunk(array, [](int64_t, int64_t, const char *) {});
  return array;
}

Array readArray(const std::string &path) {
  requireRegularFile(path);
  if (endsWith(path, ".npy"))
    return parseNpy(readFileBytes(path), path);
  if (endsWith(path, ".pb"))
    return parseTensorProto(readFileBytes(path), path);
  throw RuntimeError(path + ": unknown file type (use .npy or an ONNX "
                            "TensorProto .pb)");
}

Array widenedToFloat32(const TensorView &view) {
  Array out;
  out.shape = view.shape;
  out.bytes.resize(view.numel() * sizeof(float));
  const auto *from = static_cast<const uint16_t *>(view.data);
  auto *to = reinterpret_cast<float *>(out.bytes.data());
  for (int64_t k = 0; k < view.numel(); ++k)
    to[k] = view.dtype == plan::BF16 ? floatOfBfloat16(from[k])
                                     : floatOfFloat16(from[k]);
  return out;
}

/// The `.npy` header of `view` (the data follows it).
std::string npyHeader(const TensorView &view) {
  // numpy has no bfloat16: such a tensor is written as its 2-byte patterns.
  std::string descr = view.dtype == plan::F32    ? "<f4"
                      : view.dtype == plan::I64  ? "<i8"
                      : view.dtype == plan::I32  ? "<i4"
                      : view.dtype == plan::F16  ? "<f2"
                      : view.dtype == plan::BF16 ? "<u2"
                                                 : "|b1";
  std::string shape = "(";
  for (int64_t d : view.shape)
    shape += std::to_string(d) + ",";
  if (view.shape.size() > 1)
    shape.pop_back();
  shape += ")";
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes.push_back(static_cast<char>(header.size() & 0xff));
  bytes.push_back(static_cast<char>(header.size() >> 8));
  bytes += header;
  return bytes;
}

std::function<bool(int)> npyWriter(const TensorView &view) {
  return [view](int fd) {
    return writeAll(fd, npyHeader(view)) &&
           writeAll(fd, static_cast<const char *>(view.data),
                    view.numel() * plan::dtypeSize(view.dtype));
  };
}

void writeNpy(const std::string &path, const TensorView &view) {
  std::string error;
  if (!writeFileAtomically(path, npyWriter(view), error))
    throw RuntimeError(path + ": " + error);
}

std::vector<std::string> idxSplitFiles(const std::string &dir,
                                       const std::string &prefix) {
  return {findIdx(dir, prefix + "-images-idx3-ubyte"),
          findIdx(dir, prefix + "-labels-idx1-ubyte")};
}

Dataset readIdxSplit(const std::string &dir, const std::string &prefix,
                     int64_t maxBytes) {
  std::vector<std::string> files = idxSplitFiles(dir, prefix);
  const std::string &imagesPath = files[0], &labelsPath = files[1];
  requireRegularFile(imagesPath);
  requireRegularFile(labelsPath);
  // A float per pixel: the images take 4 bytes per stored byte.
  return parseIdx(readMaybeGzip(imagesPath, maxBytes / 4),
                  readMaybeGzip(labelsPath, maxBytes / 8), prefix);
}

Dataset parseIdx(const std::string &images, const std::string &labels,
                 const std::string &prefix) {
  if (images.size() < 16 || bigEndian(images, 0) != 0x803)
    throw RuntimeError(prefix + " images: not an IDX image file");
  if (labels.size() < 8 || bigEndian(labels, 0) != 0x801)
    throw RuntimeError(prefix + " labels: not an IDX label file");
  int64_t count = bigEndian(images, 4), rows = bigEndian(images, 8),
          cols = bigEndian(images, 12);
  if (bigEndian(labels, 4) != count)
    throw RuntimeError(prefix +
                       " labels: " + std::to_string(bigEndian(labels, 4)) +
                       " labels for " + std::to_string(count) + " images");
  // Each factor is below 2^32, so pixels and the sizes below cannot wrap
  // once pixels is checked against the bytes there are; an empty set's
  // image size is checked on its own.
  int64_t perImage = saturatingMul(rows, cols);
  if (perImage == std::numeric_limits<int64_t>::max())
    throw RuntimeError(prefix + " images: " + std::to_string(rows) + " x " +
                       std::to_string(cols) + " pixels do not fit in memory");
  int64_t pixels = saturatingMul(count, perImage);
  if (pixels != static_cast<int64_t>(images.size()) - 16 ||
      static_cast<int64_t>(labels.size()) != 8 + count)
    throw RuntimeError(prefix + " IDX files are truncated or padded");
  Dataset data;
  data.images.dtype = plan::F32;
  data.images.shape = {count, perImage};
  data.images.bytes.resize(pixels * 4);
  float *values = reinterpret_cast<float *>(data.images.bytes.data());
  for (int64_t i = 0; i < pixels; ++i)
    values[i] = static_cast<unsigned char>(images[16 + i]) / 255.0f;
  data.labels.dtype = plan::I64;
  data.labels.shape = {count};
  data.labels.bytes.resize(count * 8);
  int64_t *classes = reinterpret_cast<int64_t *>(data.labels.bytes.data());
  for (int64_t i = 0; i < count; ++i)
    classes[i] = static_cast<unsigned char>(labels[8 + i]);
  return data;
}

std::string FileNamer::name(const std::string &onnxName) {
  std::string base = onnxName.empty() ? "tensor" : onnxName;
  for (char &c : base)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '-')
      c = '_';
  std::string candidate = base;
  for (int suffix = 1;
       std::find(used.begin(), used.end(), candidate) != used.end(); ++suffix)
    candidate = base + "_" + std::to_string(suffix);
  used.push_back(candidate);
  return candidate;
}

} // namespace cdp::runtime
