//===- Npy.h - the .npy format: header, types, conversion -------*- C++ -*-===//
//
// Shared by the in-memory reader (parseNpy: the fuzz target's, small
// files) and the streamed one (NpyStream: a feed read as its rows are
// staged, so a file of any size costs no memory).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_DATA_NPY_H
#define CDP_RUNTIME_DATA_NPY_H

#include "cdp/Runtime/Data.h"

#include <cstdint>
#include <string>
#include <vector>

namespace cdp::runtime::npy {

/// An element type: 'f' float, 'i' signed, 'u' unsigned integer, 'b'
/// bool, and its bytes.
struct Type {
  char kind;
  int width;
};

/// What a header says: the element type, the shape, and where the data
/// start.
struct Header {
  Type type;
  std::vector<int64_t> shape;
  int64_t count = 1;
  uint64_t dataOffset = 0;
};

/// The bytes before the header's text (magic, version, its length), and
/// the header's end (offset of the data): throws on a malformed start.
uint64_t headerEnd(const std::string &start, uint64_t fileSize,
                   const std::string &path);

/// Parses the header in `prefix` (the file's bytes up to headerEnd) of a
/// file of `fileSize` bytes, checking that it holds the data announced.
Header parseHeader(const std::string &prefix, uint64_t fileSize,
                   const std::string &path);

/// Where an element type goes without a conversion: floats to float32,
/// integers to int64, bool and uint8 (numpy's mask type) to bool.
plan::DType naturalTarget(Type type);

/// Whether elements of `type` are already `target`'s bytes.
bool sameBytes(Type type, plan::DType target);

/// Converts `count` elements of `raw` into `out` as `into` asks; `first`
/// is the first one's index in the file, for messages.
void convert(const char *raw, Type type, int64_t count, const Conversion &into,
             int64_t first, char *out, const std::string &path);

} // namespace cdp::runtime::npy

#endif // CDP_RUNTIME_DATA_NPY_H
