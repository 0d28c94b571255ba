//===- Outputs.cpp - what a run writes ------------------------------------===//
//
// Everything a run writes after it ends: parameters, gradients, outputs,
// the trained ONNX model, the profile, the trace and the report.
//
//===----------------------------------------------------------------------===//

#include "Run.h"

#include "cdp/Plan/Paths.h"
#include "cdp/Runtime/Json.h"
#include "cdp/Runtime/OnnxInferenceMode.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace cdp::runtime::training {

/// Writes an output file all at once (cdp::writeFileAtomically): a crash
/// or a full disk never leaves half of it.
static void writeOutput(const std::string &path, const std::string &bytes) {
  std::string error;
  if (!writeFileAtomically(path, bytes, error))
    fail(path + ": " + error);
}

/// Writes one .npy file per ONNX name, each by its writer, plus index.json
/// mapping the names to files, as a set: the folder is replaced at once
/// (writeFolderAtomically).
static void
writeNpyFolder(const std::string &dir,
               const std::vector<std::pair<std::string, FileWriter>> &npys) {
  FileNamer namer;
  runtime::Json index = runtime::Json::object();
  std::vector<std::pair<std::string, FileWriter>> files;
  for (const auto &[name, writer] : npys) {
    std::string file = namer.name(name) + ".npy";
    files.emplace_back(file, writer);
    index[name] = file;
  }
  std::string indexText = runtime::jsonText(index, 1) + "\n";
  files.emplace_back("index.json",
                     [&indexText](int fd) { return writeAll(fd, indexText); });
  std::string error;
  if (!writeFolderAtomically(dir, files, error))
    fail(dir + ": " + error);
}

/// Views as a folder of .npy files, each written from its tensor's memory
/// (a model's parameters as one set of bytes were its size once more on
/// the root).
static void
writeFolder(const std::string &dir,
            const std::vector<std::pair<std::string, TensorView>> &tensors) {
  std::vector<std::pair<std::string, FileWriter>> npys;
  for (const auto &[name, view] : tensors)
    npys.emplace_back(name, npyWriter(view));
  writeNpyFolder(dir, npys);
}

/// The trained tensors by name into a folder, each read from its device
/// as its file is written, 16 MiB at a time (forEachTrainedChunk).
static void
writeTrainedTensors(Run &run, const std::string &dir,
                    const std::vector<std::pair<std::string, int>> &tensors) {
  std::vector<std::pair<std::string, FileWriter>> npys;
  for (const auto &[name, id] : tensors)
    npys.emplace_back(name, [&run, id = id](int fd) {
      const plan::Tensor &t = run.plan.tensors(id);
      TensorView shape{nullptr,
                       {t.shape().begin(), t.shape().end()},
                       t.dtype(),
                       MemorySpace::Host};
      int64_t size = plan::dtypeSize(t.dtype());
      return writeAll(fd, npyHeader(shape)) &&
             forEachTrainedChunk(
                 run, id, [&](int64_t, int64_t count, const char *bytes) {
                   return writeAll(fd, bytes, count * size);
                 });
    });
  writeNpyFolder(dir, npys);
}

/// After training: a parameter or buffer that ended non-finite stops the
/// run before anything is written (a NaN the loss never saw, behind a
/// ReLU, would otherwise be saved as the trained model).
static void checkTrainedFinite(Run &run) {
  for (const plan::Tensor &t : run.plan.tensors()) {
    bool trained =
        (t.kind() == plan::PARAM && t.trainable()) || t.kind() == plan::BUFFER;
    if (!trained || t.dtype() != plan::F32)
      continue;
    forEachTrainedChunk(
        run, t.id(), [&](int64_t, int64_t count, const char *bytes) {
          const float *values = reinterpret_cast<const float *>(bytes);
          for (int64_t k = 0; k < count; ++k)
            if (!std::isfinite(values[k]))
              fail("after " + std::to_string(run.total) +
                   " steps the trained parameter '" + t.name() +
                   "' holds a non-finite value (" + nonFiniteName(values[k]) +
                   "); nothing was written");
          return true;
        });
  }
}

