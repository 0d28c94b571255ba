//===- Npy.cpp - the .npy format: header, element types, conversion -------===//

#include "Npy.h"

#include "cdp/Plan/PlanIO.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>

namespace cdp::runtime::npy {

namespace {

/// The element type `descr` spells, little-endian or byte-wide; nothing
/// for what cdp does not read.
std::optional<Type> npyType(const std::string &descr) {
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
  return Type{kind, width};
}

/// IEEE half to float by its bits (exact: every half is a float).
float halfToFloat(uint16_t half) {
  uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16,
           exponent = (half >> 10) & 0x1f, mantissa = half & 0x3ffu, bits;
  if (exponent == 0x1f) { // infinity, NaN
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else { // subnormal: shift the leading one into the hidden bit
    uint32_t shifts = 0;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      ++shifts;
    }
    bits = sign | ((113 - shifts) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

/// Element i of `raw` as a double (floats) or an int64 (integers, bool);
/// `exact` says which one holds it.
struct Element {
  double real = 0;
  int64_t integer = 0;
  bool exact = true;
};

Element elementAt(const char *raw, Type type, int64_t i) {
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

} // namespace

plan::DType naturalTarget(Type type) {
  if (type.kind == 'f')
    return plan::F32;
  if (type.kind == 'b' || (type.kind == 'u' && type.width == 1))
    return plan::BOOL;
  return plan::I64;
}

bool sameBytes(Type type, plan::DType target) {
  return (type.kind == 'f' && type.width == 4 && target == plan::F32) ||
         (type.kind == 'i' && type.width == 8 && target == plan::I64) ||
         (type.kind == 'b' && target == plan::BOOL);
}

namespace {

/// Where the header's text starts: version 1 stores its length in 2 bytes,
/// versions 2 and 3 in 4.
size_t textStart(const std::string &data) {
  return static_cast<unsigned char>(data[6]) == 1 ? 10 : 12;
}

} // namespace

uint64_t headerEnd(const std::string &data, uint64_t fileSize,
                   const std::string &path) {
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0)
    throw RuntimeError(path + ": not a .npy file");
  int major = static_cast<unsigned char>(data[6]);
  if (major < 1 || major > 3)
    throw RuntimeError(path + ": .npy format version " + std::to_string(major) +
                       " is not one numpy writes (1, 2 or 3)");
  size_t start = textStart(data), headerLength = 0;
  if (data.size() < start)
    throw RuntimeError(path + ": truncated .npy header");
  for (size_t i = 8; i < start; ++i) // little-endian length
    headerLength |= static_cast<size_t>(static_cast<unsigned char>(data[i]))
                    << (8 * (i - 8));
  // numpy's headers are a few hundred bytes: a longer one is not read.
  if (headerLength > (size_t(1) << 20))
    throw RuntimeError(path + ": .npy header of " +
                       std::to_string(headerLength) +
                       " bytes (numpy writes well under 1 MiB)");
  if (start + headerLength > fileSize)
    throw RuntimeError(path + ": truncated .npy header");
  return start + headerLength;
}

Header parseHeader(const std::string &data, uint64_t fileSize,
                   const std::string &path) {
  std::string header = data.substr(textStart(data));
  Header result;
  auto field = [&](const std::string &key) {
    size_t at = header.find("'" + key + "'");
    if (at == std::string::npos)
      throw RuntimeError(path + ": .npy header lacks '" + key + "'");
    return header.substr(header.find(':', at) + 1);
  };
  std::string descr = field("descr");
  descr = descr.substr(descr.find('\'') + 1);
  descr = descr.substr(0, descr.find('\''));
  std::optional<Type> type = npyType(descr);
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
    result.shape.push_back(value);
  }
  int64_t bytes = 0;
  uint64_t offset = data.size();
  if (__builtin_mul_overflow(count, type->width, &bytes) ||
      static_cast<uint64_t>(bytes) != fileSize - offset)
    throw RuntimeError(path + ": has " + std::to_string(fileSize - offset) +
                       " bytes of data, its header needs " +
                       std::to_string(count) + " elements of " +
                       std::to_string(type->width) + " bytes");
  result.type = *type;
  result.count = count;
  result.dataOffset = offset;
  return result;
}

void convert(const char *raw, Type type, int64_t count, const Conversion &into,
             int64_t first, char *out, const std::string &path) {
  int width = plan::dtypeSize(into.target);
  if (sameBytes(type, into.target)) {
    if (count > 0) // memcpy from or to null is UB
      std::memcpy(out, raw, count * width);
    return;
  }
  if (type.kind == 'f' && type.width == 2 && into.target == plan::F32) {
    for (int64_t i = 0; i < count; ++i) { // the common case, without branches
      uint16_t half;
      std::memcpy(&half, raw + 2 * i, 2);
      float value = halfToFloat(half);
      std::memcpy(out + 4 * i, &value, 4);
    }
    return;
  }
  bool scaled = type.kind != 'f';
  for (int64_t i = 0; i < count; ++i) {
    Element e = elementAt(raw, type, i);
    char *at = out + i * width;
    if (into.target == plan::F32) {
      float f = static_cast<float>(scaled ? e.real * into.scale + into.offset
                                          : e.real);
      std::memcpy(at, &f, 4);
    } else if (!e.exact) {
      throw RuntimeError(
          path + ": element " + std::to_string(first + i) + " is " +
          (type.kind == 'f' ? "floating point" : "above int64") + "; an " +
          (into.target == plan::I64 ? "int64" : "bool") +
          " input takes integer data");
    } else if (into.target == plan::I64) {
      std::memcpy(at, &e.integer, 8);
    } else {
      *at = e.integer != 0;
    }
  }
}

} // namespace cdp::runtime::npy
