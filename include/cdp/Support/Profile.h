//===- Profile.h - reading cdp-run --profile files --------------*- C++ -*-===//
//
// cdp-run --profile writes every instruction's mean milliseconds per step
// with its kernel and ONNX node; the stage partitioner and the step-time
// prediction of cdp-compile read it back. LLVM Support only, below the
// passes and the planner alike.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_SUPPORT_PROFILE_H
#define CDP_SUPPORT_PROFILE_H

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <optional>
#include <string>
#include <vector>

namespace cdp {

struct ProfileEntry {
  std::string location; ///< the ONNX node (or parameter) of the instruction
  std::string op;       ///< the kernel
  double ms = 0;        ///< mean milliseconds per step
};

/// The most nesting the JSON inputs may have: LLVM's parser recurses once
/// per level, so hostile nesting would overflow the stack.
constexpr int kMostJsonDepth = 64;

/// Parses `text` as JSON after checking its nesting (brackets in strings
/// do not count); on failure returns nothing and sets `error`.
inline std::optional<llvm::json::Value> parseJson(llvm::StringRef text,
                                                  std::string &error) {
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMostJsonDepth) {
        error = "JSON nested deeper than " + std::to_string(kMostJsonDepth) +
                " levels";
        return std::nullopt;
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
  if (!json) {
    error = "not JSON (" + llvm::toString(json.takeError()) + ")";
    return std::nullopt;
  }
  return std::move(*json);
}

/// A profile's entries from its text; on failure returns false and sets
/// `error` (one phrase).
inline bool parseProfile(llvm::StringRef text,
                         std::vector<ProfileEntry> &entries,
                         std::string &error) {
  const char *notProfile =
      "not a cdp-run --profile file (no \"instructions\" array)";
  std::optional<llvm::json::Value> json = parseJson(text, error);
  if (!json) {
    if (error.rfind("not JSON", 0) == 0)
      error = notProfile;
    return false;
  }
  const llvm::json::Array *instructions =
      json->getAsObject() ? json->getAsObject()->getArray("instructions")
                          : nullptr;
  if (!instructions) {
    error = notProfile;
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
  return parseProfile((*buffer)->getBuffer(), entries, error);
}

} // namespace cdp

#endif // CDP_SUPPORT_PROFILE_H
