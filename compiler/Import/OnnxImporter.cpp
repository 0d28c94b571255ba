//===- OnnxImporter.cpp - ONNX ModelProto to cdp IR -----------------------===//
//
// The importer checks everything a malformed model can get wrong before it
// builds IR, reports the first problem as one line naming the node, op and
// tensor, and never reads outside the model's folder. Every shape is static:
// computations on known values (Shape -> Gather -> Unsqueeze -> Concat
// chains, attention masks built from constants) are evaluated here
// (ConstantFolding.cpp), and op result types come from the dialect's own
// inference, not from ONNX's (which stops at opset 17). Each ONNX op's
// builder is a row of ImportOps.cpp's table; which initializers are trained
// is decided before any node is read (Trainable.cpp).
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "cdp/Dialect/Graph/GraphBuilder.h"
#include "cdp/Dialect/Graph/GraphOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <unistd.h>

using namespace mlir;

namespace cdp::import {

//===----------------------------------------------------------------------===//
// Model, opsets, graph structure
//===----------------------------------------------------------------------===//

void Importer::loadModel() {
  if (llvm::sys::fs::is_directory(path))
    raise("is a directory, not an ONNX model");
  // A FIFO would block the read forever, a device never end it.
  if (llvm::sys::fs::exists(path) && !llvm::sys::fs::is_regular_file(path))
    raise("not a regular file (a FIFO, device or folder); give the model "
          "file itself");
  // Read through a small buffer, not mapped whole: the model's bytes are
  // then in memory once (the parsed message), not twice while parsing.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    raise("cannot open: " + Twine(std::strerror(errno)));
  auto closeFile = llvm::make_scope_exit([&] { ::close(fd); });
  char head[256];
  ssize_t headBytes = ::pread(fd, head, sizeof(head), 0);
  if (headBytes < 0)
    raise("cannot read: " + Twine(std::strerror(errno)));
  if (headBytes == 0)
    raise("file is empty, not an ONNX model");
  google::protobuf::io::FileInputStream input(fd);
  google::protobuf::io::CodedInputStream stream(&input);
  stream.SetTotalBytesLimit(INT32_MAX);
  bool parsed = model.ParseFromCodedStream(&stream) &&
                stream.ConsumedEntireMessage() && input.GetErrno() == 0;
  bool looksLikeText = llvm::all_of(StringRef(head, headBytes), [](char c) {
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
// Node helpers
//===----------------------------------------------------------------------===//

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

void Importer::bindValue(int output, Value value) {
  if (output < node->output_size() && !node->output(output).empty())
    values[node->output(output)].value = value;
}

Value Importer::scalarConstant(Type elementType, double value) {
  auto scalar = RankedTensorType::get({}, elementType);
  DenseElementsAttr attr =
      elementType.isF32()
          ? DenseElementsAttr::get(scalar, static_cast<float>(value))
          : DenseElementsAttr::get(scalar, truncateToInt64(value));
  return builder.create<ConstantOp>(
      NameLoc::get(builder.getStringAttr(where())), cast<ElementsAttr>(attr));
}

Value Importer::castTo(Value value, Type elementType) {
  if (typeOf(value).getElementType() == elementType)
    return value;
  return create(CastOp::getOperationName(), {value},
                {named("to", TypeAttr::get(elementType))}, 1)
      ->getResult(0);
}

void Importer::importNode(const onnx::NodeProto &current) {
  node = &current;
  const std::string &domain = node->domain();
  StringRef op = node->op_type();
  if (!domain.empty() && domain != "ai.onnx")
    raise(where() + ": op '" + op + "' of domain '" + domain +
          "' is not supported (only the default ONNX domain is)");
  if (tryFold(*this, op))
    return;
  importOp(*this, op);
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

void Importer::collectInitializers() {
  onnx::GraphProto &graph = *model.mutable_graph();
  for (onnx::TensorProto &tensor : *graph.mutable_initializer()) {
    if (tensor.name().empty())
      raise("an initializer has no name");
    if (!initializers.emplace(tensor.name(), &tensor).second)
      raise("initializer '" + tensor.name() + "' is defined twice");
  }
  if (graph.sparse_initializer_size() > 0)
    raise("sparse initializers are not supported");
}

/// The graph outputs become the function's results, tagged with their ONNX
/// names; the module is verified once more as a whole.
void Importer::finishFunction(func::FuncOp func) {
  const onnx::GraphProto &graph = model.graph();
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
  builder.create<func::ReturnOp>(func.getLoc(), results);
  func.setType(builder.getFunctionType(func.getArgumentTypes(),
                                       ValueRange(results).getTypes()));
  for (auto [i, output] : llvm::enumerate(graph.output()))
    func.setResultAttr(i, "cdp.name", builder.getStringAttr(output.name()));
}

OwningOpRef<ModuleOp> Importer::run() {
  loadModel();
  checkOpsets();
  if (model.graph().output_size() == 0)
    raise("the graph has no outputs");
  collectInitializers();

  Location loc = FileLineColLoc::get(&context, path, 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  builder.setInsertionPointToEnd(module->getBody());
  auto func = builder.create<func::FuncOp>(loc, "main",
                                           builder.getFunctionType({}, {}));
  addInputs(func);
  for (auto &[name, tensor] : initializers)
    if (!values.count(name))
      values[name].initializer = tensor;
  decideTrained();
  std::vector<int> order = sortNodes();
  builder.setInsertionPointToEnd(body);
  for (int i : order)
    importNode(model.graph().node(i));
  node = nullptr;
  finishFunction(func);
  reportTrained();
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

} // namespace cdp::import

namespace cdp {

OwningOpRef<ModuleOp> importOnnxModel(MLIRContext &context,
                                      const std::string &path,
                                      const ImportOptions &options,
                                      std::string &error) {
  context.loadDialect<CDPDialect, func::FuncDialect>();
  try {
    import::Importer importer(context, path, options);
    return importer.run();
  } catch (const import::ImportError &e) {
    error = e.message;
  } catch (const std::bad_alloc &) {
    error = "out of memory while importing";
  }
  return nullptr;
}

} // namespace cdp
