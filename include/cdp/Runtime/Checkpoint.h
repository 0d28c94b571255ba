//===- Checkpoint.h - saving and resuming training state --------*- C++ -*-===//
//
// A checkpoint holds everything that changes during training, so that
// resuming from it continues bit-identically: every device's parameters,
// buffers, reduced gradients and optimizer state, a pipeline's micro-batches
// in flight (the arena, where 2bw and cdp-mp stash activations across the
// step boundary), the messages and reductions in flight between devices,
// and the next step. Each process writes its own shard; the root then
// writes the manifest that names them, and only then are older shards
// removed, so a crash at any point leaves the previous checkpoint whole.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_CHECKPOINT_H
#define CDP_RUNTIME_CHECKPOINT_H

#include "cdp/Runtime/Executor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace cdp::runtime {

/// A data file as a checkpoint remembers it, without reading it whole:
/// its size, modification time and a hash of its first and last MiB.
struct FileFingerprint {
  std::string path; ///< as the user named it
  uint64_t size = 0;
  int64_t modified = 0; ///< nanoseconds since the epoch
  uint64_t hash = 0;
  bool operator==(const FileFingerprint &other) const {
    return path == other.path && size == other.size &&
           modified == other.modified && hash == other.hash;
  }
};

/// The fingerprint of the file at `path` (a RuntimeError if it cannot be
/// read).
FileFingerprint fingerprintFile(const std::string &path);

/// What a resumed run must share with the run that wrote the checkpoint to
/// continue it: the plan, the seed (shuffling, Dropout) and the data --
/// the same files, unchanged.
struct RunIdentity {
  uint64_t planChecksum = 0;
  uint64_t seed = 0;
  std::string data; ///< the --data folder or the --feed list, as given
  std::vector<FileFingerprint> files; ///< the data's files
};

/// Refuses (a RuntimeError of one line naming the checkpoint `path`) a
/// checkpoint `taken` with another seed or data than `identity`, or on
/// data files changed since.
void checkSameData(const std::string &path, const RunIdentity &taken,
                   const RunIdentity &identity);

/// This process's part of a run: its devices (in device order) and the
/// fabric between them (null for one device that does not communicate).
struct CheckpointScope {
  std::vector<Executor *> devices;
  Fabric *fabric = nullptr;
};

/// Writes this process's shard of the state before step `nextStep` and,
/// on the root, DIR/manifest.bin (creating DIR). Every device of every
/// process must be between steps: collective under MPI.
void saveCheckpoint(const std::string &dir, const CheckpointScope &scope,
                    const RunIdentity &identity, int64_t nextStep);

/// Takes DIR/.lock (creating DIR) for the rest of this process's life, so
/// that no other run writes checkpoints into DIR meanwhile (each would
/// remove the other's shards). Throws RuntimeError when another run holds
/// it. Under MPI the root takes it for the run.
void lockCheckpointFolder(const std::string &dir);

/// Where a restored run goes on: the next step, and the step its schedule
/// started at (Executor::setStepOrigin: 0, or where a run resumed from a
/// portable checkpoint began, whose delays count from there).
struct ResumePoint {
  int64_t nextStep = 0, stepOrigin = 0;
};

/// Restores the state saved by saveCheckpoint. Throws RuntimeError (one
/// line) when the checkpoint is corrupt or truncated, or was written by a
/// run of another plan, seed, data, device count or process count.
ResumePoint loadCheckpoint(const std::string &dir, const CheckpointScope &scope,
                           const RunIdentity &identity);

} // namespace cdp::runtime

#endif // CDP_RUNTIME_CHECKPOINT_H
