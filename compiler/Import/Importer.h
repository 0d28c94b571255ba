//===- Importer.h - the ONNX importer's private declarations ----*- C++ -*-===//
//
// Shared by the importer's files: the driver (OnnxImporter.cpp), tensors and
// parameters (ImportTensors.cpp), constant folding (ConstantFolding.cpp) and
// the op table (ImportOps.cpp). Not installed: the public API is
// cdp/Import/OnnxImporter.h.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_COMPILER_IMPORT_IMPORTER_H
#define CDP_COMPILER_IMPORT_IMPORTER_H

#include "cdp/Import/OnnxImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Twine.h"

#include <onnx/onnx_pb.h>

#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace cdp::import {

/// Carries the one error line of a failed import up the call chain.
struct ImportError {
  std::string message;
};

[[noreturn]] void raise(const llvm::Twine &message);

/// A float as int64 the way x86's conversion, and so torch on it, gives it:
/// truncated, and the lowest int64 for NaN and values out of range (T5's
/// log(0) = -inf before a Where discards it) instead of C++'s undefined
/// behaviour.
int64_t truncateToInt64(double value);

/// A small tensor whose values the importer knows: ONNX constants, integer
/// initializers, initializers that are not trained, and folded
/// computations. Floating types other than float32 (double, float16,
/// bfloat16) are kept as doubles, which hold each of them exactly, and
/// become float32 where a runtime op reads them.
struct ConstTensor {
  enum Kind { F32, F64, I64, Bool } kind = F32;
  llvm::SmallVector<int64_t> shape;
  std::vector<float> floats;   // F32
  std::vector<double> doubles; // F64
  std::vector<int64_t> ints;   // I64 and Bool

  bool isFloat() const { return kind == F32 || kind == F64; }
  int64_t size() const;
  double at(int64_t i) const;
  int64_t intAt(int64_t i) const;
  /// Appends `value` converted to this tensor's kind.
  void push(double value);
  /// Appends element `i` of `source` (same kind) without a round trip
  /// through double, which would lose large int64 values.
  void append(const ConstTensor &source, int64_t i);
  /// An empty tensor of `kind` and `shape`.
  static ConstTensor empty(Kind kind, llvm::ArrayRef<int64_t> shape);
};

/// Constants larger than this (elements) are left to the runtime.
constexpr int64_t kFoldLimit = 1 << 16;

/// ONNX Reshape's target shape made explicit: `0` copies the input's
/// dimension (unless `allowZero`), one `-1` takes what is left. `where`
/// prefixes the error.
std::vector<int64_t> resolveReshape(llvm::ArrayRef<int64_t> dims,
                                    std::vector<int64_t> shape,
                                    int64_t elements, bool allowZero,
                                    const std::string &where);
/// Row-major strides of a shape.
llvm::SmallVector<int64_t> stridesOf(llvm::ArrayRef<int64_t> shape);
std::string shapeText(llvm::ArrayRef<int64_t> shape);
std::string onnxTypeName(int32_t type);
/// The element count of a shape (the caller has checked it).
int64_t elementCount(llvm::ArrayRef<int64_t> shape);

class Importer {
public:
  Importer(mlir::MLIRContext &context, const std::string &path,
           const ImportOptions &options)
      : context(context), builder(&context), path(path), options(options) {}

  mlir::OwningOpRef<mlir::ModuleOp> run();

  // Values known by ONNX name: an SSA value, a known constant, or both.
  struct Entry {
    mlir::Value value;
    std::optional<ConstTensor> constant;
    const onnx::TensorProto *initializer = nullptr;
  };

  //===--------------------------------------------------------------------===//
  // The node being imported: what folds and op builders read.
  //===--------------------------------------------------------------------===//

  const onnx::NodeProto *node = nullptr;
  int64_t opset = 0;
  std::string where() const;
  bool hasInput(int i) const;
  mlir::Value input(int i);
  /// Input i's value when known at compile time, else null.
  const ConstTensor *constInput(int i);
  const ConstTensor &requireConst(int i, llvm::StringRef role);
  std::vector<int64_t> constInts(int i, llvm::StringRef role);
  /// Slice's starts, ends, axes (default 0, 1, ...) and steps (default 1).
  struct SliceInputs {
    std::vector<int64_t> starts, ends, axes, steps;
  };
  SliceInputs sliceInputs();
  const onnx::AttributeProto *attr(llvm::StringRef name) const;
  /// The attribute, or null; an error when it holds another type.
  const onnx::AttributeProto *
  typedAttr(llvm::StringRef name,
            onnx::AttributeProto::AttributeType type) const;
  int64_t intAttr(llvm::StringRef name, int64_t fallback) const;
  float floatAttr(llvm::StringRef name, float fallback) const;
  std::string stringAttr(llvm::StringRef name, llvm::StringRef fallback) const;
  std::vector<int64_t> intsAttr(llvm::StringRef name) const;
  /// Refuses attributes cdp does not implement instead of ignoring them.
  void checkAttributes(std::initializer_list<llvm::StringRef> known) const;
  /// Builds an op by name; result types come from the op's own shape rules.
  mlir::Operation *create(llvm::StringRef opName,
                          llvm::ArrayRef<mlir::Value> operands,
                          llvm::ArrayRef<mlir::NamedAttribute> attributes,
                          unsigned numResults);
  void bindResults(mlir::Operation *op);
  void bindValue(int output, mlir::Value value);
  void bindConst(int output, ConstTensor value);
  mlir::NamedAttribute named(llvm::StringRef name, mlir::Attribute value) {
    return builder.getNamedAttr(name, value);
  }
  mlir::DenseI64ArrayAttr i64s(llvm::ArrayRef<int64_t> values) {
    return builder.getDenseI64ArrayAttr(values);
  }
  mlir::RankedTensorType typeOf(mlir::Value value) {
    return mlir::cast<mlir::RankedTensorType>(value.getType());
  }
  /// A float32 or int64 scalar constant op.
  mlir::Value scalarConstant(mlir::Type elementType, double value);
  mlir::Value castTo(mlir::Value value, mlir::Type elementType);

