//===- PlanValidate.cpp - a plan's structure, checked on load -------------===//

#include "cdp/Plan/PlanValidate.h"

#include "cdp/Plan/Checked.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/ShardGroups.h"

#include <set>

namespace cdp::plan {

namespace {

/// Counters (steps, time steps, stages, micro-batches) far beyond any plan's
/// but small enough that the runtime's tag and clock arithmetic cannot wrap.
constexpr int64_t kMostCounter = int64_t(1) << 40;
constexpr int kMostRank = 16;

std::string tensorName(const Tensor &t) {
  return "tensor " + std::to_string(t.id()) +
         (t.name().empty() ? "" : " ('" + t.name() + "')");
}

bool inArena(const Tensor &t) {
  return t.kind() == ACTIVATION || t.kind() == INPUT;
}

class Validator {
public:
  Validator(const Plan &plan, int64_t maxBytes)
      : plan(plan), maxBytes(maxBytes), gathered(gatheredParameters(plan)) {}

  std::string run() {
    checkPlan();
    checkSomethingRuns();
    for (int d = 0; error.empty() && d < plan.devices_size(); ++d)
      checkDevice(d);
    for (int id = 0; error.empty() && id < plan.tensors_size(); ++id)
      checkTensor(id);
    if (error.empty())
      checkIds();
    if (error.empty())
      fail(checkShardGroups(plan));
    for (int d = 0; error.empty() && d < plan.devices_size(); ++d) {
      for (const Instruction &i : plan.devices(d).instructions())
        checkInstruction(d, i);
      for (const Instruction &i : plan.devices(d).eval_instructions())
        checkInstruction(d, i);
    }
    return error;
  }

private:
  void fail(const std::string &message) {
    if (error.empty())
      error = message;
  }

  /// A training plan whose devices run nothing would train nothing and
  /// report a loss of 0 (a re-sealed plan with its streams emptied). An
  /// inference plan may hold constants alone.
  void checkSomethingRuns() {
    if (plan.inference())
      return;
    int64_t work = 0;
    for (const Device &device : plan.devices())
      work += device.instructions_size() + device.runs_size();
    for (const Template &t : plan.templates())
      work += t.instructions_size();
    if (work == 0)
      fail("the training plan has no instructions: its devices run nothing");
  }
  bool tensorId(int64_t id) const {
    return id >= 0 && id < plan.tensors_size();
  }

  void checkPlan() {
    if (plan.devices_size() < 1 || plan.devices_size() > kMostPlanDevices)
      fail("the plan has " + std::to_string(plan.devices_size()) +
           " devices; a plan has 1 to " + std::to_string(kMostPlanDevices));
    if (plan.micro_batches() < 0 ||
        plan.micro_batches() > kMostPlanMicroBatches)
      fail("the plan has " + std::to_string(plan.micro_batches()) +
           " micro-batches a step; a plan has at most " +
           std::to_string(kMostPlanMicroBatches));
    if (plan.loss_device() < 0 || plan.loss_device() >= plan.devices_size())
      fail("the plan's loss device " + std::to_string(plan.loss_device()) +
           " is not one of its devices");
    const Schedule &s = plan.schedule();
    bool counters = s.stages() >= 0 && s.stages() <= kMostPlanDevices &&
                    s.cycle() >= 0 && s.cycle() <= kMostCounter;
    for (const auto *list : {&s.offsets(), &s.reduce_at(), &s.live_versions(),
                             &s.stage_param_bytes()})
      for (int64_t v : *list)
        counters = counters && v >= -kMostCounter && v <= kMostCounter;
    for (const Ints &delays : s.version_delay())
      for (int64_t v : delays.values())
        counters = counters && v >= 0 && v <= kMostCounter;
    if (!counters)
      fail("the plan's schedule holds a count out of range");
    int replicaDevices = plan.replica_devices();
    if (replicaDevices < 0 || replicaDevices > plan.devices_size() ||
        (replicaDevices > 0 && plan.devices_size() % replicaDevices != 0))
      fail("the plan's " + std::to_string(replicaDevices) +
           " devices per replica do not divide its " +
           std::to_string(plan.devices_size()) + " devices");
    // A name in the plan's folder: a plan never reads outside it.
    const std::string &weights = plan.weights_file();
    if (weights == "." || weights == ".." ||
        weights.find_first_of(std::string("/\0", 2)) != std::string::npos)
      fail("the plan's weights file '" + weights +
           "' is not a file name beside the plan");
  }

