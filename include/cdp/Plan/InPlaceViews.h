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

/// Whether an instruction `op` reading `in` and writing `out` is a view
/// (reshape, flatten, squeeze, unsqueeze, identity) whose output lies at
/// its input's arena offset.
inline bool isInPlaceView(std::string_view op, const Tensor &in,
                          const Tensor &out) {
  bool view = op == "reshape" || op == "flatten" || op == "squeeze" ||
              op == "unsqueeze" || op == "identity";
  return view && in.kind() == ACTIVATION && out.kind() == ACTIVATION &&
         in.offset() == out.offset() && in.bytes() == out.bytes();
}

} // namespace cdp::plan

#endif // CDP_PLAN_INPLACEVIEWS_H
