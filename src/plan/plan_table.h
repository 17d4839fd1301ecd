#pragma once
// The readable form of a plan (`pipetrain plan` prints it): one row per stage with its layers,
// replicas, worker ids and predicted compute/communication, then the bottleneck and the
// speed-ups over data parallelism and over one worker.
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/plan.h"
#include "profile/profile.h"

namespace pt::plan {

// one_worker_fits: false where a memory cap leaves no room for one worker (the joint search's
// caller knows), so that the warning of a plan slower than one worker does not advise it.
std::string format_plan_table(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                              bool one_worker_fits = true);

// "0-3,8-11": sorted ids as ranges.
std::string format_id_ranges(std::vector<int> ids);

}  // namespace pt::plan
