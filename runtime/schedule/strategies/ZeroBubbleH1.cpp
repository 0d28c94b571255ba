//===- ZeroBubbleH1.cpp - zb-h1: zero-bubble 1F1B -------------------------===//
//
// Qi et al., 2023: 1F1B's order with each backward split into its input
// gradient (I) and weight gradient (W), stage s putting off its W by s - 1
// micro-batches, so that the tail bubble shrinks to S - 1 time steps at
// 1F1B's peak stash.
//
//===----------------------------------------------------------------------===//

#include "Descriptors.h"

#include "../Dependencies.h"

#include <algorithm>

namespace cdp {

namespace pipeline {

ScheduleTable zbH1Table(int64_t S, int64_t M) {
  ScheduleTable table(S, S, M, WeightRule::Synchronous);
  std::vector<std::vector<Action>> orders(S);
  for (int64_t s = 1; s <= S; ++s) {
    table.deviceOf[s - 1] = s - 1;
    std::vector<Action> &order = orders[s - 1];
    int64_t warmup = std::min(S - s + 1, M), putOff = s - 1;
    int64_t nextF = 0, nextW = 0;
    for (; nextF < warmup; ++nextF)
      order.push_back({s, ActionKind::Forward, nextF});
    // After each I: the W put off by s - 1 micro-batches, then the next F.
    for (int64_t k = 0; k < M; ++k) {
      order.push_back({s, ActionKind::InputGrad, k});
      if (k - putOff >= 0 && nextW == k - putOff)
        order.push_back({s, ActionKind::WeightGrad, nextW++});
      if (nextF < M)
        order.push_back({s, ActionKind::Forward, nextF++});
    }
    for (; nextW < M; ++nextW)
      order.push_back({s, ActionKind::WeightGrad, nextW});
    order.push_back({s, ActionKind::Update, 0});
  }
  return timeOrders(table, orders);
}

} // namespace pipeline

namespace {

pipeline::ScheduleTable zbH1TableOf(int64_t S, int64_t M, int64_t) {
  return pipeline::zbH1Table(S, M);
}

} // namespace

constexpr StrategyTraits kZBH1Strategy = [] {
  StrategyTraits traits;
  traits.strategy = Strategy::ZBH1;
  traits.name = "zb-h1";
  traits.help = "zero-bubble 1F1B: backwards split into input and weight "
                "gradients";
  traits.passPipeline = "cdp-zb-h1";
  traits.summary = "Zero-bubble ZB-H1: 1F1B with backwards split into input "
                   "and weight gradients";
  traits.pipelined = true;
  traits.flushes = true;
  traits.replicable = true;
  traits.table = zbH1TableOf;
  return traits;
}();

} // namespace cdp
