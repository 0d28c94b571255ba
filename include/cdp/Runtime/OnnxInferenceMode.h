//===- OnnxInferenceMode.h - training exports for inference -----*- C++ -*-===//
//
// PyTorch exports for training (torch.onnx.TrainingMode.TRAINING) keep
// BatchNormalization in training mode (batch statistics, running-stat
// outputs) and Dropout's training_mode input true. ONNX runs them so, and so
// does cdp-compile --inference; PyTorch's eval() does not. cdp-run
// --save-onnx-eval writes the trained model rewritten here, so that ONNX
// runtimes and --inference give what model.eval() gives.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_ONNXINFERENCEMODE_H
#define CDP_RUNTIME_ONNXINFERENCEMODE_H

#include <onnx/onnx_pb.h>

#include <string>

namespace cdp::runtime {

/// Rewrites `model` in place: every BatchNormalization with training_mode 1
/// normalizes with its running statistics (training_mode 0, its two
/// running-statistics outputs removed), and every Dropout passes its input
/// through (its training_mode input removed: ONNX's default is false).
/// Returns an empty string, or one line naming the node whose training-only
/// output another node or the graph reads (the model is then unchanged).
std::string toInferenceMode(onnx::ModelProto &model);

} // namespace cdp::runtime

#endif // CDP_RUNTIME_ONNXINFERENCEMODE_H
