//===- OpTable.cpp - the generated op table, indexed by name --------------===//

#include "cdp/Runtime/OpTable.h"

#include <map>

namespace cdp::ops {

namespace {

std::vector<OpInfo> buildOps() {
  std::vector<OpInfo> ops;
#define CDP_OP(Id, name, minIn, maxIn, minOut, maxOut)                         \
  ops.push_back({name, minIn, maxIn, minOut, maxOut, {}});
#include "cdp/Ops/OpTable.inc"
  std::map<std::string_view, OpInfo *> byName;
  for (OpInfo &op : ops)
    byName[op.name] = &op;
#define CDP_OP_ATTRIBUTE(op, attr, kind, required)                             \
  byName.at(op)->attributes.push_back({attr, AttrKind::kind, required});
#include "cdp/Ops/OpTable.inc"
  return ops;
}

const std::map<std::string_view, const OpInfo *> &index() {
  static const std::map<std::string_view, const OpInfo *> byName = [] {
    std::map<std::string_view, const OpInfo *> map;
    for (const OpInfo &op : allOps())
      map[op.name] = &op;
    return map;
  }();
  return byName;
}

} // namespace

const std::vector<OpInfo> &allOps() {
  static const std::vector<OpInfo> ops = buildOps();
  return ops;
}

const OpInfo *opInfo(std::string_view name) {
  auto it = index().find(name);
  return it == index().end() ? nullptr : it->second;
}

} // namespace cdp::ops
