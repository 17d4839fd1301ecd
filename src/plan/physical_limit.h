#pragma once
// The physical limit of a plan (docs/design.md: a time per minibatch below it is a bug): no schedule
// runs a minibatch faster than the busiest worker computes its share of it, or than the busiest
// direction of any worker's link at any level carries its share of the bytes (activations,
// their gradients, and the stage's all-reduce, which the simulator books on the same links).
// The referee skips every candidate whose limit is above the best time it has simulated: the
// limit is never above a plan's simulated time, so skipping never drops the best plan.
// (Bounds that depend on the schedule's action order, such as Little's law over a replica's
// minibatches in flight, are the referee's: referee/replay_floor.h.)
#include <algorithm>

#include "plan/cluster.h"
#include "plan/realised_cost.h"
#include "plan/plan.h"
#include "profile/profile.h"

namespace pt::plan {

struct PhysicalLimit {
  double compute_ms = 0;  // the busiest worker's compute per minibatch (its stage's / replicas)
  double link_ms = 0;     // the busiest link direction's bytes per minibatch / its bandwidth
  double ms() const { return std::max(compute_ms, link_ms); }
};

// From the exact model's figures for the plan (evaluate_plan: compute per stage, each worker's
// bytes per level). Each replicated stage all-reduces at least once per round of its replicas.
PhysicalLimit physical_limit(const Plan& plan, const PlanEstimate& exact, const profile::Profile& profile,
                             const Cluster& cluster);

}  // namespace pt::plan