  void checkDevice(int d) {
    const Device &device = plan.devices(d);
    std::string name = "device " + std::to_string(d);
    if (device.index() != d)
      fail(name + " says it is device " + std::to_string(device.index()));
    if (device.backend() != "" && device.backend() != "cpu" &&
        device.backend() != "cuda")
      fail(name + " has backend '" + device.backend() +
           "'; cdp-run knows cpu and cuda");
    if (device.arena_bytes() < 0 || device.arena_bytes() > maxBytes)
      fail(name + "'s arena of " + std::to_string(device.arena_bytes()) +
           " bytes is negative or more than --max-tensor-bytes (" +
           std::to_string(maxBytes) + ")");
  }

  void checkTensor(int id) {
    const Tensor &t = plan.tensors(id);
    std::string name = tensorName(t);
    if (t.id() != id)
      return fail("plan tensor " + std::to_string(id) + " has id " +
                  std::to_string(t.id()));
    if (!DType_IsValid(t.dtype()) || !TensorKind_IsValid(t.kind()))
      return fail(name + " has an unknown type or kind");
    if (t.shape_size() > kMostRank)
      return fail(name + " has rank " + std::to_string(t.shape_size()) +
                  ", more than " + std::to_string(kMostRank));
    std::optional<int64_t> count = elementCount(t.shape());
    std::optional<int64_t> bytes =
        count ? checkedMul(*count, dtypeSize(t.dtype())) : std::nullopt;
    if (!bytes)
      return fail(name + " has a negative dimension or too many elements");
    if (*bytes != t.bytes())
      return fail(name + " declares " + std::to_string(t.bytes()) +
                  " bytes, its shape needs " + std::to_string(*bytes));
    if (*bytes > maxBytes)
      return fail(name + " needs " + std::to_string(*bytes) +
                  " bytes, more than --max-tensor-bytes (" +
                  std::to_string(maxBytes) + ")");
    if (t.has_device() && (t.device() < 0 || t.device() >= plan.devices_size()))
      return fail(name + " is on device " + std::to_string(t.device()) +
                  ", which the plan lacks");
    if (!t.data().empty() && static_cast<int64_t>(t.data().size()) != *bytes)
      return fail(name + " has " + std::to_string(t.data().size()) +
                  " bytes of data, its shape needs " + std::to_string(*bytes));
    if (t.has_initial())
      checkInitial(t, name, *bytes);
    if (t.has_previous_version_of() && !tensorId(t.previous_version_of()))
      return fail(name + " is the previous version of a tensor the plan lacks");
    if (t.has_mirror_of() &&
        (t.kind() != SPARSE_STATE || !tensorId(t.mirror_of()) ||
         plan.tensors(t.mirror_of()).kind() != PARAM ||
         plan.tensors(t.mirror_of()).bytes() != t.bytes()))
      return fail(name + " mirrors no parameter of its size");
    if (t.kind() == INPUT &&
        (t.batch_axis() < -1 || t.batch_axis() >= t.shape_size()))
      return fail(name + " has batch axis " + std::to_string(t.batch_axis()) +
                  " of " + std::to_string(t.shape_size()));
    if (inArena(t) || gathered[id])
      checkArenaPlace(t, *bytes);
  }

  /// An arena tensor lies inside the arena of every device that holds it.
  /// Format 6: the value lies wholly in the weights file, past its header,
  /// and is the tensor's size; never also inline.
  void checkInitial(const Tensor &t, const std::string &name, int64_t bytes) {
    const DataRef &ref = t.initial();
    if (!t.data().empty())
      return fail(name + " has both an inline and a stored initial value");
    if (ref.size() != static_cast<uint64_t>(bytes))
      return fail(name + "'s initial value has " + std::to_string(ref.size()) +
                  " bytes, its shape needs " + std::to_string(bytes));
    if (plan.weights_file().empty() || ref.offset() < 64 ||
        ref.offset() > plan.weights_bytes() ||
        ref.size() > plan.weights_bytes() - ref.offset())
      return fail(name + "'s initial value lies outside the weights file");
  }

  void checkArenaPlace(const Tensor &t, int64_t bytes) {
    std::optional<int64_t> end = checkedAdd(t.offset(), bytes);
    // Shared by replicas: the first replica's devices name them.
    if (t.has_device() && plan.replica_devices() > 0 &&
        t.device() >= plan.replica_devices())
      return fail(tensorName(t) + " is on device " +
                  std::to_string(t.device()) + ", outside the first of " +
                  "the replicas whose devices hold it");
    for (int d = 0; d < plan.devices_size(); ++d) {
      if (t.has_device() && t.device() != arenaHome(plan, d))
        continue;
      if (t.offset() < 0 || !end || *end > plan.devices(d).arena_bytes())
        return fail(tensorName(t) + " lies outside device " +
                    std::to_string(d) + "'s arena");
    }
  }

