//===- PlanCheck.cpp - static checks on a plan's instruction streams ------===//
//
// Steps repeat the same streams and their messages carry the step in their
// tag; a receive may take a message of the step before (`step_offset` -1,
// tied weights) and may start at step 1 (`min_step`). Steps 0 and 1 are
// simulated: from step 1 on every step sees the same traffic.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/PlanCheck.h"

#include <map>
#include <sstream>
#include <tuple>
#include <vector>

namespace cdp::plan {

namespace {

int64_t attribute(const Instruction &instruction, const std::string &name,
                  int64_t fallback = -1) {
  for (const Attribute &a : instruction.attributes())
    if (a.name() == name)
      return a.i();
  return fallback;
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
  // (from, to, value, micro-batch, step) -> messages in flight
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;
  std::map<Key, int> inFlight;
  // Instruction positions over the simulated steps, step-major.
  std::vector<int> next(devices, 0);
  std::vector<std::vector<int>> rounds;
  auto length = [&](int d) { return 2 * plan.devices(d).instructions_size(); };
  for (bool moved = true; moved;) {
    moved = false;
    for (int d = 0; d < devices; ++d) {
      const Device &device = plan.devices(d);
      while (next[d] < length(d)) {
        int64_t step = next[d] / device.instructions_size();
        const Instruction &instruction =
            device.instructions(next[d] % device.instructions_size());
        if (instruction.min_step() > step) {
          // not run in this step
        } else if (instruction.op() == "send") {
          ++inFlight[{d, attribute(instruction, "peer"),
                      attribute(instruction, "value"),
                      attribute(instruction, "micro_batch"), step}];
        } else if (instruction.op() == "recv") {
          int64_t offset = attribute(instruction, "step_offset", 0);
          auto it = inFlight.find({attribute(instruction, "peer"), d,
                                   attribute(instruction, "value"),
                                   attribute(instruction, "micro_batch"),
                                   step + offset});
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
    if (next[d] < length(d)) {
      if (!stuck)
        os << "the plan would hang: no device can move after round "
           << rounds.size() - 1
           << " (sends buffered, receives blocking); stuck:\n";
      stuck = true;
      int size = plan.devices(d).instructions_size();
      os << "  device " << d << " at instruction " << next[d] % size;
      if (next[d] >= size)
        os << " of step 1";
      os << ": " << describe(plan.devices(d).instructions(next[d] % size))
         << "\n";
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
