//===- OnnxImporter.cpp - ONNX ModelProto to cdp IR -----------------------===//
//
// The importer checks everything a malformed model can get wrong before it
// builds IR, reports the first problem as one line naming the node, op and
// tensor, and never reads outside the model's folder. Every shape is static:
// shape computations (Shape -> Gather -> Unsqueeze -> Concat chains) are
// evaluated here on small constant tensors, and op result types come from
// the dialect's own inference, not from ONNX's (which stops at opset 17).
//
//===----------------------------------------------------------------------===//

#include "cdp/Import/OnnxImporter.h"
#include "cdp/Plan/Checked.h"

#include "cdp/Dialect/Graph/GraphBuilder.h"
#include "cdp/Dialect/Graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <google/protobuf/io/coded_stream.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <unordered_map>
#include <unordered_set>

using namespace mlir;

namespace cdp {
namespace {

/// Carries the one error line of a failed import up the call chain.
struct ImportError {
  std::string message;
};

[[noreturn]] void raise(const Twine &message) {
  throw ImportError{message.str()};
}

/// A small tensor whose values the importer knows: ONNX constants, integer
/// initializers and folded shape computations.
struct ConstTensor {
  enum Kind { F32, I64, Bool } kind = F32;
  SmallVector<int64_t> shape;
  std::vector<float> floats; // F32
  std::vector<int64_t> ints; // I64 and Bool

  int64_t size() const {
    return kind == F32 ? static_cast<int64_t>(floats.size())
                       : static_cast<int64_t>(ints.size());
  }
  double at(int64_t i) const {
    return kind == F32 ? floats[i] : static_cast<double>(ints[i]);
  }
  int64_t intAt(int64_t i) const {
    return kind == F32 ? static_cast<int64_t>(floats[i]) : ints[i];
  }
  void push(double value) {
    if (kind == F32)
      floats.push_back(static_cast<float>(value));
    else
      ints.push_back(static_cast<int64_t>(value));
  }
  /// Appends element `i` of `source` (same kind) without a round trip
  /// through double, which would lose large int64 values.
  void append(const ConstTensor &source, int64_t i) {
    if (kind == F32)
      floats.push_back(source.floats[i]);
    else
      ints.push_back(source.ints[i]);
  }
};

/// ONNX Reshape's target shape made explicit: `0` copies the input's
/// dimension (unless `allowZero`), one `-1` takes what is left. `where`
/// prefixes the error.
/// Constants larger than this (elements) are left to the runtime.
constexpr int64_t kFoldLimit = 1 << 16;

std::vector<int64_t> resolveReshape(ArrayRef<int64_t> dims,
                                    std::vector<int64_t> shape,
                                    int64_t elements, bool allowZero,
                                    const std::string &where);

/// Row-major strides of a shape.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

std::string shapeText(ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string onnxTypeName(int32_t type) {
  if (onnx::TensorProto_DataType_IsValid(type))
    return onnx::TensorProto_DataType_Name(
        static_cast<onnx::TensorProto_DataType>(type));
  return "type " + std::to_string(type);
}

class Importer {
public:
  Importer(MLIRContext &context, const std::string &path,
           const ImportOptions &options)
      : context(context), builder(&context), path(path), options(options) {}

  OwningOpRef<ModuleOp> run();

private:
  // Values known by ONNX name: an SSA value, a known constant, or both.
  struct Entry {
    Value value;
    std::optional<ConstTensor> constant;
    const onnx::TensorProto *initializer = nullptr;
  };

  void loadModel();
  void checkOpsets();
  std::vector<int> sortNodes();
  void addInputs(func::FuncOp func);
  ConstTensor readConstInput(const onnx::ValueInfoProto &info,
                             const std::string &file);
  void importNode(const onnx::NodeProto &node);

  // Tensors.
  Type elementTypeOf(int32_t onnxType, const Twine &what);
  SmallVector<int64_t> checkedShape(ArrayRef<int64_t> dims, Type elementType,
                                    const Twine &what);
  ConstTensor readTensor(const onnx::TensorProto &tensor, const Twine &what);
  void checkContained(StringRef full, StringRef location, const Twine &what);
  std::string readExternal(const onnx::TensorProto &tensor, int64_t bytes,
                           const Twine &what);
  Value materialize(const std::string &name, Entry &entry);
  Value paramFor(const std::string &name, Entry &entry);
  Attribute elementsAttr(const ConstTensor &constant);
  ConstTensor::Kind kindOf(Type type);

  // Node helpers.
  const onnx::NodeProto *node = nullptr;
  std::string where() const;
  bool hasInput(int i) const;
  Value input(int i);
  const ConstTensor *constInput(int i);
  const ConstTensor &requireConst(int i, StringRef role);
  std::vector<int64_t> constInts(int i, StringRef role);
  const onnx::AttributeProto *attr(StringRef name) const;
  /// The attribute, or null; an error when it holds another type.
  const onnx::AttributeProto *
  typedAttr(StringRef name, onnx::AttributeProto::AttributeType type) const;
  int64_t intAttr(StringRef name, int64_t fallback) const;
  float floatAttr(StringRef name, float fallback) const;
  std::string stringAttr(StringRef name, StringRef fallback) const;
  std::vector<int64_t> intsAttr(StringRef name) const;
  void checkAttributes(std::initializer_list<StringRef> known) const;
  Operation *create(StringRef opName, ArrayRef<Value> operands,
                    ArrayRef<NamedAttribute> attributes, unsigned numResults);
  void bindResults(Operation *op);
  void bindConst(int output, ConstTensor value);
  NamedAttribute named(StringRef name, Attribute value) {
    return builder.getNamedAttr(name, value);
  }
  DenseI64ArrayAttr i64s(ArrayRef<int64_t> values) {
    return builder.getDenseI64ArrayAttr(values);
  }
  RankedTensorType typeOf(Value value) {
    return cast<RankedTensorType>(value.getType());
  }

  // Op families.
  bool tryFold(StringRef opType);
  void importConv();
  void importNeg();
  void importClip();
  void importPad();
  void importPool(bool isMax);
  /// Folds of one op over constant inputs into `out`; false: not folded.
  bool foldConstantOfShape(const std::vector<const ConstTensor *> &in,
                           ConstTensor &out);
  bool foldIdentity(const std::vector<const ConstTensor *> &in,
                    ConstTensor &out);
  bool foldCast(const std::vector<const ConstTensor *> &in, ConstTensor &out);
  bool foldGather(const std::vector<const ConstTensor *> &in, ConstTensor &out);
  bool foldSqueeze(const std::vector<const ConstTensor *> &in, ConstTensor &out,
                   StringRef opType);
  bool foldConcat(const std::vector<const ConstTensor *> &in, ConstTensor &out);
  bool foldSlice(const std::vector<const ConstTensor *> &in, ConstTensor &out);
  bool foldReshape(const std::vector<const ConstTensor *> &in,
                   ConstTensor &out);
  bool foldNeg(const std::vector<const ConstTensor *> &in, ConstTensor &out);
  bool foldWhere(const std::vector<const ConstTensor *> &in, ConstTensor &out);
  bool foldArithmetic(const std::vector<const ConstTensor *> &in,
                      ConstTensor &out, StringRef opType);
  void importPow();
  void importHardSigmoid();
  void importGelu();
  void importGemm();
  void importBatchNormalization();
  void importLayerNormalization();
  void importDropout();
  void importCast();
  void importReshape();
  void importTranspose();
  void importConcat();
  void importSplit();
  void importSlice();
  void importSqueeze(StringRef op);
  void importExpand();
  void importGather();
  void importConstantOfShape();
  void importSoftmaxCrossEntropyLoss(StringRef op);
  void importReduce(StringRef opName);
  std::vector<int64_t> windowPads(ArrayRef<int64_t> inputSpatial,
                                  ArrayRef<int64_t> kernel,
                                  ArrayRef<int64_t> strides,
                                  ArrayRef<int64_t> dilations);

  MLIRContext &context;
  OpBuilder builder;
  std::string path;
  const ImportOptions &options;
  onnx::ModelProto model;
  // Names some node or the graph's outputs read (filled on first use).
  std::unordered_set<std::string> readNames;
  bool isRead(const std::string &name);
  int64_t opset = 0;
  std::unordered_map<std::string, Entry> values;
  std::unordered_map<std::string, const onnx::TensorProto *> initializers;
  Block *body = nullptr;
  Operation *lastParam = nullptr;
  /// Float initializers read as compile-time values (requireConst), by
  /// name; their other uses stay parameters.
  std::map<std::string, ConstTensor> initializerValues;
};

//===----------------------------------------------------------------------===//
// Model, opsets, graph structure
//===----------------------------------------------------------------------===//

std::vector<int64_t> resolveReshape(ArrayRef<int64_t> dims,
                                    std::vector<int64_t> shape,
                                    int64_t elements, bool allowZero,
                                    const std::string &where) {
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowZero) {
      if (i >= dims.size())
        raise(where + ": shape copies dimension " + Twine(i) +
              " that the input does not have");
      shape[i] = dims[i];
    }
    if (shape[i] == -1) {
      if (inferred >= 0)
        raise(where + ": shape has more than one -1");
      inferred = i;
    } else if (shape[i] < 0) {
      raise(where + ": invalid dimension " + Twine(shape[i]) + " in shape");
    } else if (!checkedMul(known, shape[i])) {
      raise(where + ": shape " + shapeText(shape) +
            " has more elements than int64 holds");
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || elements % known != 0)
      raise(where + ": cannot reshape " + shapeText(dims) + " into " +
            shapeText(shape));
    shape[inferred] = elements / known;
  }
  return shape;
}

void Importer::loadModel() {
  if (llvm::sys::fs::is_directory(path))
    raise("is a directory, not an ONNX model");
  // A FIFO would block the read forever, a device never end it.
  if (llvm::sys::fs::exists(path) && !llvm::sys::fs::is_regular_file(path))
    raise("not a regular file (a FIFO, device or folder); give the model "
          "file itself");
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    raise("cannot open: " + buffer.getError().message());
  StringRef data = (*buffer)->getBuffer();
  if (data.empty())
    raise("file is empty, not an ONNX model");
  google::protobuf::io::CodedInputStream stream(
      reinterpret_cast<const uint8_t *>(data.data()),
      static_cast<int>(std::min<size_t>(data.size(), INT32_MAX)));
  stream.SetTotalBytesLimit(INT32_MAX);
  bool parsed =
      model.ParseFromCodedStream(&stream) && stream.ConsumedEntireMessage();
  bool looksLikeText = llvm::all_of(data.take_front(256), [](char c) {
    return std::isprint(static_cast<unsigned char>(c)) || std::isspace(c);
  });
  if (!parsed) {
    if (looksLikeText)
      raise("not a binary ONNX model (this looks like text; cdp reads the "
            "protobuf wire format that torch.onnx.export and onnx.save write)");
    raise("not a valid ONNX model: protobuf parsing failed (truncated or "
          "corrupt file?)");
  }
  if (!model.has_graph() || model.ir_version() <= 0)
    raise(
        "not a valid ONNX model: " +
        Twine(model.has_graph() ? "no ir_version" : "no graph") +
        (looksLikeText ? " (this looks like text, not binary protobuf)" : ""));
}

void Importer::checkOpsets() {
  for (const onnx::OperatorSetIdProto &entry : model.opset_import()) {
    if (entry.domain().empty() || entry.domain() == "ai.onnx")
      opset = entry.version();
  }
  if (opset == 0) {
    std::string domains;
    for (const onnx::OperatorSetIdProto &entry : model.opset_import())
      domains += (domains.empty() ? "" : ", ") + entry.domain();
    raise("model imports no opset of the default ONNX domain" +
          (domains.empty()
               ? std::string()
               : " (only " + domains + ", which cdp does not support)"));
  }
  if (opset < kMinOpset || opset > kMaxOpset)
    raise("opset " + Twine(opset) +
          " of the default domain is not supported "
          "(cdp supports opsets " +
          Twine(kMinOpset) + " to " + Twine(kMaxOpset) +
          "; re-export with opset_version in that range)");
}

std::string Importer::where() const {
  std::string name = node->name().empty() ? "<unnamed>" : node->name();
  return "node '" + name + "' (" + node->op_type() + ")";
}

/// Kahn's algorithm: accepts nodes in any order and needs no recursion, so a
/// chain of many thousand nodes is fine.
std::vector<int> Importer::sortNodes() {
  const onnx::GraphProto &graph = model.graph();
  int count = graph.node_size();
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < count; ++i) {
    node = &graph.node(i);
    for (const std::string &output : node->output()) {
      if (output.empty())
        continue;
      if (initializers.count(output) || values.count(output))
        raise(where() + " writes tensor '" + output +
              "', which is already a graph input or initializer");
      auto [it, inserted] = producer.emplace(output, i);
      if (!inserted) {
        const onnx::NodeProto &first = graph.node(it->second);
        raise("tensor '" + output + "' is produced twice: by node '" +
              first.name() + "' (" + first.op_type() + ") and by " + where());
      }
    }
  }
  std::vector<int> pending(count, 0);
  std::vector<std::vector<int>> consumers(count);
  for (int i = 0; i < count; ++i) {
    node = &graph.node(i);
    for (const std::string &in : node->input()) {
      if (in.empty() || values.count(in) || initializers.count(in))
        continue;
      auto it = producer.find(in);
      if (it == producer.end())
        raise(where() + " consumes tensor '" + in +
              "', which no node, graph input or initializer defines");
      ++pending[i];
      consumers[it->second].push_back(i);
    }
  }
  std::deque<int> ready;
  for (int i = 0; i < count; ++i)
    if (pending[i] == 0)
      ready.push_back(i);
  std::vector<int> order;
  order.reserve(count);
  while (!ready.empty()) {
    int i = ready.front();
    ready.pop_front();
    order.push_back(i);
    for (int consumer : consumers[i])
      if (--pending[consumer] == 0)
        ready.push_back(consumer);
  }
  if (static_cast<int>(order.size()) != count) {
    for (int i = 0; i < count; ++i)
      if (pending[i] > 0) {
        node = &graph.node(i);
        raise("the graph has a cycle through " + where());
      }
  }
  return order;
}

