//===- PlanFuzzer.cpp - libFuzzer target: plan loading --------------------===//
//
// A plan payload as an attacker could seal it: parsed, validated, checked
// for deadlocks and bound (every device's kernels made with their
// signatures checked), as cdp-run does before running it. Anything but a
// clean refusal (a RuntimeError or a non-empty error) is a finding.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/PlanInstantiate.h"
#include "cdp/Plan/PlanValidate.h"
#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Executor.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <memory>
#include <vector>

using namespace cdp;

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // Invalid UTF-8 in string fields is logged per input: noise at this rate.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  plan::Plan plan;
  if (!plan.ParseFromArray(data, static_cast<int>(size)))
    return 0;
  // As readPlan: format 4's runs spelled out, then the streams checked.
  // Small bounds keep each input fast: a megabyte per tensor and arena.
  if (!parseStrategy(plan.strategy()) ||
      !plan::checkRuns(plan, int64_t(1) << 16).empty())
    return 0;
  if (plan::hasRuns(plan))
    (void)plan::findSendRecvDeadlock(plan); // on the runs' messages
  plan::instantiate(plan);
  if (!plan::validatePlan(plan, int64_t(1) << 20).empty() ||
      plan.devices_size() > 8 || !plan::findSendRecvDeadlock(plan).empty())
    return 0;
  // The weights file is not part of the input: values in it load as zeros
  // from the plan itself (their place checked above).
  for (plan::Tensor &t : *plan.mutable_tensors())
    if (t.has_initial()) {
      t.set_data(std::string(t.initial().size(), '\0'));
      t.clear_initial();
    }
  runtime::LocalFabric fabric(plan.devices_size());
  try {
    std::vector<std::unique_ptr<runtime::Executor>> executors;
    for (int d = 0; d < plan.devices_size(); ++d)
      executors.push_back(
          std::make_unique<runtime::Executor>(plan, 1, d, &fabric.endpoint(d)));
  } catch (const runtime::RuntimeError &) {
  }
  return 0;
}
