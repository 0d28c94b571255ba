//===- InPlaceViews.h - views whose output is their input's bytes -*- C++
//-*-===//
//
// cdp-plan-memory places a reshape's result over its input's storage where
// it can (SharedStorage): the kernel then sees one address and copies
// nothing. The plan's readers that count bytes (the report's memory, the
// cost model's time) ask this one question of an instruction so that they
// count such a view as the runtime runs it: no bytes moved, no storage of
// its own.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_INPLACEVIEWS_H
#define CDP_PLAN_INPLACEVIEWS_H

#include "cdp/Plan/plan.pb.h"

#include <string_view>

namespace cdp::plan {

/// Whether an instruction `op` reading tensor ids `inputs` and writing
/// `outputs` (the plan's, or a SpelledPlan's, with `tensorOf` giving each
/// id's tensor) is a view (reshape, flatten, squeeze, unsqueeze, identity)
/// whose one output lies at its one input's arena offset.
template <typename Ids, typename TensorOf>
bool isInPlaceView(std::string_view op, const Ids &inputs, const Ids &outputs,
                   TensorOf tensorOf) {
  bool view = op == "reshape" || op == "flatten" || op == "squeeze" ||
              op == "unsqueeze" || op == "identity";
  if (!view || inputs.size() != 1 || outputs.size() != 1 || inputs[0] < 0 ||
      outputs[0] < 0)
    return false;
  const Tensor &in = tensorOf(inputs[0]), &out = tensorOf(outputs[0]);
  return in.kind() == ACTIVATION && out.kind() == ACTIVATION &&
         in.offset() == out.offset() && in.bytes() == out.bytes();
}

} // namespace cdp::plan

#endif // CDP_PLAN_INPLACEVIEWS_H
