//===- MirrorSpans.h - host mirrors of a kernel's device memory -*- C++ -*-===//
//
// A GPU instruction that runs the CPU kernel of its op copies its tensors to
// host memory and back. It mirrors runs of device memory, not tensors:
// views that touch or overlap share one span, so a kernel that relies on
// tensors lying one after another (ZeRO's gathered stage) or on two views of
// one buffer (an in-place result) finds them so on the host too.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_MIRRORSPANS_H
#define CDP_RUNTIME_KERNELS_MIRRORSPANS_H

#include <algorithm>
#include <cstddef>
#include <vector>

namespace cdp::runtime {

struct MirrorSpan {
  char *begin;
  size_t bytes;
  bool written; ///< copied back after the kernel runs
};

/// The spans sorted by address, those that touch or overlap merged (written
/// where any part is).
inline std::vector<MirrorSpan> mergeSpans(std::vector<MirrorSpan> spans) {
  std::sort(spans.begin(), spans.end(),
            [](const MirrorSpan &a, const MirrorSpan &b) {
              return a.begin < b.begin;
            });
  std::vector<MirrorSpan> merged;
  for (const MirrorSpan &span : spans) {
    if (merged.empty() ||
        span.begin > merged.back().begin + merged.back().bytes) {
      merged.push_back(span);
      continue;
    }
    MirrorSpan &last = merged.back();
    last.bytes = std::max(
        last.bytes, static_cast<size_t>(span.begin - last.begin) + span.bytes);
    last.written = last.written || span.written;
  }
  return merged;
}

/// The index of the merged span that holds `address`.
inline size_t spanHolding(const std::vector<MirrorSpan> &merged,
                          const char *address) {
  auto after = std::upper_bound(
      merged.begin(), merged.end(), address,
      [](const char *p, const MirrorSpan &span) { return p < span.begin; });
  return static_cast<size_t>(after - merged.begin()) - 1;
}

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_MIRRORSPANS_H