//===----------------------------------------------------------------------===//
// Tensors
//===----------------------------------------------------------------------===//

Type Importer::elementTypeOf(int32_t onnxType, const Twine &what) {
  switch (onnxType) {
  case onnx::TensorProto::FLOAT:
    return builder.getF32Type();
  case onnx::TensorProto::INT64:
    return builder.getI64Type();
  case onnx::TensorProto::BOOL:
    return builder.getI1Type();
  default:
    raise(what + " has element type " + onnxTypeName(onnxType) +
          ", which cdp does not support (float32, int64 and bool only)");
  }
}

ConstTensor::Kind Importer::kindOf(Type type) {
  if (type.isF32())
    return ConstTensor::F32;
  return type.isInteger(1) ? ConstTensor::Bool : ConstTensor::I64;
}

SmallVector<int64_t> Importer::checkedShape(ArrayRef<int64_t> dims,
                                            Type elementType,
                                            const Twine &what) {
  int64_t elements = 1;
  for (int64_t dim : dims) {
    if (dim < 0)
      raise(what + " has negative dimension " + Twine(dim) + " in shape " +
            shapeText(dims));
    if (__builtin_mul_overflow(elements, dim, &elements))
      raise(what + " of shape " + shapeText(dims) +
            " has more elements than a 64-bit count holds");
  }
  int64_t width = elementType.isF32() ? 4 : elementType.isInteger(1) ? 1 : 8;
  int64_t bytes;
  bool overflows = __builtin_mul_overflow(elements, width, &bytes);
  if (overflows || bytes > options.maxTensorBytes)
    raise(what + " of shape " + shapeText(dims) + " needs " +
          (overflows ? std::string("more than 2^63") : std::to_string(bytes)) +
          " bytes, more than --max-tensor-bytes " +
          Twine(options.maxTensorBytes));
  return SmallVector<int64_t>(dims);
}

/// The lexical check above cannot see symbolic links: the file's real
/// path must lie inside the model folder's real path.
void Importer::checkContained(StringRef full, StringRef location,
                              const Twine &what) {
  SmallString<256> file, folder;
  if (llvm::sys::fs::real_path(full, file) ||
      llvm::sys::fs::real_path(llvm::sys::path::parent_path(path), folder))
    return; // missing: reading it says so
  StringRef inside(file);
  if (!inside.starts_with(folder) || inside.size() <= folder.size() ||
      !llvm::sys::path::is_separator(inside[folder.size()]))
    raise(what + " names external data '" + location +
          "', which resolves outside the model's folder (a symbolic link); "
          "only files inside it are read");
}

std::string Importer::readExternal(const onnx::TensorProto &tensor,
                                   int64_t bytes, const Twine &what) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const onnx::StringStringEntryProto &entry : tensor.external_data()) {
    if (entry.key() == "location")
      location = entry.value();
    else if (entry.key() == "offset" || entry.key() == "length") {
      char *end = nullptr;
      long long parsed = std::strtoll(entry.value().c_str(), &end, 10);
      if (entry.value().empty() || *end || parsed < 0)
        raise(what + " has an invalid external-data " + entry.key() + " '" +
              entry.value() + "'");
      (entry.key() == "offset" ? offset : length) = parsed;
    }
  }
  if (location.empty())
    raise(what + " is stored externally but names no location");
  // Never read outside the model's folder.
  if (llvm::sys::path::is_absolute(location) ||
      llvm::sys::path::is_absolute(location, llvm::sys::path::Style::windows))
    raise(what + " names external data by the absolute path '" + location +
          "'; only paths inside the model's folder are read");
  int depth = 0;
  for (auto it = llvm::sys::path::begin(location),
            end = llvm::sys::path::end(location);
       it != end; ++it) {
    if (*it == "..")
      --depth;
    else if (*it != ".")
      ++depth;
    if (depth < 0)
      raise(what + " names external data '" + location +
            "' outside the model's folder; only paths inside it are read");
  }
  SmallString<256> full(llvm::sys::path::parent_path(path));
  llvm::sys::path::append(full, location);
  if (length >= 0 && length != bytes)
    raise(what + " declares " + Twine(length) +
          " bytes of external data, "
          "its shape and type need " +
          Twine(bytes));
  checkContained(full, location, what);
  if (llvm::sys::fs::exists(full) && !llvm::sys::fs::is_regular_file(full))
    raise(what + ": external data '" + location +
          "' is not a regular file (a FIFO, device or folder)");
  auto buffer = llvm::MemoryBuffer::getFileSlice(full, bytes, offset,
                                                 /*IsVolatile=*/false);
  if (!buffer)
    raise(what + ": cannot read external data file '" + location +
          "': " + buffer.getError().message());
  uint64_t fileSize = 0;
  llvm::sys::fs::file_size(full, fileSize);
  if (static_cast<uint64_t>(offset) + static_cast<uint64_t>(bytes) > fileSize)
    raise(what + ": external data file '" + location + "' has " +
          Twine(fileSize) + " bytes, shorter than offset " + Twine(offset) +
          " + " + Twine(bytes) + " bytes declared");
  return (*buffer)->getBuffer().str();
}

