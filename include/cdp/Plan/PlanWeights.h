//===- PlanWeights.h - the initial values beside a plan ---------*- C++ -*-===//
//
// A plan (format 6) holds the program; the initial values of its
// parameters, buffers and constants lie in one file beside it,
// `<plan>.weights`, each at a 64-byte aligned offset with its checksum, so
// that no size limit of the plan's protobuf applies to the model and each
// process reads only the tensors its devices hold.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_PLANWEIGHTS_H
#define CDP_PLAN_PLANWEIGHTS_H

#include "cdp/Plan/plan.pb.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace cdp::plan {

/// The weights file's name for a plan written to `planPath`.
std::string weightsFileName(const std::string &planPath);
/// Where writeWeights puts the weights file of a plan written to
/// `planPath`: beside the file a symbolic link names, which the plan
/// replaces.
std::string weightsPathFor(const std::string &planPath);
/// The weights file `plan`, read from `planPath`, names (beside the file
/// a symbolic link names); empty when it names none.
std::string weightsPathOf(const Plan &plan, const std::string &planPath);

/// Moves every tensor's `data` of `plan` into the weights file beside
/// `planPath` (written whole, then renamed into place; equal values once)
/// and records where (`initial`, and the plan's weights_* fields). A plan
/// without data writes no file; one whose values went to this path's
/// weights file already is left as it is. False with `error` on failure.
bool writeWeights(Plan &plan, const std::string &planPath, std::string &error);

/// The weights file of a plan that was read, open for reading.
class PlanWeights {
public:
  /// Opens the file `plan` names beside `planPath` and checks its size and
  /// stamp; null with `error` set (one line naming the file) on failure.
  /// A plan that names no weights file opens nothing and succeeds.
  static std::unique_ptr<PlanWeights> open(const std::string &planPath,
                                           const Plan &plan, std::string &error,
                                           const std::string &givenPath = "");
  ~PlanWeights();

  /// Reads `tensor`'s initial value (`tensor.bytes()` bytes) into `out`:
  /// its inline `data`, or its bytes in the file, checked against their
  /// checksum. Returns an empty string, or one line saying what is wrong.
  std::string read(const Tensor &tensor, char *out) const;

  /// A plan without a weights file: `tensor`'s inline `data` into `out`.
  static std::string readInline(const Tensor &tensor, char *out);

  /// Bytes read from the file so far (all threads).
  uint64_t bytesRead() const;

private:
  PlanWeights(int fd, std::string path) : fd(fd), path(std::move(path)) {}
  int fd;
  std::string path;
  mutable std::atomic<uint64_t> readSoFar{0};
};

/// Whether `tensor` has an initial value (inline or in the weights file).
bool hasInitialValue(const Tensor &tensor);

} // namespace cdp::plan

#endif // CDP_PLAN_PLANWEIGHTS_H
