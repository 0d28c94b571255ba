//===- OpTable.cpp - the generated op table, indexed by name --------------===//

#include "cdp/Runtime/OpTable.h"

#include <map>

namespace cdp::ops {

namespace {

/// The ops (by ODS definition name), and each op name's index.
struct Table {
  std::vector<OpInfo> ops;
  std::map<std::string_view, size_t> byName;
};

Table buildTable() {
  Table table;
#define CDP_OP(Id, name, minIn, maxIn, minOut, maxOut)                         \
  table.byName[name] = table.ops.size();                                       \
  table.ops.push_back({name, minIn, maxIn, minOut, maxOut, {}});
#include "cdp/Ops/OpTable.inc"
#define CDP_OP_ATTRIBUTE(op, attr, kind, required)                             \
  table.ops[table.byName.at(op)].attributes.push_back(                         \
      {attr, AttrKind::kind, required});
#include "cdp/Ops/OpTable.inc"
  return table;
}

const Table &table() {
  static const Table built = buildTable();
  return built;
}

} // namespace

const std::vector<OpInfo> &allOps() { return table().ops; }

const OpInfo *opInfo(std::string_view name) {
  auto it = table().byName.find(name);
  return it == table().byName.end() ? nullptr : &table().ops[it->second];
}

} // namespace cdp::ops
