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

std::string format_plan_table(const Plan& plan, const profile::Profile& profile, const Cluster& cluster);

// "0-3,8-11": sorted ids as ranges.
std::string format_id_ranges(std::vector<int> ids);

}  // namespace pt::plan
