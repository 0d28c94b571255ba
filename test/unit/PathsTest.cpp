//===- PathsTest.cpp - writing outputs all at once ------------------------===//
//
// writeFileAtomically: a new file, a replaced one, the permissions a plain
// open gives, a missing folder refused, and a write that fails halfway (the
// file size limit hit) leaving the previous file whole and no temporary
// file behind.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/Paths.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>

namespace fs = std::filesystem;

namespace {

std::string readAll(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

/// The folder's entries other than `keep`.
std::vector<std::string> strays(const fs::path &dir, const std::string &keep) {
  std::vector<std::string> names;
  for (const auto &entry : fs::directory_iterator(dir))
    if (entry.path().filename() != keep)
      names.push_back(entry.path().filename());
  return names;
}

struct AtomicWrite : ::testing::Test {
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("cdp-paths-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
};

TEST_F(AtomicWrite, WritesAndReplaces) {
  std::string error, path = (dir / "out.bin").string();
  ASSERT_TRUE(cdp::writeFileAtomically(path, "first", error)) << error;
  EXPECT_EQ(readAll(path), "first");
  ASSERT_TRUE(cdp::writeFileAtomically(path, std::string(1 << 20, 'x'), error))
      << error;
  EXPECT_EQ(readAll(path), std::string(1 << 20, 'x'));
  EXPECT_TRUE(strays(dir, "out.bin").empty());
  mode_t mask = umask(0);
  umask(mask);
  struct stat info;
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0666 & ~mask);
}

TEST_F(AtomicWrite, MissingFolderIsRefused) {
  std::string error;
  EXPECT_FALSE(
      cdp::writeFileAtomically((dir / "no" / "out.bin").string(), "x", error));
  EXPECT_NE(error.find("cannot write"), std::string::npos) << error;
}

TEST_F(AtomicWrite, FailedWriteKeepsThePreviousFile) {
  std::string error, path = (dir / "out.bin").string();
  ASSERT_TRUE(cdp::writeFileAtomically(path, "previous", error)) << error;
  // A file size limit makes the write fail halfway (EFBIG, not a signal).
  struct rlimit saved;
  getrlimit(RLIMIT_FSIZE, &saved);
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  auto handler = std::signal(SIGXFSZ, SIG_IGN);
  setrlimit(RLIMIT_FSIZE, &small);
  bool wrote = cdp::writeFileAtomically(path, std::string(1 << 16, 'y'), error);
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, handler);
  EXPECT_FALSE(wrote);
  EXPECT_NE(error.find("write failed"), std::string::npos) << error;
  EXPECT_EQ(readAll(path), "previous");
  EXPECT_TRUE(strays(dir, "out.bin").empty());
}

} // namespace
