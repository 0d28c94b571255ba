//===- CostModel.h - predicted step times of a plan -------------*- C++ -*-===//
//
// Per-instruction costs, measured (a cdp-run --profile file) or analytic
// (the hardware model), and the step time they predict for a plan's
// streams. cdp-compile's --report and --plan auto read them.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_COSTMODEL_H
#define CDP_PLAN_COSTMODEL_H

#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/plan.pb.h"

#include <functional>
#include <string>

namespace cdp {

/// Milliseconds of one instruction, or negative when unknown.
using InstructionCost =
    std::function<double(const plan::Plan &, const plan::Instruction &)>;

/// The hardware model (cdp-compile --hw FILE.json): per device FLOP/s,
/// memory and memory bandwidth, and the link's bandwidth and latency.
struct Hardware {
  double flopsPerSecond = 5e10;          ///< one CPU core with AVX-512
  double memoryBytes = 16.0 * (1 << 30); ///< the cap for --plan auto
  double memoryBandwidth = 2e10;         ///< bytes/s
  double linkBandwidth = 1e10;           ///< bytes/s between devices
  double linkLatency = 5e-6;             ///< seconds per message
};

/// Reads a hardware model from JSON text (keys flops_per_s, memory_bytes,
/// memory_bandwidth_bytes_per_s, link_bandwidth_bytes_per_s,
/// link_latency_s; absent keys keep their defaults). On failure returns
/// false and says why in `error`.
bool parseHardware(const std::string &text, Hardware &hw, std::string &error);

/// Analytic costs: an instruction takes its floating-point work at the
/// device's FLOP/s or its bytes at the memory bandwidth, whichever is
/// longer (products: 2 x output elements x the reduced dimension;
/// everything else one operation per output element); a send takes the
/// link's latency plus its bytes at the link's bandwidth; a replica_sum
/// over R replicas R - 1 of those and R - 1 additions (3 x the gradient's
/// bytes at the memory bandwidth each).
InstructionCost hardwareCost(const Hardware &hw);

/// Measured costs from a cdp-run --profile file, by ONNX node and kernel
/// (unknown instructions cost -1). On failure returns an empty function
/// and says why in `error`.
InstructionCost profileCost(const std::string &path, std::string &error);

/// A plan's step time predicted from per-instruction costs: every device's
/// instructions run in order over `steps` steps, a recv starting no earlier
/// than the end of its send, and the time the last device ends is divided
/// by the steps. A profile of one device has no messages, loads,
/// accumulations, version copies or replica sums: those are free when
/// their cost is unknown. `end` holds milliseconds per step.
plan::SimulatedTime predictStepMs(const plan::Plan &plan,
                                  const InstructionCost &cost, int64_t steps);

} // namespace cdp

#endif // CDP_PLAN_COSTMODEL_H
