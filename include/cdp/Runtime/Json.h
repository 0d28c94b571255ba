//===- Json.h - the runtime's JSON text -------------------------*- C++ -*-===//
//
// Everything cdp-run writes as JSON (reports' names, traces, profiles,
// metrics, index.json) is built as nlohmann::ordered_json (keys in the
// order written) and turned into text here.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_JSON_H
#define CDP_RUNTIME_JSON_H

#include <nlohmann/json.hpp>

#include <string>

namespace cdp::runtime {

using Json = nlohmann::ordered_json;

/// `value` as JSON text (`indent` as nlohmann's dump: -1 one line). Names
/// come from models and may hold invalid UTF-8: replaced, never thrown on.
inline std::string jsonText(const Json &value, int indent = -1) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false,
                    Json::error_handler_t::replace);
}

} // namespace cdp::runtime

#endif // CDP_RUNTIME_JSON_H
