//===- Interleaved1F1B.cpp - interleaved-1f1b: V stages a device ----------===//
//
// Narayanan et al., 2021 (Megatron-LM): D devices each run V stages, stage
// s on device (s - 1) mod D, flushed every step.
//
//===----------------------------------------------------------------------===//

#include "Descriptors.h"

#include "../Dependencies.h"

#include <algorithm>

namespace cdp {

namespace pipeline {

ScheduleTable interleavedTable(int64_t D, int64_t V, int64_t M) {
  int64_t S = D * V, total = V * M;
  ScheduleTable table(S, D, M, WeightRule::Synchronous);
  for (int64_t s = 1; s <= S; ++s)
    table.deviceOf[s - 1] = (s - 1) % D;
  // Megatron-LM's order: forwards go through the device's stages D
  // micro-batches at a time, backwards in reverse stage order; the warm-up
  // fills the pipeline of all V·D stages before 1F1B's alternation.
  std::vector<std::vector<Action>> orders(D);
  for (int64_t d = 0; d < D; ++d) {
    auto work = [&](int64_t i, bool forward) {
      int64_t chunk = (i / D) % V;
      if (!forward)
        chunk = V - 1 - chunk;
      int64_t k = (i / (D * V)) * D + i % D;
      return Action{chunk * D + d + 1,
                    forward ? ActionKind::Forward : ActionKind::Backward, k};
    };
    int64_t warmup = std::min((D - d - 1) * 2 + (V - 1) * D, total);
    int64_t f = 0, b = 0;
    for (; f < warmup; ++f)
      orders[d].push_back(work(f, true));
    for (; b < total; ++b) {
      if (f < total)
        orders[d].push_back(work(f++, true));
      orders[d].push_back(work(b, false));
    }
    for (int64_t chunk = 0; chunk < V; ++chunk)
      orders[d].push_back({chunk * D + d + 1, ActionKind::Update, 0});
  }
  return timeOrders(table, orders);
}

} // namespace pipeline

namespace {

pipeline::ScheduleTable interleavedTableOf(int64_t S, int64_t M, int64_t V) {
  return pipeline::interleavedTable(S / V, V, M);
}

/// The devices of one replica, S / V, must divide the micro-batches:
/// Megatron-LM's order goes through the devices' stages a round of S / V
/// micro-batches at a time.
std::string interleavedShape(int64_t S, int64_t M, int64_t V) {
  if (S % V != 0)
    return "--strategy interleaved-1f1b: --stages " + std::to_string(S) +
           " is not a multiple of --stages-per-device " + std::to_string(V);
  if (M % (S / V) != 0)
    return "--strategy interleaved-1f1b: --micro-batches " + std::to_string(M) +
           " is not a multiple of the " + std::to_string(S / V) +
           " devices (stages / stages per device)";
  return "";
}

} // namespace

constexpr StrategyTraits kInterleaved1F1BStrategy = [] {
  StrategyTraits traits;
  traits.strategy = Strategy::Interleaved1F1B;
  traits.name = "interleaved-1f1b";
  traits.help = "each device runs --stages-per-device stages";
  traits.passPipeline = "cdp-interleaved-1f1b";
  traits.summary = "Interleaved 1F1B: each device runs several stages, "
                   "flushed every step";
  traits.pipelined = true;
  traits.flushes = true;
  traits.replicable = true;
  traits.stagesPerDevice = 0;
  traits.table = interleavedTableOf;
  traits.checkShape = interleavedShape;
  return traits;
}();

} // namespace cdp
