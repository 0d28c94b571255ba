//===- Versions.cpp - the weight versions dp's and CDP's slots read -------===//

#include "cdp/Schedule/Versions.h"

#include "cdp/Schedule/Pipeline.h"

#include <algorithm>

namespace cdp {

std::vector<int64_t> slotOffsets(Strategy strategy, int64_t L, int64_t N) {
  bool cyclic = traitsOf(strategy).cyclic;
  std::vector<int64_t> offsets;
  for (int64_t i = 0; i < N; ++i)
    offsets.push_back(cyclic ? pipeline::cdpSlotStart(i, L, N) : 0);
  return offsets;
}

bool reducesAfterBackward(Strategy strategy, bool clips) {
  return traitsOf(strategy).cyclic && clips;
}

bool isCdpZero(Strategy strategy, int64_t zero) {
  return zero == 3 && traitsOf(strategy).cyclic;
}

VersionTable versionTable(Strategy strategy, const std::string &rule,
                          const std::string &table,
                          const std::vector<int64_t> &offsets, int64_t L,
                          bool afterBackward) {
  bool cdp = traitsOf(strategy).cyclic;
  const std::vector<int64_t> &s = offsets;
  int64_t N = static_cast<int64_t>(s.size());
  VersionTable versions;
  versions.live.assign(L, cdp ? 2 : 1);
  std::vector<bool> allFresh(L, true);
  for (int64_t i = 0; i < N; ++i) {
    std::vector<int64_t> row;
    for (int64_t l = 1; l <= L; ++l) {
      int64_t delay = 0;
      if (cdp && rule == "v1")
        delay = 1;
      else if (cdp)
        delay = pipeline::cdpFresh(table == "code", i, l, L, s[i], s[N - 1],
                                   afterBackward)
                    ? 0
                    : 1;
      allFresh[l - 1] = allFresh[l - 1] && delay == 0;
      row.push_back(delay);
    }
    versions.delay.push_back(row);
  }
  // A fresh (i, l) needs theta_{t,l}, made when the stage-l reduction of
  // step t-1 completes at tau*_l(t-1) = s_{N-1} + 2L(t-1) + r_l (r_l =
  // 2L - l, or 2L - 1 when reductions follow the whole backward); its
  // F_l runs at s_i + 2Lt + l - 1. When a table asks for a version that
  // does not exist yet (the code table with N != L can), the slot waits:
  // its offset grows by the shortfall. The last slot is never late, so
  // tau* stays put.
  versions.idle.assign(N, 0);
  if (cdp)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t l = 1; l <= L; ++l)
        if (versions.delay[i][l - 1] == 0)
          versions.idle[i] = std::max<int64_t>(
              versions.idle[i],
              s[N - 1] - s[i] + pipeline::reductionStart(l, L, afterBackward) -
                  2 * L - l + 2);
  // Under v2 a stage every slot reads fresh is updated in place.
  if (cdp && rule == "v2")
    for (int64_t l = 0; l < L; ++l)
      if (allFresh[l])
        versions.live[l] = 1;
  versions.rule = !cdp ? "dp" : rule == "v1" ? "v1" : "v2-" + table;
  return versions;
}

} // namespace cdp