ConstTensor Importer::readTensor(const onnx::TensorProto &tensor,
                                 const Twine &what) {
  Type elementType = elementTypeOf(tensor.data_type(), what);
  ConstTensor result;
  result.kind = kindOf(elementType);
  result.shape = checkedShape(
      SmallVector<int64_t>(tensor.dims().begin(), tensor.dims().end()),
      elementType, what);
  int64_t count = 1;
  for (int64_t dim : result.shape)
    count *= dim;
  int64_t width = result.kind == ConstTensor::F32    ? 4
                  : result.kind == ConstTensor::Bool ? 1
                                                     : 8;
  const std::string *raw = nullptr;
  std::string external;
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
    external = readExternal(tensor, count * width, what);
    raw = &external;
  } else if (tensor.has_raw_data()) {
    raw = &tensor.raw_data();
  }
  if (raw) {
    if (static_cast<int64_t>(raw->size()) != count * width)
      raise(what + " has " + Twine(raw->size()) + " bytes of data, expected " +
            Twine(count * width) + " for shape " + shapeText(result.shape) +
            " of " + onnxTypeName(tensor.data_type()));
    // ONNX raw data is little-endian, like every host cdp runs on. (An
    // empty tensor copies nothing: its vector's data may be null.)
    if (result.kind == ConstTensor::F32) {
      result.floats.resize(count);
      if (count)
        std::memcpy(result.floats.data(), raw->data(), raw->size());
    } else if (result.kind == ConstTensor::I64) {
      result.ints.resize(count);
      if (count)
        std::memcpy(result.ints.data(), raw->data(), raw->size());
    } else {
      for (char c : *raw)
        result.ints.push_back(c != 0);
    }
    return result;
  }
  int64_t stored = result.kind == ConstTensor::F32   ? tensor.float_data_size()
                   : result.kind == ConstTensor::I64 ? tensor.int64_data_size()
                                                     : tensor.int32_data_size();
  if (stored != count)
    raise(what + " has " + Twine(stored) + " values, expected " + Twine(count) +
          " for shape " + shapeText(result.shape));
  if (result.kind == ConstTensor::F32)
    result.floats.assign(tensor.float_data().begin(),
                         tensor.float_data().end());
  else if (result.kind == ConstTensor::I64)
    result.ints.assign(tensor.int64_data().begin(), tensor.int64_data().end());
  else
    for (int32_t v : tensor.int32_data())
      result.ints.push_back(v != 0);
  return result;
}

Attribute Importer::elementsAttr(const ConstTensor &constant) {
  Type elementType =
      constant.kind == ConstTensor::F32   ? Type(builder.getF32Type())
      : constant.kind == ConstTensor::I64 ? Type(builder.getI64Type())
                                          : Type(builder.getI1Type());
  auto type = RankedTensorType::get(constant.shape, elementType);
  if (constant.kind == ConstTensor::F32)
    return DenseElementsAttr::get(type, ArrayRef<float>(constant.floats));
  if (constant.kind == ConstTensor::I64)
    return DenseElementsAttr::get(type, ArrayRef<int64_t>(constant.ints));
  SmallVector<bool> bits(constant.ints.begin(), constant.ints.end());
  return DenseElementsAttr::get(type, ArrayRef<bool>(bits));
}

/// A float initializer becomes one `cdp.param`, created at its first use and
/// shared by every later one (tied weights stay one parameter).
Value Importer::paramFor(const std::string &name, Entry &entry) {
  const onnx::TensorProto &tensor = *entry.initializer;
  std::string what = "initializer '" + name + "'";
  Type elementType = elementTypeOf(tensor.data_type(), what);
  OpBuilder::InsertionGuard guard(builder);
  if (lastParam)
    builder.setInsertionPointAfter(lastParam);
  else
    builder.setInsertionPointToStart(body);
  SmallVector<NamedAttribute> attributes{
      named("name", builder.getStringAttr(name))};
  RankedTensorType type;
  if (options.shapesOnly) {
    type = RankedTensorType::get(
        checkedShape(
            SmallVector<int64_t>(tensor.dims().begin(), tensor.dims().end()),
            elementType, what),
        elementType);
  } else {
    ConstTensor data = readTensor(tensor, what);
    type = RankedTensorType::get(data.shape, elementType);
    // An empty vector's data() is null, which MLIR would pass to memcpy.
    static const float nothing = 0.0f;
    ArrayRef<float> values = data.floats.empty()
                                 ? ArrayRef<float>(&nothing, size_t(0))
                                 : ArrayRef<float>(data.floats);
    AsmResourceBlob blob =
        HeapAsmResourceBlob::allocateAndCopyInferAlign<float>(values);
    attributes.push_back(named(
        "value", DenseResourceElementsAttr::get(type, name, std::move(blob))));
  }
  OperationState state(NameLoc::get(builder.getStringAttr(name)),
                       ParamOp::getOperationName());
  state.addAttributes(attributes);
  state.addTypes(type);
  lastParam = builder.create(state);
  return lastParam->getResult(0);
}

Value Importer::materialize(const std::string &name, Entry &entry) {
  if (entry.value)
    return entry.value;
  if (entry.initializer &&
      entry.initializer->data_type() == onnx::TensorProto::FLOAT) {
    entry.value = paramFor(name, entry);
    return entry.value;
  }
  if (!entry.constant)
    entry.constant =
        readTensor(*entry.initializer, "initializer '" + name + "'");
  Attribute value = elementsAttr(*entry.constant);
  entry.value =
      builder
          .create<ConstantOp>(NameLoc::get(builder.getStringAttr(name)),
                              cast<ElementsAttr>(value))
          .getResult();
  return entry.value;
}

//===----------------------------------------------------------------------===//
// Node helpers
//===----------------------------------------------------------------------===//

bool Importer::hasInput(int i) const {
  return i < node->input_size() && !node->input(i).empty();
}

Value Importer::input(int i) {
  if (!hasInput(i))
    raise(where() + " is missing its input " + Twine(i));
  const std::string &name = node->input(i);
  return materialize(name, values.at(name));
}

const ConstTensor *Importer::constInput(int i) {
  if (!hasInput(i))
    return nullptr;
  Entry &entry = values.at(node->input(i));
  if (!entry.constant && entry.initializer &&
      entry.initializer->data_type() != onnx::TensorProto::FLOAT)
    entry.constant =
        readTensor(*entry.initializer, "initializer '" + node->input(i) + "'");
  return entry.constant ? &*entry.constant : nullptr;
}

const ConstTensor &Importer::requireConst(int i, StringRef role) {
  if (!hasInput(i))
    raise(where() + " is missing its " + role + " input");
  const ConstTensor *constant = constInput(i);
  // A float initializer is a parameter to the graph's other uses, but where
  // an operator needs a compile-time value (a ratio, a scale) it is one.
  Entry &entry = values.at(node->input(i));
  if (!constant && entry.initializer) {
    auto [it, read] = initializerValues.try_emplace(node->input(i));
    if (read)
      it->second = readTensor(*entry.initializer,
                              "initializer '" + node->input(i) + "'");
    constant = &it->second;
  }
  if (!constant)
    raise(where() + ": " + role + " input '" + node->input(i) +
          "' is not a constant; cdp needs it at compile time (static shapes)");
  return *constant;
}

std::vector<int64_t> Importer::constInts(int i, StringRef role) {
  const ConstTensor &constant = requireConst(i, role);
  if (constant.kind != ConstTensor::I64)
    raise(where() + ": " + role + " input '" + node->input(i) +
          "' must be int64");
  return constant.ints;
}

const onnx::AttributeProto *Importer::attr(StringRef name) const {
  for (const onnx::AttributeProto &attribute : node->attribute())
    if (attribute.name() == name)
      return &attribute;
  return nullptr;
}

/// ONNX's name of an attribute type, with its article.
static std::string typeName(onnx::AttributeProto::AttributeType type) {
  std::string name = onnx::AttributeProto::AttributeType_Name(type);
  bool vowel = !name.empty() && std::strchr("AEIOU", name[0]) != nullptr;
  return (vowel ? "an " : "a ") + name;
}

const onnx::AttributeProto *
Importer::typedAttr(StringRef name,
                    onnx::AttributeProto::AttributeType type) const {
  const onnx::AttributeProto *a = attr(name);
  // Models from before attribute types were recorded leave it UNDEFINED.
  if (a && a->type() != type && a->type() != onnx::AttributeProto::UNDEFINED)
    raise(where() + ": attribute '" + name.str() + "' is " +
          typeName(a->type()) + ", expected " + typeName(type));
  return a;
}

int64_t Importer::intAttr(StringRef name, int64_t fallback) const {
  const onnx::AttributeProto *a = typedAttr(name, onnx::AttributeProto::INT);
  return a ? a->i() : fallback;
}

float Importer::floatAttr(StringRef name, float fallback) const {
  const onnx::AttributeProto *a = typedAttr(name, onnx::AttributeProto::FLOAT);
  return a ? a->f() : fallback;
}

std::string Importer::stringAttr(StringRef name, StringRef fallback) const {
  const onnx::AttributeProto *a = typedAttr(name, onnx::AttributeProto::STRING);
  return a ? a->s() : fallback.str();
}

std::vector<int64_t> Importer::intsAttr(StringRef name) const {
  const onnx::AttributeProto *a = typedAttr(name, onnx::AttributeProto::INTS);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end())
           : std::vector<int64_t>();
}

/// Refuses attributes cdp does not implement instead of ignoring them.
void Importer::checkAttributes(std::initializer_list<StringRef> known) const {
  for (const onnx::AttributeProto &attribute : node->attribute())
    if (!llvm::is_contained(known, attribute.name()))
      raise(where() + ": attribute '" + attribute.name() +
            "' is not supported");
}

/// Builds an op by name; result types come from the op's own shape rules.
/// A rule's complaint becomes the one error line, naming the node.
Operation *Importer::create(StringRef opName, ArrayRef<Value> operands,
                            ArrayRef<NamedAttribute> attributes,
                            unsigned numResults) {
  Location loc = NameLoc::get(builder.getStringAttr(
      node->name().empty() ? node->op_type() : node->name()));
  std::string diagnostic;
  Operation *op = createInferred(builder, loc, opName, operands, attributes,
                                 numResults, diagnostic);
  if (!op)
    raise(where() + ": " + diagnostic);
  for (Value result : op->getResults()) {
    auto tensor = cast<RankedTensorType>(result.getType());
    checkedShape(tensor.getShape(), tensor.getElementType(),
                 where() + " result");
  }
  return op;
}

