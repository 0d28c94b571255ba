//===- PlanCheck.cpp - static checks on a plan's instruction streams ------===//
//
// Steps repeat the same streams and their messages carry the step in their
// tag, so if one step completes from the start, every step does: a single
// step is simulated.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/PlanCheck.h"

#include <map>
#include <sstream>
#include <tuple>
#include <vector>

namespace cdp::plan {

namespace {

int64_t attribute(const Instruction &instruction, const std::string &name) {
  for (const Attribute &a : instruction.attributes())
    if (a.name() == name)
      return a.i();
  return -1;
}

std::string describe(const Instruction &instruction) {
  std::ostringstream os;
  os << instruction.op() << " at '" << instruction.location()
     << "' (micro-batch " << attribute(instruction, "micro_batch") << ", value "
     << attribute(instruction, "value") << ", peer "
     << attribute(instruction, "peer") << ", time step "
     << instruction.time_step() << ")";
  return os.str();
}

} // namespace

std::string findSendRecvDeadlock(const Plan &plan) {
  int devices = plan.devices_size();
  // (from, to, value, micro-batch) -> messages in flight
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;
  std::map<Key, int> inFlight;
  std::vector<int> next(devices, 0);
  std::vector<std::vector<int>> rounds;
  for (bool moved = true; moved;) {
    moved = false;
    for (int d = 0; d < devices; ++d) {
      const Device &device = plan.devices(d);
      while (next[d] < device.instructions_size()) {
        const Instruction &instruction = device.instructions(next[d]);
        if (instruction.op() == "send") {
          ++inFlight[{d, attribute(instruction, "peer"),
                      attribute(instruction, "value"),
                      attribute(instruction, "micro_batch")}];
        } else if (instruction.op() == "recv") {
          auto it = inFlight.find({attribute(instruction, "peer"), d,
                                   attribute(instruction, "value"),
                                   attribute(instruction, "micro_batch")});
          if (it == inFlight.end() || it->second == 0)
            break;
          --it->second;
        }
        ++next[d];
        moved = true;
      }
    }
    rounds.push_back(next);
  }
  std::ostringstream os;
  bool stuck = false;
  for (int d = 0; d < devices; ++d)
    if (next[d] < plan.devices(d).instructions_size()) {
      if (!stuck)
        os << "the plan would hang: no device can move after round "
           << rounds.size() - 1
           << " (sends buffered, receives blocking); stuck:\n";
      stuck = true;
      os << "  device " << d << " at instruction " << next[d] << ": "
         << describe(plan.devices(d).instructions(next[d])) << "\n";
    }
  if (!stuck)
    return "";
  os << "round x device (instructions completed):";
  for (size_t r = 0; r < rounds.size(); ++r) {
    os << "\n  " << r << ":";
    for (int done : rounds[r])
      os << " " << done;
  }
  return os.str();
}

} // namespace cdp::plan
