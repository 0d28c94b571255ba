//===- Strategy.cpp - the registry of strategies --------------------------===//

#include "cdp/Schedule/Strategy.h"

#include "strategies/Descriptors.h"

#include <algorithm>
#include <cmath>

namespace cdp {

namespace {

constexpr const StrategyTraits *kStrategies[] = {
#define CDP_STRATEGY(Id) &k##Id##Strategy,
#include "cdp/Schedule/Strategies.def"
};

std::string joinNames(const std::vector<const char *> &names,
                      const char *last) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += std::string(i == 0                  ? ""
                        : i + 1 == names.size() ? last
                                                : ", ") +
            names[i];
  return text;
}

} // namespace

const std::vector<const StrategyTraits *> &allStrategies() {
  static const std::vector<const StrategyTraits *> all(std::begin(kStrategies),
                                                       std::end(kStrategies));
  return all;
}

std::optional<Strategy> parseStrategy(std::string_view name) {
  for (const StrategyTraits *traits : kStrategies)
    if (name == traits->name)
      return traits->strategy;
  return std::nullopt;
}

const StrategyTraits &traitsOf(Strategy strategy) {
  return *kStrategies[static_cast<int>(strategy)];
}

PlanForm planForm(Strategy strategy) {
  const StrategyTraits &traits = traitsOf(strategy);
  return traits.pipelined      ? PlanForm::Pipeline
         : traits.dataParallel ? PlanForm::Replicated
                               : PlanForm::Single;
}

bool buildsZero(Strategy strategy, int64_t zero) {
  return zero >= 1 && zero <= 3 && (traitsOf(strategy).zeroStages >> zero & 1);
}

const char *strategyName(Strategy strategy) { return traitsOf(strategy).name; }

std::string strategyNames(bool (*which)(const StrategyTraits &),
                          const char *last) {
  std::vector<const char *> names;
  for (const StrategyTraits *traits : kStrategies)
    if (!which || which(*traits))
      names.push_back(traits->name);
  return joinNames(names, last);
}

int64_t stagesPerDevice(Strategy strategy, int64_t requested) {
  const StrategyTraits &traits = traitsOf(strategy);
  return traits.stagesPerDevice == 0 ? requested : traits.stagesPerDevice;
}

namespace {

bool matches(StrategyScope scope, const StrategyTraits &traits) {
  switch (scope) {
  case StrategyScope::Replicated:
    return traits.dataParallel;
  case StrategyScope::OrderedPipeline:
    return traits.ordersStages;
  case StrategyScope::OneStagePerDevice:
    return traits.pipelined && traits.stagesPerDevice == 1;
  case StrategyScope::Pipeline:
    return traits.pipelined;
  case StrategyScope::Replicable:
    return traits.replicable;
  case StrategyScope::LossScaled:
    return traits.oneDevice || (traits.pipelined && !traits.cyclic) ||
           (traits.dataParallel && !traits.sparseExchange);
  }
  return false;
}

} // namespace

bool inScope(StrategyScope scope, Strategy strategy) {
  return matches(scope, traitsOf(strategy));
}

std::string scopeNames(StrategyScope scope, const char *last) {
  std::vector<const char *> names;
  for (const StrategyTraits *traits : kStrategies)
    if (matches(scope, *traits))
      names.push_back(traits->name);
  return joinNames(names, last);
}

int weightVersions(Strategy strategy) {
  return traitsOf(strategy).weightVersions;
}

bool runsCyclicSlots(Strategy strategy) { return traitsOf(strategy).cyclic; }

bool buildsReplicaZero(Strategy strategy, int64_t zero) {
  return zero == 0 || (zero == 1 && !traitsOf(strategy).cyclic);
}

bool exchangesSparseGradients(Strategy strategy) {
  return traitsOf(strategy).sparseExchange;
}

std::string checkPipelineShape(Strategy strategy, int64_t S, int64_t M,
                               int64_t V) {
  const StrategyTraits &traits = traitsOf(strategy);
  return traits.checkShape ? traits.checkShape(S, M, V) : std::string();
}

int64_t stashSlots(Strategy strategy, int64_t s, int64_t d, int64_t m) {
  const StrategyTraits &traits = traitsOf(strategy);
  return traits.stash ? traits.stash(s, d, m) : 1;
}

int64_t sparseCount(int64_t elements, double density, int64_t denseBelow) {
  if (elements < denseBelow)
    return elements;
  auto k =
      static_cast<int64_t>(std::ceil(density * static_cast<double>(elements)));
  return std::min(elements, std::max<int64_t>(1, k));
}

} // namespace cdp