/// Appends rows [0, count) of `output` (a batch along `axis`) to
/// `gathered`, which holds `total` rows along that axis when complete;
/// `first` is where these rows go.
void gatherRows(const TensorView &output, int64_t axis, int64_t first,
                int64_t count, int64_t total, Array &gathered) {
  int64_t width = plan::dtypeSize(output.dtype), outer = 1, inner = width;
  for (int64_t d = 0; d < axis; ++d)
    outer *= output.shape[d];
  for (size_t d = axis + 1; d < output.shape.size(); ++d)
    inner *= output.shape[d];
  if (gathered.bytes.empty()) {
    gathered.dtype = output.dtype;
    gathered.shape = output.shape;
    gathered.shape[axis] = total;
    gathered.bytes.resize(outer * total * inner);
  }
  int64_t rows = output.shape[axis];
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(gathered.bytes.data() + (o * total + first) * inner,
                static_cast<const char *>(output.data) + o * rows * inner,
                count * inner);
}

void keepStepOutputs(Run &run) {
  if (run.options.saveOutputs.empty())
    return;
  std::vector<int> ids;
  for (const plan::Output &output : run.plan.outputs())
    ids.push_back(output.tensor());
  for (auto &executor : run.executors)
    if (executor)
      executor->keepOutputsOfStep(run.total - 1, ids);
}

/// Tensor `id` as the last step's slots wrote it, by slot, from every
/// device of this process (dp's and cdp's devices each run one slot).
static std::map<int64_t, const HostTensor *> keptSlots(const Run &run, int id) {
  std::map<int64_t, const HostTensor *> slots;
  for (const auto &executor : run.executors)
    if (executor)
      for (const auto &[slot, values] : executor->keptOutputs(id))
        slots[slot] = &values;
  return slots;
}

/// The loss of a step of several slots: the mean over them, as the step's
/// loss is printed.
static Array meanLoss(const std::map<int64_t, const HostTensor *> &slots) {
  float mean = 0.0f;
  for (const auto &[slot, values] : slots)
    mean += values->view().f32()[0] / static_cast<float>(slots.size());
  Array loss;
  loss.bytes.resize(sizeof(float));
  std::memcpy(loss.bytes.data(), &mean, sizeof(float));
  return loss;
}

/// Output `output` of a step of several slots as one array: the slots
/// concatenated along its batch axis in slot order; the loss the mean over
/// them; any other output without a batch axis stacked along a new first
/// axis.
static Array joinedSlots(const Run &run, const plan::Output &output,
                         const std::map<int64_t, const HostTensor *> &slots) {
  if (output.tensor() == run.plan.loss())
    return meanLoss(slots);
  Array joined;
  int64_t k = 0, count = static_cast<int64_t>(slots.size());
  for (const auto &[slot, values] : slots) {
    TensorView view = values->view();
    int64_t axis = output.batch_axis();
    if (axis < 0) {
      view.shape.insert(view.shape.begin(), 1);
      axis = 0;
    }
    int64_t rows = view.shape[axis];
    gatherRows(view, axis, k++ * rows, rows, count * rows, joined);
  }
  return joined;
}

/// --dump-grads and --save-outputs: the last step's gradients and outputs.
void writeStepOutputs(Run &run) {
  const RunOptions &options = run.options;
  Executor &executor = run.first();
  if (!options.dumpGrads.empty()) {
    writeTrainedTensors(run, options.dumpGrads, executor.gradients());
  }
  if (!options.saveOutputs.empty()) {
    // The views point into these: reserved, never moved.
    std::vector<HostTensor> staged;
    staged.reserve(run.plan.outputs_size());
    std::vector<Array> widened;
    widened.reserve(run.plan.outputs_size());
    std::vector<std::pair<std::string, TensorView>> views;
    for (const plan::Output &output : run.plan.outputs()) {
      auto gathered = run.gatheredOutputs.find(output.tensor());
      auto slots = keptSlots(run, output.tensor());
      if (gathered == run.gatheredOutputs.end() && slots.size() > 1)
        gathered =
            run.gatheredOutputs
                .emplace(output.tensor(), joinedSlots(run, output, slots))
                .first;
      TensorView view;
      if (gathered != run.gatheredOutputs.end()) {
        Array &rows = gathered->second;
        view = {rows.bytes.data(), rows.shape, rows.dtype, MemorySpace::Host};
      } else if (!slots.empty()) {
        view = slots.begin()->second->view();
      } else {
        staged.push_back(executor.stageOut(output.tensor()));
        view = staged.back().view();
      }
      if (output.widened()) {
        widened.push_back(widenedToFloat32(view));
        view = {widened.back().bytes.data(), view.shape, plan::F32,
                MemorySpace::Host};
      }
      views.emplace_back(output.name(), view);
    }
    writeFolder(options.saveOutputs, views);
  }
  run.stepOutputsWritten = true;
}

