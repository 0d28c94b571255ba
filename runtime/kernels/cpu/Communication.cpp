//===- Communication.cpp - gradient reductions as instructions ------------===//
//
// `reduce_start` hands a stage's gradients to the communicator when the
// device finishes the stage's backward; `reduce_wait` fetches the mean of an
// earlier step's reduction just before the update that needs it. The step
// a wait fetches is the current one minus 1 + its version delay, so one
// instruction serves dp (delay 0) and both cdp rules.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

#include "cdp/Runtime/Communicator.h"

namespace cdp::runtime::cpu {

namespace {

/// Reductions are named by step and stage.
int64_t reductionTag(int64_t step, int64_t stage) {
  return step * 4096 + stage;
}

int64_t totalCount(const std::vector<TensorView> &views) {
  int64_t n = 0;
  for (const TensorView &v : views)
    n += v.numel();
  return n;
}

} // namespace

void registerCommunication(KernelRegistry &registry) {
  addKernel(registry, "reduce_start", [](const KernelArgs &args) {
    if (!args.communicator)
      args.fail("needs a communicator (a multi-device plan)");
    std::vector<TensorView> grads = args.inputs;
    int64_t stage = args.i("stage", 0);
    auto staging = std::make_shared<std::vector<float>>(totalCount(grads));
    Communicator *comm = args.communicator;
    int device = args.device;
    return [=](const StepContext &context) {
      float *out = staging->data();
      for (const TensorView &g : grads) {
        std::memcpy(out, g.data, g.numel() * sizeof(float));
        out += g.numel();
      }
      comm->reduceStart(device, reductionTag(context.step, stage),
                        staging->data(), staging->size());
    };
  });

  addKernel(registry, "reduce_wait", [](const KernelArgs &args) {
    if (!args.communicator)
      args.fail("needs a communicator (a multi-device plan)");
    std::vector<TensorView> reduced = args.outputs;
    int64_t stage = args.i("stage", 0), delay = args.i("delay", 0);
    auto staging = std::make_shared<std::vector<float>>(totalCount(reduced));
    Communicator *comm = args.communicator;
    int device = args.device;
    return [=](const StepContext &context) {
      int64_t step = context.step - 1 - delay;
      if (!comm->reduceWait(device, reductionTag(step, stage), staging->data(),
                            staging->size()))
        throw RuntimeError("device " + std::to_string(device) +
                           ": stopped while waiting for a reduction (another "
                           "device failed)");
      const float *in = staging->data();
      for (const TensorView &r : reduced) {
        std::memcpy(r.data, in, r.numel() * sizeof(float));
        in += r.numel();
      }
    };
  });
}

} // namespace cdp::runtime::cpu