  void checkIds() {
    std::set<int> inputs;
    for (int id : plan.inputs()) {
      if (!tensorId(id) || plan.tensors(id).kind() != INPUT ||
          !inputs.insert(id).second)
        return fail("the plan's input list names " + std::to_string(id) +
                    ", not an input tensor (or twice)");
    }
    for (const Output &output : plan.outputs()) {
      if (!tensorId(output.tensor()))
        return fail("output '" + output.name() + "' is tensor " +
                    std::to_string(output.tensor()) + ", which the plan lacks");
      DType dtype = plan.tensors(output.tensor()).dtype();
      if (output.widened() && dtype != BF16 && dtype != F16)
        return fail("output '" + output.name() +
                    "' is marked widened but its tensor is not bf16 or fp16");
    }
    for (int id : plan.applied_gradients())
      if (!tensorId(id))
        return fail("an applied gradient is tensor " + std::to_string(id) +
                    ", which the plan lacks");
    auto optionalId = [&](int id, const std::string &what) {
      if (id != -1 && !tensorId(id))
        fail("the plan's " + what + " is tensor " + std::to_string(id) +
             ", which the plan lacks");
    };
    optionalId(plan.loss(), "loss");
    optionalId(plan.scores(), "scores");
    optionalId(plan.labels(), "labels");
    if (plan.has_eval_loss())
      optionalId(plan.eval_loss(), "evaluation loss");
    if (error.empty() && plan.has_eval_loss() && plan.eval_loss() >= 0 &&
        (plan.tensors(plan.eval_loss()).dtype() != F32 ||
         plan.tensors(plan.eval_loss()).bytes() < 4))
      fail("the plan's evaluation loss is not an f32 tensor");
    if (error.empty() && plan.loss() >= 0 &&
        (plan.tensors(plan.loss()).dtype() != F32 ||
         plan.tensors(plan.loss()).bytes() < 4))
      fail("the plan's loss is not an f32 tensor");
    if (error.empty() && plan.labels() >= 0 && !inputs.count(plan.labels()))
      fail("the plan's labels are not one of its inputs");
  }

  void checkInstruction(int d, const Instruction &i) {
    std::string name = "instruction '" + i.op() + "' at '" + i.location() +
                       "' on device " + std::to_string(d);
    for (int id : i.inputs())
      if (id != -1 && !tensorId(id))
        return fail(name + " reads tensor " + std::to_string(id) +
                    ", which the plan lacks");
    for (int id : i.outputs())
      if (!tensorId(id))
        return fail(name + " writes tensor " + std::to_string(id) +
                    ", which the plan lacks");
    auto bounded = [](int64_t v) {
      return v >= -kMostCounter && v <= kMostCounter;
    };
    if (i.min_step() < 0 || i.min_step() > kMostCounter ||
        !bounded(i.time_step()) || !bounded(i.stage()) ||
        !bounded(i.micro_batch()))
      return fail(name + " has a step, time step, stage or micro-batch out "
                         "of range");
    if (i.op() == "load")
      checkLoad(name, i);
  }

  /// A load fills its output with a micro-batch of graph input `input`:
  /// the output must be shaped like that input.
  void checkLoad(const std::string &name, const Instruction &i) {
    int64_t input = -1;
    for (const Attribute &a : i.attributes())
      if (a.name() == "input" && a.value_case() == Attribute::kI)
        input = a.i();
    bool listed = false;
    for (int id : plan.inputs())
      listed = listed || id == input;
    if (!listed || i.outputs_size() != 1)
      return fail(name + " loads " + std::to_string(input) +
                  ", not one of the plan's inputs");
    const Tensor &from = plan.tensors(static_cast<int>(input)),
                 &to = plan.tensors(i.outputs(0));
    if (from.dtype() != to.dtype() ||
        !std::equal(from.shape().begin(), from.shape().end(),
                    to.shape().begin(), to.shape().end()))
      fail(name + " loads input " + tensorName(from) +
           " into a tensor of another shape or type");
  }

  const Plan &plan;
  int64_t maxBytes;
  std::vector<char> gathered; ///< ZeRO stage 3's parameters, in the arena
  std::string error;
};

} // namespace

std::string validatePlan(const Plan &plan, int64_t maxBytes) {
  return Validator(plan, maxBytes).run();
}

} // namespace cdp::plan
