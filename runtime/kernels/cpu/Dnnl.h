//===- Dnnl.h - what every oneDNN kernel shares -----------------*- C++ -*-===//
//
// One CPU engine, and scratchpads the primitives own. cdp-run creates every
// kernel on the thread that loads the plan and runs a device's stream on a
// thread of its own; oneDNN's default (library) scratchpad belongs to the
// thread that created the primitive and is null on any other, so a
// primitive that needs one (a grouped convolution) would write through null
// on a device thread. Primitives are therefore created in user scratchpad
// mode, each with its scratchpad bound at load in the kernel's scratch
// (KernelScratch: the device's block, which its kernels share), as are the
// buffers a primitive's own layouts need.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_CPU_DNNL_H
#define CDP_RUNTIME_KERNELS_CPU_DNNL_H

#include "CpuKernels.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <unordered_map>

namespace cdp::runtime::cpu {

inline dnnl::engine &engine() {
  static dnnl::engine instance(dnnl::engine::kind::cpu, 0);
  return instance;
}

/// Attributes for every primitive descriptor: the scratchpad is ours.
inline const dnnl::primitive_attr &ownScratchpad() {
  static const dnnl::primitive_attr attributes = [] {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return a;
  }();
  return attributes;
}

/// What a kernel's oneDNN buffers lie in where the kernel holds them itself
/// (made without a device: KernelScratch).
using HeldBuffers = std::vector<std::shared_ptr<void>>;

/// oneDNN memory of `desc` for values that live only while the kernel runs
/// (a primitive's scratchpad, a tensor reordered into the primitive's
/// layout and back): in the kernel's scratch, which the device's kernels
/// share.
inline dnnl::memory scratchMemory(const dnnl::memory::desc &desc,
                                  KernelScratch &scratch, HeldBuffers &held) {
  held.push_back(scratch.take(desc.get_size()));
  return dnnl::memory(desc, engine(), held.back().get());
}

/// Adds the scratchpad `primitive` needs (if any) to its arguments, in the
/// kernel's scratch.
inline void bindScratchpad(const dnnl::primitive &primitive,
                           std::unordered_map<int, dnnl::memory> &arguments,
                           KernelScratch &scratch, HeldBuffers &held) {
  const dnnl_memory_desc_t *desc = dnnl_primitive_desc_query_md(
      primitive.get_primitive_desc(), dnnl_query_scratchpad_md, 0);
  if (!desc)
    return;
  dnnl::memory::desc scratchpad(*desc);
  if (scratchpad.get_size() != 0)
    arguments[DNNL_ARG_SCRATCHPAD] = scratchMemory(scratchpad, scratch, held);
}

/// A oneDNN kernel: its buffers (scratchpads, tensors in a primitive's own
/// layout) lie in its scratch, and what it holds of its own there (made
/// without a device) is its workspace.
class DnnlKernel : public Kernel {
public:
  explicit DnnlKernel(const KernelArgs &args) : scratch(args) {}
  int64_t workspaceBytes() const override { return scratch.ownBytes(); }

protected:
  dnnl::memory scratchMemory(const dnnl::memory::desc &desc) {
    return cpu::scratchMemory(desc, scratch, held);
  }
  void bindScratchpad(const dnnl::primitive &primitive,
                      std::unordered_map<int, dnnl::memory> &arguments) {
    cpu::bindScratchpad(primitive, arguments, scratch, held);
  }

  KernelScratch scratch;
  HeldBuffers held;
};

} // namespace cdp::runtime::cpu

#endif // CDP_RUNTIME_KERNELS_CPU_DNNL_H
