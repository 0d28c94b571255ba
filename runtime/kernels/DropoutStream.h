//===- DropoutStream.h - dropout's counter-based random stream --*- C++ -*-===//
//
// Every backend draws Dropout masks from this one definition, so that a
// mask depends on (seed, step, micro-batch, node, element) only and the CPU
// and GPU backends draw the same bits.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_DROPOUTSTREAM_H
#define CDP_RUNTIME_KERNELS_DROPOUTSTREAM_H

#include "HostDevice.h"
#include "cdp/Runtime/Kernel.h"
#include "cdp/Runtime/OpTable.h"

#include <cstdint>
#include <functional>
#include <string>

namespace cdp::runtime {

/// dropout_grad's scale of a kept gradient, 1 / (1 - ratio), as the
/// forward scaled the values it kept.
inline float dropoutGradKeepScale(const KernelArgs &args) {
  return 1.0f / (1.0f - static_cast<float>(
                            ops::DropoutGradAttributes::read(args).ratio));
}

/// A uniform number in [0, 1) from the step's seed, the instruction's
/// stream and the element's index.
CDP_HOST_DEVICE inline float dropoutUniform(uint64_t seed, uint64_t stream,
                                            uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull ^ stream * 0xD1B54A32D192ED03ull ^
               (index + 1) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

/// What a Dropout instruction fixes at load: its stream (the `seed`
/// attribute and its node) and the micro-batch of the step it belongs to.
struct DropoutStream {
  explicit DropoutStream(const KernelArgs &args)
      : stream(static_cast<uint64_t>(args.i("seed", 0)) ^
               std::hash<std::string>()(args.instruction->location())),
        // A pipeline stage names the micro-batch (its device runs several);
        // otherwise it is the step's slot.
        microBatch(args.i("step_micro_batch", -1)) {}

  /// The seed of the step `context` runs.
  uint64_t seedOf(const StepContext &context) const {
    return context.seed ^ (static_cast<uint64_t>(context.step) << 20) ^
           static_cast<uint64_t>(microBatch >= 0 ? microBatch : context.slot);
  }

  uint64_t stream;
  int64_t microBatch;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_DROPOUTSTREAM_H
