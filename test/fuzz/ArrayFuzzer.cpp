//===- ArrayFuzzer.cpp - libFuzzer target: .npy and .pb feeds -------------===//
//
// The first byte picks the reader (.npy or ONNX TensorProto .pb), the rest
// is the file. A RuntimeError is a clean refusal; anything else a finding.
//
//===----------------------------------------------------------------------===//

#include "cdp/Runtime/Data.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  std::string bytes(reinterpret_cast<const char *>(data) + 1, size - 1);
  try {
    if (data[0] & 1)
      cdp::runtime::parseTensorProto(bytes, "fuzz.pb");
    else if (data[0] & 2)
      cdp::runtime::parseNpy(bytes, "fuzz.npy");
    else {
      // Into each of a feed's targets, as cdp-run converts them.
      cdp::runtime::Conversion into{data[0] & 4   ? cdp::plan::F32
                                    : data[0] & 8 ? cdp::plan::I64
                                                  : cdp::plan::BOOL,
                                    1.0 / 255, -0.5};
      cdp::runtime::parseNpy(bytes, "fuzz.npy", &into);
    }
  } catch (const cdp::runtime::RuntimeError &) {
  }
  return 0;
}
