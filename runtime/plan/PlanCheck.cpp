//===- PlanCheck.cpp - static checks on a plan's instruction streams ------===//
//
// Steps repeat the same streams and their messages carry the step in their
// tag as a micro-batch index over the run (step · M + micro_batch, where
// micro_batch or `step_offset` may reach into the step before: 2bw, tied
// weights), and some instructions start at step 1 (`min_step`). Steps 0
// to 2 are simulated, from then on every step sees the same traffic, and
// then the drain that follows the last step (2bw, cdp-mp).
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/PlanInstantiate.h"
#include "cdp/Plan/ReplicaSymmetry.h"
#include "cdp/Plan/SpelledPlan.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace cdp::plan {

namespace {

/// A send or recv as the traffic sees it: the peer, the value and the
/// micro-batch over the run it carries in a given step.
struct Message {
  int64_t peer = 0, value = 0, microBatch = 0, perStep = 1, stepOffset = 0;
  int64_t overRun(int64_t step) const {
    return (step + stepOffset) * perStep + microBatch;
  }
};

Message messageOf(const Instruction &instruction) {
  Message m;
  m.peer = intAttribute(instruction, "peer");
  m.value = intAttribute(instruction, "value");
  m.microBatch = intAttribute(instruction, "micro_batch", 0);
  m.perStep = intAttribute(instruction, "micro_batches", 1);
  m.stepOffset = intAttribute(instruction, "step_offset", 0);
  return m;
}

/// Values that name the chain's messages apart from the pipelines' (which
/// are 0 to 2^24): a stage's partial sums and its means.
int64_t partialValue(int64_t stage) { return -2 - 2 * stage; }
int64_t meanValue(int64_t stage) { return -3 - 2 * stage; }

/// A chain_reduce or chain_relay of device d (of `devices`) as the receive
/// and the send it makes, tagged by the step whose reduction they carry:
/// chain_reduce adds to the partial sum from d - 1 and passes it to d + 1,
/// or, on the last device, sends the mean back to d - 1; chain_relay takes
/// the mean of step t - step_offset from d + 1 and passes it to d - 1.
template <typename Traffic>
std::vector<Traffic> chainHops(const Instruction &instruction, int d,
                               int devices, const Traffic &base) {
  int64_t stage = intAttribute(instruction, "stage", 0);
  bool relay = instruction.op() == "chain_relay";
  bool wait = instruction.op() == "chain_wait";
  int64_t owner = intAttribute(instruction, "owner", -1);
  auto hop = [&](int kind, int64_t peer, int64_t value) {
    Traffic t = base;
    t.kind = kind;
    t.message.peer = peer;
    t.message.value = value;
    t.message.stepOffset = relay  ? -intAttribute(instruction, "step_offset", 0)
                           : wait ? -1 - intAttribute(instruction, "delay", 0)
                                  : 0;
    return t;
  };
  std::vector<Traffic> hops;
  if (wait) { // CDP-ZeRO's owner: the mean of an earlier step
    hops.push_back(
        hop(2, intAttribute(instruction, "from", 0), meanValue(stage)));
  } else if (relay) {
    hops.push_back(hop(2, d + 1, meanValue(stage)));
    if (d > 0)
      hops.push_back(hop(1, d - 1, meanValue(stage)));
  } else {
    if (d > 0)
      hops.push_back(hop(2, d - 1, partialValue(stage)));
    if (d + 1 < devices)
      hops.push_back(hop(1, d + 1, partialValue(stage)));
    else if (owner >= 0) // CDP-ZeRO: to the stage's owner
      hops.push_back(hop(1, owner, meanValue(stage)));
    else if (d > 0)
      hops.push_back(hop(1, d - 1, meanValue(stage)));
  }
  if (hops.empty())
    hops.push_back(base); // one device: nothing to exchange
  for (size_t k = 1; k < hops.size(); ++k)
    hops[k].free = true;
  return hops;
}

std::string describe(const Instruction &instruction, int64_t step) {
  std::ostringstream os;
  if (instruction.op() == "reduce_wait") {
    os << "reduce_wait at '" << instruction.location() << "' (stage "
       << intAttribute(instruction, "stage", 0) << ", the reduction of step "
       << step - 1 - intAttribute(instruction, "delay", 0) << ", time step "
       << instruction.time_step() << ")";
    return os.str();
  }
  if (instruction.op().rfind("chain_", 0) == 0 ||
      instruction.op().rfind("shard_", 0) == 0) {
    os << instruction.op() << " at '" << instruction.location() << "' (stage "
       << intAttribute(instruction, "stage", 0) << ", time step "
       << instruction.time_step() << ")";
    return os.str();
  }
  os << instruction.op() << " at '" << instruction.location()
     << "' (micro-batch " << intAttribute(instruction, "micro_batch")
     << ", value " << intAttribute(instruction, "value") << ", peer "
     << intAttribute(instruction, "peer") << ", time step "
     << instruction.time_step() << ")";
  return os.str();
}

/// Steps simulated: 2bw's program for step t finishes step t - 1's
/// backwards, so traffic is periodic from step 2 on.
constexpr int kSteps = 3;

/// Every device's stream run for `steps` steps (then the drain, if
/// `drain`) with buffered sends and blocking receives, in rounds: each
/// device advances until a receive finds no message. With `reductions`,
/// a reduce_wait also blocks until every device has run the reduce_start
/// of its step and stage, and a blocking collective (ZeRO's shard_reduce,
/// shard_update and shard_gather) until every device has reached the same one
/// of its step and stage. With `cost`, each instruction lasts cost(device,
/// instruction) on its device's clock and a receive starts no earlier than the
/// end of its send.
struct Simulation {
  std::vector<int> next;                ///< per device: positions completed
  std::vector<std::vector<int>> rounds; ///< `next` after every round
  std::vector<double> clock;            ///< per device, with a cost
  std::vector<std::vector<double>> passEnds; ///< per device: clock per pass
  bool unknownCost = false; ///< the cost was negative somewhere
};

/// A plan's streams as the simulation reads them: a plain plan's
/// instructions, or a format-4 plan's runs read in place (SpelledPlan).
/// Only the instruction and what its run adds to a message's micro-batch
/// matter here, so a plain plan needs no spelled-out copy.
struct PlainStreams {
  const Plan &source;
  const Plan &plan() const { return source; }
  int size(int d) const { return source.devices(d).instructions_size(); }
  const Instruction &instruction(int d, int i) const {
    return source.devices(d).instructions(i);
  }
  int64_t messageBatch(int, int) const { return 0; }
  int64_t peerOffset(int, int) const { return 0; }
  /// The instruction as its run runs it (for messages naming it).
  Instruction described(int d, int i) const { return instruction(d, i); }
  /// The devices simulated, and the replicas each stands for.
  int devices() const { return source.devices_size(); }
  int replicas() const { return 1; }
};

struct SpelledStreams {
  const SpelledPlan &spelled;
  /// The first `simulated` devices (0: all), each standing for `standsFor`
  /// replicas alike (alikeReplicaDevices): a collective of a stage's
  /// replicas is then met by its one device.
  int simulated = 0, standsFor = 1;
  int devices() const { return simulated > 0 ? simulated : spelled.devices(); }
  int replicas() const { return standsFor; }
  const Plan &plan() const { return spelled.plan(); }
  int size(int d) const { return spelled.size(d); }
  const Instruction &instruction(int d, int i) const {
    return *spelled.at(d, i);
  }
  int64_t messageBatch(int d, int i) const {
    return spelled.at(d, i).messageBatch;
  }
  int64_t peerOffset(int d, int i) const { return spelled.at(d, i).peerOffset; }
  Instruction described(int d, int i) const {
    const SpelledInstruction &at = spelled.at(d, i);
    Instruction out = *at;
    out.set_time_step(at.timeStep);
    if (carriesMessageBatch(out))
      setIntAttribute(&out, "micro_batch",
                      intAttribute(out, "micro_batch") + at.messageBatch);
    if (carriesPeer(out))
      setIntAttribute(&out, "peer", intAttribute(out, "peer") + at.peerOffset);
    return out;
  }
};

/// An instruction the simulation visits, with its part in the traffic.
struct Traffic {
  int index = 0; ///< in the device's instructions
  int kind = 0;  ///< 0 none, 1 send, 2 recv, 3 reduce_start, 4 reduce_wait,
                 ///< 5 a blocking collective (`collective` names it)
  /// 0 shard_reduce, 1 shard_update, -1 replica_shard_update, -2
  /// norm_all_reduce (-4 its overflow flags' part), -3 sparse_gather, 2 +
  /// its time step a shard_gather (a stage is gathered more than once a
  /// step), -5 - the gradient's id a replica_sum (one per parameter of a
  /// stage)
  int64_t collective = 0;
  int64_t members = 0; ///< the devices that meet (0: all)
  Message message;
  int64_t minStep = 0, stage = 0, delay = 0;
  bool drain = false;
  bool ahead = false; ///< the next step's work: a pass before step 0
  bool free = false;  ///< the second part of a chain hop: costs nothing
};

/// An instruction's first input's id, 0 where an edited plan gives none.
int64_t firstInput(const Instruction &instruction) {
  return instruction.inputs_size() > 0 ? instruction.inputs(0) : 0;
}

/// Every device's instructions the simulation visits (all with a cost;
/// without, only those that can block: messages and, with `reductions`,
/// reductions, chain hops and collectives), with their part in the traffic.
template <typename Streams>
std::vector<std::vector<Traffic>> collectTraffic(const Streams &streams,
                                                 bool reductions, bool costed) {
  const Plan &plan = streams.plan();
  int devices = streams.devices();
  std::vector<std::vector<Traffic>> traffic(devices);
  // The runtime runs a last_slot instruction only on the device whose slot
  // is the step's last (dp, cdp: slot d on device d; pipelines: slot 0).
  int64_t lastSlot = std::max(plan.micro_batches(), 1) - 1;
  bool pipelined = isPipeline(plan);
  for (int d = 0; d < devices; ++d) {
    int64_t slot = pipelined ? 0 : d;
    if (costed) // every instruction: no regrowth (13 % of a 1008-device report)
      traffic[d].reserve(streams.size(d));
    for (int i = 0; i < streams.size(d); ++i) {
      const Instruction &instruction = streams.instruction(d, i);
      std::string_view op = instruction.op();
      if (instruction.last_slot() && slot != lastSlot)
        continue; // never runs
      bool isMessage = op == "send" || op == "recv";
      bool reduction =
          reductions && (op == "reduce_start" || op == "reduce_wait");
      bool chain =
          reductions &&
          (op == "chain_reduce" || op == "chain_relay" ||
           (op == "chain_wait" && intAttribute(instruction, "from", -1) >= 0));
      // CDP-ZeRO's owner updates its stage alone (`owner`).
      bool collective = reductions &&
                        intAttribute(instruction, "owner", -1) < 0 &&
                        (op == "shard_reduce" || op == "shard_update" ||
                         op == "shard_gather" || op == "replica_shard_update" ||
                         op == "norm_all_reduce" || op == "sparse_gather" ||
                         op == "replica_sum");
      if (!isMessage && !reduction && !chain && !collective && !costed)
        continue;
      Traffic t;
      t.index = i;
      t.minStep = instruction.min_step();
      t.drain = instruction.drain();
      t.ahead = instruction.ahead();
      if (chain) {
        for (Traffic &hop : chainHops(instruction, d, devices, t))
          traffic[d].push_back(hop);
        continue;
      }
      if (reduction) {
        t.kind = op == "reduce_start" ? 3 : 4;
        t.stage = intAttribute(instruction, "stage", 0);
        t.delay = intAttribute(instruction, "delay", 0);
      }
      if (collective) {
        t.kind = 5;
        t.collective = op == "shard_update"           ? 1
                       : op == "replica_shard_update" ? -1
                       : op == "norm_all_reduce"
                           ? -2 - 2 * intAttribute(instruction, "part", 0)
                       : op == "sparse_gather" ? -3
                       : op == "replica_sum"   ? -5 - firstInput(instruction)
                       : op == "shard_gather"  ? 2 + instruction.time_step()
                                               : 0;
        if (op == "replica_shard_update" || op == "replica_sum") // replicas
          t.members = std::max<int64_t>(1, listSize(instruction, "peers") /
                                               streams.replicas());
        t.stage = intAttribute(instruction, "stage", 0);
      }
      if (isMessage) {
        t.kind = op == "send" ? 1 : 2;
        t.message = messageOf(instruction);
        t.message.microBatch += streams.messageBatch(d, i);
        t.message.peer += streams.peerOffset(d, i);
      }
      traffic[d].push_back(t);
    }
  }
  return traffic;
}

/// A message in the simulation: (from, to, value, micro-batch over the
/// run).
using MessageKey = std::array<int64_t, 4>;

struct MessageKeyHash {
  size_t operator()(const MessageKey &key) const {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int64_t part : key)
      h = (h ^ static_cast<uint64_t>(part)) * 0x100000001b3ULL;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

/// The end times of the messages in flight under one key, oldest first:
/// one in almost every case, so the first is kept without an allocation.
class InFlight {
public:
  void push(double end) {
    if (count++ == 0)
      first = end;
    else
      later.push_back(end);
  }
  double pop() {
    double oldest = first;
    if (--count > 0) {
      first = later.front();
      later.erase(later.begin());
    }
    return oldest;
  }
  bool empty() const { return count == 0; }

private:
  double first = 0;
  size_t count = 0;
  std::vector<double> later;
};

template <typename Streams>
Simulation simulate(const Streams &streams, int64_t steps, bool drain,
                    const InstructionTime *cost, bool reductions = false) {
  int devices = streams.devices();
  std::vector<std::vector<Traffic>> traffic =
      collectTraffic(streams, reductions, cost != nullptr);
  // (from, to, value, micro-batch over the run) -> the end times of the
  // messages in flight, oldest first (hashed: a 1,008-device pipeline has
  // 2 million messages a step, rarely two under one key)
  std::unordered_map<MessageKey, InFlight, MessageKeyHash> inFlight;
  // (step, stage) -> (contributions, when the last one was made)
  std::map<std::pair<int64_t, int64_t>, std::pair<int, double>> reduced;
  std::map<std::pair<int64_t, int64_t>, std::set<int>> fetched;
  // (step, stage, collective) -> (the devices that reached it, the latest
  // arrival)
  std::map<std::tuple<int64_t, int64_t, int64_t>,
           std::pair<std::set<int>, double>>
      collectives;
  std::vector<std::vector<double>> costs(devices);
  if (cost)
    for (int d = 0; d < devices; ++d)
      costs[d].assign(traffic[d].size(),
                      std::numeric_limits<double>::quiet_NaN());
  Simulation sim;
  sim.next.assign(devices, 0);
  sim.clock.assign(devices, 0.0);
  sim.passEnds.resize(devices);
  // Instructions that do the next step's work (`ahead`) run once, alone,
  // before step 0 (a pass of its own, step -1) and not in the last step.
  int64_t shift = 0;
  for (const auto &stream : traffic)
    for (const Traffic &t : stream)
      shift = t.ahead ? 1 : shift;
  int64_t passes = shift + steps + (drain ? 1 : 0);
  // Positions over the visited instructions of all passes, step-major.
  std::vector<int64_t> at(devices, 0);
  auto fullPosition = [&](int d) -> int {
    int size = streams.size(d);
    int64_t visited = traffic[d].size();
    if (at[d] >= passes * visited)
      return (passes - shift) * size;
    int64_t pass = at[d] / visited;
    if (pass < shift)
      return 0;
    return (pass - shift) * size + traffic[d][at[d] % visited].index;
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (int d = 0; d < devices; ++d) {
      int64_t visited = traffic[d].size();
      int64_t &position = at[d];
      double &clock = sim.clock[d];
      // On to the next instruction, noting the clock where a pass ends.
      auto advance = [&] {
        ++position;
        moved = true;
        if (position % visited == 0 && position / visited > shift)
          sim.passEnds[d].push_back(clock);
      };
      while (position < passes * visited) {
        int64_t step = position / visited - shift;
        const Traffic &t = traffic[d][position % visited];
        bool runs = step < 0 ? t.ahead
                             : t.minStep <= step && (step < steps || t.drain) &&
                                   !(t.ahead && step == steps - 1);
        if (!runs) {
          advance(); // not run in this step
          continue;
        }
        const Message &m = t.message;
        int64_t runMicroBatch = m.overRun(step);
        double start = clock;
        if (t.kind == 2) {
          auto it = inFlight.find({m.peer, d, m.value, runMicroBatch});
          if (it == inFlight.end())
            break;
          start = std::max(start, it->second.pop());
          if (it->second.empty())
            inFlight.erase(it);
        }
        if (t.kind == 5) {
          auto &[arrived, latest] = collectives[{step, t.stage, t.collective}];
          if (arrived.insert(d).second)
            latest = std::max(latest, clock);
          if (static_cast<int64_t>(arrived.size()) <
              (t.members > 0 ? t.members : devices))
            break;
          start = std::max(start, latest);
        }
        if (t.kind == 4) {
          std::pair<int64_t, int64_t> key{step - 1 - t.delay, t.stage};
          auto it = reduced.find(key);
          // A device fetches each mean once: a second wait never ends.
          if (it == reduced.end() || it->second.first < devices ||
              !fetched[key].insert(d).second)
            break;
          start = std::max(start, it->second.second);
        }
        if (cost) {
          // Every step runs the same instructions: cost each once.
          double &time = costs[d][position % visited];
          if (std::isnan(time))
            time = t.free ? 0.0 : (*cost)(d, streams.instruction(d, t.index));
          if (time < 0)
            sim.unknownCost = true;
          clock = start + std::max(time, 0.0);
        }
        if (t.kind == 1)
          inFlight[{d, m.peer, m.value, runMicroBatch}].push(clock);
        if (t.kind == 3) {
          auto &[count, last] = reduced[{step, t.stage}];
          ++count;
          last = std::max(last, clock);
        }
        advance();
      }
    }
    for (int d = 0; d < devices; ++d)
      sim.next[d] = fullPosition(d);
    sim.rounds.push_back(sim.next);
  }
  return sim;
}

} // namespace

SimulatedTime simulateTime(const Plan &plan, int64_t steps,
                           const InstructionTime &cost) {
  // With the drain, as the runtime runs it: a receive at the end of step t
  // may wait for a send the peer makes in step t + 1 (a tied weight's new
  // value), which for the last step is in the drain.
  // Replicas that run alike go through the same times: the first alone.
  int P = alikeReplicaDevices(plan);
  SpelledPlan spelled(plan, [P](int d) { return P == 0 || d < P; });
  SpelledStreams streams{spelled, P, P > 0 ? plan.devices_size() / P : 1};
  Simulation sim = simulate(streams, steps, /*drain=*/true, &cost);
  SimulatedTime result;
  for (int d = 0; d < streams.devices(); ++d) {
    if (sim.next[d] < steps * spelled.size(d)) {
      result.status = SimulatedTime::Status::WouldHang;
      return result;
    }
    // The end of step `steps - 1`, the drain left out.
    if (static_cast<int64_t>(sim.passEnds[d].size()) >= steps)
      result.end = std::max(result.end, sim.passEnds[d][steps - 1]);
  }
  if (sim.unknownCost)
    result.status = SimulatedTime::Status::UnknownCost;
  return result;
}

namespace {

template <typename InstructionAt>
void visitRelaysAfterTraining(
    int size, InstructionAt at, int64_t steps, int64_t origin,
    const std::function<void(int index, int64_t step)> &visit) {
  for (int i = 0; i < size; ++i) {
    const Instruction &instruction = at(i);
    if (instruction.op() != "chain_relay")
      continue;
    int64_t offset = instruction.min_step();
    for (int64_t t = std::max(steps, origin + offset); t < steps + offset; ++t)
      visit(i, t);
  }
}

} // namespace

void forEachRelayAfterTraining(
    const Device &device, int64_t steps, int64_t origin,
    const std::function<void(int index, int64_t step)> &visit) {
  visitRelaysAfterTraining(
      device.instructions_size(),
      [&](int i) -> const Instruction & { return device.instructions(i); },
      steps, origin, visit);
}

void forEachRelayAfterTraining(
    const SpelledPlan &spelled, int device, int64_t steps,
    const std::function<void(int index, int64_t step)> &visit) {
  visitRelaysAfterTraining(
      spelled.size(device),
      [&](int i) -> const Instruction & { return *spelled.at(device, i); },
      steps, 0, visit);
}

namespace {

/// The deadlock check's simulation of `streams` and, where a device stops
/// short, which instruction each stuck device waits at and the rounds.
template <typename Streams> std::string deadlockReport(const Streams &streams) {
  Simulation sim = simulate(streams, kSteps, /*drain=*/true, nullptr,
                            /*reductions=*/true);
  const std::vector<int> &next = sim.next;
  const std::vector<std::vector<int>> &rounds = sim.rounds;
  int devices = streams.devices();
  std::ostringstream os;
  bool stuck = false;
  for (int d = 0; d < devices; ++d) {
    int size = streams.size(d);
    if (next[d] >= (kSteps + 1) * size)
      continue;
    if (!stuck)
      os << "the plan would hang: no device can move after round "
         << rounds.size() - 1
         << " (sends buffered, receives blocking); stuck:\n";
    stuck = true;
    os << "  device " << d << " at instruction " << next[d] % size;
    if (next[d] >= size)
      os << (next[d] / size == kSteps
                 ? std::string(" of the drain")
                 : " of step " + std::to_string(next[d] / size));
    os << ": " << describe(streams.described(d, next[d] % size), next[d] / size)
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

/// The first message attribute of `instructions` (device or template
/// `owner`) outside the tags' bounds, described; empty where none is.
template <typename Instructions>
std::string messageFieldOutOfBounds(const Instructions &instructions,
                                    const std::string &owner) {
  struct Bound {
    const char *op, *name;
    int64_t least;
  };
  static const Bound bounds[] = {{"send", "micro_batch", -kMostTagField},
                                 {"send", "micro_batches", 1},
                                 {"send", "step_offset", -kMostTagField},
                                 {"recv", "micro_batch", -kMostTagField},
                                 {"recv", "micro_batches", 1},
                                 {"recv", "step_offset", -kMostTagField},
                                 {"chain_relay", "step_offset", -kMostTagField},
                                 {"chain_wait", "delay", 0},
                                 {"reduce_wait", "delay", 0}};
  for (const Instruction &instruction : instructions)
    for (const Bound &bound : bounds) {
      if (instruction.op() != bound.op)
        continue;
      for (const Attribute &a : instruction.attributes())
        if (a.name() == bound.name && a.has_i() &&
            (a.i() < bound.least || a.i() > kMostTagField))
          return instruction.op() + " at '" + instruction.location() + "' of " +
                 owner + " has " + bound.name + " " + std::to_string(a.i()) +
                 ", outside " + std::to_string(bound.least) + " to " +
                 std::to_string(kMostTagField) + " (a damaged plan?)";
    }
  return "";
}

std::string messageFieldsOutOfBounds(const Plan &plan) {
  for (int d = 0; d < plan.devices_size(); ++d)
    if (std::string error = messageFieldOutOfBounds(
            plan.devices(d).instructions(), "device " + std::to_string(d));
        !error.empty())
      return error;
  for (int t = 0; t < plan.templates_size(); ++t)
    if (std::string error = messageFieldOutOfBounds(
            plan.templates(t).instructions(), "template " + std::to_string(t));
        !error.empty())
      return error;
  return "";
}

} // namespace

std::string findSendRecvDeadlock(const Plan &plan) {
  if (std::string error = messageFieldsOutOfBounds(plan); !error.empty())
    return error;
  if (!hasRuns(plan))
    return deadlockReport(PlainStreams{plan});
  // The runs read in place, the instructions that may block alone
  // (messages, reductions, collectives): a stuck device's position counts
  // those.
  if (std::string error = checkRuns(plan); !error.empty())
    return error;
  // Replicas that run alike meet the same messages at the same places: the
  // first alone hangs where any would (a replica collective met by its one
  // device), as in simulateTime.
  int P = alikeReplicaDevices(plan);
  SpelledPlan spelled(
      plan, [P](int d) { return P == 0 || d < P; },
      [](const Instruction &instruction) {
        std::string_view op = instruction.op();
        return op == "send" || op == "recv" || op == "reduce_start" ||
               op == "reduce_wait" || op == "chain_reduce" ||
               op == "chain_relay" || op == "chain_wait" ||
               op == "shard_reduce" || op == "shard_update" ||
               op == "shard_gather" || op == "sparse_gather" ||
               op == "replica_sum";
      });
  return deadlockReport(
      SpelledStreams{spelled, P, P > 0 ? plan.devices_size() / P : 1});
}

std::string deadlockLine(const std::string &description) {
  std::istringstream lines(description);
  std::string line, text;
  std::getline(lines, line);
  text = line.substr(0, line.find(';'));
  while (std::getline(lines, line) && line.rfind("  device ", 0) == 0)
    text += "; " + line.substr(2);
  return text;
}

namespace {

/// The sends of the run, to find the one a receive waits for.
class SendIndex {
public:
  explicit SendIndex(const Plan &plan) : plan(plan) {
    for (int d = 0; d < plan.devices_size(); ++d)
      for (int i = 0; i < plan.devices(d).instructions_size(); ++i) {
        const Instruction &instruction = plan.devices(d).instructions(i);
        if (instruction.op() == "send") {
          Message m = messageOf(instruction);
          sends[{d, m.peer, m.value}].push_back({i, m});
        }
      }
  }
  /// The send a recv of device `to` in `step` waits for: (index, step), or
  /// index -1 when none matches.
  std::pair<int, int64_t> senderOf(int to, const Message &recv,
                                   int64_t step) const {
    auto it = sends.find({static_cast<int>(recv.peer), to, recv.value});
    if (it == sends.end())
      return {-1, 0};
    int64_t wanted = recv.overRun(step);
    const Device &device = plan.devices(static_cast<int>(recv.peer));
    for (const auto &[index, send] : it->second) {
      int64_t rest = wanted - send.microBatch;
      if (rest % send.perStep != 0)
        continue;
      int64_t sendStep = rest / send.perStep - send.stepOffset;
      if (sendStep >= device.instructions(index).min_step())
        return {index, sendStep};
    }
    return {-1, 0};
  }

private:
  const Plan &plan;
  std::map<std::tuple<int, int64_t, int64_t>,
           std::vector<std::pair<int, Message>>>
      sends;
};

} // namespace

std::vector<int> checkpointCut(const Plan &plan, int64_t next,
                               std::string &error) {
  SendIndex index(plan);
  int devices = plan.devices_size();
  int64_t last = next - 1; // the step the cut falls in
  std::vector<int> cut(devices);
  for (int d = 0; d < devices; ++d)
    cut[d] = plan.devices(d).instructions_size();
  // Whether device e's recv (instruction i of `step`) would wait across the
  // cut; if so, e stops before it. False when that needs an earlier step.
  auto cutBefore = [&](int e, int i, int64_t step) {
    const Instruction &recv = plan.devices(e).instructions(i);
    Message m = messageOf(recv);
    auto [send, sendStep] = index.senderOf(e, m, step);
    bool acrossCut = send >= 0 && (sendStep > last ||
                                   (sendStep == last && send >= cut[m.peer]));
    if (!acrossCut)
      return true;
    if (step < last) {
      error = "a checkpoint before step " + std::to_string(next) +
              " would need device " + std::to_string(e) + " to stop in step " +
              std::to_string(step) + "; choose another --checkpoint-every";
      return false;
    }
    cut[e] = std::min(cut[e], i);
    return true;
  };
  // To a fixpoint: every receive run before the cut finds its send before
  // it (receives of a few earlier steps may wait for sends of step `last`).
  for (std::vector<int> before; before != cut;) {
    before = cut;
    for (int e = 0; e < devices; ++e) {
      const Device &device = plan.devices(e);
      for (int64_t step = std::max<int64_t>(last - kSteps, 0); step <= last;
           ++step) {
        int end = step < last ? device.instructions_size() : cut[e];
        for (int i = 0; i < end; ++i) {
          const Instruction &instruction = device.instructions(i);
          if (instruction.op() == "recv" && instruction.min_step() <= step &&
              !cutBefore(e, i, step))
            return {};
        }
      }
    }
  }
  return cut;
}

} // namespace cdp::plan
