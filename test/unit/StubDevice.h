//===- StubDevice.h - a GPU-like device nobody reads ------------*- C++ -*-===//
//
// The Device seam's memory calls as no-ops, for tests of what a GPU device
// does beside its memory (its link, its recordings): the host may not
// touch such a device's memory, and these tests never do.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_TEST_UNIT_STUBDEVICE_H
#define CDP_TEST_UNIT_STUBDEVICE_H

#include "cdp/Runtime/Device.h"

namespace cdp::test {

class StubGpuDevice : public runtime::Device {
public:
  runtime::Backend backend() const override { return runtime::Backend::CUDA; }
  runtime::MemorySpace space() const override {
    return runtime::MemorySpace::Device;
  }
  void *allocate(size_t) override { return nullptr; }
  void release(void *) override {}
  void download(void *, const void *, size_t) override {}
  void upload(void *, const void *, size_t) override {}
  void fill(void *, unsigned char, size_t) override {}
};

} // namespace cdp::test

#endif // CDP_TEST_UNIT_STUBDEVICE_H
