//===- ImportOps.cpp - one builder per ONNX op ----------------------------===//
//
// `opRules` maps each ONNX op (and the first opset whose semantics its
// builder implements) to the builder that turns the current node into cdp
// ops. Builders read the node through the Importer's helpers, refuse the
// attributes they do not implement, and let the ops' shape rules type the
// results. Nodes whose inputs are all known never get here: they fold
// (ConstantFolding.cpp).
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "cdp/Dialect/Graph/GraphOps.h"

#include "llvm/ADT/StringMap.h"

#include <limits>

using namespace mlir;

namespace cdp::import {

namespace {

//===----------------------------------------------------------------------===//
// Convolution, pooling and normalization
//===----------------------------------------------------------------------===//

/// Explicit pads for ONNX `pads`/`auto_pad` (SAME_UPPER puts the odd pad at
/// the end, SAME_LOWER at the beginning).
std::vector<int64_t> windowPads(Importer &im, ArrayRef<int64_t> inputSpatial,
                                ArrayRef<int64_t> kernel,
                                ArrayRef<int64_t> strides,
                                ArrayRef<int64_t> dilations) {
  std::string autoPad = im.stringAttr("auto_pad", "NOTSET");
  std::vector<int64_t> pads = im.intsAttr("pads");
  size_t spatial = kernel.size();
  if (autoPad == "NOTSET") {
    if (pads.empty())
      pads.assign(2 * spatial, 0);
    return pads;
  }
  if (autoPad == "VALID")
    return std::vector<int64_t>(2 * spatial, 0);
  if (autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    raise(im.where() + ": auto_pad '" + autoPad + "' is not supported");
  if (inputSpatial.size() != spatial || strides.size() != spatial ||
      dilations.size() != spatial)
    raise(im.where() + ": kernel_shape, strides and dilations must have one "
                       "entry per spatial dimension");
  pads.assign(2 * spatial, 0);
  for (size_t d = 0; d < spatial; ++d) {
    if (strides[d] < 1)
      raise(im.where() + ": strides must be positive");
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

void importConv(Importer &im) {
  im.checkAttributes(
      {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  Value x = im.input(0), w = im.input(1);
  RankedTensorType xType = im.typeOf(x), wType = im.typeOf(w);
  if (xType.getRank() != 4 || wType.getRank() != 4)
    raise(im.where() + ": only 2-D convolution is supported (input rank " +
          Twine(xType.getRank()) + ")");
  std::vector<int64_t> strides = im.intsAttr("strides"),
                       dilations = im.intsAttr("dilations");
  if (strides.empty())
    strides = {1, 1};
  if (dilations.empty())
    dilations = {1, 1};
  std::vector<int64_t> kernel(wType.getShape().begin() + 2,
                              wType.getShape().end());
  std::vector<int64_t> explicitKernel = im.intsAttr("kernel_shape");
  if (!explicitKernel.empty() && explicitKernel != kernel)
    raise(im.where() + ": kernel_shape " + shapeText(explicitKernel) +
          " does not match the weight " + shapeText(wType.getShape()));
  std::vector<int64_t> pads = windowPads(im, xType.getShape().drop_front(2),
                                         kernel, strides, dilations);
  SmallVector<Value> operands{x, w};
  if (im.hasInput(2))
    operands.push_back(im.input(2));
  im.bindResults(im.create(
      ConvOp::getOperationName(), operands,
      {im.named("pads", im.i64s(pads)), im.named("strides", im.i64s(strides)),
       im.named("dilations", im.i64s(dilations)),
       im.named("group", im.builder.getI64IntegerAttr(im.intAttr("group", 1)))},
      1));
}

void importPool(Importer &im, bool isMax) {
  if (isMax)
    im.checkAttributes({"auto_pad", "ceil_mode", "dilations", "kernel_shape",
                        "pads", "storage_order", "strides"});
  else
    im.checkAttributes({"auto_pad", "ceil_mode", "count_include_pad",
                        "dilations", "kernel_shape", "pads", "strides"});
  Value x = im.input(0);
  RankedTensorType type = im.typeOf(x);
  std::vector<int64_t> kernel = im.intsAttr("kernel_shape");
  int64_t spatial = type.getRank() - 2;
  if (spatial < 1 || spatial > 3)
    raise(im.where() +
          ": pooling takes 1 to 3 spatial dimensions (input rank " +
          Twine(type.getRank()) + ")");
  if (static_cast<int64_t>(kernel.size()) != spatial)
    raise(im.where() + ": kernel_shape has " + Twine(kernel.size()) +
          " entries for " + Twine(spatial) + " spatial dimensions");
  std::vector<int64_t> strides = im.intsAttr("strides"),
                       dilations = im.intsAttr("dilations");
  if (strides.empty())
    strides.assign(spatial, 1);
  if (dilations.empty())
    dilations.assign(spatial, 1);
  std::vector<int64_t> pads =
      windowPads(im, type.getShape().drop_front(2), kernel, strides, dilations);
  SmallVector<NamedAttribute> attributes{
      im.named("kernel_shape", im.i64s(kernel)),
      im.named("pads", im.i64s(pads)), im.named("strides", im.i64s(strides)),
      im.named("dilations", im.i64s(dilations)),
      im.named("ceil_mode",
               im.builder.getBoolAttr(im.intAttr("ceil_mode", 0)))};
  if (!isMax)
    attributes.push_back(
        im.named("count_include_pad",
                 im.builder.getBoolAttr(im.intAttr("count_include_pad", 0))));
  Operation *pool = im.create(isMax ? MaxPoolOp::getOperationName()
                                    : AveragePoolOp::getOperationName(),
                              {x}, attributes, 1);
  if (!isMax || im.node->output_size() < 2 || im.node->output(1).empty())
    return im.bindResults(pool);
  // The Indices output: where each maximum is, flattened over the input
  // (row-major, or column-major spatial dimensions with storage_order 1).
  attributes.push_back(
      im.named("storage_order",
               im.builder.getI64IntegerAttr(im.intAttr("storage_order", 0))));
  Operation *indices =
      im.create(MaxPoolIndicesOp::getOperationName(), {x}, attributes, 1);
  im.values[im.node->output(0)].value = pool->getResult(0);
  im.values[im.node->output(1)].value = indices->getResult(0);
}

void importReduce(Importer &im, StringRef opName) {
  im.checkAttributes({"axes", "keepdims", "noop_with_empty_axes"});
  Value x = im.input(0);
  // ReduceSum takes axes as an input from opset 13, ReduceMean from 18.
  bool axesInput = opName == ReduceSumOp::getOperationName() ? im.opset >= 13
                                                             : im.opset >= 18;
  std::vector<int64_t> axes =
      axesInput
          ? (im.hasInput(1) ? im.constInts(1, "axes") : std::vector<int64_t>{})
          : im.intsAttr("axes");
  if (axes.empty() && im.intAttr("noop_with_empty_axes", 0)) {
    im.bindResults(im.create(IdentityOp::getOperationName(), {x}, {}, 1));
    return;
  }
  int64_t rank = im.typeOf(x).getRank();
  for (int64_t &a : axes)
    if (a < 0 && a >= -rank)
      a += rank;
  im.bindResults(im.create(
      opName, {x},
      {im.named("axes", im.i64s(axes)),
       im.named("keepdims", im.builder.getBoolAttr(im.intAttr("keepdims", 1)))},
      1));
}

/// -x as x * -1 (float32 or int64), so that autodiff and the kernels need
/// nothing new.
void importNeg(Importer &im) {
  im.checkAttributes({});
  Value x = im.input(0);
  Value factor = im.scalarConstant(im.typeOf(x).getElementType(), -1.0);
  im.bindResults(im.create(MulOp::getOperationName(), {x, factor}, {}, 1));
}

/// Clip's bounds are attributes before opset 11 and constant inputs after;
/// a missing bound is unbounded.
void importClip(Importer &im) {
  im.checkAttributes({"min", "max"});
  float low = -std::numeric_limits<float>::infinity(),
        high = std::numeric_limits<float>::infinity();
  if (im.opset < 11) {
    low = im.floatAttr("min", low);
    high = im.floatAttr("max", high);
  } else {
    // A bound is a scalar; an empty or longer one is refused, not read.
    auto bound = [&](int index, const char *name) {
      const ConstTensor &value = im.requireConst(index, name);
      if (value.size() != 1)
        raise(im.where() + ": " + name + " must hold one element, it has " +
              std::to_string(value.size()));
      return static_cast<float>(value.at(0));
    };
    if (im.hasInput(1))
      low = bound(1, "min");
    if (im.hasInput(2))
      high = bound(2, "max");
  }
  im.bindResults(im.create(ClipOp::getOperationName(), {im.input(0)},
                           {im.named("min", im.builder.getF32FloatAttr(low)),
                            im.named("max", im.builder.getF32FloatAttr(high))},
                           1));
}

/// Pad in constant mode with pads as an attribute (before opset 11) or a
/// constant input, optionally over some axes only (opset 18).
void importPad(Importer &im) {
  im.checkAttributes({"mode", "pads", "value"});
  std::string mode = im.stringAttr("mode", "constant");
  if (mode != "constant")
    raise(im.where() + ": mode '" + mode +
          "' is not supported (only constant padding)");
  Value x = im.input(0);
  int64_t rank = im.typeOf(x).getRank();
  std::vector<int64_t> given =
      im.opset < 11 ? im.intsAttr("pads") : im.constInts(1, "pads");
  float value = im.floatAttr("value", 0.0f);
  if (im.opset >= 11 && im.hasInput(2))
    value = static_cast<float>(im.requireConst(2, "constant_value").at(0));
  std::vector<int64_t> axes;
  if (im.opset >= 18 && im.hasInput(3))
    axes = im.constInts(3, "axes");
  else
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  if (given.size() != 2 * axes.size())
    raise(im.where() + ": pads has " + Twine(given.size()) + " values for " +
          Twine(axes.size()) + " axes");
  SmallVector<int64_t> pads(2 * rank, 0);
  int64_t count = axes.size();
  for (int64_t i = 0; i < count; ++i) {
    int64_t axis = axes[i];
    if (axis < -rank || axis >= rank)
      raise(im.where() + ": axis " + Twine(axis) + " is out of range");
    axis = axis < 0 ? axis + rank : axis;
    if (given[i] < 0 || given[i + count] < 0)
      raise(im.where() + ": negative pads (cropping) are not supported");
    pads[axis] = given[i];
    pads[axis + rank] = given[i + count];
  }
  im.bindResults(
      im.create(PadOp::getOperationName(), {x},
                {im.named("pads", im.i64s(pads)),
                 im.named("value", im.builder.getF32FloatAttr(value))},
                1));
}

void importPow(Importer &im) {
  // ONNX allows integer bases and exponents; cdp computes in float32
  // (exact while a result fits its 24-bit significand) and casts an
  // integer base's result back, truncating as ONNX's Cast does.
  im.checkAttributes({});
  Value base = im.input(0), exponent = im.input(1);
  Type f32 = im.builder.getF32Type(), i64 = im.builder.getIntegerType(64);
  bool integerBase = im.typeOf(base).getElementType().isInteger(64);
  if (!integerBase && !im.typeOf(base).getElementType().isF32())
    raise(im.where() + ": the base must be float32 or int64");
  Operation *power =
      im.create(PowOp::getOperationName(),
                {im.castTo(base, f32), im.castTo(exponent, f32)}, {}, 1);
  if (!integerBase)
    return im.bindResults(power);
  im.bindValue(0, im.castTo(power->getResult(0), i64));
}

void importHardSigmoid(Importer &im) {
  im.checkAttributes({"alpha", "beta"});
  return im.bindResults(im.create(
      HardSigmoidOp::getOperationName(), {im.input(0)},
      {im.named("alpha",
                im.builder.getF32FloatAttr(im.floatAttr("alpha", 0.2f))),
       im.named("beta",
                im.builder.getF32FloatAttr(im.floatAttr("beta", 0.5f)))},
      1));
}

void importGelu(Importer &im) {
  im.checkAttributes({"approximate"});
  return im.bindResults(
      im.create(GeluOp::getOperationName(), {im.input(0)},
                {im.named("approximate", im.builder.getStringAttr(im.stringAttr(
                                             "approximate", "none")))},
                1));
}

void importGemm(Importer &im) {
  im.checkAttributes({"alpha", "beta", "transA", "transB"});
  SmallVector<Value> operands{im.input(0), im.input(1)};
  if (im.hasInput(2))
    operands.push_back(im.input(2));
  return im.bindResults(im.create(
      GemmOp::getOperationName(), operands,
      {im.named("alpha",
                im.builder.getF32FloatAttr(im.floatAttr("alpha", 1.0f))),
       im.named("beta", im.builder.getF32FloatAttr(im.floatAttr("beta", 1.0f))),
       im.named("trans_a", im.builder.getBoolAttr(im.intAttr("transA", 0))),
       im.named("trans_b", im.builder.getBoolAttr(im.intAttr("transB", 0)))},
      1));
}

void importBatchNormalization(Importer &im) {
  im.checkAttributes({"epsilon", "momentum", "training_mode"});
  SmallVector<Value> operands;
  for (int i = 0; i < 5; ++i)
    operands.push_back(im.input(i));
  // Running statistics are buffers, not trainable parameters.
  for (int i = 3; i < 5; ++i)
    if (auto param = operands[i].getDefiningOp<ParamOp>()) {
      param.setBuffer(true);
      param.setFrozen(false);
    }
  bool statistics =
      im.node->output_size() > 1 &&
      llvm::any_of(llvm::drop_begin(im.node->output()),
                   [](const std::string &o) { return !o.empty(); });
  // Before opset 14 there is no training_mode: asking for the running
  // statistics is what selects training (torch exports it so at 13).
  bool training =
      im.opset < 14 ? statistics : im.intAttr("training_mode", 0) != 0;
  if (!training && statistics)
    raise(im.where() + ": running statistics outputs need training_mode=1");
  return im.bindResults(im.create(
      BatchNormOp::getOperationName(), operands,
      {im.named("epsilon",
                im.builder.getF32FloatAttr(im.floatAttr("epsilon", 1e-5f))),
       im.named("momentum",
                im.builder.getF32FloatAttr(im.floatAttr("momentum", 0.9f))),
       im.named("training_mode", im.builder.getBoolAttr(training))},
      3));
}

/// LayerNormalization's and RMSNormalization's attributes as
/// cdp.layer_norm's (`rms` for the second), float32 statistics only.
SmallVector<NamedAttribute> normalizationAttributes(Importer &im, bool rms) {
  im.checkAttributes({"axis", "epsilon", "stash_type"});
  if (im.intAttr("stash_type", 1) != 1)
    raise(im.where() + ": stash_type " + Twine(im.intAttr("stash_type", 1)) +
          " is not supported (float32 only)");
  return {
      im.named("axis", im.builder.getI64IntegerAttr(im.intAttr("axis", -1))),
      im.named("epsilon",
               im.builder.getF32FloatAttr(im.floatAttr("epsilon", 1e-5f))),
      im.named("rms", im.builder.getBoolAttr(rms))};
}

void importLayerNormalization(Importer &im) {
  SmallVector<NamedAttribute> attributes = normalizationAttributes(im, false);
  SmallVector<Value> operands{im.input(0), im.input(1)};
  if (im.hasInput(2))
    operands.push_back(im.input(2));
  return im.bindResults(
      im.create(LayerNormOp::getOperationName(), operands, attributes, 3));
}

/// RMSNormalization (opset 23): a layer norm without the mean, its scale
/// and no bias; the statistics are results of cdp.layer_norm the node
/// does not have.
void importRMSNormalization(Importer &im) {
  SmallVector<NamedAttribute> attributes = normalizationAttributes(im, true);
  return im.bindResults(im.create(LayerNormOp::getOperationName(),
                                  {im.input(0), im.input(1)}, attributes, 3));
}

void importDropout(Importer &im) {
  im.checkAttributes({"seed"});
  float ratio = 0.5f;
  if (im.hasInput(1))
    ratio = static_cast<float>(im.requireConst(1, "ratio").at(0));
  bool training = false;
  if (im.hasInput(2))
    training = im.requireConst(2, "training_mode").at(0) != 0;
  SmallVector<NamedAttribute> attributes{
      im.named("ratio", im.builder.getF32FloatAttr(ratio)),
      im.named("training_mode", im.builder.getBoolAttr(training))};
  if (im.attr("seed"))
    attributes.push_back(
        im.named("seed", im.builder.getI64IntegerAttr(im.intAttr("seed", 0))));
  return im.bindResults(
      im.create(DropoutOp::getOperationName(), {im.input(0)}, attributes, 2));
}

void importCast(Importer &im) {
  im.checkAttributes({"to", "saturate"});
  Type to = im.elementTypeOf(static_cast<int32_t>(im.intAttr("to", 0)),
                             im.where() + " target");
  return im.bindResults(im.create(CastOp::getOperationName(), {im.input(0)},
                                  {im.named("to", TypeAttr::get(to))}, 1));
}

void importReshape(Importer &im) {
  im.checkAttributes({"allowzero"});
  Value x = im.input(0);
  std::vector<int64_t> shape =
      resolveReshape(im.typeOf(x).getShape(), im.constInts(1, "shape"),
                     im.typeOf(x).getNumElements(),
                     im.intAttr("allowzero", 0) != 0, im.where());
  return im.bindResults(im.create(ReshapeOp::getOperationName(), {x},
                                  {im.named("shape", im.i64s(shape))}, 1));
}

void importTranspose(Importer &im) {
  im.checkAttributes({"perm"});
  Value x = im.input(0);
  std::vector<int64_t> perm = im.intsAttr("perm");
  if (!im.attr("perm"))
    for (int64_t d = im.typeOf(x).getRank() - 1; d >= 0; --d)
      perm.push_back(d);
  return im.bindResults(im.create(TransposeOp::getOperationName(), {x},
                                  {im.named("perm", im.i64s(perm))}, 1));
}

void importConcat(Importer &im) {
  im.checkAttributes({"axis"});
  SmallVector<Value> operands;
  for (int i = 0; i < im.node->input_size(); ++i)
    operands.push_back(im.input(i));
  return im.bindResults(im.create(
      ConcatOp::getOperationName(), operands,
      {im.named("axis", im.builder.getI64IntegerAttr(im.intAttr("axis", 0)))},
      1));
}

void importSplit(Importer &im) {
  im.checkAttributes({"axis", "split", "num_outputs"});
  Value x = im.input(0);
  RankedTensorType type = im.typeOf(x);
  int64_t rank = type.getRank(), axis = im.intAttr("axis", 0);
  if (axis < -rank || axis >= rank)
    raise(im.where() + ": axis " + Twine(axis) + " is out of range");
  int64_t dim = type.getDimSize(axis < 0 ? axis + rank : axis);
  std::vector<int64_t> split =
      im.hasInput(1) ? im.constInts(1, "split") : im.intsAttr("split");
  if (split.empty()) {
    int64_t pieces = im.attr("num_outputs") ? im.intAttr("num_outputs", 1)
                                            : im.node->output_size();
    if (pieces < 1)
      raise(im.where() + ": needs at least one output");
    // Equal pieces, the last one smaller when the axis does not divide.
    int64_t size = (dim + pieces - 1) / pieces;
    for (int64_t i = 0; i < pieces; ++i)
      split.push_back(std::max<int64_t>(0, std::min(size, dim - i * size)));
  }
  if (static_cast<int64_t>(split.size()) != im.node->output_size())
    raise(im.where() + ": " + Twine(split.size()) + " pieces for " +
          Twine(im.node->output_size()) + " outputs");
  return im.bindResults(
      im.create(SplitOp::getOperationName(), {x},
                {im.named("axis", im.builder.getI64IntegerAttr(axis)),
                 im.named("split", im.i64s(split))},
                split.size()));
}

void importSlice(Importer &im) {
  im.checkAttributes({});
  Value x = im.input(0);
  auto [starts, ends, axes, steps] = im.sliceInputs();
  return im.bindResults(im.create(
      SliceOp::getOperationName(), {x},
      {im.named("starts", im.i64s(starts)), im.named("ends", im.i64s(ends)),
       im.named("axes", im.i64s(axes)), im.named("steps", im.i64s(steps))},
      1));
}

void importSqueeze(Importer &im, StringRef op) {
  im.checkAttributes({});
  Value x = im.input(0);
  std::vector<int64_t> axes =
      im.hasInput(1) ? im.constInts(1, "axes") : std::vector<int64_t>{};
  if (op == "Unsqueeze" && axes.empty())
    raise(im.where() + " needs axes");
  return im.bindResults(im.create(op == "Squeeze"
                                      ? SqueezeOp::getOperationName()
                                      : UnsqueezeOp::getOperationName(),
                                  {x}, {im.named("axes", im.i64s(axes))}, 1));
}

void importExpand(Importer &im) {
  im.checkAttributes({});
  Value x = im.input(0);
  return im.bindResults(
      im.create(ExpandOp::getOperationName(), {x},
                {im.named("shape", im.i64s(im.constInts(1, "shape")))}, 1));
}

void importGather(Importer &im) {
  im.checkAttributes({"axis"});
  Value data = im.input(0), indices = im.input(1);
  if (!im.typeOf(indices).getElementType().isInteger(64))
    raise(im.where() + ": indices must be int64");
  int64_t axis = im.intAttr("axis", 0);
  SmallVector<NamedAttribute> attrs{
      im.named("axis", im.builder.getI64IntegerAttr(axis))};
  if (axis == 0)
    if (std::optional<int64_t> row =
            im.embeddingPaddingRow(im.node->input(0), data))
      attrs.push_back(
          im.named("padding_idx", im.builder.getI64IntegerAttr(*row)));
  return im.bindResults(
      im.create(GatherOp::getOperationName(), {data, indices}, attrs, 1));
}

void importConstantOfShape(Importer &im) {
  im.checkAttributes({"value"});
  std::vector<int64_t> shape = im.constInts(0, "shape");
  Attribute value = DenseElementsAttr::get(
      RankedTensorType::get({1}, im.builder.getF32Type()), 0.0f);
  if (const onnx::AttributeProto *a = im.attr("value"))
    value = im.elementsAttr(im.readTensor(a->t(), im.where() + " value"));
  return im.bindResults(im.create(
      ConstantOfShapeOp::getOperationName(), {},
      {im.named("shape", im.i64s(shape)), im.named("value", value)}, 1));
}

void importSoftmaxCrossEntropyLoss(Importer &im, StringRef op) {
  im.checkAttributes({"reduction", "ignore_index"});
  bool sce = op == "SoftmaxCrossEntropyLoss";
  SmallVector<Value> operands{im.input(0), im.input(1)};
  if (!im.typeOf(operands[1]).getElementType().isInteger(64))
    raise(im.where() + ": labels must be int64");
  if (im.hasInput(2))
    operands.push_back(im.input(2));
  SmallVector<NamedAttribute> attributes{
      im.named("reduction",
               im.builder.getStringAttr(im.stringAttr("reduction", "mean")))};
  if (im.attr("ignore_index"))
    attributes.push_back(
        im.named("ignore_index",
                 im.builder.getI64IntegerAttr(im.intAttr("ignore_index", 0))));
  return im.bindResults(
      im.create(sce ? SoftmaxCrossEntropyLossOp::getOperationName()
                    : NllLossOp::getOperationName(),
                operands, attributes, sce ? 2 : 1));
}

//===----------------------------------------------------------------------===//
// Element-wise families
//===----------------------------------------------------------------------===//

void unary(Importer &im, StringRef opName) {
  im.checkAttributes({});
  im.bindResults(im.create(opName, {im.input(0)}, {}, 1));
}

void binary(Importer &im, StringRef opName) {
  im.checkAttributes({});
  Value lhs = im.input(0), rhs = im.input(1);
  im.bindResults(im.create(opName, {lhs, rhs}, {}, 1));
}

/// Min, Max and Sum take one or more inputs: a chain of pairs.
void variadic(Importer &im, StringRef opName) {
  im.checkAttributes({});
  Value acc = im.input(0);
  for (int i = 1; i < im.node->input_size(); ++i)
    acc = im.create(opName, {acc, im.input(i)}, {}, 1)->getResult(0);
  if (im.node->input_size() == 1)
    acc = im.create(IdentityOp::getOperationName(), {acc}, {}, 1)->getResult(0);
  im.bindValue(0, acc);
}

void axisOp(Importer &im, StringRef opName, int64_t fallback) {
  im.checkAttributes({"axis"});
  im.bindResults(im.create(
      opName, {im.input(0)},
      {im.named("axis",
                im.builder.getI64IntegerAttr(im.intAttr("axis", fallback)))},
      1));
}

void importWhere(Importer &im) {
  im.checkAttributes({});
  Value condition = im.input(0), x = im.input(1), y = im.input(2);
  if (!im.typeOf(condition).getElementType().isInteger(1))
    raise(im.where() + ": the condition must be bool");
  im.bindResults(
      im.create(WhereOp::getOperationName(), {condition, x, y}, {}, 1));
}

void importIsInf(Importer &im) {
  im.checkAttributes({"detect_positive", "detect_negative"});
  Builder &b = im.builder;
  im.bindResults(im.create(
      IsInfOp::getOperationName(), {im.input(0)},
      {im.named("detect_positive",
                b.getBoolAttr(im.intAttr("detect_positive", 1) != 0)),
       im.named("detect_negative",
                b.getBoolAttr(im.intAttr("detect_negative", 1) != 0))},
      1));
}

/// CastLike(x, like) is Cast(x) to like's element type.
void importCastLike(Importer &im) {
  im.checkAttributes({"saturate"});
  Value x = im.input(0);
  Type to = im.typeOf(im.input(1)).getElementType();
  im.bindValue(0, im.castTo(x, to));
}

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

void importGatherElements(Importer &im) {
  im.checkAttributes({"axis"});
  Value data = im.input(0), indices = im.input(1);
  im.bindResults(im.create(
      GatherElementsOp::getOperationName(),
      {data, im.castTo(indices, im.builder.getI64Type())},
      {im.named("axis", im.builder.getI64IntegerAttr(im.intAttr("axis", 0)))},
      1));
}

void importGatherND(Importer &im) {
  im.checkAttributes({"batch_dims"});
  Value data = im.input(0), indices = im.input(1);
  im.bindResults(im.create(
      GatherNDOp::getOperationName(),
      {data, im.castTo(indices, im.builder.getI64Type())},
      {im.named("batch_dims",
                im.builder.getI64IntegerAttr(im.intAttr("batch_dims", 0)))},
      1));
}

void importCumSum(Importer &im) {
  im.checkAttributes({"exclusive", "reverse"});
  Value x = im.input(0);
  const ConstTensor &axis = im.requireConst(1, "axis");
  if (axis.size() != 1 || axis.isFloat())
    raise(im.where() + ": axis must be one integer");
  Builder &b = im.builder;
  im.bindResults(im.create(
      CumSumOp::getOperationName(), {x},
      {im.named("axis", b.getI64IntegerAttr(axis.intAt(0))),
       im.named("exclusive", b.getBoolAttr(im.intAttr("exclusive", 0) != 0)),
       im.named("reverse", b.getBoolAttr(im.intAttr("reverse", 0) != 0))},
      1));
}

void importTrilu(Importer &im) {
  im.checkAttributes({"upper"});
  int64_t k = 0;
  if (im.hasInput(1)) {
    const ConstTensor &given = im.requireConst(1, "k");
    if (given.size() != 1 || given.isFloat())
      raise(im.where() + ": k must be one integer");
    k = given.intAt(0);
  }
  Builder &b = im.builder;
  im.bindResults(
      im.create(TriluOp::getOperationName(), {im.input(0)},
                {im.named("k", b.getI64IntegerAttr(k)),
                 im.named("upper", b.getBoolAttr(im.intAttr("upper", 1) != 0))},
                1));
}

/// Range folds when its bounds are known; cdp has no op for a runtime one.
void importRange(Importer &im) {
  for (int i = 0; i < 3; ++i)
    if (!im.constInput(i))
      raise(im.where() + ": input '" + im.node->input(i) +
            "' is not a constant; cdp needs Range's bounds at compile time");
  raise(im.where() + ": the range has more than " + Twine(kFoldLimit) +
        " elements, more than cdp computes at compile time");
}

//===----------------------------------------------------------------------===//
// Sequences: torch's split into a list, read back element by element
//===----------------------------------------------------------------------===//

/// SplitToSequence becomes a Split whose pieces SequenceAt reads.
void importSplitToSequence(Importer &im) {
  im.checkAttributes({"axis", "keepdims"});
  Value x = im.input(0);
  RankedTensorType type = im.typeOf(x);
  int64_t rank = type.getRank(), axis = im.intAttr("axis", 0);
  if (axis < -rank || axis >= rank)
    raise(im.where() + ": axis " + Twine(axis) + " is out of range");
  axis = axis < 0 ? axis + rank : axis;
  int64_t dim = type.getDimSize(axis);
  std::vector<int64_t> split;
  bool keepdims = im.intAttr("keepdims", 1) != 0;
  if (im.hasInput(1)) {
    const ConstTensor &given = im.requireConst(1, "split");
    if (given.isFloat())
      raise(im.where() + ": split must be integers");
    if (given.shape.empty()) { // one size: pieces of it, the last smaller
      int64_t size = given.intAt(0);
      if (size < 1)
        raise(im.where() + ": split size must be positive");
      for (int64_t at = 0; at < dim; at += size)
        split.push_back(std::min(size, dim - at));
    } else {
      split = given.ints;
    }
    keepdims = true;
  } else {
    split.assign(dim, 1);
  }
  Operation *op =
      im.create(SplitOp::getOperationName(), {x},
                {im.named("axis", im.builder.getI64IntegerAttr(axis)),
                 im.named("split", im.i64s(split))},
                split.size());
  SmallVector<Value> pieces(op->getResults());
  if (!keepdims)
    for (Value &piece : pieces)
      piece = im.create(SqueezeOp::getOperationName(), {piece},
                        {im.named("axes", im.i64s({axis}))}, 1)
                  ->getResult(0);
  im.sequences[im.node->output(0)] = std::move(pieces);
}

void importSequenceAt(Importer &im) {
  im.checkAttributes({});
  auto it = im.sequences.find(im.node->input(0));
  if (it == im.sequences.end())
    raise(im.where() + ": reads a sequence that no SplitToSequence made "
                       "(cdp reads no other sequences)");
  const ConstTensor &position = im.requireConst(1, "position");
  if (position.size() != 1 || position.isFloat())
    raise(im.where() + ": position must be one integer");
  int64_t count = it->second.size(), at = position.intAt(0);
  if (at < -count || at >= count)
    raise(im.where() + ": position " + Twine(at) + " is out of range for " +
          Twine(count) + " pieces");
  im.bindValue(0, it->second[at < 0 ? at + count : at]);
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

using Build = void (*)(Importer &);

struct OpRule {
  /// The first opset whose semantics the builder implements.
  int64_t since;
  Build build;
};

#define CDP_UNARY(OP) [](Importer &im) { unary(im, OP::getOperationName()); }
#define CDP_BINARY(OP) [](Importer &im) { binary(im, OP::getOperationName()); }

const llvm::StringMap<OpRule> &opRules() {
  static const llvm::StringMap<OpRule> rules = {
      // Element-wise.
      {"Relu", {kMinOpset, CDP_UNARY(ReluOp)}},
      {"Erf", {kMinOpset, CDP_UNARY(ErfOp)}},
      {"Tanh", {kMinOpset, CDP_UNARY(TanhOp)}},
      {"Sigmoid", {kMinOpset, CDP_UNARY(SigmoidOp)}},
      {"Sqrt", {kMinOpset, CDP_UNARY(SqrtOp)}},
      {"Reciprocal", {kMinOpset, CDP_UNARY(ReciprocalOp)}},
      {"Sin", {kMinOpset, CDP_UNARY(SinOp)}},
      {"Cos", {kMinOpset, CDP_UNARY(CosOp)}},
      {"Abs", {kMinOpset, CDP_UNARY(AbsOp)}},
      {"Exp", {kMinOpset, CDP_UNARY(ExpOp)}},
      {"Log", {kMinOpset, CDP_UNARY(LogOp)}},
      {"Identity", {kMinOpset, CDP_UNARY(IdentityOp)}},
      {"HardSwish", {kMinOpset, CDP_UNARY(HardSwishOp)}},
      {"Neg", {kMinOpset, importNeg}},
      {"Clip", {kMinOpset, importClip}},
      {"HardSigmoid", {kMinOpset, importHardSigmoid}},
      {"Gelu", {20, importGelu}},
      {"Add", {kMinOpset, CDP_BINARY(AddOp)}},
      {"Sub", {kMinOpset, CDP_BINARY(SubOp)}},
      {"Mul", {kMinOpset, CDP_BINARY(MulOp)}},
      {"Div", {kMinOpset, CDP_BINARY(DivOp)}},
      {"Pow", {kMinOpset, importPow}},
      {"Min",
       {kMinOpset,
        [](Importer &im) { variadic(im, MinOp::getOperationName()); }}},
      {"Max",
       {kMinOpset,
        [](Importer &im) { variadic(im, MaxOp::getOperationName()); }}},
      {"Sum",
       {kMinOpset,
        [](Importer &im) { variadic(im, AddOp::getOperationName()); }}},
      {"Cast", {kMinOpset, importCast}},
      {"CastLike", {15, importCastLike}},
      // Selection, comparison and logic.
      {"Where", {kMinOpset, importWhere}},
      {"Equal", {kMinOpset, CDP_BINARY(EqualOp)}},
      {"Less", {kMinOpset, CDP_BINARY(LessOp)}},
      {"LessOrEqual", {kMinOpset, CDP_BINARY(LessOrEqualOp)}},
      {"Greater", {kMinOpset, CDP_BINARY(GreaterOp)}},
      {"GreaterOrEqual", {kMinOpset, CDP_BINARY(GreaterOrEqualOp)}},
      {"And", {kMinOpset, CDP_BINARY(AndOp)}},
      {"Or", {kMinOpset, CDP_BINARY(OrOp)}},
      {"Xor", {kMinOpset, CDP_BINARY(XorOp)}},
      {"Not", {kMinOpset, CDP_UNARY(NotOp)}},
      {"IsNaN", {kMinOpset, CDP_UNARY(IsNaNOp)}},
      {"IsInf", {kMinOpset, importIsInf}},
      // Linear algebra, convolution, pooling, normalization.
      {"MatMul", {kMinOpset, CDP_BINARY(MatMulOp)}},
      {"Gemm", {kMinOpset, importGemm}},
      {"Conv", {kMinOpset, importConv}},
      {"MaxPool", {kMinOpset, [](Importer &im) { importPool(im, true); }}},
      {"AveragePool", {kMinOpset, [](Importer &im) { importPool(im, false); }}},
      {"GlobalAveragePool", {kMinOpset, CDP_UNARY(GlobalAveragePoolOp)}},
      {"BatchNormalization", {kMinOpset, importBatchNormalization}},
      {"LayerNormalization", {17, importLayerNormalization}},
      {"RMSNormalization", {23, importRMSNormalization}},
      {"Dropout", {kMinOpset, importDropout}},
      {"Softmax",
       {kMinOpset,
        [](Importer &im) { axisOp(im, SoftmaxOp::getOperationName(), -1); }}},
      {"LogSoftmax",
       {kMinOpset,
        [](Importer &im) {
          axisOp(im, LogSoftmaxOp::getOperationName(), -1);
        }}},
      {"ReduceMean",
       {kMinOpset,
        [](Importer &im) {
          importReduce(im, ReduceMeanOp::getOperationName());
        }}},
      {"ReduceSum",
       {kMinOpset,
        [](Importer &im) {
          importReduce(im, ReduceSumOp::getOperationName());
        }}},
      // Shapes and data movement.
      {"Flatten",
       {kMinOpset,
        [](Importer &im) { axisOp(im, FlattenOp::getOperationName(), 1); }}},
      {"Pad", {kMinOpset, importPad}},
      {"Reshape", {kMinOpset, importReshape}},
      {"Transpose", {kMinOpset, importTranspose}},
      {"Concat", {kMinOpset, importConcat}},
      {"Split", {kMinOpset, importSplit}},
      {"Slice", {kMinOpset, importSlice}},
      {"Squeeze",
       {kMinOpset, [](Importer &im) { importSqueeze(im, "Squeeze"); }}},
      {"Unsqueeze",
       {kMinOpset, [](Importer &im) { importSqueeze(im, "Unsqueeze"); }}},
      {"Expand", {kMinOpset, importExpand}},
      {"Gather", {kMinOpset, importGather}},
      {"GatherElements", {kMinOpset, importGatherElements}},
      {"GatherND", {kMinOpset, importGatherND}},
      {"CumSum", {kMinOpset, importCumSum}},
      {"Trilu", {14, importTrilu}},
      {"Range", {kMinOpset, importRange}},
      {"ConstantOfShape", {kMinOpset, importConstantOfShape}},
      {"SplitToSequence", {kMinOpset, importSplitToSequence}},
      {"SequenceAt", {kMinOpset, importSequenceAt}},
      // Recurrent layers, unrolled.
      {"LSTM", {kMinOpset, importLSTM}},
      {"GRU", {kMinOpset, importGRU}},
      // Losses.
      {"SoftmaxCrossEntropyLoss",
       {kMinOpset,
        [](Importer &im) {
          importSoftmaxCrossEntropyLoss(im, "SoftmaxCrossEntropyLoss");
        }}},
      {"NegativeLogLikelihoodLoss",
       {kMinOpset,
        [](Importer &im) {
          importSoftmaxCrossEntropyLoss(im, "NegativeLogLikelihoodLoss");
        }}},
  };
  return rules;
}

#undef CDP_UNARY
#undef CDP_BINARY

} // namespace

void importOp(Importer &im, StringRef opType) {
  auto rule = opRules().find(opType);
  if (rule == opRules().end() || im.opset < rule->second.since)
    raise(im.where() + ": op '" + opType + "' is not supported at opset " +
          Twine(im.opset));
  rule->second.build(im);
}

std::vector<std::pair<std::string, int64_t>> importedOps() {
  std::vector<std::pair<std::string, int64_t>> ops;
  for (const auto &rule : opRules())
    ops.emplace_back(rule.getKey().str(), rule.second.since);
  std::sort(ops.begin(), ops.end());
  return ops;
}

} // namespace cdp::import
