//===- cdp-compile.cpp - ONNX model to cdp IR and plans -------------------===//
//
// Imports an ONNX model and, for now, prints the imported cdp IR
// (--emit=mlir). Every error is one line, `cdp-compile: error: ...`, with
// exit status 1.
//
//===----------------------------------------------------------------------===//

#include "cdp/Import/OnnxImporter.h"
#include "cdp/InitAll.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("cdp-compile options");

cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.onnx>"),
                               cl::cat(category));
cl::opt<std::string> outputPath("o",
                                cl::desc("Output file (default: standard "
                                         "output for --emit=mlir)"),
                                cl::value_desc("FILE"), cl::init("-"),
                                cl::cat(category));
cl::opt<std::string>
    emit("emit",
         cl::desc("What to write: mlir (the imported cdp IR); plan, "
                  "train-mlir and sched-mlir arrive with training support"),
         cl::value_desc("mlir|plan|train-mlir|sched-mlir"), cl::init("plan"),
         cl::cat(category));
// Numbers are read as strings so that a bad value gets our one-line error.
cl::opt<std::string> batchSize(
    "batch-size",
    cl::desc("Binds a symbolic batch dimension to B (one micro-batch)"),
    cl::value_desc("B"), cl::cat(category));
cl::list<std::string> batchAxis(
    "batch-axis",
    cl::desc("Batch axis of a graph input (default 0; none: no batch axis). "
             "Repeatable"),
    cl::value_desc("NAME=A|NAME=none"), cl::cat(category));
cl::opt<std::string> maxTensorBytes(
    "max-tensor-bytes",
    cl::desc("Refuse any tensor larger than N bytes (default 16 GiB)"),
    cl::value_desc("N"), cl::init("17179869184"), cl::cat(category));
cl::list<std::string> constInput(
    "const-input",
    cl::desc("Bind a graph input to the value in FILE (a serialized ONNX "
             "TensorProto) at compile time, for shape-like inputs such as "
             "Reshape's shape. Repeatable"),
    cl::value_desc("NAME=FILE"), cl::cat(category));
cl::opt<bool> printParamData(
    "print-param-data",
    cl::desc("With --emit=mlir, print parameter data in full instead of "
             "eliding it (makes the output parseable by cdp-opt)"),
    cl::init(false), cl::cat(category));

[[noreturn]] void die(const llvm::Twine &message) {
  llvm::errs() << "cdp-compile: error: " << message << "\n";
  std::exit(1);
}

/// Runs LLVM's parser but reports a bad flag as one line.
void parseCommandLine(int argc, char **argv) {
  cl::HideUnrelatedOptions(category);
  std::string messages;
  llvm::raw_string_ostream stream(messages);
  if (!cl::ParseCommandLineOptions(
          argc, argv,
          "cdp-compile: compiles an ONNX model for cdp\n\n"
          "  cdp-compile MODEL.onnx --emit=mlir [--batch-size B]\n",
          &stream)) {
    // LLVM writes "<argv0>: <problem>.  Try: ..." and a suggestion line;
    // keep only the problem.
    llvm::StringRef first = llvm::StringRef(messages).split('\n').first;
    first = first.split(": ").second.split("  Try:").first;
    die(first.trim().rtrim('.') + " (see cdp-compile --help)");
  }
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  parseCommandLine(argc, argv);

  if (inputPath.empty())
    die("no input model given (usage: cdp-compile MODEL.onnx --emit=mlir)");
  if (emit != "mlir" && emit != "plan" && emit != "train-mlir" &&
      emit != "sched-mlir")
    die("--emit must be mlir, plan, train-mlir or sched-mlir, got '" + emit +
        "'");

  cdp::ImportOptions options;
  if (batchSize.getNumOccurrences()) {
    int64_t value = 0;
    if (!llvm::to_integer(llvm::StringRef(batchSize), value, 10) || value < 1)
      die("--batch-size must be a positive integer, got '" + batchSize + "'");
    options.batchSize = value;
  }
  if (!llvm::to_integer(llvm::StringRef(maxTensorBytes), options.maxTensorBytes,
                        10) ||
      options.maxTensorBytes < 1)
    die("--max-tensor-bytes must be a positive integer, got '" +
        maxTensorBytes + "'");
  for (const std::string &entry : batchAxis) {
    auto [name, axisText] = llvm::StringRef(entry).rsplit('=');
    int64_t axis = -1;
    if (name.empty() || axisText.empty() ||
        (axisText != "none" &&
         (!llvm::to_integer(axisText, axis, 10) || axis < 0)))
      die("--batch-axis takes NAME=A with A a non-negative axis or none, got "
          "'" +
          entry + "'");
    options.batchAxes[name.str()] = axisText == "none" ? -1 : axis;
  }

  for (const std::string &entry : constInput) {
    auto [name, file] = llvm::StringRef(entry).split('=');
    if (name.empty() || file.empty())
      die("--const-input takes NAME=FILE, got '" + entry + "'");
    options.constInputs[name.str()] = file.str();
  }

  mlir::DialectRegistry registry;
  cdp::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  std::string error;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      cdp::importOnnxModel(context, inputPath, options, error);
  if (!module)
    die(inputPath + ": " + error);

  if (emit != "mlir")
    die("--emit=" + emit +
        " is not available yet: this build imports models only; use "
        "--emit=mlir");

  std::string errorMessage;
  auto output = mlir::openOutputFile(outputPath, &errorMessage);
  if (!output)
    die(outputPath + ": " + errorMessage);
  mlir::OpPrintingFlags flags;
  if (printParamData) {
    module->print(output->os(), flags);
  } else {
    // Elided resources still print an empty metadata block; drop it so the
    // IR reads as the graph alone.
    flags.elideLargeResourceString(0);
    std::string text;
    llvm::raw_string_ostream stream(text);
    module->print(stream, flags);
    llvm::StringRef printed(text);
    size_t metadata = printed.rfind("{-#");
    if (metadata != llvm::StringRef::npos &&
        printed.drop_front(metadata + 3).trim() == "#-}")
      printed = printed.take_front(metadata);
    output->os() << printed.rtrim() << "\n";
  }
  output->keep();
  return 0;
}
