//===- NcclBootstrap.cpp - an mpirun job's agreement on NCCL --------------===//

#include "cdp/Runtime/NcclBootstrap.h"

#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Kernel.h"

#include <algorithm>
#include <map>
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

} // namespace cdp::runtime
