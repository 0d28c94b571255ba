//===- OnnxInferenceMode.cpp - training exports for inference -------------===//

#include "cdp/Runtime/OnnxInferenceMode.h"

#include <set>

namespace cdp::runtime {

namespace {

/// The outputs a node keeps in inference mode: BatchNormalization its Y
/// (ONNX forbids the running statistics outside training), Dropout its
/// output (the mask is all ones).
int outputsKept(const onnx::NodeProto &node) {
  return node.op_type() == "BatchNormalization" || node.op_type() == "Dropout"
             ? 1
             : node.output_size();
}

bool inTrainingMode(const onnx::NodeProto &node) {
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == "training_mode")
      return a.i() != 0;
  return false;
}

bool isRewritten(const onnx::NodeProto &node) {
  return (node.op_type() == "BatchNormalization" && inTrainingMode(node)) ||
         (node.op_type() == "Dropout" && node.input_size() >= 3);
}

std::string nodeName(const onnx::NodeProto &node) {
  return node.op_type() + " '" +
         (node.name().empty() ? node.output(0) : node.name()) + "'";
}

} // namespace

std::string toInferenceMode(onnx::ModelProto &model) {
  onnx::GraphProto &graph = *model.mutable_graph();
  std::set<std::string> read;
  for (const onnx::NodeProto &node : graph.node())
    read.insert(node.input().begin(), node.input().end());
  for (const onnx::ValueInfoProto &output : graph.output())
    read.insert(output.name());
  // Refuse before changing anything.
  for (const onnx::NodeProto &node : graph.node()) {
    if (!isRewritten(node))
      continue;
    for (int i = outputsKept(node); i < node.output_size(); ++i)
      if (!node.output(i).empty() && read.count(node.output(i)))
        return nodeName(node) + " has its training-only output '" +
               node.output(i) +
               "' read by the model, so the model has no inference mode "
               "(--save-onnx writes it as exported)";
  }
  for (onnx::NodeProto &node : *graph.mutable_node()) {
    if (!isRewritten(node))
      continue;
    if (node.op_type() == "Dropout")
      node.mutable_input()->DeleteSubrange(2, node.input_size() - 2);
    for (onnx::AttributeProto &a : *node.mutable_attribute())
      if (a.name() == "training_mode")
        a.set_i(0);
    node.mutable_output()->DeleteSubrange(
        outputsKept(node), node.output_size() - outputsKept(node));
  }
  return "";
}

} // namespace cdp::runtime
