#pragma once
// `pipetrain plan` without the command-line parser: flags in, plan and its two printed forms
// out, so every bad input is testable without building the CLI.
#include <functional>
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/plan.h"
#include "plan/planner.h"
#include "profile/profile.h"

namespace pt::plan {

inline constexpr int kMaxCandidates = 1000;

struct PlanFlags {
  std::string profile;           // --profile: pipetrain JSON, PipeDream JSON figures or graph.txt
  ClusterFlags cluster;          // --cluster FILE, or --workers 4,4 --bandwidth-gbps 80,10
  std::string memory;            // --memory 16GB ("" = the cluster's, or unlimited)
  std::string cost_model = "pipetrain";
  bool straight = false;
  bool no_activation_transfer = false;
  int candidates = 12;           // --candidates: the search's best plans the simulator referees
  double bucket_mb = Cluster::kDefaultBucketBytes / double(1 << 20);  // --bucket-mb, as train's
  bool no_deferred_step = false;  // --no-deferred-step
  bool all_workers = false;       // --all-workers: no plan that leaves workers idle
  double time_limit_s = PlanOptions{}.time_limit_s;  // --time-limit
  std::function<void(const std::string&)> progress;  // PlanOptions::progress
  // The joint search (src/referee/joint_search.h) keeps plans under the memory cap with the memory model:
  // the candidates here are searched without it (as under a cluster file's cap, PlanOutcome::joint).
  bool joint = false;
};

struct PlanOutcome {
  profile::Profile profile;
  Cluster cluster;
  PlanOptions options;
  Plan plan;                     // the best predicted (candidates[0])
  std::vector<Plan> candidates;  // plan_candidates: pipetrain model, best predicted first
  int64_t memory_cap = 0;        // per worker: --memory, or the cluster's (0: none)
  // PlanFlags::joint, or a cluster file's cap under the pipetrain model: the pipetrain model plans
  // under a cap jointly (searched here without it, a 200 MiB cap was refused as too small for any
  // plan before the joint search could look).
  bool joint = false;
  std::string table;  // the readable form
  std::string json;   // the plan format of docs/design.md
};

// Throws UsageError naming the flag and value for bad flags, FormatError for bad files,
// ConfigError when no plan exists.
PlanOutcome run_plan_command(const PlanFlags& flags);

}  // namespace pt::plan