  /// An embedding table's padding row: the only all-zero row of a trained
  /// 2-D initializer, which torch's nn.Embedding(padding_idx) keeps at zero
  /// and gives no gradient (Trainable.cpp).
  std::optional<int64_t> embeddingPaddingRow(const std::string &name,
                                             mlir::Value data);

  // Tensors.
  mlir::Type elementTypeOf(int32_t onnxType, const llvm::Twine &what);
  ConstTensor::Kind constKindOf(int32_t onnxType, const llvm::Twine &what);
  ConstTensor::Kind kindOf(mlir::Type type);
  llvm::SmallVector<int64_t> checkedShape(llvm::ArrayRef<int64_t> dims,
                                          mlir::Type elementType,
                                          const llvm::Twine &what);
  ConstTensor readTensor(const onnx::TensorProto &tensor,
                         const llvm::Twine &what);
  mlir::Attribute elementsAttr(const ConstTensor &constant);

  mlir::OpBuilder builder;
  std::unordered_map<std::string, Entry> values;
  /// SplitToSequence's pieces by the sequence's name (SequenceAt reads them).
  std::unordered_map<std::string, llvm::SmallVector<mlir::Value>> sequences;

private:
  void loadModel();
  void checkOpsets();
  void collectInitializers();
  std::vector<int> sortNodes();
  void addInputs(mlir::func::FuncOp func);
  ConstTensor readConstInput(const onnx::ValueInfoProto &info,
                             const std::string &file);
  void importNode(const onnx::NodeProto &node);
  void finishFunction(mlir::func::FuncOp func);

  // Tensors and parameters (ImportTensors.cpp).
  void checkContained(llvm::StringRef full, llvm::StringRef location,
                      const llvm::Twine &what);
  std::string readExternal(const onnx::TensorProto &tensor, int64_t bytes,
                           const llvm::Twine &what);
  /// The external data's bytes, mapped (not copied).
  std::unique_ptr<llvm::MemoryBuffer>
  mapExternal(const onnx::TensorProto &tensor, int64_t bytes,
              const llvm::Twine &what);
  mlir::AsmResourceBlob paramBlob(const onnx::TensorProto &tensor,
                                  llvm::ArrayRef<int64_t> shape,
                                  const llvm::Twine &what);
  /// Hands an external tensor's file to options.externalData unread.
  void noteExternalData(const onnx::TensorProto &tensor);
  mlir::Value materialize(const std::string &name, Entry &entry);
  mlir::Value paramFor(const std::string &name, Entry &entry);

  // What is trained (Trainable.cpp).
  void decideTrained();
  bool looksExportedByDynamo() const;
  /// Why a float32 initializer cannot be a parameter; empty when it can.
  std::string trainedByDefault(const std::string &name,
                               const onnx::TensorProto &tensor);
  std::unordered_set<std::string> batchNormStatistics() const;
  void checkNamed(const std::vector<std::string> &names, llvm::StringRef flag);
  std::string initializerOf(const std::vector<std::string> &aliases);
  void findFoldedTransposes();
  void checkInferenceBatchNorms();
  void reportTrained();

  // Names some node or the graph's outputs read (filled on first use).
  std::unordered_set<std::string> readNames;
  bool isRead(const std::string &name);

  mlir::MLIRContext &context;
  std::string path;
  const ImportOptions &options;
  onnx::ModelProto model;
  std::unordered_map<std::string, onnx::TensorProto *> initializers;
  void releaseInitializerData(const std::string &name);
  /// Float initializers that become trained parameters; the others are
  /// constants (folded where small, else frozen `cdp.param`s).
  std::unordered_set<std::string> trained;
  /// Exporter-made initializers read as the transpose of another, by name.
  std::map<std::string, std::string> transposeOf;
  /// Float initializers whose values are all 0 and 1 (trainedByDefault).
  std::unordered_set<std::string> maskLike;
  /// embeddingPaddingRow's answers, by initializer.
  std::map<std::string, std::optional<int64_t>> paddingRows;
  mlir::Block *body = nullptr;
  mlir::Operation *lastParam = nullptr;
  /// Float initializers read as compile-time values (requireConst), by
  /// name; their other uses stay parameters.
  std::map<std::string, ConstTensor> initializerValues;
};

/// Folds the current node when every input is known and the result is
/// small; false when it must become an op (ConstantFolding.cpp).
bool tryFold(Importer &importer, llvm::StringRef opType);
/// A folding rule's known inputs, in the node's order.
using FoldInputs = std::vector<const ConstTensor *>;
/// Cast and CastLike on known values (FoldCasts.cpp).
bool foldCast(Importer &importer, const FoldInputs &in, ConstTensor &out);
bool foldCastLike(Importer &importer, const FoldInputs &in, ConstTensor &out);
/// Builds the current node's ops; raises when the op is not supported at
/// the model's opset (ImportOps.cpp).
void importOp(Importer &importer, llvm::StringRef opType);
/// ONNX LSTM and GRU, unrolled over their static sequence length
/// (ImportRecurrent.cpp).
void importLSTM(Importer &importer);
void importGRU(Importer &importer);
/// Every ONNX op the table builds, with the first opset it reads.
std::vector<std::pair<std::string, int64_t>> importedOps();
/// Every ONNX op evaluated at import when its inputs are known.
std::vector<std::string> foldedOps();

} // namespace cdp::import

#endif // CDP_COMPILER_IMPORT_IMPORTER_H
