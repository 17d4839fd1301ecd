#pragma once
// The options a schedule of `kind` is generated with where a profile is known: its activation
// budget and, for the zero-bubble clock's kinds, its times (schedule::weigh_by_profile), the
// times kept only where the order they give simulates sooner than the unit clock's on `cluster`
// (schedule/zero_bubble_clock.h says when each wins). plan, compare, simulate and train call it
// alike, so that the order trained is the order predicted. Without the cluster's levels (train
// on threads, or without --cluster) or on a machine's shared cores (host_cores), the unit clock's
// order. Throws what make_schedule throws.
#include <string>

#include "plan/cluster.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "schedule/generators.h"

namespace pt::sim {

schedule::ScheduleOptions weigh_schedule(const std::string& kind, const plan::Plan& plan,
                                         schedule::ScheduleOptions options, const profile::Profile& profile,
                                         const plan::Cluster& cluster);

}  // namespace pt::sim
