//===- NcclBootstrap.cpp - an mpirun job's agreement on NCCL --------------===//

#include "cdp/Runtime/NcclBootstrap.h"

#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Bytes.h"
#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Kernel.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace cdp::runtime {

std::string whyNotNccl(std::vector<GpuPlace> places) {
  std::sort(
      places.begin(), places.end(),
      [](const GpuPlace &a, const GpuPlace &b) { return a.device < b.device; });
  std::map<std::pair<std::string, int>, int> first;
  for (const GpuPlace &p : places)
    if (p.gpu < 0)
      return "device " + std::to_string(p.device) + " sees no GPU on " + p.host;
  for (const GpuPlace &p : places) {
    auto [at, fresh] = first.insert({{p.host, p.gpu}, p.device});
    if (!fresh)
      return "devices " + std::to_string(at->second) + " and " +
             std::to_string(p.device) + " share GPU " + std::to_string(p.gpu) +
             " of " + p.host;
  }
  return "";
}

namespace {

/// A process's places as lines "device host gpu" (host names hold no
/// blanks), and back.
std::string describe(const std::vector<GpuPlace> &places) {
  std::string lines;
  for (const GpuPlace &p : places)
    lines += std::to_string(p.device) + " " + p.host + " " +
             std::to_string(p.gpu) + "\n";
  return lines;
}

std::vector<GpuPlace> parse(const std::vector<std::string> &processes) {
  std::vector<GpuPlace> places;
  for (const std::string &lines : processes) {
    std::istringstream in(lines);
    GpuPlace p;
    while (in >> p.device >> p.host >> p.gpu)
      places.push_back(p);
  }
  return places;
}

} // namespace

std::string agreeOnNcclId(Fabric &fabric, const std::vector<GpuPlace> &mine,
                          const std::function<std::string()> &makeId,
                          std::string &why) {
  std::vector<std::string> all = fabric.gatherOntoRoot(describe(mine));
  std::string verdict;
  if (fabric.isRoot()) {
    std::vector<GpuPlace> places = parse(all);
    std::string shared = whyNotNccl(places);
    if (shared.empty() && static_cast<int>(places.size()) != fabric.size())
      shared = std::to_string(places.size()) + " of the run's " +
               std::to_string(fabric.size()) + " devices have a GPU";
    verdict = shared.empty() ? "1" + makeId() : "0" + shared;
  }
  verdict = fabric.shareFromRoot(verdict);
  if (verdict.empty())
    throw RuntimeError("the processes' agreement on NCCL came back empty");
  if (verdict[0] == '1')
    return verdict.substr(1);
  why = verdict.substr(1);
  return "";
}

namespace {

/// The devices an instruction of device `from` (of `devices`) sends
/// messages to: a send's peer; ZeRO's reduce-scatters and all-gathers (a
/// stage 1 or 2 update gathers its shard) and laysa's gather of the
/// selections every other device; a replica_sum and a replica_shard_update
/// (its updated shard) its stage's other replicas; cdp's chain passes its
/// partial sum to the next slot and the last slot its mean to the stage's owner
/// (CDP-ZeRO) or back to the slot before, which each relay passes on.
std::vector<int64_t> messageTargets(const plan::Instruction &instruction,
                                    int from, int devices) {
  const std::string &op = instruction.op();
  if (op == "send")
    return {plan::intAttribute(instruction, "peer", 0)};
  bool gathers =
      op == "shard_reduce" || op == "shard_gather" || op == "sparse_gather" ||
      (op == "shard_update" && plan::intAttribute(instruction, "zero", 1) != 3);
  if (gathers) { // ZeRO's and laysa's collectives: to every other device
    std::vector<int64_t> others;
    for (int d = 0; d < devices; ++d)
      if (d != from)
        others.push_back(d);
    return others;
  }
  if (op == "chain_relay")
    return {from - 1};
  // A pipeline stage's gradient, or its updated shard, to its replicas.
  if (op == "replica_sum" || op == "replica_shard_update") {
    std::vector<int64_t> peers;
    for (const plan::Attribute &a : instruction.attributes())
      if (a.name() == "peers")
        for (int64_t peer : a.ints().values())
          if (peer != from)
            peers.push_back(peer);
    return peers;
  }
  if (op != "chain_reduce")
    return {};
  if (from + 1 < devices)
    return {from + 1};
  int64_t owner = plan::intAttribute(instruction, "owner", -1);
  return {owner >= 0 ? owner : from - 1};
}

} // namespace

std::vector<std::pair<int, int>> crossProcessSends(const plan::Plan &plan,
                                                   const Fabric &fabric) {
  std::set<std::pair<int, int>> pairs;
  auto collect = [&](int from, const auto &instructions) {
    for (const plan::Instruction &instruction : instructions)
      for (int64_t to : messageTargets(instruction, from, fabric.size()))
        if (to >= 0 && to < fabric.size() &&
            fabric.processOf(from) != fabric.processOf(static_cast<int>(to)))
          pairs.insert({from, static_cast<int>(to)});
  };
  for (int d = 0; d < plan.devices_size(); ++d) {
    collect(d, plan.devices(d).instructions());
    collect(d, plan.devices(d).eval_instructions());
  }
  return {pairs.begin(), pairs.end()};
}

namespace {

/// Why NCCL cannot join the pair's two devices (empty where it can).
std::string whyNotRoute(const std::vector<GpuPlace> &places, int from, int to) {
  std::vector<GpuPlace> ends;
  for (int device : {from, to}) {
    auto at =
        std::find_if(places.begin(), places.end(),
                     [&](const GpuPlace &p) { return p.device == device; });
    if (at == places.end())
      return "device " + std::to_string(device) + " has no GPU";
    ends.push_back(*at);
  }
  return whyNotNccl(ends);
}

} // namespace

std::vector<RouteAgreement>
agreeOnRoutes(Fabric &fabric, const std::vector<GpuPlace> &mine,
              const std::vector<std::pair<int, int>> &pairs,
              const std::function<std::string()> &makeId) {
  std::vector<std::string> all = fabric.gatherOntoRoot(describe(mine));
  ByteWriter out;
  if (fabric.isRoot()) {
    std::vector<GpuPlace> places = parse(all);
    for (auto [from, to] : pairs) {
      std::string why = whyNotRoute(places, from, to);
      out.putString(why.empty() ? makeId() : "");
      out.putString(why);
    }
  }
  std::string shared = fabric.shareFromRoot(out.bytes());
  ByteReader in(shared, "the processes' agreement on NCCL routes");
  std::vector<RouteAgreement> routes;
  for (auto [from, to] : pairs) {
    RouteAgreement route{from, to, in.getString(), ""};
    route.why = in.getString();
    routes.push_back(std::move(route));
  }
  if (!in.atEnd())
    in.fail();
  return routes;
}

} // namespace cdp::runtime