void Importer::bindResults(Operation *op) {
  for (int i = 0; i < node->output_size(); ++i) {
    if (node->output(i).empty())
      continue;
    if (i >= static_cast<int>(op->getNumResults())) {
      if (!isRead(node->output(i)))
        continue; // e.g. BatchNormalization's saved statistics at opset 13
      raise(where() + ": output " + Twine(i) + " ('" + node->output(i) +
            "') is not supported");
    }
    values[node->output(i)].value = op->getResult(i);
  }
}

bool Importer::isRead(const std::string &name) {
  if (readNames.empty()) {
    const onnx::GraphProto &graph = model.graph();
    for (const onnx::NodeProto &each : graph.node())
      readNames.insert(each.input().begin(), each.input().end());
    for (const onnx::ValueInfoProto &output : graph.output())
      readNames.insert(output.name());
  }
  return readNames.count(name) != 0;
}

void Importer::bindConst(int output, ConstTensor value) {
  if (output < node->output_size() && !node->output(output).empty())
    values[node->output(output)].constant = std::move(value);
}

//===----------------------------------------------------------------------===//
// Constant folding of shape computations
//===----------------------------------------------------------------------===//

/// Evaluates `node` when all of its inputs are known and small; returns
/// false when the node must become an op instead.
bool Importer::foldConstantOfShape(const std::vector<const ConstTensor *> &in,
                                   ConstTensor &out) {
  checkAttributes({"value"});
  std::vector<int64_t> shape = constInts(0, "shape");
  out.kind = ConstTensor::F32;
  double fill = 0;
  if (const onnx::AttributeProto *a = attr("value")) {
    ConstTensor v = readTensor(a->t(), where() + " value");
    if (v.size() != 1)
      raise(where() + ": value must hold one element");
    out.kind = v.kind;
    fill = v.at(0);
  }
  Type elementType = out.kind == ConstTensor::F32 ? Type(builder.getF32Type())
                                                  : Type(builder.getI64Type());
  out.shape = checkedShape(shape, elementType, where() + " result");
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  if (count > kFoldLimit)
    return false;
  for (int64_t i = 0; i < count; ++i)
    out.push(fill);
  return true;
}

bool Importer::foldIdentity(const std::vector<const ConstTensor *> &in,
                            ConstTensor &out) {
  out = *in[0];
  return true;
}

bool Importer::foldCast(const std::vector<const ConstTensor *> &in,
                        ConstTensor &out) {
  checkAttributes({"to", "saturate"});
  Type to = elementTypeOf(static_cast<int32_t>(intAttr("to", 0)),
                          where() + " target");
  out.kind = kindOf(to);
  out.shape = in[0]->shape;
  for (int64_t i = 0; i < in[0]->size(); ++i) {
    double v = in[0]->at(i);
    if (out.kind == ConstTensor::Bool)
      out.ints.push_back(v != 0);
    else if (out.kind == ConstTensor::I64 && in[0]->kind != ConstTensor::F32)
      out.ints.push_back(in[0]->ints[i]);
    else
      out.push(out.kind == ConstTensor::I64 ? std::trunc(v) : v);
  }
  return true;
}

bool Importer::foldGather(const std::vector<const ConstTensor *> &in,
                          ConstTensor &out) {
  checkAttributes({"axis"});
  const ConstTensor &data = *in[0];
  const ConstTensor &indices = *in[1];
  int64_t rank = data.shape.size();
  int64_t axis = intAttr("axis", 0);
  if (rank == 0 || axis < -rank || axis >= rank)
    raise(where() + ": axis " + Twine(axis) + " is out of range");
  if (axis < 0)
    axis += rank;
  int64_t outer = 1, inner = 1, dim = data.shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= data.shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= data.shape[d];
  out.shape.assign(data.shape.begin(), data.shape.begin() + axis);
  out.shape.append(indices.shape.begin(), indices.shape.end());
  out.shape.append(data.shape.begin() + axis + 1, data.shape.end());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < indices.size(); ++k) {
      int64_t index = indices.intAt(k);
      if (index < -dim || index >= dim)
        raise(where() + ": index " + Twine(index) +
              " is out of range for a dimension of " + Twine(dim));
      if (index < 0)
        index += dim;
      for (int64_t j = 0; j < inner; ++j)
        out.append(data, (o * dim + index) * inner + j);
    }
  return true;
}

bool Importer::foldSqueeze(const std::vector<const ConstTensor *> &in,
                           ConstTensor &out, StringRef opType) {
  checkAttributes({"axes"});
  std::vector<int64_t> axes =
      opset >= 13 && hasInput(1) ? constInts(1, "axes") : intsAttr("axes");
  out = *in[0];
  int64_t rank = in[0]->shape.size();
  if (opType == "Unsqueeze") {
    int64_t outRank = rank + axes.size();
    for (int64_t &a : axes) {
      if (a < -outRank || a >= outRank)
        raise(where() + ": axis " + Twine(a) + " is out of range");
      a = a < 0 ? a + outRank : a;
    }
    std::sort(axes.begin(), axes.end());
    for (int64_t a : axes)
      out.shape.insert(out.shape.begin() + a, 1);
  } else {
    SmallVector<int64_t> shape;
    for (int64_t d = 0; d < rank; ++d) {
      bool listed = llvm::any_of(
          axes, [&](int64_t a) { return (a < 0 ? a + rank : a) == d; });
      if ((listed || axes.empty()) && in[0]->shape[d] == 1)
        continue;
      if (listed)
        raise(where() + ": cannot squeeze a dimension of size " +
              Twine(in[0]->shape[d]));
      shape.push_back(in[0]->shape[d]);
    }
    out.shape = shape;
  }
  return true;
}

bool Importer::foldConcat(const std::vector<const ConstTensor *> &in,
                          ConstTensor &out) {
  checkAttributes({"axis"});
  int64_t rank = in[0]->shape.size();
  int64_t axis = intAttr("axis", 0);
  if (axis < -rank || axis >= rank)
    raise(where() + ": axis " + Twine(axis) + " is out of range");
  axis = axis < 0 ? axis + rank : axis;
  if (axis != 0 && rank != 1)
    return false; // only 1-D shape vectors are folded
  out.shape = {0};
  for (const ConstTensor *part : in) {
    if (!part || part->shape.size() != 1 || part->kind != out.kind)
      return false;
    out.shape[0] += part->shape[0];
    for (int64_t i = 0; i < part->size(); ++i)
      out.append(*part, i);
  }
  return true;
}

bool Importer::foldSlice(const std::vector<const ConstTensor *> &in,
                         ConstTensor &out) {
  if (in[0]->shape.size() != 1)
    return false;
  std::vector<int64_t> starts = constInts(1, "starts"),
                       ends = constInts(2, "ends");
  std::vector<int64_t> axes =
      hasInput(3) ? constInts(3, "axes") : std::vector<int64_t>{0};
  std::vector<int64_t> steps =
      hasInput(4) ? constInts(4, "steps") : std::vector<int64_t>{1};
  if (starts.size() != 1 || ends.size() != 1 || axes.size() != 1 ||
      steps.size() != 1 || (axes[0] != 0 && axes[0] != -1) || steps[0] == 0)
    return false;
  int64_t dim = in[0]->shape[0], step = steps[0];
  int64_t start = starts[0] < 0 ? starts[0] + dim : starts[0];
  int64_t end = ends[0] < 0 ? ends[0] + dim : ends[0];
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    // Steps near 2^63 would overflow the index: stop instead.
    for (int64_t i = start; i < end;) {
      out.append(*in[0], i);
      if (__builtin_add_overflow(i, step, &i))
        break;
    }
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    for (int64_t i = start; i > end;) {
      out.append(*in[0], i);
      if (__builtin_add_overflow(i, step, &i))
        break;
    }
  }
  out.shape = {out.size()};
  return true;
}

bool Importer::foldReshape(const std::vector<const ConstTensor *> &in,
                           ConstTensor &out) {
  // Shape arithmetic such as torch's expand(-1, ...) reshapes constants.
  checkAttributes({"allowzero"});
  std::vector<int64_t> shape =
      resolveReshape(in[0]->shape, constInts(1, "shape"), in[0]->size(),
                     intAttr("allowzero", 0) != 0, where());
  out = *in[0];
  out.shape.assign(shape.begin(), shape.end());
  return true;
}

bool Importer::foldNeg(const std::vector<const ConstTensor *> &in,
                       ConstTensor &out) {
  checkAttributes({});
  if (out.kind == ConstTensor::Bool)
    return false;
  for (float v : in[0]->floats)
    out.floats.push_back(-v);
  for (int64_t v : in[0]->ints)
    out.ints.push_back(-v);
  out.shape = in[0]->shape;
  return true;
}

bool Importer::foldWhere(const std::vector<const ConstTensor *> &in,
                         ConstTensor &out) {
  checkAttributes({});
  const ConstTensor &cond = *in[0], &a = *in[1], &b = *in[2];
  out.kind = a.kind;
  if (cond.kind != ConstTensor::Bool || a.kind != b.kind ||
      a.shape != b.shape || cond.shape != a.shape)
    return false; // broadcasting selects are left to a later importer
  for (int64_t i = 0; i < a.size(); ++i)
    out.append(cond.ints[i] ? a : b, i);
  out.shape = a.shape;
  return true;
}

