//===- JsonFuzzer.cpp - libFuzzer target: --profile and --hw JSON ---------===//
//
// The same text read as a cdp-run --profile file and as a --hw hardware
// model; each either succeeds or sets its error.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/CostModel.h"
#include "cdp/Support/Profile.h"

#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::vector<cdp::ProfileEntry> entries;
  std::string error;
  cdp::parseProfile(text, entries, error);
  cdp::Hardware hardware;
  cdp::parseHardware(text, hardware, error);
  return 0;
}
