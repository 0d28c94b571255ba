//===- ZeroBubbleV.cpp - zb-v: zero-bubble V schedule ---------------------===//
//
// Qi et al., 2024 (ZB-V), in the order of PyTorch's ScheduleZBVZeroBubble:
// D devices each run two stages placed in a V, device d stages d + 1 and
// 2D - d, so that the first and the last stage share device 0 and the
// middle two device D - 1. Backwards are split into their input (I) and
// weight (W) gradients and the Ws fill the bubbles. Synchronous: every
// micro-batch reads the step's weights, the updates end the step.
//
//===----------------------------------------------------------------------===//

#include "Descriptors.h"

#include "../Dependencies.h"

namespace cdp {

namespace {

using pipeline::Action;
using pipeline::ActionKind;
using pipeline::ScheduleTable;

/// Device d's order as PyTorch builds it (stages 0-based there, 1-based
/// here), for at least 2D - 1 micro-batches; the ones past M are dropped.
std::vector<Action> zbvOrder(int64_t d, int64_t D, int64_t M) {
  int64_t n = std::max(2 * D - 1, M);
  int64_t down = d + 1, up = 2 * D - d; // the V's two arms
  int64_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  std::vector<Action> order;
  auto add = [&](int64_t stage, ActionKind kind, int64_t k) {
    if (k < M)
      order.push_back({stage, kind, k});
  };
  for (int64_t i = 0; i < 2 * (D - d) - 1; ++i)
    add(down, ActionKind::Forward, f0++);
  for (int64_t i = 0; i < d; ++i) {
    add(up, ActionKind::Forward, f1++);
    add(down, ActionKind::Forward, f0++);
  }
  for (int64_t i = 0; i < D - d; ++i) {
    add(up, ActionKind::Forward, f1++);
    add(up, ActionKind::InputGrad, b1);
    add(up, ActionKind::WeightGrad, b1++);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n)
      add(down, ActionKind::Forward, f0++);
    add(down, ActionKind::InputGrad, b0);
    add(down, ActionKind::WeightGrad, b0++);
    add(up, ActionKind::Forward, f1++);
    add(up, ActionKind::InputGrad, b1);
    add(up, ActionKind::WeightGrad, b1++);
  }
  int64_t w0 = b0, w1 = b1;
  for (int64_t i = 0; i < d; ++i) {
    add(down, ActionKind::InputGrad, b0++);
    add(up, ActionKind::InputGrad, b1++);
  }
  for (int64_t i = 0; i < D - d; ++i) {
    add(down, ActionKind::InputGrad, b0++);
    add(down, ActionKind::WeightGrad, w0++);
  }
  while (w1 < b1)
    add(up, ActionKind::WeightGrad, w1++);
  while (w0 < b0)
    add(down, ActionKind::WeightGrad, w0++);
  order.push_back({down, ActionKind::Update, 0});
  order.push_back({up, ActionKind::Update, 0});
  return order;
}

ScheduleTable zbvTable(int64_t S, int64_t M, int64_t) {
  int64_t D = S / 2;
  ScheduleTable table(S, D, M, pipeline::WeightRule::Synchronous);
  std::vector<std::vector<Action>> orders;
  for (int64_t d = 0; d < D; ++d) {
    table.deviceOf[d] = table.deviceOf[S - 1 - d] = d;
    orders.push_back(zbvOrder(d, D, M));
  }
  return pipeline::timeOrders(table, orders);
}

std::string zbvShape(int64_t S, int64_t, int64_t) {
  if (S % 2 == 0)
    return "";
  return "--strategy zb-v places two stages on each device: --stages " +
         std::to_string(S) + " is odd";
}

} // namespace

constexpr StrategyTraits kZBVStrategy = [] {
  StrategyTraits traits;
  traits.strategy = Strategy::ZBV;
  traits.name = "zb-v";
  traits.help = "zero-bubble V: two stages per device in a V, backwards "
                "split";
  traits.passPipeline = "cdp-zb-v";
  traits.summary = "Zero-bubble ZB-V: two stages per device placed in a V, "
                   "backwards split into input and weight gradients";
  traits.pipelined = true;
  traits.flushes = true;
  traits.replicable = true;
  traits.stagesPerDevice = 2;
  traits.table = zbvTable;
  traits.checkShape = zbvShape;
  return traits;
}();

} // namespace cdp
