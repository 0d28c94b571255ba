//===- FeedReadTest.cpp - streamed .npy feeds read in pieces --------------===//
//
// A feed's read of 4 MB or more is split over threads; every element must
// land where one read would put it, converted, whatever the split.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Data.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace cdp;
using namespace cdp::runtime;

namespace {

std::string scratchPath(const std::string &name) {
  return ::testing::TempDir() + name + "-" + std::to_string(::getpid()) +
         ".npy";
}

/// A one-dimensional uint8 .npy written by hand (writeNpy writes the
/// plan's types only).
void writeBytesNpy(const std::string &path, const std::vector<uint8_t> &data) {
  std::string header = "{'descr': '|u1', 'fortran_order': False, 'shape': (" +
                       std::to_string(data.size()) + ",), }";
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  char length[2] = {char(header.size() & 0xff), char(header.size() >> 8)};
  out.write(length, 2);
  out << header;
  out.write(reinterpret_cast<const char *>(data.data()), data.size());
}

TEST(FeedRead, LargeFloatReadEqualsItsElements) {
  // 5.25M floats (21 MB): four pieces, the last one shorter.
  std::vector<float> values(5'250'001);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i) * 0.5f;
  std::string path = scratchPath("large-f32");
  TensorView view{values.data(), {int64_t(values.size())}, plan::F32};
  writeNpy(path, view);
  Array array = readFeedArray(path, Conversion{});
  ASSERT_TRUE(array.source);
  // Off the start and short of the end, so no piece is aligned.
  std::vector<float> read(values.size() - 10);
  array.readElements(7, read.size(), reinterpret_cast<char *>(read.data()));
  for (size_t i = 0; i < read.size(); ++i)
    ASSERT_EQ(read[i], values[i + 7]) << "element " << i + 7;
  std::remove(path.c_str());
}

TEST(FeedRead, LargeConvertedReadEqualsItsElements) {
  // 9M bytes become 9M floats times 1/255: two or more pieces converted
  // apart.
  std::vector<uint8_t> bytes(9'000'003);
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<uint8_t>(i * 7 + i / 251);
  std::string path = scratchPath("large-u8");
  writeBytesNpy(path, bytes);
  Conversion into{plan::F32, 1.0 / 255, 0};
  Array array = readFeedArray(path, into);
  ASSERT_TRUE(array.source);
  std::vector<float> read(bytes.size() - 3);
  array.readElements(3, read.size(), reinterpret_cast<char *>(read.data()));
  for (size_t i = 0; i < read.size(); ++i)
    ASSERT_EQ(read[i], static_cast<float>(bytes[i + 3] * (1.0 / 255)))
        << "element " << i + 3;
  std::remove(path.c_str());
}

} // namespace
