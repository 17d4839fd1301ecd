#pragma once
// Flags shared by `plan`, `simulate` and `compare`: the cluster (a file, or the --workers /
// --bandwidth-gbps shorthand) and the schedule options.
#include <string>

#include <CLI/CLI.hpp>

#include "plan/cluster.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "schedule/generators.h"

namespace pt::app {

// Adds --cluster FILE, --workers and --bandwidth-gbps (plan::cluster_from_flags reads them).
void add_cluster_flags(CLI::App& app, plan::ClusterFlags& flags);

// Adds --microbatches, --chunks, --minibatches and --vertical-sync to `app`.
void add_schedule_options(CLI::App& app, schedule::ScheduleOptions& schedule_options);

// Adds --no-weight-prediction: the memory of a run of `train --no-weight-prediction` (pipedream and
// 2bw on the paper's weight versions, no predicted copies), where the default models train's.
void add_no_weight_prediction_flag(CLI::App& app, bool& no_weight_prediction);

// Even split of the profile into `stages` single-replica stages; a ConfigError naming `why` (what
// asked for them) where it has fewer layers.
plan::Plan straight_plan(const profile::Profile& p, int stages, const std::string& why);

}  // namespace pt::app
