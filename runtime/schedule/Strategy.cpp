//===- Strategy.cpp - the parallel strategies and their traits ------------===//

#include "cdp/Schedule/Strategy.h"

#include "cdp/Schedule/Pipeline.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace cdp {

namespace {

// clang-format off
constexpr StrategyTraits kTraits[] = {
//  strategy                   name                dataParallel pipelined versions flushes replicable cyclic interleaved
  {Strategy::Single,          "single",           false,       false,    1,       false,  false,     false, false},
  {Strategy::DP,              "dp",               true,        false,    1,       false,  false,     false, false},
  {Strategy::CDP,             "cdp",              true,        false,    1,       false,  false,     true,  false},
  {Strategy::GPipe,           "gpipe",            false,       true,     1,       true,   true,      false, false},
  {Strategy::OneFOneB,        "1f1b",             false,       true,     1,       true,   true,      false, false},
  {Strategy::TwoBW,           "2bw",              false,       true,     2,       false,  true,      false, false},
  {Strategy::CDPMP,           "cdp-mp",           false,       true,     2,       false,  false,     true,  false},
  {Strategy::Interleaved1F1B, "interleaved-1f1b", false,       true,     1,       true,   true,      false, true},
  {Strategy::ZBH1,            "zb-h1",            false,       true,     1,       true,   true,      false, false},
  {Strategy::LaySA,           "laysa",            true,        false,    1,       false,  false,     false, false},
};
// clang-format on

constexpr bool inEnumOrder() {
  for (size_t i = 0; i < std::size(kTraits); ++i)
    if (static_cast<size_t>(kTraits[i].strategy) != i)
      return false;
  return true;
}
static_assert(inEnumOrder(), "kTraits is indexed by Strategy");

} // namespace

std::optional<Strategy> parseStrategy(std::string_view name) {
  for (const StrategyTraits &traits : kTraits)
    if (name == traits.name)
      return traits.strategy;
  return std::nullopt;
}

const StrategyTraits &traitsOf(Strategy strategy) {
  return kTraits[static_cast<int>(strategy)];
}

std::string strategyNames() {
  std::string names;
  size_t count = std::size(kTraits);
  for (size_t i = 0; i < count; ++i)
    names += std::string(i == 0           ? ""
                         : i + 1 == count ? " and "
                                          : ", ") +
             kTraits[i].name;
  return names;
}

int64_t stashSlots(Strategy strategy, int64_t s, int64_t d, int64_t m) {
  switch (strategy) {
  case Strategy::GPipe:
    return m;
  case Strategy::OneFOneB:
    return std::min(d - s + 1, m);
  case Strategy::CDPMP: {
    // CDP's slots on the stage's devices (edge colouring): each device
    // stashes every micro-batch it runs.
    std::vector<int64_t> device = pipeline::cdpStageDevices(s, d, m);
    std::vector<int64_t> count(m, 0);
    for (int64_t c : device)
      ++count[c];
    return *std::max_element(count.begin(), count.end());
  }
  case Strategy::TwoBW: {
    // A backward may run in the next step's program: the slot of
    // micro-batch k must be k mod slots in every step.
    int64_t slots = std::min(d - s + 1, m);
    while (m % slots != 0)
      ++slots;
    return slots;
  }
  default:
    return 1;
  }
}

int64_t sparseCount(int64_t elements, double density, int64_t denseBelow) {
  if (elements < denseBelow)
    return elements;
  auto k =
      static_cast<int64_t>(std::ceil(density * static_cast<double>(elements)));
  return std::min(elements, std::max<int64_t>(1, k));
}

} // namespace cdp
