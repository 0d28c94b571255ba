//===- CheckDeadlock.cpp - blocking sends and receives that would hang ----===//

#include "cdp/Dialect/Sched/SchedOps.h"
#include "cdp/Passes/Passes.h"

#include "llvm/Support/raw_ostream.h"

#include <set>

namespace cdp {
#define GEN_PASS_DEF_CHECKDEADLOCK
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

/// A send or receive, by its partner: (sender, receiver, kind, slot, step).
using Endpoint = std::tuple<int64_t, int64_t, std::string, int64_t, int64_t>;

std::string describe(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << op->getName().getStringRef();
  for (NamedAttribute attr : op->getAttrs()) {
    os << " " << attr.getName().getValue() << "=";
    if (auto s = dyn_cast<StringAttr>(attr.getValue()))
      os << s.getValue();
    else if (auto i = dyn_cast<IntegerAttr>(attr.getValue()))
      os << i.getInt();
  }
  return text;
}

LogicalResult check(sched::ProgramOp program) {
  SmallVector<sched::DeviceOp> devices;
  for (Operation &op : program.getBody().front())
    if (auto device = dyn_cast<sched::DeviceOp>(op))
      devices.push_back(device);
  int64_t n = devices.size();
  SmallVector<SmallVector<Operation *>> streams(n);
  for (int64_t d = 0; d < n; ++d)
    for (Operation &op : devices[d].getBody().front())
      streams[d].push_back(&op);
  auto endpoint = [&](int64_t d, Operation *op) -> std::optional<Endpoint> {
    if (auto send = dyn_cast<sched::SendOp>(op))
      return Endpoint{d, static_cast<int64_t>(send.getTo()),
                      send.getKind().str(),
                      static_cast<int64_t>(send.getSlot()),
                      static_cast<int64_t>(send.getStep())};
    if (auto recv = dyn_cast<sched::RecvOp>(op))
      return Endpoint{static_cast<int64_t>(recv.getFrom()), d,
                      recv.getKind().str(),
                      static_cast<int64_t>(recv.getSlot()),
                      static_cast<int64_t>(recv.getStep())};
    return std::nullopt;
  };
  SmallVector<size_t> next(n, 0);
  // Sends are buffered (they complete when posted); a receive blocks until
  // its message has been posted. Each round moves every device as far as
  // it can; the grid records what each device reached per round.
  std::set<Endpoint> posted;
  SmallVector<SmallVector<std::string>> grid;
  bool progress = true;
  while (progress) {
    progress = false;
    SmallVector<std::string> row(n, ".");
    for (int64_t d = 0; d < n; ++d) {
      while (next[d] < streams[d].size()) {
        Operation *op = streams[d][next[d]];
        std::optional<Endpoint> mine = endpoint(d, op);
        if (mine) {
          int64_t peer =
              isa<sched::SendOp>(op) ? std::get<1>(*mine) : std::get<0>(*mine);
          if (peer < 0 || peer >= n || peer == d)
            return op->emitError("sends to or receives from device ")
                   << peer << ", which is not another device of the program";
          if (isa<sched::SendOp>(op))
            posted.insert(*mine);
          else if (!posted.erase(*mine))
            break; // its message is not there yet
        }
        row[d] = op->getName().stripDialect().str();
        ++next[d];
        progress = true;
      }
    }
    if (progress)
      grid.push_back(row);
  }
  SmallVector<int64_t> stuck;
  for (int64_t d = 0; d < n; ++d)
    if (next[d] < streams[d].size())
      stuck.push_back(d);
  if (stuck.empty())
    return success();
  std::string report;
  llvm::raw_string_ostream os(report);
  os << "the schedule would hang: no device can move after round "
     << grid.size() << " (sends buffered, receives blocking).\nstuck:";
  for (int64_t d : stuck)
    os << "\n  device " << d << " at op " << next[d] << ": "
       << describe(streams[d][next[d]]);
  os << "\nround x device (the last op each device completed in the round):";
  for (auto [round, row] : llvm::enumerate(grid)) {
    os << "\n  " << round << ":";
    for (const std::string &cell : row)
      os << " " << cell;
  }
  return program.emitError(report);
}

struct CheckDeadlockPass
    : public cdp::impl::CheckDeadlockBase<CheckDeadlockPass> {
  void runOnOperation() override {
    getOperation().walk([&](sched::ProgramOp program) {
      if (failed(check(program)))
        signalPassFailure();
    });
  }
};

} // namespace
