#pragma once
// Flags shared by `simulate` and `compare`: the cluster (a file, or the --workers /
// --bandwidth-gbps shorthand) and the schedule options.
#include <string>

#include <CLI/CLI.hpp>

#include "plan/cluster.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "schedule/generators.h"

namespace pt::app {

struct ClusterFlags {
  std::string cluster;         // --cluster FILE
  std::string workers;         // --workers 4 or 4,4
  std::string bandwidth_gbps;  // --bandwidth-gbps 1 or 80,10
  void add_to(CLI::App& app);
  // Throws UsageError naming the flags when neither or both forms are given.
  plan::Cluster build() const;
};

// Adds --microbatches, --chunks, --minibatches and --vertical-sync to `app`.
void add_schedule_options(CLI::App& app, schedule::ScheduleOptions& o);

// Even split of the profile into `stages` single-replica stages, fewer when it has fewer layers.
plan::Plan straight_plan(const profile::Profile& p, int stages);

}  // namespace pt::app
