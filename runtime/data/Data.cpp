//===- Data.cpp - reading and writing tensors and data sets ---------------===//

#include "cdp/Runtime/Data.h"

#include "cdp/Plan/Checked.h"

#include "cdp/Plan/Paths.h"
#include "cdp/Plan/PlanIO.h"

#include <onnx/onnx_pb.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <sys/stat.h>

namespace cdp::runtime {

int64_t Array::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
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

namespace {

/// A .npy element type: 'f' float, 'i' signed, 'u' unsigned integer, 'b'
/// bool, and its bytes.
struct NpyType {
  char kind;
  int width;
};

/// The element type `descr` spells, little-endian or byte-wide; nothing
/// for what cdp does not read.
std::optional<NpyType> npyType(const std::string &descr) {
  if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '|'))
    return std::nullopt;
  char kind = descr[1];
  int width = descr[2] - '0';
  if (descr.size() != 3 ||
      (width != 1 && width != 2 && width != 4 && width != 8))
    return std::nullopt;
  bool known = (kind == 'f' && width >= 2) || kind == 'i' || kind == 'u' ||
               (kind == 'b' && width == 1);
  if (!known || (width == 1) != (descr[0] == '|'))
    return std::nullopt;
  return NpyType{kind, width};
}

/// Where an element type goes without a conversion: floats to float32,
/// integers to int64, bool and uint8 (numpy's mask type) to bool.
plan::DType naturalTarget(NpyType type) {
  if (type.kind == 'f')
    return plan::F32;
  if (type.kind == 'b' || (type.kind == 'u' && type.width == 1))
    return plan::BOOL;
  return plan::I64;
}

float halfToFloat(uint16_t half) {
  uint32_t sign = (half >> 15) & 1, exponent = (half >> 10) & 0x1f,
           mantissa = half & 0x3ff;
  float magnitude =
      exponent == 0    ? std::ldexp(static_cast<float>(mantissa), -24)
      : exponent == 31 ? (mantissa ? std::numeric_limits<float>::quiet_NaN()
                                   : std::numeric_limits<float>::infinity())
                       : std::ldexp(static_cast<float>(mantissa | 0x400),
                                    static_cast<int>(exponent) - 25);
  return sign ? -magnitude : magnitude;
}

/// Element i of `raw` as a double (floats) or an int64 (integers, bool);
/// `exact` says which one holds it.
struct Element {
  double real = 0;
  int64_t integer = 0;
  bool exact = true;
};

Element elementAt(const char *raw, NpyType type, int64_t i) {
  const char *at = raw + i * type.width;
  Element e;
  if (type.kind == 'f') {
    e.exact = false;
    if (type.width == 2) {
      uint16_t h;
      std::memcpy(&h, at, 2);
      e.real = halfToFloat(h);
    } else if (type.width == 4) {
      float f;
      std::memcpy(&f, at, 4);
      e.real = f;
    } else {
      std::memcpy(&e.real, at, 8);
    }
    return e;
  }
  uint64_t bits = 0;
  std::memcpy(&bits, at, type.width);
  if (type.kind == 'i' && type.width < 8 &&
      (bits >> (8 * type.width - 1)) & 1) // sign-extend
    bits |= ~uint64_t(0) << (8 * type.width);
  e.integer = static_cast<int64_t>(bits);
  e.real = type.kind == 'u' ? static_cast<double>(bits)
                            : static_cast<double>(e.integer);
  if (type.kind == 'u' && type.width == 8 && e.integer < 0)
    e.exact = false; // beyond int64: only the float target takes it
  return e;
}

/// The bytes of `count` elements of `raw` as `into` asks.
std::vector<char> convertElements(const char *raw, NpyType type, int64_t count,
                                  const Conversion &into,
                                  const std::string &path) {
  int width = plan::dtypeSize(into.target);
  std::vector<char> bytes(count * width);
  bool same =
      (type.kind == 'f' && type.width == 4 && into.target == plan::F32) ||
      (type.kind == 'i' && type.width == 8 && into.target == plan::I64) ||
      (type.kind == 'b' && into.target == plan::BOOL);
  if (same) {
    if (!bytes.empty()) // memcpy to an empty vector's null is UB
      std::memcpy(bytes.data(), raw, bytes.size());
    return bytes;
  }
  bool scaled = type.kind != 'f';
  for (int64_t i = 0; i < count; ++i) {
    Element e = elementAt(raw, type, i);
    char *out = bytes.data() + i * width;
    if (into.target == plan::F32) {
      float f = static_cast<float>(scaled ? e.real * into.scale + into.offset
                                          : e.real);
      std::memcpy(out, &f, 4);
    } else if (!e.exact) {
      throw RuntimeError(path + ": element " + std::to_string(i) + " is " +
                         (type.kind == 'f' ? "floating point" : "above int64") +
                         "; an " +
                         (into.target == plan::I64 ? "int64" : "bool") +
                         " input takes integer data");
    } else if (into.target == plan::I64) {
      std::memcpy(out, &e.integer, 8);
    } else {
      *out = e.integer != 0;
    }
  }
  return bytes;
}

} // namespace

