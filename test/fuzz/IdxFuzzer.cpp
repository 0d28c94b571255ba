//===- IdxFuzzer.cpp - libFuzzer target: IDX data sets --------------------===//
//
// The first two bytes say where the image file ends and the label file
// begins. A RuntimeError is a clean refusal; anything else a finding.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Data.h"

#include <algorithm>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  size_t split = std::min<size_t>(size - 2, data[0] | (data[1] << 8));
  const char *rest = reinterpret_cast<const char *>(data) + 2;
  std::string images(rest, split), labels(rest + split, size - 2 - split);
  try {
    cdp::runtime::parseIdx(images, labels, "fuzz");
  } catch (const cdp::runtime::RuntimeError &) {
  }
  return 0;
}
