//===- TensorBoardLogTest.cpp - event-file framing
//-------------------------===//
//
// The pieces TensorBoard's reader checks, against published values: the
// CRC-32C check value (RFC 3720's "123456789" and its 32 zero bytes), the
// TFRecord framing around a payload, and an Event's protobuf bytes worked
// out by hand from event.proto's field numbers.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/TensorBoardLog.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace cdp::runtime;

namespace {

uint32_t readU32(const std::string &bytes, size_t at) {
  uint32_t value;
  std::memcpy(&value, bytes.data() + at, 4);
  return value;
}

TEST(TensorBoardLogTest, Crc32cMatchesCheckValues) {
  const char *digits = "123456789";
  EXPECT_EQ(crc32c(digits, 9), 0xe3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8a9136aau); // RFC 3720
}

TEST(TensorBoardLogTest, RecordFramesItsData) {
  std::string record = tfRecord("abc");
  ASSERT_EQ(record.size(), 8u + 4 + 3 + 4);
  uint64_t length;
  std::memcpy(&length, record.data(), 8);
  EXPECT_EQ(length, 3u);
  EXPECT_EQ(readU32(record, 8), maskedCrc32c(record.data(), 8));
  EXPECT_EQ(record.substr(12, 3), "abc");
  uint32_t crc = crc32c("abc", 3);
  EXPECT_EQ(readU32(record, 15), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoardLogTest, EventBytesFollowEventProto) {
  // wall_time 1.5 (field 1, fixed64), step 3 (field 2, varint), summary
  // (field 5) with value (field 1) {tag "x" (1), simple_value 2.0f (2)}.
  std::string bytes = eventBytes(1.5, 3, {{"x", 2.0f}});
  const unsigned char want[] = {0x09, 0,    0,    0,    0,    0,    0,    0xf8,
                                0x3f, 0x10, 0x03, 0x2a, 0x0a, 0x0a, 0x08, 0x0a,
                                0x01, 'x',  0x15, 0,    0,    0,    0x40};
  ASSERT_EQ(bytes.size(), sizeof(want));
  EXPECT_EQ(0, std::memcmp(bytes.data(), want, sizeof(want)));
  // The file's first event names its version (field 3); a resumed run's
  // second says START (field 7, session_log: SessionLog{status 1}; field
  // 6 is the deprecated log_message).
  std::string version = eventBytes(0, 0, {}, "brain.Event:2");
  EXPECT_NE(version.find("\x1a\x0d"
                         "brain.Event:2"),
            std::string::npos);
  std::string start = eventBytes(0, 4, {}, "", true);
  EXPECT_EQ(start.substr(start.size() - 4), std::string("\x3a\x02\x08\x01"));
}

} // namespace
