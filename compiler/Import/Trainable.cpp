//===- Trainable.cpp - which initializers are trained ---------------------===//
//
// An ONNX model does not say which initializers torch trains: parameters,
// buffers (masks, rotary frequency tables, BatchNorm statistics) and the
// exporters' own folds all look alike. Training a buffer, or leaving a
// parameter out, trains a different network without an error, so this is
// decided once, before any node is read, from (in order):
//
//  - `--trainable-from FILE` (the names of `model.named_parameters()`):
//    exactly those; a name the model lacks is refused (the exporter folded
//    or merged it);
//  - otherwise, every float32 initializer except those that cannot be
//    parameters: non-finite values (masks), rank 0 (scalars), BatchNorm's
//    running statistics. A model from the dynamo exporter is refused
//    without the file: its optimizer folds and merges parameters, which
//    leaves nothing to tell them by;
//  - `--trainable NAME` adds one, `--freeze NAME` removes one.
//
// TorchScript's constant folding stores a transposed weight under an
// exporter-made name (`onnx::MatMul_603`); where that is exactly the
// transpose of another initializer (GPT-2's LM head of its tied token
// embedding) it is read as Transpose(that initializer), which keeps the tie
// torch trains.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "cdp/Dialect/Graph/GraphOps.h"

#include "llvm/ADT/StringRef.h"

#include <google/protobuf/unknown_field_set.h>

#include <cmath>
#include <cstring>
#include <regex>

using namespace mlir;

