//===- OnnxImporter.h - ONNX ModelProto to cdp IR ---------------*- C++ -*-===//
//
// Reads a binary ONNX model and builds a module holding one `func.func
// @main` of cdp graph ops with static shapes. Shape computations are folded
// at import; initializers become named `cdp.param` values.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_IMPORT_ONNXIMPORTER_H
#define CDP_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace cdp {

/// Default-domain opsets the importer accepts.
constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 25;

struct ImportOptions {
  /// Binds a symbolic batch dimension (see --batch-size).
  std::optional<int64_t> batchSize;
  /// Batch axis per graph input (see --batch-axis); -1 means none. Inputs not
  /// listed use axis 0.
  std::map<std::string, int64_t> batchAxes;
  /// Largest tensor the importer agrees to describe or read.
  int64_t maxTensorBytes = int64_t(16) << 30;
  /// Graph inputs bound to a value at compile time (a serialized
  /// TensorProto file each), for shape-like inputs such as Reshape's shape.
  std::map<std::string, std::string> constInputs;
  /// Keep initializer data out of the module (shapes only), for reports.
  bool shapesOnly = false;
  /// A training compile: what is trained is decided, and exports that
  /// would train a different network than torch's are refused.
  bool training = true;
  /// --trainable-from: one entry per parameter torch trains, its names
  /// (several where torch ties it: `named_parameters(remove_duplicate=
  /// False)`); unset: every float32 initializer that can be a parameter is
  /// trained.
  std::optional<std::vector<std::vector<std::string>>> trainableFrom;
  /// --trainable and --freeze: single names added to or removed from it.
  std::vector<std::string> trainable, freeze;
  /// Receives one line per warning (what is trained, eval-mode exports).
  std::function<void(const std::string &)> warn;
  /// Receives the path of every external-data file an initializer names
  /// (read or, with shapesOnly, not), so that no output replaces one.
  std::function<void(const std::string &)> externalData;
};

/// Imports the ONNX model at `path`. On failure returns null and sets `error`
/// to one line naming the problem (node, op type, tensor) without the file.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxModel(mlir::MLIRContext &context,
                                                  const std::string &path,
                                                  const ImportOptions &options,
                                                  std::string &error);

} // namespace cdp

#endif // CDP_IMPORT_ONNXIMPORTER_H
