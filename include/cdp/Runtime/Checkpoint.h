//===- Checkpoint.h - saving and resuming training state --------*- C++ -*-===//
//
// A checkpoint holds everything that changes during training: parameters,
// buffers, optimizer moments and step counts, and the next step. Resuming
// from it continues bit-identically. It is tied to the plan it was taken
// from by the plan's checksum.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_CHECKPOINT_H
#define CDP_RUNTIME_CHECKPOINT_H

#include "cdp/Runtime/Executor.h"

#include <cstdint>
#include <string>

namespace cdp::runtime {

/// What a resumed run must share with the run that wrote the checkpoint to
/// continue it: the plan, the seed (shuffling, Dropout) and the data.
struct RunIdentity {
  uint64_t planChecksum = 0;
  uint64_t seed = 0;
  std::string data; ///< the --data folder or the --feed list, as given
};

/// Writes DIR/checkpoint.bin (and creates DIR); `nextStep` is the first step
/// a resumed run takes.
void saveCheckpoint(const std::string &dir, Executor &executor,
                    const RunIdentity &identity, int64_t nextStep);

/// Restores the state saved by saveCheckpoint; returns the next step.
/// Throws RuntimeError when the checkpoint is corrupt or was written by a
/// run of another plan, seed or data.
int64_t loadCheckpoint(const std::string &dir, Executor &executor,
                       const RunIdentity &identity);

} // namespace cdp::runtime

#endif // CDP_RUNTIME_CHECKPOINT_H