namespace cdp::import {

namespace {

constexpr const char *kTrainableRecipe =
    "write the names torch trains with ids = {}; [ids.setdefault(id(p), "
    "[]).append(n) for n, p in model.named_parameters(remove_duplicate="
    "False)]; open('trainable.txt', 'w').write('\\n'.join(' '.join(v) for v "
    "in ids.values())) and pass --trainable-from trainable.txt";

/// TorchScript names its folds `onnx::Op_N`; dynamo names constants `val_N`.
bool exporterMade(StringRef name) {
  static const std::regex dynamo("_?val_[0-9]+");
  return name.starts_with("onnx::") || std::regex_match(name.str(), dynamo);
}

bool isFloating(int32_t type) {
  return type == onnx::TensorProto::FLOAT ||
         type == onnx::TensorProto::DOUBLE ||
         type == onnx::TensorProto::FLOAT16 ||
         type == onnx::TensorProto::BFLOAT16;
}

bool allFinite(const ConstTensor &t) {
  for (int64_t i = 0; i < t.size(); ++i)
    if (!std::isfinite(t.at(i)))
      return false;
  return true;
}

/// A mask-like pattern: rank 2 or more with every value 0 or 1.
bool looksLikeMask(const ConstTensor &t) {
  if (t.shape.size() < 2 || t.size() == 0)
    return false;
  for (int64_t i = 0; i < t.size(); ++i)
    if (t.at(i) != 0 && t.at(i) != 1)
      return false;
  return true;
}

bool constantValued(const ConstTensor &t) {
  for (int64_t i = 1; i < t.size(); ++i)
    if (t.floats[i] != t.floats[0])
      return false;
  return true;
}

/// Element 0 of a float32 tensor stored inline, without reading the rest;
/// none when it is stored elsewhere (then only a full read tells). Both a
/// matrix and its transpose start with it.
std::optional<float> firstFloat(const onnx::TensorProto &t) {
  if (t.data_location() != onnx::TensorProto::EXTERNAL &&
      t.raw_data().size() >= sizeof(float)) {
    float value;
    std::memcpy(&value, t.raw_data().data(), sizeof value);
    return value;
  }
  if (t.float_data_size() > 0)
    return t.float_data(0);
  return std::nullopt;
}

/// `a` (k x m) is exactly the transpose of `b` (m x k).
bool isTransposeOf(const ConstTensor &a, const ConstTensor &b) {
  if (a.shape.size() != 2 || b.shape.size() != 2 || a.shape[0] != b.shape[1] ||
      a.shape[1] != b.shape[0])
    return false;
  int64_t rows = a.shape[0], cols = a.shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (a.floats[r * cols + c] != b.floats[c * rows + r])
        return false;
  return true;
}

} // namespace

/// The dynamo exporter annotates nodes (`pkg.torch.onnx.*` metadata). The
/// field (NodeProto.metadata_props, number 9) is newer than the ONNX
/// library cdp builds with, so it arrives as an unknown field.
bool Importer::looksExportedByDynamo() const {
  constexpr int kNodeMetadataProps = 9;
  for (const onnx::NodeProto &n : model.graph().node()) {
    const google::protobuf::UnknownFieldSet &unknown = n.unknown_fields();
    for (int i = 0; i < unknown.field_count(); ++i) {
      const google::protobuf::UnknownField &field = unknown.field(i);
      onnx::StringStringEntryProto entry;
      if (field.number() == kNodeMetadataProps &&
          field.type() ==
              google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED &&
          entry.ParseFromString(field.length_delimited()) &&
          StringRef(entry.key()).starts_with("pkg.torch.onnx"))
        return true;
    }
  }
  return false;
}

std::string Importer::trainedByDefault(const std::string &name,
                                       const onnx::TensorProto &tensor) {
  if (tensor.dims_size() == 0)
    return "a scalar";
  if (options.shapesOnly)
    return ""; // a report reads no values
  ConstTensor value = readTensor(tensor, "initializer '" + name + "'");
  if (!allFinite(value))
    return "holds non-finite values (a mask)";
  if (looksLikeMask(value)) // said if trained (reportTrained), read once
    maskLike.insert(name);
  return "";
}

/// The initializers BatchNormalization nodes read as running statistics.
std::unordered_set<std::string> Importer::batchNormStatistics() const {
  std::unordered_set<std::string> names;
  for (const onnx::NodeProto &n : model.graph().node())
    if (n.op_type() == "BatchNormalization")
      for (int i = 3; i < std::min(5, n.input_size()); ++i)
        names.insert(n.input(i));
  return names;
}

void Importer::checkNamed(const std::vector<std::string> &names,
                          StringRef flag) {
  for (const std::string &name : names) {
    auto it = initializers.find(name);
    if (it == initializers.end())
      raise(flag + " names '" + name +
            "', which is not an initializer of the model");
    if (it->second->data_type() != onnx::TensorProto::FLOAT)
      raise(flag + " names '" + name + "', which is " +
            onnxTypeName(it->second->data_type()) +
            "; cdp trains float32 initializers only");
  }
}

/// The one initializer that holds a parameter torch knows by `aliases`.
std::string Importer::initializerOf(const std::vector<std::string> &aliases) {
  std::vector<std::string> present;
  for (const std::string &name : aliases)
    if (initializers.count(name))
      present.push_back(name);
  if (present.empty())
    raise("--trainable-from names '" + aliases.front() +
          "', which is not an initializer of the model: the exporter folded "
          "or merged it into another tensor, so cdp cannot train it as torch "
          "does; export with torch.onnx.export(..., dynamo=True, "
          "optimize=False), or with dynamo=False and "
          "do_constant_folding=False");
  if (present.size() > 1)
    raise("--trainable-from ties '" + present[0] + "' and '" + present[1] +
          "' (one parameter in torch), but the model holds them as two "
          "initializers, which would train apart; export with "
          "do_constant_folding=False");
  checkNamed(present, "--trainable-from");
  return present.front();
}

void Importer::decideTrained() {
  if (!options.training)
    return;
  checkNamed(options.trainable, "--trainable");
  checkNamed(options.freeze, "--freeze");
  std::unordered_set<std::string> statistics = batchNormStatistics();
  if (options.trainableFrom) {
    for (const std::vector<std::string> &aliases : *options.trainableFrom)
      trained.insert(initializerOf(aliases));
  } else {
    if (looksExportedByDynamo())
      raise("this model comes from torch.onnx.export(..., dynamo=True), "
            "which does not record which initializers torch trains (its "
            "optimizer folds and merges them); " +
            std::string(kTrainableRecipe));
    for (const auto &[name, tensor] : initializers) {
      if (statistics.count(name) || !isFloating(tensor->data_type()) ||
          !trainedByDefault(name, *tensor).empty())
        continue;
      if (tensor->data_type() != onnx::TensorProto::FLOAT)
        raise("initializer '" + name + "' is " +
              onnxTypeName(tensor->data_type()) +
              ", which cdp does not train (float32 only): export the model "
              "in float32 (model.float())");
      trained.insert(name);
    }
  }
  for (const std::string &name : options.trainable)
    trained.insert(name);
  for (const std::string &name : options.freeze)
    trained.erase(name);
  for (const std::string &name : statistics)
    trained.erase(name);
  findFoldedTransposes();
  checkInferenceBatchNorms();
}

/// Exporter-made 2-D initializers that are exactly the transpose of a named
/// one are read as Transpose(named) (see the file comment).
void Importer::findFoldedTransposes() {
  if (options.shapesOnly)
    return;
  std::map<std::pair<int64_t, int64_t>, std::vector<std::string>> byShape;
  for (const auto &[name, tensor] : initializers)
    if (!exporterMade(name) &&
        tensor->data_type() == onnx::TensorProto::FLOAT &&
        tensor->dims_size() == 2 && trained.count(name))
      byShape[{tensor->dims(0), tensor->dims(1)}].push_back(name);
  for (const auto &[name, tensor] : initializers) {
    if (!exporterMade(name) ||
        tensor->data_type() != onnx::TensorProto::FLOAT ||
        tensor->dims_size() != 2)
      continue;
    auto candidates = byShape.find({tensor->dims(1), tensor->dims(0)});
    if (candidates == byShape.end())
      continue;
    ConstTensor folded = readTensor(*tensor, "initializer '" + name + "'");
    if (constantValued(folded))
      continue; // a constant matrix could be any parameter's fold
    for (const std::string &source : candidates->second) {
      std::optional<float> first = firstFloat(*initializers.at(source));
      if (first && *first != folded.floats.front())
        continue; // differ already; no full read
      if (isTransposeOf(folded, readTensor(*initializers.at(source),
                                           "initializer '" + source + "'"))) {
        transposeOf[name] = source;
        trained.erase(name);
        break;
      }
    }
  }
}

/// A BatchNormalization in inference mode normalizes with its running
/// statistics; torch's training-mode BatchNorm uses the batch's. Training
/// its scale and bias so would train another network.
void Importer::checkInferenceBatchNorms() {
  for (const onnx::NodeProto &n : model.graph().node()) {
    if (n.op_type() != "BatchNormalization" || n.input_size() < 3)
      continue;
    node = &n;
    bool statistics = false; // any output past the first named
    for (int k = 1; k < n.output_size(); ++k)
      statistics = statistics || !n.output(k).empty();
    bool training = opset < 14 ? statistics : intAttr("training_mode", 0) != 0;
    if (!training && (trained.count(n.input(1)) || trained.count(n.input(2))))
      raise(where() +
            " normalizes with its running statistics (inference mode) while "
            "its scale and bias are trained; torch trains BatchNorm with the "
            "batch's statistics. Export in training mode "
            "(torch.onnx.export(..., dynamo=False, "
            "training=torch.onnx.TrainingMode.TRAINING)), or freeze '" +
            n.input(1) + "' and '" + n.input(2) +
            "' (--freeze) to train with fixed statistics");
  }
  node = nullptr;
}

/// torch's ONNX export of nn.Embedding(padding_idx=p) is a plain Gather:
/// the padding_idx, which keeps row p out of the gradient, is lost. Row p
/// is the table's only all-zero row (torch zeroes it at init, and it never
/// learns), so that is how it is found again; the compile says so.
std::optional<int64_t> Importer::embeddingPaddingRow(const std::string &name,
                                                     Value data) {
  auto known = paddingRows.find(name);
  if (known != paddingRows.end())
    return known->second;
  std::optional<int64_t> &row = paddingRows[name];
  // The table as the parameter holds it (no second read of the model).
  auto param = data.getDefiningOp<ParamOp>();
  auto value =
      param
          ? dyn_cast_or_null<DenseF32ResourceElementsAttr>(param.getValueAttr())
          : nullptr;
  std::optional<ArrayRef<float>> table =
      value ? value.tryGetAsArrayRef() : std::nullopt;
  if (!table || !trained.count(name) || param.getType().getRank() != 2)
    return row;
  int64_t rows = param.getType().getDimSize(0),
          width = param.getType().getDimSize(1);
  for (int64_t r = 0; r < rows && width > 0; ++r) {
    ArrayRef<float> values = table->slice(r * width, width);
    bool zero = llvm::all_of(values, [](float v) { return v == 0.0f; });
    if (zero && row)
      return row = std::nullopt; // two zero rows: nothing to tell by
    if (zero)
      row = r;
  }
  if (row && options.warn)
    options.warn("treating row " + std::to_string(*row) + " of '" + name +
                 "' (its only all-zero row) as nn.Embedding's padding_idx: "
                 "lookups of it give it no gradient, as in torch");
  return row;
}

/// Says what is trained where a trained initializer may be a buffer or an
/// exporter's fold, so that a wrong guess is seen before training.
void Importer::reportTrained() {
  if (!options.training || !options.warn || options.trainableFrom ||
      options.shapesOnly)
    return;
  std::vector<std::string> masks, folds;
  for (const std::string &name : trained) {
    if (exporterMade(name))
      folds.push_back(name);
    else if (maskLike.count(name))
      masks.push_back(name);
  }
  std::sort(masks.begin(), masks.end());
  std::sort(folds.begin(), folds.end());
  if (!masks.empty())
    options.warn("training " + std::to_string(trained.size()) +
                 " initializers, among them '" + masks.front() + "'" +
                 (masks.size() > 1
                      ? " and " + std::to_string(masks.size() - 1) + " more"
                      : std::string()) +
                 " whose values are all 0 and 1 (a mask buffer?); if torch "
                 "does not train it, pass --freeze NAME, or " +
                 kTrainableRecipe);
  bool convolutionFolds = llvm::any_of(folds, [](const std::string &name) {
    return StringRef(name).starts_with("onnx::Conv");
  });
  if (convolutionFolds)
    options.warn("the model looks exported in inference mode (initializers "
                 "such as '" +
                 folds.front() +
                 "' are BatchNorm folded into a convolution, and Dropout is "
                 "gone), which trains another network than torch's; export "
                 "with training=torch.onnx.TrainingMode.TRAINING");
  else if (!folds.empty())
    options.warn("training " + std::to_string(folds.size()) +
                 " initializers the exporter folded from parameters under "
                 "its own names (such as '" +
                 folds.front() +
                 "'): results are torch's, but the trained model keeps "
                 "those names; export with do_constant_folding=False to "
                 "keep the parameters' own");
}

} // namespace cdp::import
