//===- KernelScratchTest.cpp - the CPU device's shared scratch block ------===//
//
// CPU kernels keep values that live only while they run (operands widened
// from 2 bytes, a result before it is packed) in their device's scratch
// block, which a device's kernels share: the device holds the largest
// kernel's need, not the sum of all (GPT-2 small in bf16 at 8 x 512 held
// 8 GB of such buffers beside a 2.6 GB arena). Here: the block grows
// without moving; two kernels of one device share it, the device reports
// the larger need, each kernel none of its own; they compute what kernels
// with buffers of their own compute, run in any order.
//
//===----------------------------------------------------------------------===//

#include "../../runtime/kernels/NarrowFloat.h"
#include "cdp/Runtime/Device.h"
#include "cdp/Runtime/Kernel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace {

using namespace cdp;
using namespace cdp::runtime;

TEST(KernelScratch, TheCpuBlockGrowsInPlace) {
  std::unique_ptr<Device> device = createDevice(Backend::CPU, 0);
  EXPECT_EQ(device->workspaceBytes(), 0);
  char *block = static_cast<char *>(device->reserveScratch(100));
  ASSERT_NE(block, nullptr);
  std::memset(block, 7, 100);
  EXPECT_EQ(device->reserveScratch(50 << 20), block);
  block[(50 << 20) - 1] = 1; // usable to its end
  EXPECT_EQ(block[99], 7);   // what was there stays
  EXPECT_EQ(device->reserveScratch(10), block);
  EXPECT_GE(device->workspaceBytes(), 50 << 20);
  EXPECT_LT(device->workspaceBytes(), (50 << 20) + 4096 * 16);
}

/// add of a 2-byte tensor and a float32 row of zeros (the residual add of
/// a bf16 plan): the kernel widens the 2-byte operand into float32 first,
/// in its scratch.
struct WidenedAdd {
  plan::Instruction instruction;
  std::vector<uint16_t> x;
  std::vector<float> zeros, y, expected;
  std::unique_ptr<Kernel> kernel;

  WidenedAdd(int64_t rows, int64_t cols, std::mt19937 &rng, Device *device) {
    std::normal_distribution<float> normal;
    instruction.set_op("add");
    instruction.set_location("/b/add");
    x.resize(rows * cols);
    expected.resize(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) {
      expected[i] = roundToBfloat16(normal(rng));
      x[i] = bfloat16BitsOf(expected[i]);
    }
    zeros.assign(cols, 0.0f);
    y.assign(rows * cols, std::nanf(""));
    KernelArgs args;
    args.instruction = &instruction;
    TensorView in, row, out;
    in.data = x.data();
    in.shape = {rows, cols};
    in.dtype = plan::BF16;
    row.data = zeros.data();
    row.shape = {cols};
    out.data = y.data();
    out.shape = {rows, cols};
    args.inputs = {in, row};
    args.outputs = {out};
    args.runsOn = device;
    kernel = (*KernelRegistry::instance().lookup("add", Backend::CPU))(args);
  }
  void check() {
    std::fill(y.begin(), y.end(), std::nanf(""));
    kernel->run(StepContext());
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_EQ(bitsOf(y[i]), bitsOf(expected[i])) << "element " << i;
  }
};

TEST(KernelScratch, KernelsOfADeviceShareIt) {
  std::mt19937 rng(3);
  std::unique_ptr<Device> device = createDevice(Backend::CPU, 0);
  WidenedAdd small(64, 32, rng, device.get()),
      large(512, 64, rng, device.get());
  EXPECT_EQ(small.kernel->workspaceBytes(), 0);
  EXPECT_EQ(large.kernel->workspaceBytes(), 0);
  int64_t largeNeed = 512 * 64 * 4;
  EXPECT_GE(device->workspaceBytes(), largeNeed);
  EXPECT_LT(device->workspaceBytes(), largeNeed + 64 * 32 * 4);
  for (int round = 0; round < 2; ++round) { // each overwrites the other's
    small.check();
    large.check();
  }

  // Made alone (no device), a kernel holds its own buffers, its workspace.
  WidenedAdd alone(64, 32, rng, nullptr);
  EXPECT_EQ(alone.kernel->workspaceBytes(), 64 * 32 * 4);
  alone.check();
}

/// A matmul of a bf16 A (widened into the scratch) and a float32 B into a
/// result stored in bf16 (computed into the scratch in float32, then
/// packed): two buffers of one kernel, which must not overlap.
std::vector<uint16_t> matmulWidenedAndNarrowed(Device *device,
                                               int64_t *workspace) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  int64_t m = 12, k = 8, n = 12; // Y's rows longer than A's
  std::vector<uint16_t> a(m * k), y(m * n, 0xFFFF);
  std::vector<float> b(k * n);
  for (uint16_t &v : a)
    v = bfloat16BitsOf(roundToBfloat16(normal(rng)));
  for (float &v : b)
    v = roundToBfloat16(normal(rng));
  plan::Instruction instruction;
  instruction.set_op("matmul");
  instruction.set_location("/b/matmul");
  TensorView va, vb, vy;
  va.data = a.data();
  va.shape = {m, k};
  va.dtype = plan::BF16;
  vb.data = b.data();
  vb.shape = {k, n};
  vy.data = y.data();
  vy.shape = {m, n};
  vy.dtype = plan::BF16;
  KernelArgs args;
  args.instruction = &instruction;
  args.inputs = {va, vb};
  args.outputs = {vy};
  args.runsOn = device;
  auto kernel =
      (*KernelRegistry::instance().lookup("matmul", Backend::CPU))(args);
  kernel->run(StepContext());
  *workspace = kernel->workspaceBytes();
  return y;
}

TEST(KernelScratch, AKernelsBuffersDoNotOverlap) {
  std::unique_ptr<Device> device = createDevice(Backend::CPU, 0);
  int64_t shared = -1, own = -1;
  std::vector<uint16_t> inBlock =
                            matmulWidenedAndNarrowed(device.get(), &shared),
                        alone = matmulWidenedAndNarrowed(nullptr, &own);
  EXPECT_EQ(shared, 0);
  EXPECT_EQ(own, (12 * 8 + 12 * 12) * 4);
  EXPECT_GE(device->workspaceBytes(), own);
  EXPECT_EQ(inBlock, alone);
}

} // namespace