bool Importer::foldArithmetic(const std::vector<const ConstTensor *> &in,
                              ConstTensor &out, StringRef opType) {
  // Element-wise arithmetic on small constants (shape arithmetic).
  const ConstTensor &lhs = *in[0], &rhs = *in[1];
  if (lhs.kind != rhs.kind || lhs.kind == ConstTensor::Bool ||
      (lhs.size() != 1 && rhs.size() != 1 && lhs.shape != rhs.shape))
    return false;
  out.shape = lhs.size() >= rhs.size() ? lhs.shape : rhs.shape;
  int64_t count = std::max(lhs.size(), rhs.size());
  if (opType == "Equal")
    out.kind = ConstTensor::Bool;
  for (int64_t i = 0; i < count; ++i) {
    int64_t li = lhs.size() == 1 ? 0 : i, ri = rhs.size() == 1 ? 0 : i;
    if (opType == "Equal") { // same kinds: compare without conversion
      out.ints.push_back(lhs.kind == ConstTensor::F32
                             ? lhs.floats[li] == rhs.floats[ri]
                             : lhs.ints[li] == rhs.ints[ri]);
    } else if (lhs.kind == ConstTensor::I64) {
      int64_t a = lhs.ints[li], b = rhs.ints[ri], result = 0;
      if (opType == "Div" && b == 0)
        raise(where() + ": integer division by zero");
      // Refused rather than wrapped: a shape computed from a wrapped value
      // would be wrong without a word.
      bool overflow = false;
      if (opType == "Add")
        overflow = __builtin_add_overflow(a, b, &result);
      else if (opType == "Sub")
        overflow = __builtin_sub_overflow(a, b, &result);
      else if (opType == "Mul")
        overflow = __builtin_mul_overflow(a, b, &result);
      else if (a == std::numeric_limits<int64_t>::min() && b == -1)
        overflow = true;
      else
        result = a / b;
      if (overflow)
        raise(where() + ": int64 arithmetic overflows");
      out.ints.push_back(result);
    } else {
      float a = lhs.floats[li], b = rhs.floats[ri];
      out.floats.push_back(opType == "Add"   ? a + b
                           : opType == "Sub" ? a - b
                           : opType == "Mul" ? a * b
                                             : a / b);
    }
  }
  return true;
}

bool Importer::tryFold(StringRef opType) {
  static const llvm::StringSet<> foldable = {
      "Shape",     "Constant", "ConstantOfShape",
      "Identity",  "Cast",     "Gather",
      "Unsqueeze", "Squeeze",  "Concat",
      "Slice",     "Reshape",  "Add",
      "Sub",       "Mul",      "Div",
      "Equal",     "Where",    "Neg"};
  if (!foldable.contains(opType))
    return false;

  if (opType == "Shape") {
    checkAttributes({"start", "end"});
    RankedTensorType type = typeOf(input(0));
    int64_t rank = type.getRank();
    auto clamp = [&](int64_t v) {
      return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank);
    };
    int64_t start = clamp(intAttr("start", 0)),
            end = clamp(intAttr("end", rank));
    ConstTensor shape;
    shape.kind = ConstTensor::I64;
    for (int64_t d = start; d < end; ++d)
      shape.ints.push_back(type.getDimSize(d));
    shape.shape = {static_cast<int64_t>(shape.ints.size())};
    bindConst(0, std::move(shape));
    return true;
  }
  if (opType == "Constant") {
    checkAttributes(
        {"value", "value_float", "value_floats", "value_int", "value_ints"});
    ConstTensor value;
    if (const onnx::AttributeProto *a = attr("value")) {
      value = readTensor(a->t(), where() + " value");
    } else if (const onnx::AttributeProto *a = attr("value_float")) {
      value.floats = {a->f()};
    } else if (const onnx::AttributeProto *a = attr("value_floats")) {
      value.floats.assign(a->floats().begin(), a->floats().end());
      value.shape = {static_cast<int64_t>(value.floats.size())};
    } else if (const onnx::AttributeProto *a = attr("value_int")) {
      value.kind = ConstTensor::I64;
      value.ints = {a->i()};
    } else if (const onnx::AttributeProto *a = attr("value_ints")) {
      value.kind = ConstTensor::I64;
      value.ints.assign(a->ints().begin(), a->ints().end());
      value.shape = {static_cast<int64_t>(value.ints.size())};
    } else {
      raise(where() + " has no value attribute");
    }
    bindConst(0, std::move(value));
    return true;
  }

  // The remaining ops fold only when every input is a known constant, and
  // every input they require is there (else the import names the missing
  // one).
  static const llvm::StringMap<int> required = {
      {"Gather", 2}, {"Reshape", 2}, {"Slice", 3}, {"Add", 2},  {"Sub", 2},
      {"Mul", 2},    {"Div", 2},     {"Equal", 2}, {"Where", 3}};
  for (int i = 0; i < required.lookup(opType); ++i)
    if (!hasInput(i))
      return false;
  for (int i = 0; i < node->input_size(); ++i)
    if (hasInput(i) && !constInput(i))
      return false;
  std::vector<const ConstTensor *> in;
  for (int i = 0; i < node->input_size(); ++i)
    in.push_back(constInput(i));
  if (in.empty() || !in[0])
    return false;
  ConstTensor out;
  out.kind = in[0]->kind;

  if (opType == "ConstantOfShape") {
    if (!foldConstantOfShape(in, out))
      return false;
  } else if (opType == "Identity") {
    if (!foldIdentity(in, out))
      return false;
  } else if (opType == "Cast") {
    if (!foldCast(in, out))
      return false;
  } else if (opType == "Gather") {
    if (!foldGather(in, out))
      return false;
  } else if (opType == "Unsqueeze" || opType == "Squeeze") {
    if (!foldSqueeze(in, out, opType))
      return false;
  } else if (opType == "Concat") {
    if (!foldConcat(in, out))
      return false;
  } else if (opType == "Slice") {
    if (!foldSlice(in, out))
      return false;
  } else if (opType == "Reshape") {
    if (!foldReshape(in, out))
      return false;
  } else if (opType == "Neg") {
    if (!foldNeg(in, out))
      return false;
  } else if (opType == "Where") {
    if (!foldWhere(in, out))
      return false;
  } else if (!foldArithmetic(in, out, opType))
    return false;
  if (out.size() > kFoldLimit)
    return false;
  bindConst(0, std::move(out));
  return true;
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