Array parseNpy(const std::string &data, const std::string &path,
               const Conversion *into) {
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0)
    throw RuntimeError(path + ": not a .npy file");
  int major = static_cast<unsigned char>(data[6]);
  if (major < 1 || major > 3)
    throw RuntimeError(path + ": .npy format version " + std::to_string(major) +
                       " is not one numpy writes (1, 2 or 3)");
  size_t headerLength, start;
  if (major == 1) {
    headerLength = static_cast<unsigned char>(data[8]) |
                   (static_cast<unsigned char>(data[9]) << 8);
    start = 10;
  } else {
    if (data.size() < 12)
      throw RuntimeError(path + ": truncated .npy header");
    headerLength = 0;
    for (int i = 0; i < 4; ++i)
      headerLength |=
          static_cast<size_t>(static_cast<unsigned char>(data[8 + i]))
          << (8 * i);
    start = 12;
  }
  if (start + headerLength > data.size())
    throw RuntimeError(path + ": truncated .npy header");
  std::string header = data.substr(start, headerLength);
  Array array;
  auto field = [&](const std::string &key) {
    size_t at = header.find("'" + key + "'");
    if (at == std::string::npos)
      throw RuntimeError(path + ": .npy header lacks '" + key + "'");
    return header.substr(header.find(':', at) + 1);
  };
  std::string descr = field("descr");
  descr = descr.substr(descr.find('\'') + 1);
  descr = descr.substr(0, descr.find('\''));
  std::optional<NpyType> type = npyType(descr);
  if (!type)
    throw RuntimeError(path + ": .npy dtype '" + descr +
                       "' is not supported (little-endian float16, float32, "
                       "float64, int8 to int64, uint8 to uint64, bool)");
  if (field("fortran_order").find("True") < field("fortran_order").find(','))
    throw RuntimeError(path + ": Fortran-order .npy files are not supported");
  std::string shape = field("shape");
  shape =
      shape.substr(shape.find('(') + 1, shape.find(')') - shape.find('(') - 1);
  std::stringstream dims(shape);
  std::string dim;
  int64_t count = 1;
  while (std::getline(dims, dim, ',')) {
    size_t first = dim.find_first_not_of(" "), last = dim.find_last_not_of(" ");
    if (first == std::string::npos)
      continue;
    dim = dim.substr(first, last - first + 1);
    int64_t value = -1;
    auto [end, error] =
        std::from_chars(dim.data(), dim.data() + dim.size(), value);
    if (error != std::errc() || end != dim.data() + dim.size() || value < 0) {
      dim.erase(std::remove(dim.begin(), dim.end(), '\''), dim.end());
      throw RuntimeError(path + ": .npy dimension '" + dim +
                         "' is not a non-negative integer");
    }
    if (__builtin_mul_overflow(count, value, &count))
      throw RuntimeError(path + ": .npy shape has more elements than int64 "
                                "holds");
    array.shape.push_back(value);
  }
  int64_t bytes = 0;
  size_t offset = start + headerLength;
  if (__builtin_mul_overflow(count, type->width, &bytes) ||
      static_cast<uint64_t>(bytes) != data.size() - offset)
    throw RuntimeError(path + ": has " + std::to_string(data.size() - offset) +
                       " bytes of data, its header needs " +
                       std::to_string(count) + " elements of " +
                       std::to_string(type->width) + " bytes");
  Conversion natural{naturalTarget(*type)};
  array.dtype = into ? into->target : natural.target;
  array.bytes = convertElements(data.data() + offset, *type, count,
                                into ? *into : natural, path);
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

Array readArray(const std::string &path, const Conversion *into) {
  requireRegularFile(path);
  if (endsWith(path, ".npy"))
    return parseNpy(readFileBytes(path), path, into);
  if (endsWith(path, ".pb"))
    return parseTensorProto(readFileBytes(path), path);
  throw RuntimeError(path + ": unknown file type (use .npy or an ONNX "
                            "TensorProto .pb)");
}

std::string npyBytes(const TensorView &view) {
  std::string descr = view.dtype == plan::F32   ? "<f4"
                      : view.dtype == plan::I64 ? "<i8"
                      : view.dtype == plan::I32 ? "<i4"
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
  bytes.append(static_cast<const char *>(view.data),
               view.numel() * plan::dtypeSize(view.dtype));
  return bytes;
}

void writeNpy(const std::string &path, const TensorView &view) {
  std::string error;
  if (!writeFileAtomically(path, npyBytes(view), error))
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