/// --profile: every instruction's mean time per step over the steps after
/// the first (setup) when more ran.
static void writeProfile(Run &run) {
  const RunOptions &options = run.options;
  std::vector<double> seconds = run.first().profileSeconds();
  const plan::Device &device = run.plan.devices(0);
  int64_t steps = std::max<int64_t>(1, run.first().stepsRun());
  runtime::Json instructions = runtime::Json::array();
  for (size_t i = 0; i < seconds.size(); ++i)
    instructions.push_back({{"index", i},
                            {"op", device.instructions(i).op()},
                            {"location", device.instructions(i).location()},
                            {"ms", seconds[i] * 1e3}});
  runtime::Json profile = {{"schema", "cdp-profile/1"},
                           {"steps", steps},
                           {"instructions", std::move(instructions)}};
  writeOutput(options.profile, runtime::jsonText(profile, 1) + "\n");
}

/// --report (with the bytes the communicator logged), --report-svg.
static void writeReport(Run &run) {
  const RunOptions &options = run.options;
  ReportBuilder &report = *run.report;
  for (int d = 0; d < static_cast<int>(run.sendLogs.size()); ++d)
    for (const Communicator::SendRecord &record : run.sendLogs[d])
      report.sent(d, record.tau, record.bytes, record.collective);
  for (int d = 0; d < run.deviceCount; ++d) {
    bool gathered = d < static_cast<int>(run.workspaceBytes.size());
    report.setWorkspace(d, gathered
                               ? static_cast<int64_t>(run.workspaceBytes[d])
                               : run.executors[d]->workspaceBytes());
    report.setOptimizer(d, gathered
                               ? static_cast<int64_t>(run.optimizerBytes[d])
                               : run.executors[d]->optimizerBytes());
    report.setWeightsRead(d, gathered
                                 ? static_cast<int64_t>(run.weightsReadBytes[d])
                                 : run.executors[d]->weightsReadBytes());
  }
  report.setThreads(run.threadsPerDevice);
  std::string json = report.json();
  writeOutput(options.report, json);
  if (options.reportSvg.empty())
    return;
  std::string error;
  std::optional<runtime::ReportCurves> curves =
      runtime::readReportCurves(json, fileName(options.report), error);
  if (!curves)
    fail("the run's report does not read back: " + error);
  writeOutput(
      options.reportSvg,
      runtime::reportSvg(*curves, run.comparison ? &*run.comparison : nullptr));
}

/// Protobuf serializes no message past 2 GiB: a model whose values would
/// come near it is saved with external data.
constexpr uint64_t kMostInlineOnnxBytes = (uint64_t(1) << 31) - (64u << 20);

/// The values of `model`'s initializers moved to `path`.data (ONNX
/// external data, as onnx.save(save_as_external_data=True) writes it: one
/// file, each value at its offset), the trained ones (`trained`: tensor id
/// by initializer name) read from the devices one at a time.
static void writeExternalValues(Run &run, onnx::ModelProto &model,
                                const std::map<std::string, int> &trained,
                                const std::string &path) {
  std::string dataPath = path + ".data";
  std::string location = std::filesystem::path(dataPath).filename().string();
  auto write = [&](int fd) {
    uint64_t offset = 0;
    for (onnx::TensorProto &initializer :
         *model.mutable_graph()->mutable_initializer()) {
      auto it = trained.find(initializer.name());
      if (it == trained.end() && initializer.raw_data().empty())
        continue; // typed fields (small) or another external file: kept
      // The trained value 16 MiB at a time as it is read from where it
      // lies (a whole copy was the largest tensor once more).
      size_t size;
      if (it != trained.end()) {
        const plan::Tensor &t = run.plan.tensors(it->second);
        size = t.bytes();
        int64_t element = plan::dtypeSize(t.dtype());
        if (!forEachTrainedChunk(run, it->second,
                                 [&](int64_t, int64_t count, const char *b) {
                                   return writeAll(fd, b, count * element);
                                 }))
          return false;
      } else {
        std::string untrained;
        untrained.swap(*initializer.mutable_raw_data());
        size = untrained.size();
        if (!writeAll(fd, untrained))
          return false;
      }
      initializer.clear_raw_data();
      initializer.clear_float_data();
      initializer.clear_external_data();
      initializer.set_data_location(onnx::TensorProto::EXTERNAL);
      for (auto [key, entry] :
           {std::pair<const char *, std::string>{"location", location},
            {"offset", std::to_string(offset)},
            {"length", std::to_string(size)}}) {
        onnx::StringStringEntryProto *field = initializer.add_external_data();
        field->set_key(key);
        field->set_value(entry);
      }
      offset += size;
    }
    return true;
  };
  std::string error;
  if (!writeFileAtomically(dataPath, write, error))
    fail(dataPath + ": " + error);
}

