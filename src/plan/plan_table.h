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

// pipedream's replicated stages (runtime/worker.h, sum_replica_gradients): a round of r minibatches,
// one a replica, is one step on r x the batch with their gradients' mean (or `sum`); where every
// stage is replicated, what `train --schedule dp` does instead. Empty where no stage is replicated.
std::string replica_rounds_note(const Plan& plan, int64_t batch, bool sum);

}  // namespace pt::plan
