//===- Profile.h - reading cdp-run --profile files ---------------*- C++
//-*-===//
//
// cdp-run --profile writes every instruction's mean milliseconds per step
// with its kernel and ONNX node; the stage partitioner and the step-time
// prediction of cdp-compile read it back.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PASSES_PROFILE_H
#define CDP_PASSES_PROFILE_H

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <string>
#include <vector>

namespace cdp {

struct ProfileEntry {
  std::string location; ///< the ONNX node (or parameter) of the instruction
  std::string op;       ///< the kernel
  double ms = 0;        ///< mean milliseconds per step
};

/// Reads a profile's entries; on failure returns false and sets `error`
/// (one phrase, no file name).
inline bool readProfile(llvm::StringRef path,
                        std::vector<ProfileEntry> &entries,
                        std::string &error) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) {
    error = "cannot open: " + buffer.getError().message();
    return false;
  }
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse((*buffer)->getBuffer());
  const llvm::json::Array *instructions =
      json && json->getAsObject()
          ? json->getAsObject()->getArray("instructions")
          : nullptr;
  if (!instructions) {
    if (!json)
      llvm::consumeError(json.takeError());
    error = "not a cdp-run --profile file (no \"instructions\" array)";
    return false;
  }
  entries.clear();
  for (const llvm::json::Value &value : *instructions)
    if (const llvm::json::Object *object = value.getAsObject()) {
      auto location = object->getString("location");
      auto ms = object->getNumber("ms");
      if (!location || !ms)
        continue;
      auto op = object->getString("op");
      entries.push_back({location->str(), op ? op->str() : "", *ms});
    }
  return true;
}

} // namespace cdp

#endif // CDP_PASSES_PROFILE_H
