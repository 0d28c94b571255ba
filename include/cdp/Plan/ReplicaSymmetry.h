//===- ReplicaSymmetry.h - replicas that run what the first one runs ------===//
//
// A pipeline's replicas (format 7: `replica_devices` P) run the first
// replica's compute templates a peer offset further. Where every device's
// program is the same as its first replica's but for its replica and its
// peers r x P further, and no message leaves a replica, every replica
// goes through the same times and memory: the report and the step-time
// simulation predict the first replica alone.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_REPLICASYMMETRY_H
#define CDP_PLAN_REPLICASYMMETRY_H

#include "cdp/Plan/plan.pb.h"

namespace cdp::plan {

/// P where device d runs what device d mod P runs, a replica further, for
/// every device, and the first replica's messages stay among its P
/// devices; 0 otherwise (no replicas, a weight tied across stages whose
/// templates differ, an edited plan).
int alikeReplicaDevices(const Plan &plan);

} // namespace cdp::plan

#endif // CDP_PLAN_REPLICASYMMETRY_H