/// Explicit pads for ONNX `pads`/`auto_pad` (SAME_UPPER puts the odd pad at
/// the end, SAME_LOWER at the beginning).
std::vector<int64_t> Importer::windowPads(ArrayRef<int64_t> inputSpatial,
                                          ArrayRef<int64_t> kernel,
                                          ArrayRef<int64_t> strides,
                                          ArrayRef<int64_t> dilations) {
  std::string autoPad = stringAttr("auto_pad", "NOTSET");
  std::vector<int64_t> pads = intsAttr("pads");
  size_t spatial = kernel.size();
  if (autoPad == "NOTSET") {
    if (pads.empty())
      pads.assign(2 * spatial, 0);
    return pads;
  }
  if (autoPad == "VALID")
    return std::vector<int64_t>(2 * spatial, 0);
  if (autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    raise(where() + ": auto_pad '" + autoPad + "' is not supported");
  if (inputSpatial.size() != spatial || strides.size() != spatial ||
      dilations.size() != spatial)
    raise(where() + ": kernel_shape, strides and dilations must have one "
                    "entry per spatial dimension");
  pads.assign(2 * spatial, 0);
  for (size_t d = 0; d < spatial; ++d) {
    if (strides[d] < 1)
      raise(where() + ": strides must be positive");
    int64_t out = (inputSpatial[d] + strides[d] - 1) / strides[d];
    int64_t span = (kernel[d] - 1) * dilations[d] + 1;
    int64_t total =
        std::max<int64_t>(0, (out - 1) * strides[d] + span - inputSpatial[d]);
    int64_t small = total / 2, large = total - small;
    pads[d] = autoPad == "SAME_UPPER" ? small : large;
    pads[d + spatial] = autoPad == "SAME_UPPER" ? large : small;
  }
  return pads;
}

void Importer::importConv() {
  checkAttributes(
      {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  Value x = input(0), w = input(1);
  RankedTensorType xType = typeOf(x), wType = typeOf(w);
  if (xType.getRank() != 4 || wType.getRank() != 4)
    raise(where() + ": only 2-D convolution is supported (input rank " +
          Twine(xType.getRank()) + ")");
  std::vector<int64_t> strides = intsAttr("strides"),
                       dilations = intsAttr("dilations");
  if (strides.empty())
    strides = {1, 1};
  if (dilations.empty())
    dilations = {1, 1};
  std::vector<int64_t> kernel(wType.getShape().begin() + 2,
                              wType.getShape().end());
  std::vector<int64_t> explicitKernel = intsAttr("kernel_shape");
  if (!explicitKernel.empty() && explicitKernel != kernel)
    raise(where() + ": kernel_shape " + shapeText(explicitKernel) +
          " does not match the weight " + shapeText(wType.getShape()));
  std::vector<int64_t> pads =
      windowPads(xType.getShape().drop_front(2), kernel, strides, dilations);
  SmallVector<Value> operands{x, w};
  if (hasInput(2))
    operands.push_back(input(2));
  bindResults(
      create(ConvOp::getOperationName(), operands,
             {named("pads", i64s(pads)), named("strides", i64s(strides)),
              named("dilations", i64s(dilations)),
              named("group", builder.getI64IntegerAttr(intAttr("group", 1)))},
             1));
}

void Importer::importPool(bool isMax) {
  if (isMax)
    checkAttributes({"auto_pad", "ceil_mode", "dilations", "kernel_shape",
                     "pads", "storage_order", "strides"});
  else
    checkAttributes({"auto_pad", "ceil_mode", "count_include_pad", "dilations",
                     "kernel_shape", "pads", "strides"});
  Value x = input(0);
  RankedTensorType type = typeOf(x);
  std::vector<int64_t> kernel = intsAttr("kernel_shape");
  int64_t spatial = type.getRank() - 2;
  if (spatial < 1 || spatial > 3)
    raise(where() + ": pooling takes 1 to 3 spatial dimensions (input rank " +
          Twine(type.getRank()) + ")");
  if (static_cast<int64_t>(kernel.size()) != spatial)
    raise(where() + ": kernel_shape has " + Twine(kernel.size()) +
          " entries for " + Twine(spatial) + " spatial dimensions");
  std::vector<int64_t> strides = intsAttr("strides"),
                       dilations = intsAttr("dilations");
  if (strides.empty())
    strides.assign(spatial, 1);
  if (dilations.empty())
    dilations.assign(spatial, 1);
  std::vector<int64_t> pads =
      windowPads(type.getShape().drop_front(2), kernel, strides, dilations);
  SmallVector<NamedAttribute> attributes{
      named("kernel_shape", i64s(kernel)), named("pads", i64s(pads)),
      named("strides", i64s(strides)), named("dilations", i64s(dilations)),
      named("ceil_mode", builder.getBoolAttr(intAttr("ceil_mode", 0)))};
  if (!isMax)
    attributes.push_back(
        named("count_include_pad",
              builder.getBoolAttr(intAttr("count_include_pad", 0))));
  Operation *pool = create(isMax ? MaxPoolOp::getOperationName()
                                 : AveragePoolOp::getOperationName(),
                           {x}, attributes, 1);
  if (!isMax || node->output_size() < 2 || node->output(1).empty())
    return bindResults(pool);
  // The Indices output: where each maximum is, flattened over the input
  // (row-major, or column-major spatial dimensions with storage_order 1).
  attributes.push_back(named(
      "storage_order", builder.getI64IntegerAttr(intAttr("storage_order", 0))));
  Operation *indices =
      create(MaxPoolIndicesOp::getOperationName(), {x}, attributes, 1);
  values[node->output(0)].value = pool->getResult(0);
  values[node->output(1)].value = indices->getResult(0);
}

void Importer::importReduce(StringRef opName) {
  checkAttributes({"axes", "keepdims", "noop_with_empty_axes"});
  Value x = input(0);
  // ReduceSum takes axes as an input from opset 13, ReduceMean from 18.
  bool axesInput =
      opName == ReduceSumOp::getOperationName() ? opset >= 13 : opset >= 18;
  std::vector<int64_t> axes =
      axesInput ? (hasInput(1) ? constInts(1, "axes") : std::vector<int64_t>{})
                : intsAttr("axes");
  if (axes.empty() && intAttr("noop_with_empty_axes", 0)) {
    bindResults(create(IdentityOp::getOperationName(), {x}, {}, 1));
    return;
  }
  int64_t rank = typeOf(x).getRank();
  for (int64_t &a : axes)
    if (a < 0 && a >= -rank)
      a += rank;
  bindResults(
      create(opName, {x},
             {named("axes", i64s(axes)),
              named("keepdims", builder.getBoolAttr(intAttr("keepdims", 1)))},
             1));
}

/// -x as x * -1 (float32 or int64), so that autodiff and the kernels need
/// nothing new.
void Importer::importNeg() {
  checkAttributes({});
  Value x = input(0);
  Type element = typeOf(x).getElementType();
  auto scalar = RankedTensorType::get({}, element);
  DenseElementsAttr minusOne =
      element.isF32() ? DenseElementsAttr::get(scalar, ArrayRef<float>{-1.0f})
                      : DenseElementsAttr::get(scalar, ArrayRef<int64_t>{-1});
  Value factor =
      builder.create<ConstantOp>(NameLoc::get(builder.getStringAttr(where())),
                                 cast<ElementsAttr>(minusOne));
  bindResults(create(MulOp::getOperationName(), {x, factor}, {}, 1));
}

/// Clip's bounds are attributes before opset 11 and constant inputs after;
/// a missing bound is unbounded.
void Importer::importClip() {
  checkAttributes({"min", "max"});
  float low = -std::numeric_limits<float>::infinity(),
        high = std::numeric_limits<float>::infinity();
  if (opset < 11) {
    low = floatAttr("min", low);
    high = floatAttr("max", high);
  } else {
    // A bound is a scalar; an empty or longer one is refused, not read.
    auto bound = [&](int index, const char *name) {
      const ConstTensor &value = requireConst(index, name);
      if (value.size() != 1)
        raise(where() + ": " + name + " must hold one element, it has " +
              std::to_string(value.size()));
      return static_cast<float>(value.at(0));
    };
    if (hasInput(1))
      low = bound(1, "min");
    if (hasInput(2))
      high = bound(2, "max");
  }
  bindResults(create(ClipOp::getOperationName(), {input(0)},
                     {named("min", builder.getF32FloatAttr(low)),
                      named("max", builder.getF32FloatAttr(high))},
                     1));
}

/// Pad in constant mode with pads as an attribute (before opset 11) or a
/// constant input, optionally over some axes only (opset 18).
void Importer::importPad() {
  checkAttributes({"mode", "pads", "value"});
  std::string mode = stringAttr("mode", "constant");
  if (mode != "constant")
    raise(where() + ": mode '" + mode +
          "' is not supported (only constant padding)");
  Value x = input(0);
  int64_t rank = typeOf(x).getRank();
  std::vector<int64_t> given =
      opset < 11 ? intsAttr("pads") : constInts(1, "pads");
  float value = floatAttr("value", 0.0f);
  if (opset >= 11 && hasInput(2))
    value = static_cast<float>(requireConst(2, "constant_value").at(0));
  std::vector<int64_t> axes;
  if (opset >= 18 && hasInput(3))
    axes = constInts(3, "axes");
  else
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  if (given.size() != 2 * axes.size())
    raise(where() + ": pads has " + Twine(given.size()) + " values for " +
          Twine(axes.size()) + " axes");
  SmallVector<int64_t> pads(2 * rank, 0);
  int64_t count = axes.size();
  for (int64_t i = 0; i < count; ++i) {
    int64_t axis = axes[i];
    if (axis < -rank || axis >= rank)
      raise(where() + ": axis " + Twine(axis) + " is out of range");
    axis = axis < 0 ? axis + rank : axis;
    if (given[i] < 0 || given[i + count] < 0)
      raise(where() + ": negative pads (cropping) are not supported");
    pads[axis] = given[i];
    pads[axis + rank] = given[i + count];
  }
  bindResults(create(PadOp::getOperationName(), {x},
                     {named("pads", i64s(pads)),
                      named("value", builder.getF32FloatAttr(value))},
                     1));
}

void Importer::importPow() {
  // ONNX allows integer bases and exponents; cdp computes in float32
  // (exact while a result fits its 24-bit significand) and casts an
  // integer base's result back, truncating as ONNX's Cast does.
  checkAttributes({});
  Value base = input(0), exponent = input(1);
  Type f32 = builder.getF32Type(), i64 = builder.getIntegerType(64);
  auto cast = [&](Value value, Type to) {
    return create(CastOp::getOperationName(), {value},
                  {named("to", TypeAttr::get(to))}, 1)
        ->getResult(0);
  };
  bool integerBase = typeOf(base).getElementType().isInteger(64);
  if (!integerBase && !typeOf(base).getElementType().isF32())
    raise(where() + ": the base must be float32 or int64");
  if (integerBase)
    base = cast(base, f32);
  if (typeOf(exponent).getElementType().isInteger(64))
    exponent = cast(exponent, f32);
  Operation *power = create(PowOp::getOperationName(), {base, exponent}, {}, 1);
  if (!integerBase)
    return bindResults(power);
  values[node->output(0)].value = cast(power->getResult(0), i64);
  return;
}

void Importer::importHardSigmoid() {
  checkAttributes({"alpha", "beta"});
  return bindResults(
      create(HardSigmoidOp::getOperationName(), {input(0)},
             {named("alpha", builder.getF32FloatAttr(floatAttr("alpha", 0.2f))),
              named("beta", builder.getF32FloatAttr(floatAttr("beta", 0.5f)))},
             1));
}

void Importer::importGelu() {
  checkAttributes({"approximate"});
  return bindResults(
      create(GeluOp::getOperationName(), {input(0)},
             {named("approximate",
                    builder.getStringAttr(stringAttr("approximate", "none")))},
             1));
}

void Importer::importGemm() {
  checkAttributes({"alpha", "beta", "transA", "transB"});
  SmallVector<Value> operands{input(0), input(1)};
  if (hasInput(2))
    operands.push_back(input(2));
  return bindResults(
      create(GemmOp::getOperationName(), operands,
             {named("alpha", builder.getF32FloatAttr(floatAttr("alpha", 1.0f))),
              named("beta", builder.getF32FloatAttr(floatAttr("beta", 1.0f))),
              named("trans_a", builder.getBoolAttr(intAttr("transA", 0))),
              named("trans_b", builder.getBoolAttr(intAttr("transB", 0)))},
             1));
}

void Importer::importBatchNormalization() {
  checkAttributes({"epsilon", "momentum", "training_mode"});
  SmallVector<Value> operands;
  for (int i = 0; i < 5; ++i)
    operands.push_back(input(i));
  // Running statistics are buffers, not trainable parameters.
  for (int i = 3; i < 5; ++i)
    if (auto param = operands[i].getDefiningOp<ParamOp>())
      param.setBuffer(true);
  bool statistics =
      node->output_size() > 1 &&
      llvm::any_of(llvm::drop_begin(node->output()),
                   [](const std::string &o) { return !o.empty(); });
  // Before opset 14 there is no training_mode: asking for the running
  // statistics is what selects training (torch exports it so at 13).
  bool training = opset < 14 ? statistics : intAttr("training_mode", 0) != 0;
  if (!training && statistics)
    raise(where() + ": running statistics outputs need training_mode=1");
  return bindResults(create(
      BatchNormOp::getOperationName(), operands,
      {named("epsilon", builder.getF32FloatAttr(floatAttr("epsilon", 1e-5f))),
       named("momentum", builder.getF32FloatAttr(floatAttr("momentum", 0.9f))),
       named("training_mode", builder.getBoolAttr(training))},
      3));
}

void Importer::importLayerNormalization() {
  checkAttributes({"axis", "epsilon", "stash_type"});
  if (intAttr("stash_type", 1) != 1)
    raise(where() + ": stash_type " + Twine(intAttr("stash_type", 1)) +
          " is not supported (float32 only)");
  SmallVector<Value> operands{input(0), input(1)};
  if (hasInput(2))
    operands.push_back(input(2));
  return bindResults(create(
      LayerNormOp::getOperationName(), operands,
      {named("axis", builder.getI64IntegerAttr(intAttr("axis", -1))),
       named("epsilon", builder.getF32FloatAttr(floatAttr("epsilon", 1e-5f)))},
      3));
}

void Importer::importDropout() {
  checkAttributes({"seed"});
  float ratio = 0.5f;
  if (hasInput(1))
    ratio = static_cast<float>(requireConst(1, "ratio").at(0));
  bool training = false;
  if (hasInput(2))
    training = requireConst(2, "training_mode").at(0) != 0;
  SmallVector<NamedAttribute> attributes{
      named("ratio", builder.getF32FloatAttr(ratio)),
      named("training_mode", builder.getBoolAttr(training))};
  if (attr("seed"))
    attributes.push_back(
        named("seed", builder.getI64IntegerAttr(intAttr("seed", 0))));
  return bindResults(
      create(DropoutOp::getOperationName(), {input(0)}, attributes, 2));
}

void Importer::importCast() {
  checkAttributes({"to", "saturate"});
  Type to = elementTypeOf(static_cast<int32_t>(intAttr("to", 0)),
                          where() + " target");
  return bindResults(create(CastOp::getOperationName(), {input(0)},
                            {named("to", TypeAttr::get(to))}, 1));
}

void Importer::importReshape() {
  checkAttributes({"allowzero"});
  Value x = input(0);
  std::vector<int64_t> shape = resolveReshape(
      typeOf(x).getShape(), constInts(1, "shape"), typeOf(x).getNumElements(),
      intAttr("allowzero", 0) != 0, where());
  return bindResults(create(ReshapeOp::getOperationName(), {x},
                            {named("shape", i64s(shape))}, 1));
}

void Importer::importTranspose() {
  checkAttributes({"perm"});
  Value x = input(0);
  std::vector<int64_t> perm = intsAttr("perm");
  if (!attr("perm"))
    for (int64_t d = typeOf(x).getRank() - 1; d >= 0; --d)
      perm.push_back(d);
  return bindResults(create(TransposeOp::getOperationName(), {x},
                            {named("perm", i64s(perm))}, 1));
}

void Importer::importConcat() {
  checkAttributes({"axis"});
  SmallVector<Value> operands;
  for (int i = 0; i < node->input_size(); ++i)
    operands.push_back(input(i));
  return bindResults(create(
      ConcatOp::getOperationName(), operands,
      {named("axis", builder.getI64IntegerAttr(intAttr("axis", 0)))}, 1));
}

void Importer::importSplit() {
  checkAttributes({"axis", "split", "num_outputs"});
  Value x = input(0);
  RankedTensorType type = typeOf(x);
  int64_t rank = type.getRank(), axis = intAttr("axis", 0);
  if (axis < -rank || axis >= rank)
    raise(where() + ": axis " + Twine(axis) + " is out of range");
  int64_t dim = type.getDimSize(axis < 0 ? axis + rank : axis);
  std::vector<int64_t> split =
      hasInput(1) ? constInts(1, "split") : intsAttr("split");
  if (split.empty()) {
    int64_t pieces =
        attr("num_outputs") ? intAttr("num_outputs", 1) : node->output_size();
    if (pieces < 1)
      raise(where() + ": needs at least one output");
    // Equal pieces, the last one smaller when the axis does not divide.
    int64_t size = (dim + pieces - 1) / pieces;
    for (int64_t i = 0; i < pieces; ++i)
      split.push_back(std::max<int64_t>(0, std::min(size, dim - i * size)));
  }
  if (static_cast<int64_t>(split.size()) != node->output_size())
    raise(where() + ": " + Twine(split.size()) + " pieces for " +
          Twine(node->output_size()) + " outputs");
  return bindResults(create(SplitOp::getOperationName(), {x},
                            {named("axis", builder.getI64IntegerAttr(axis)),
                             named("split", i64s(split))},
                            split.size()));
}

void Importer::importSlice() {
  checkAttributes({});
  Value x = input(0);
  std::vector<int64_t> starts = constInts(1, "starts"),
                       ends = constInts(2, "ends");
  std::vector<int64_t> axes, steps;
  if (hasInput(3))
    axes = constInts(3, "axes");
  else
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(i);
  steps = hasInput(4) ? constInts(4, "steps")
                      : std::vector<int64_t>(starts.size(), 1);
  return bindResults(
      create(SliceOp::getOperationName(), {x},
             {named("starts", i64s(starts)), named("ends", i64s(ends)),
              named("axes", i64s(axes)), named("steps", i64s(steps))},
             1));
}

void Importer::importSqueeze(StringRef op) {
  checkAttributes({});
  Value x = input(0);
  std::vector<int64_t> axes =
      hasInput(1) ? constInts(1, "axes") : std::vector<int64_t>{};
  if (op == "Unsqueeze" && axes.empty())
    raise(where() + " needs axes");
  return bindResults(create(op == "Squeeze" ? SqueezeOp::getOperationName()
                                            : UnsqueezeOp::getOperationName(),
                            {x}, {named("axes", i64s(axes))}, 1));
}

void Importer::importExpand() {
  checkAttributes({});
  Value x = input(0);
  return bindResults(create(ExpandOp::getOperationName(), {x},
                            {named("shape", i64s(constInts(1, "shape")))}, 1));
}

void Importer::importGather() {
  checkAttributes({"axis"});
  Value data = input(0), indices = input(1);
  if (!typeOf(indices).getElementType().isInteger(64))
    raise(where() + ": indices must be int64");
  return bindResults(create(
      GatherOp::getOperationName(), {data, indices},
      {named("axis", builder.getI64IntegerAttr(intAttr("axis", 0)))}, 1));
}

void Importer::importConstantOfShape() {
  checkAttributes({"value"});
  std::vector<int64_t> shape = constInts(0, "shape");
  Attribute value = DenseElementsAttr::get(
      RankedTensorType::get({1}, builder.getF32Type()), 0.0f);
  if (const onnx::AttributeProto *a = attr("value"))
    value = elementsAttr(readTensor(a->t(), where() + " value"));
  return bindResults(
      create(ConstantOfShapeOp::getOperationName(), {},
             {named("shape", i64s(shape)), named("value", value)}, 1));
}

void Importer::importSoftmaxCrossEntropyLoss(StringRef op) {
  checkAttributes({"reduction", "ignore_index"});
  bool sce = op == "SoftmaxCrossEntropyLoss";
  SmallVector<Value> operands{input(0), input(1)};
  if (!typeOf(operands[1]).getElementType().isInteger(64))
    raise(where() + ": labels must be int64");
  if (hasInput(2))
    operands.push_back(input(2));
  SmallVector<NamedAttribute> attributes{named(
      "reduction", builder.getStringAttr(stringAttr("reduction", "mean")))};
  if (attr("ignore_index"))
    attributes.push_back(named(
        "ignore_index", builder.getI64IntegerAttr(intAttr("ignore_index", 0))));
  return bindResults(create(sce ? SoftmaxCrossEntropyLossOp::getOperationName()
                                : NllLossOp::getOperationName(),
                            operands, attributes, sce ? 2 : 1));
}

void Importer::importNode(const onnx::NodeProto &current) {
  node = &current;
  const std::string &domain = node->domain();
  StringRef op = node->op_type();
  if (!domain.empty() && domain != "ai.onnx")
    raise(where() + ": op '" + op + "' of domain '" + domain +
          "' is not supported (only the default ONNX domain is)");
  if (tryFold(op))
    return;

  auto unary = [&](StringRef opName) {
    checkAttributes({});
    bindResults(create(opName, {input(0)}, {}, 1));
  };
  auto binary = [&](StringRef opName) {
    checkAttributes({});
    Value lhs = input(0), rhs = input(1);
    bindResults(create(opName, {lhs, rhs}, {}, 1));
  };
  auto axisOp = [&](StringRef opName, int64_t fallback) {
    checkAttributes({"axis"});
    bindResults(create(
        opName, {input(0)},
        {named("axis", builder.getI64IntegerAttr(intAttr("axis", fallback)))},
        1));
  };

  if (op == "Relu")
    return unary(ReluOp::getOperationName());
  if (op == "Erf")
    return unary(ErfOp::getOperationName());
  if (op == "Tanh")
    return unary(TanhOp::getOperationName());
  if (op == "Sigmoid")
    return unary(SigmoidOp::getOperationName());
  if (op == "Sqrt")
    return unary(SqrtOp::getOperationName());
  if (op == "Identity")
    return unary(IdentityOp::getOperationName());
  if (op == "Add")
    return binary(AddOp::getOperationName());
  if (op == "Sub")
    return binary(SubOp::getOperationName());
  if (op == "Mul")
    return binary(MulOp::getOperationName());
  if (op == "Div")
    return binary(DivOp::getOperationName());
  if (op == "Pow")
    return importPow();
  if (op == "Neg")
    return importNeg();
  if (op == "Clip")
    return importClip();
  if (op == "Pad")
    return importPad();
  if (op == "HardSwish")
    return unary(HardSwishOp::getOperationName());
  if (op == "HardSigmoid")
    return importHardSigmoid();
  if (op == "MatMul")
    return binary(MatMulOp::getOperationName());
  if (op == "Softmax")
    return axisOp(SoftmaxOp::getOperationName(), -1);
  if (op == "LogSoftmax")
    return axisOp(LogSoftmaxOp::getOperationName(), -1);
  if (op == "Flatten")
    return axisOp(FlattenOp::getOperationName(), 1);
  if (op == "GlobalAveragePool")
    return unary(GlobalAveragePoolOp::getOperationName());
  if (op == "Conv")
    return importConv();
  if (op == "MaxPool")
    return importPool(/*isMax=*/true);
  if (op == "AveragePool")
    return importPool(/*isMax=*/false);
  if (op == "ReduceMean")
    return importReduce(ReduceMeanOp::getOperationName());
  if (op == "ReduceSum")
    return importReduce(ReduceSumOp::getOperationName());

  if (op == "Gelu" && opset >= 20)
    return importGelu();
  if (op == "Gemm")
    return importGemm();
  if (op == "BatchNormalization")
    return importBatchNormalization();
  if (op == "LayerNormalization" && opset >= 17)
    return importLayerNormalization();
  if (op == "Dropout")
    return importDropout();
  if (op == "Cast")
    return importCast();
  if (op == "Reshape")
    return importReshape();
  if (op == "Transpose")
    return importTranspose();
  if (op == "Concat")
    return importConcat();
  if (op == "Split")
    return importSplit();
  if (op == "Slice")
    return importSlice();
  if (op == "Squeeze" || op == "Unsqueeze")
    return importSqueeze(op);
  if (op == "Expand")
    return importExpand();
  if (op == "Gather")
    return importGather();
  if (op == "ConstantOfShape")
    return importConstantOfShape();
  if (op == "SoftmaxCrossEntropyLoss" || op == "NegativeLogLikelihoodLoss")
    return importSoftmaxCrossEntropyLoss(op);
  raise(where() + ": op '" + op + "' is not supported at opset " +
        Twine(opset));
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

void Importer::addInputs(func::FuncOp func) {
  const onnx::GraphProto &graph = model.graph();
  SmallVector<Type> types;
  SmallVector<std::string> names;
  SmallVector<int64_t> batchAxes;
  bool batchBound = false; // --batch-size bound some input's batch
  int64_t fixedBatch = -1; // the batch of the first input that has one
  for (const auto &[name, axis] : options.batchAxes)
    if (llvm::none_of(graph.input(), [&](const onnx::ValueInfoProto &info) {
          return info.name() == name;
        }))
      raise("--batch-axis names '" + name + "', which is not a graph input");
  for (const onnx::ValueInfoProto &info : graph.input()) {
    if (initializers.count(info.name()))
      continue; // an initializer listed as input (older exporters)
    std::string what = "graph input '" + info.name() + "'";
    auto bound = options.constInputs.find(info.name());
    if (bound != options.constInputs.end()) {
      values[info.name()].constant = readConstInput(info, bound->second);
      continue;
    }
    if (!info.type().has_tensor_type())
      raise(what + " is not a tensor");
    const onnx::TypeProto_Tensor &tensor = info.type().tensor_type();
    Type elementType = elementTypeOf(tensor.elem_type(), what);
    if (!tensor.has_shape())
      raise(what + " has no shape; cdp needs static shapes (export with "
                   "shapes, or give the input a fixed shape)");
    int64_t batchAxis = 0;
    auto axisIt = options.batchAxes.find(info.name());
    if (axisIt != options.batchAxes.end())
      batchAxis = axisIt->second;
    SmallVector<int64_t> dims;
    for (int d = 0; d < tensor.shape().dim_size(); ++d) {
      const onnx::TensorShapeProto_Dimension &dim = tensor.shape().dim(d);
      if (dim.has_dim_value()) {
        dims.push_back(dim.dim_value());
        continue;
      }
      std::string symbol =
          dim.has_dim_param() ? "'" + dim.dim_param() + "'" : "(unnamed)";
      if (d != batchAxis)
        raise(what + " has symbolic dimension " + symbol + " at axis " +
              Twine(d) +
              ", which is not its batch axis; cdp needs static "
              "shapes (re-export with a fixed size)");
      if (!options.batchSize)
        raise(what + " has symbolic batch dimension " + symbol + " at axis " +
              Twine(d) + "; pass --batch-size B to bind it");
      dims.push_back(*options.batchSize);
      batchBound = true;
    }
    // A scalar input has no batch axis unless --batch-axis says otherwise.
    if (dims.empty() && axisIt == options.batchAxes.end())
      batchAxis = -1;
    if (batchAxis >= static_cast<int64_t>(dims.size()))
      raise(what + " has rank " + Twine(dims.size()) + ", so axis " +
            Twine(batchAxis) + " cannot be its batch axis");
    types.push_back(RankedTensorType::get(checkedShape(dims, elementType, what),
                                          elementType));
    names.push_back(info.name());
    batchAxes.push_back(batchAxis);
    if (batchAxis >= 0 && fixedBatch < 0)
      fixedBatch = dims[batchAxis];
  }
  if (options.batchSize && !batchBound)
    raise("--batch-size " + Twine(*options.batchSize) +
          " binds a symbolic batch dimension, and no graph input has one " +
          (fixedBatch >= 0 ? "(this model's batch is fixed at export: " +
                                 Twine(fixedBatch) + ")"
                           : Twine("(no input has a batch axis)")) +
          "; drop --batch-size or re-export with a dynamic batch axis");
  for (const auto &[name, file] : options.constInputs)
    if (!values.count(name))
      raise("--const-input names '" + name + "', which is not a graph input");
  func.setType(builder.getFunctionType(types, {}));
  body = func.addEntryBlock();
  for (auto [i, name] : llvm::enumerate(names)) {
    if (values.count(name))
      raise("graph input '" + name + "' is listed twice");
    values[name].value = body->getArgument(i);
    func.setArgAttr(i, "cdp.name", builder.getStringAttr(name));
    // Where micro-batches are cut; absent when the input is passed whole.
    if (batchAxes[i] >= 0)
      func.setArgAttr(i, "cdp.batch_axis",
                      builder.getI64IntegerAttr(batchAxes[i]));
  }
}

ConstTensor Importer::readConstInput(const onnx::ValueInfoProto &info,
                                     const std::string &file) {
  std::string what = "--const-input " + info.name() + "=" + file;
  if (llvm::sys::fs::exists(file) && !llvm::sys::fs::is_regular_file(file))
    raise(what + ": not a regular file (a FIFO, device or folder)");
  auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    raise(what + ": cannot open: " + buffer.getError().message());
  onnx::TensorProto tensor;
  if (!tensor.ParseFromArray((*buffer)->getBufferStart(),
                             static_cast<int>((*buffer)->getBufferSize())))
    raise(what + ": not a serialized ONNX TensorProto");
  if (tensor.data_type() != info.type().tensor_type().elem_type())
    raise(what + ": element type " + onnxTypeName(tensor.data_type()) +
          " differs from the input's " +
          onnxTypeName(info.type().tensor_type().elem_type()));
  return readTensor(tensor, what);
}

OwningOpRef<ModuleOp> Importer::run() {
  loadModel();
  checkOpsets();
  const onnx::GraphProto &graph = model.graph();
  if (graph.output_size() == 0)
    raise("the graph has no outputs");
  for (const onnx::TensorProto &tensor : graph.initializer()) {
    if (tensor.name().empty())
      raise("an initializer has no name");
    if (!initializers.emplace(tensor.name(), &tensor).second)
      raise("initializer '" + tensor.name() + "' is defined twice");
  }
  if (graph.sparse_initializer_size() > 0)
    raise("sparse initializers are not supported");

  Location loc = FileLineColLoc::get(&context, path, 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  builder.setInsertionPointToEnd(module->getBody());
  auto func = builder.create<func::FuncOp>(loc, "main",
                                           builder.getFunctionType({}, {}));
  addInputs(func);
  for (auto &[name, tensor] : initializers)
    if (!values.count(name))
      values[name].initializer = tensor;
  std::vector<int> order = sortNodes();
  builder.setInsertionPointToEnd(body);
  for (int i : order)
    importNode(graph.node(i));
  node = nullptr;

  SmallVector<Value> results;
  for (const onnx::ValueInfoProto &output : graph.output()) {
    auto it = values.find(output.name());
    if (it == values.end())
      raise("graph output '" + output.name() + "' is not defined");
    if (!it->second.value && !it->second.constant && !it->second.initializer)
      raise("graph output '" + output.name() +
            "' is an optional output that "
            "no op computes");
    results.push_back(materialize(output.name(), it->second));
  }
  builder.create<func::ReturnOp>(loc, results);
  func.setType(builder.getFunctionType(func.getArgumentTypes(),
                                       ValueRange(results).getTypes()));
  for (auto [i, output] : llvm::enumerate(graph.output()))
    func.setResultAttr(i, "cdp.name", builder.getStringAttr(output.name()));
  module->getOperation()->setAttr(
      "cdp.source", builder.getStringAttr(llvm::sys::path::filename(path)));
  module->getOperation()->setAttr("cdp.opset",
                                  builder.getI64IntegerAttr(opset));

  // The shape rules ran at construction; this is the net under them.
  std::string diagnostic;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    if (diagnostic.empty())
      diagnostic = d.str();
    return success();
  });
  if (failed(mlir::verify(*module)))
    raise("the imported IR does not verify: " + diagnostic);
  return module;
}

} // namespace

OwningOpRef<ModuleOp> importOnnxModel(MLIRContext &context,
                                      const std::string &path,
                                      const ImportOptions &options,
                                      std::string &error) {
  context.loadDialect<CDPDialect, func::FuncDialect>();
  try {
    Importer importer(context, path, options);
    return importer.run();
  } catch (const ImportError &e) {
    error = e.message;
  } catch (const std::bad_alloc &) {
    error = "out of memory while importing";
  }
  return nullptr;
}

} // namespace cdp