/// The trained values in `model`'s initializers themselves.
static void writeInlineValues(Run &run, onnx::ModelProto &model,
                              const std::map<std::string, int> &trained) {
  for (onnx::TensorProto &initializer :
       *model.mutable_graph()->mutable_initializer()) {
    auto it = trained.find(initializer.name());
    if (it == trained.end())
      continue;
    TrainedValue value = fetchTrained(run, it->second);
    const TensorView &view = value.view;
    initializer.clear_float_data();
    initializer.clear_external_data();
    initializer.set_data_location(onnx::TensorProto::DEFAULT);
    initializer.set_raw_data(view.data,
                             view.numel() * plan::dtypeSize(view.dtype));
  }
}

/// --save-onnx: the original model with the trained parameters and
/// buffers as its initializers; --save-onnx-eval (`inference`): the same
/// in inference mode. The values go to FILE.data beside it with
/// --save-onnx-external-data, or where the model would pass 2 GiB.
static void saveOnnx(Run &run, const std::string &path, bool inference) {
  onnx::ModelProto model;
  if (!model.ParseFromString(run.plan.source_model()))
    fail("the plan holds no readable ONNX model to save into");
  std::map<std::string, int> trained;
  uint64_t bytes = model.ByteSizeLong();
  for (const plan::Tensor &t : run.plan.tensors())
    if (t.kind() == plan::PARAM || t.kind() == plan::BUFFER)
      if (trained.insert_or_assign(t.name(), t.id()).second)
        bytes += static_cast<uint64_t>(t.bytes());
  if (inference)
    if (std::string problem = runtime::toInferenceMode(model); !problem.empty())
      fail("--save-onnx-eval: " + problem);
  if (run.options.saveOnnxExternalData || bytes > kMostInlineOnnxBytes)
    writeExternalValues(run, model, trained, path);
  else
    writeInlineValues(run, model, trained);
  std::string serialized;
  if (!model.SerializeToString(&serialized))
    fail(path + ": the model does not serialize");
  writeOutput(path, serialized);
}

/// Everything the run writes after it ends.
void writeOutputs(Run &run) {
  const RunOptions &options = run.options;
  if (run.training)
    checkTrainedFinite(run);
  if (!options.portableCheckpoint.empty())
    writePortableCheckpoint(run);
  run.metrics.close();
  run.tensorboard.close();
  if (!options.profile.empty())
    writeProfile(run);
  if (run.trace)
    writeOutput(
        options.trace,
        run.trace->json(run.plan.has_schedule()
                            ? std::max<int64_t>(run.plan.schedule().cycle(), 1)
                            : 1));
  // Training runs only: --report on a forward-only plan was refused first.
  if (run.report)
    writeReport(run);
  if (!options.dumpParams.empty()) {
    std::vector<std::pair<std::string, int>> tensors;
    for (const plan::Tensor &t : run.plan.tensors())
      if ((t.kind() == plan::PARAM && t.trainable()) ||
          t.kind() == plan::BUFFER)
        tensors.emplace_back(t.name(), t.id());
    writeTrainedTensors(run, options.dumpParams, tensors);
  }
  if (!run.stepOutputsWritten)
    writeStepOutputs(run);
  if (!options.saveOnnx.empty())
    saveOnnx(run, options.saveOnnx, /*inference=*/false);
  if (!options.saveOnnxEval.empty())
    saveOnnx(run, options.saveOnnxEval, /*inference=*/true);
}

} // namespace cdp::runtime::training
