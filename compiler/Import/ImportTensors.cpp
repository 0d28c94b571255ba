//===- ImportTensors.cpp - initializers, constants and parameters ---------===//
//
// Reads ONNX tensors (inline, typed fields or external data inside the
// model's folder), keeps small ones as compile-time constants, and turns
// trained float32 initializers into `cdp.param`s.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "cdp/Plan/Checked.h"

#include "cdp/Dialect/Graph/GraphOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <cstring>
#include <limits>

using namespace mlir;

namespace cdp::import {

void raise(const Twine &message) { throw ImportError{message.str()}; }

int64_t truncateToInt64(double value) {
  bool inRange = std::isfinite(value) && std::fabs(value) < 9.2e18;
  return inRange ? static_cast<int64_t>(std::trunc(value))
                 : std::numeric_limits<int64_t>::min();
}

//===----------------------------------------------------------------------===//
// ConstTensor
//===----------------------------------------------------------------------===//

int64_t ConstTensor::size() const {
  switch (kind) {
  case F32:
    return static_cast<int64_t>(floats.size());
  case F64:
    return static_cast<int64_t>(doubles.size());
  default:
    return static_cast<int64_t>(ints.size());
  }
}

double ConstTensor::at(int64_t i) const {
  switch (kind) {
  case F32:
    return floats[i];
  case F64:
    return doubles[i];
  default:
    return static_cast<double>(ints[i]);
  }
}

int64_t ConstTensor::intAt(int64_t i) const {
  return isFloat() ? truncateToInt64(at(i)) : ints[i];
}

void ConstTensor::push(double value) {
  if (kind == F32)
    floats.push_back(static_cast<float>(value));
  else if (kind == F64)
    doubles.push_back(value);
  else if (kind == Bool)
    ints.push_back(value != 0);
  else
    ints.push_back(truncateToInt64(value));
}

void ConstTensor::append(const ConstTensor &source, int64_t i) {
  if (kind == F32)
    floats.push_back(source.floats[i]);
  else if (kind == F64)
    doubles.push_back(source.doubles[i]);
  else
    ints.push_back(source.ints[i]);
}

ConstTensor ConstTensor::empty(Kind kind, ArrayRef<int64_t> shape) {
  ConstTensor tensor;
  tensor.kind = kind;
  tensor.shape.assign(shape.begin(), shape.end());
  return tensor;
}

//===----------------------------------------------------------------------===//
// Shapes
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

int64_t elementCount(ArrayRef<int64_t> shape) {
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  return count;
}

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

namespace {

/// Bytes per element of the ONNX types a constant may have; 0 for others.
int64_t onnxWidth(int32_t type) {
  switch (type) {
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64:
    return 8;
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32:
    return 4;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
    return 2;
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::BOOL:
    return 1;
  default:
    return 0;
  }
}

float halfToFloat(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  if (exponent == 0) // zero or subnormal: mantissa * 2^-24
    return std::copysign(std::ldexp(static_cast<float>(mantissa), -24),
                         sign ? -1.0f : 1.0f);
  uint32_t word = exponent == 31
                      ? sign | 0x7f800000u | (mantissa << 13)
                      : sign | ((exponent + 112) << 23) | (mantissa << 13);
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

float bfloat16ToFloat(uint16_t bits) {
  uint32_t word = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

/// Element `i` of little-endian raw data of ONNX type `type`, as a double
/// (floating types) or an int64 (the others).
double rawFloatAt(const char *data, int32_t type, int64_t i) {
  if (type == onnx::TensorProto::FLOAT) {
    float v;
    std::memcpy(&v, data + 4 * i, 4);
    return v;
  }
  if (type == onnx::TensorProto::DOUBLE) {
    double v;
    std::memcpy(&v, data + 8 * i, 8);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, data + 2 * i, 2);
  return type == onnx::TensorProto::FLOAT16 ? halfToFloat(bits)
                                            : bfloat16ToFloat(bits);
}

int64_t rawIntAt(const char *data, int32_t type, int64_t i) {
  switch (type) {
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64: {
    int64_t v;
    std::memcpy(&v, data + 8 * i, 8);
    return v;
  }
  case onnx::TensorProto::INT32: {
    int32_t v;
    std::memcpy(&v, data + 4 * i, 4);
    return v;
  }
  case onnx::TensorProto::UINT32: {
    uint32_t v;
    std::memcpy(&v, data + 4 * i, 4);
    return v;
  }
  case onnx::TensorProto::INT16: {
    int16_t v;
    std::memcpy(&v, data + 2 * i, 2);
    return v;
  }
  case onnx::TensorProto::UINT16: {
    uint16_t v;
    std::memcpy(&v, data + 2 * i, 2);
    return v;
  }
  case onnx::TensorProto::INT8:
    return static_cast<int8_t>(data[i]);
  case onnx::TensorProto::BOOL:
    return data[i] != 0;
  default: // UINT8
    return static_cast<uint8_t>(data[i]);
  }
}

/// Values stored in the typed fields (no raw data), as ONNX lays them out.
int64_t typedFieldSize(const onnx::TensorProto &t) {
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
    return t.float_data_size();
  case onnx::TensorProto::DOUBLE:
    return t.double_data_size();
  case onnx::TensorProto::INT64:
    return t.int64_data_size();
  case onnx::TensorProto::UINT32:
  case onnx::TensorProto::UINT64:
    return t.uint64_data_size();
  default:
    return t.int32_data_size();
  }
}

void readTypedFields(const onnx::TensorProto &t, ConstTensor &result) {
  int32_t type = t.data_type();
  int64_t count = typedFieldSize(t);
  for (int64_t i = 0; i < count; ++i) {
    switch (type) {
    case onnx::TensorProto::FLOAT:
      result.floats.push_back(t.float_data(i));
      break;
    case onnx::TensorProto::DOUBLE:
      result.doubles.push_back(t.double_data(i));
      break;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16: {
      auto bits = static_cast<uint16_t>(t.int32_data(i));
      result.doubles.push_back(type == onnx::TensorProto::FLOAT16
                                   ? halfToFloat(bits)
                                   : bfloat16ToFloat(bits));
      break;
    }
    case onnx::TensorProto::INT64:
      result.ints.push_back(t.int64_data(i));
      break;
    case onnx::TensorProto::UINT32:
    case onnx::TensorProto::UINT64:
      result.ints.push_back(static_cast<int64_t>(t.uint64_data(i)));
      break;
    case onnx::TensorProto::BOOL:
      result.ints.push_back(t.int32_data(i) != 0);
      break;
    default:
      result.ints.push_back(t.int32_data(i));
    }
  }
}

} // namespace

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

ConstTensor::Kind Importer::constKindOf(int32_t onnxType, const Twine &what) {
  switch (onnxType) {
  case onnx::TensorProto::FLOAT:
    return ConstTensor::F32;
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
    return ConstTensor::F64;
  case onnx::TensorProto::BOOL:
    return ConstTensor::Bool;
  default:
    if (onnxWidth(onnxType) == 0)
      raise(what + " has element type " + onnxTypeName(onnxType) +
            ", which cdp does not support (floating, integer and bool "
            "constants only)");
    return ConstTensor::I64;
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

//===----------------------------------------------------------------------===//
// Reading tensors
//===----------------------------------------------------------------------===//

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

void Importer::noteExternalData(const onnx::TensorProto &tensor) {
  if (!options.externalData ||
      tensor.data_location() != onnx::TensorProto::EXTERNAL)
    return;
  for (const onnx::StringStringEntryProto &entry : tensor.external_data())
    if (entry.key() == "location") {
      SmallString<256> full(llvm::sys::path::parent_path(path));
      llvm::sys::path::append(full, entry.value());
      options.externalData(full.str().str());
    }
}

std::string Importer::readExternal(const onnx::TensorProto &tensor,
                                   int64_t bytes, const Twine &what) {
  return mapExternal(tensor, bytes, what)->getBuffer().str();
}

std::unique_ptr<llvm::MemoryBuffer>
Importer::mapExternal(const onnx::TensorProto &tensor, int64_t bytes,
                      const Twine &what) {
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
  if (options.externalData)
    options.externalData(full.str().str());
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
  return std::move(*buffer);
}

ConstTensor Importer::readTensor(const onnx::TensorProto &tensor,
                                 const Twine &what) {
  int32_t type = tensor.data_type();
  ConstTensor result;
  result.kind = constKindOf(type, what);
  // The size check counts 8 bytes for every integer and double element.
  Type checkType = result.kind == ConstTensor::F32 ? Type(builder.getF32Type())
                   : result.kind == ConstTensor::Bool
                       ? Type(builder.getI1Type())
                       : Type(builder.getI64Type());
  result.shape = checkedShape(
      SmallVector<int64_t>(tensor.dims().begin(), tensor.dims().end()),
      checkType, what);
  int64_t count = elementCount(result.shape), width = onnxWidth(type);
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
            " of " + onnxTypeName(type));
    // ONNX raw data is little-endian, like every host cdp runs on. (An
    // empty tensor copies nothing: its vector's data may be null.)
    if (result.kind == ConstTensor::F32) {
      result.floats.resize(count);
      if (count)
        std::memcpy(result.floats.data(), raw->data(), raw->size());
    } else if (result.kind == ConstTensor::F64) {
      for (int64_t i = 0; i < count; ++i)
        result.doubles.push_back(rawFloatAt(raw->data(), type, i));
    } else if (type == onnx::TensorProto::INT64) {
      result.ints.resize(count);
      if (count)
        std::memcpy(result.ints.data(), raw->data(), raw->size());
    } else {
      for (int64_t i = 0; i < count; ++i)
        result.ints.push_back(rawIntAt(raw->data(), type, i));
    }
    return result;
  }
  if (typedFieldSize(tensor) != count)
    raise(what + " has " + Twine(typedFieldSize(tensor)) +
          " values, expected " + Twine(count) + " for shape " +
          shapeText(result.shape));
  readTypedFields(tensor, result);
  return result;
}

/// An F64 constant that reaches a runtime op becomes float32 there: cdp
/// computes in float32 only.
Attribute Importer::elementsAttr(const ConstTensor &constant) {
  if (constant.kind == ConstTensor::F64) {
    ConstTensor narrowed = ConstTensor::empty(ConstTensor::F32, constant.shape);
    for (double v : constant.doubles)
      narrowed.push(v);
    return elementsAttr(narrowed);
  }
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

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

/// A float32 initializer becomes one `cdp.param`, created at its first use
/// and shared by every later one (tied weights stay one parameter). One
/// that is not trained is marked `frozen`.
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
  if (!trained.count(name))
    attributes.push_back(named("frozen", builder.getUnitAttr()));
  RankedTensorType type;
  if (options.shapesOnly) {
    noteExternalData(tensor);
    type = RankedTensorType::get(
        checkedShape(
            SmallVector<int64_t>(tensor.dims().begin(), tensor.dims().end()),
            elementType, what),
        elementType);
  } else {
    SmallVector<int64_t> shape = checkedShape(
        SmallVector<int64_t>(tensor.dims().begin(), tensor.dims().end()),
        elementType, what);
    type = RankedTensorType::get(shape, elementType);
    AsmResourceBlob blob = paramBlob(tensor, shape, what);
    attributes.push_back(named(
        "value", DenseResourceElementsAttr::get(type, name, std::move(blob))));
    releaseInitializerData(name);
  }
  OperationState state(NameLoc::get(builder.getStringAttr(name)),
                       ParamOp::getOperationName());
  state.addAttributes(attributes);
  state.addTypes(type);
  lastParam = builder.create(state);
  return lastParam->getResult(0);
}

/// A parameter's value lives in its blob from now on: the model's copy (an
/// inline initializer's bytes) is freed, so a model's weights are held once
/// during the import, not twice.
void Importer::releaseInitializerData(const std::string &name) {
  auto it = initializers.find(name);
  if (it == initializers.end())
    return;
  onnx::TensorProto &tensor = *it->second;
  std::string().swap(*tensor.mutable_raw_data()); // clear() keeps capacity
  google::protobuf::RepeatedField<float>().Swap(tensor.mutable_float_data());
}

/// A float32 initializer's value as a parameter's blob, copied once from
/// the model's raw bytes or its external-data file (mapped, not read into
/// a string first): at most one extra copy of the largest tensor is in
/// memory while a model is imported.
AsmResourceBlob Importer::paramBlob(const onnx::TensorProto &tensor,
                                    ArrayRef<int64_t> shape,
                                    const Twine &what) {
  int64_t bytes = elementCount(shape) * static_cast<int64_t>(sizeof(float));
  // An empty vector's data() is null, which MLIR would pass to memcpy.
  auto copy = [](ArrayRef<char> data) {
    static const char nothing = 0;
    return HeapAsmResourceBlob::allocateAndCopyWithAlign(
        data.empty() ? ArrayRef<char>(&nothing, size_t(0)) : data,
        alignof(float));
  };
  std::unique_ptr<llvm::MemoryBuffer> mapped;
  ArrayRef<char> raw;
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
    mapped = mapExternal(tensor, bytes, what);
    raw = ArrayRef<char>(mapped->getBufferStart(), mapped->getBufferSize());
  } else if (tensor.has_raw_data()) {
    raw = ArrayRef<char>(tensor.raw_data().data(), tensor.raw_data().size());
  } else { // typed float_data: read as any tensor
    ConstTensor data = readTensor(tensor, what);
    return copy(
        ArrayRef<char>(reinterpret_cast<const char *>(data.floats.data()),
                       data.floats.size() * sizeof(float)));
  }
  if (static_cast<int64_t>(raw.size()) != bytes)
    raise(what + " has " + Twine(raw.size()) + " bytes of data, expected " +
          Twine(bytes) + " for shape " + shapeText(shape) + " of " +
          onnxTypeName(tensor.data_type()));
  return copy(raw);
}

Value Importer::materialize(const std::string &name, Entry &entry) {
  if (entry.value)
    return entry.value;
  auto folded = transposeOf.find(name);
  if (folded != transposeOf.end()) {
    Value source = materialize(folded->second, values.at(folded->second));
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointAfterValue(source);
    entry.value = builder.create<TransposeOp>(
        NameLoc::get(builder.getStringAttr(name)), source,
        builder.getDenseI64ArrayAttr({1, 0}));
    return entry.value;
  }
  if (entry.initializer &&
      entry.initializer->data_type() == onnx::TensorProto::FLOAT &&
      !entry.constant) {
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
// Inputs as values and constants
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

/// Integer and bool initializers are constants; so are float initializers
/// that are not trained and small enough to fold (the others stay frozen
/// parameters, read where they are).
const ConstTensor *Importer::constInput(int i) {
  if (!hasInput(i))
    return nullptr;
  const std::string &name = node->input(i);
  Entry &entry = values.at(name);
  if (entry.constant || !entry.initializer || entry.value)
    return entry.constant ? &*entry.constant : nullptr;
  const onnx::TensorProto &tensor = *entry.initializer;
  bool isFloat32 = tensor.data_type() == onnx::TensorProto::FLOAT;
  if (isFloat32 && trained.count(name))
    return nullptr;
  int64_t count = 1;
  for (int64_t d : tensor.dims())
    if (d < 0 || __builtin_mul_overflow(count, d, &count))
      return nullptr; // reading it reports the shape
  if (isFloat32 && count > kFoldLimit)
    return nullptr;
  entry.constant = readTensor(tensor, "initializer '" + name + "'");
  return &*entry.constant;
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
          "' must be an integer tensor");
  return constant.ints;
}

Importer::SliceInputs Importer::sliceInputs() {
  SliceInputs in{constInts(1, "starts"), constInts(2, "ends"), {}, {}};
  if (hasInput(3))
    in.axes = constInts(3, "axes");
  else
    for (size_t i = 0; i < in.starts.size(); ++i)
      in.axes.push_back(i);
  in.steps = hasInput(4) ? constInts(4, "steps")
                         : std::vector<int64_t>(in.starts.size(), 1);
  return in;
}

} // namespace cdp::import
