#pragma once
// The planner: PipeDream's dynamic program over stage boundaries and replication, for a
// hierarchical cluster (SOSP'19 §3.1), with two cost models (see PlanOptions).
#include <cstdint>
#include <string>

#include "plan/cluster.h"
#include "plan/plan.h"
#include "profile/profile.h"

namespace pt::plan {

enum class CostModel {
  kPipetrain,  // default: stage times as the simulator and runtime will realise them
  kPipedream,  // PipeDream's optimizer equations, for users migrating from it
};

struct PlanOptions {
  CostModel cost_model = CostModel::kPipetrain;
  bool activation_transfer = true;  // false: --no-activation-transfer
  bool straight = false;            // one worker per stage, no replication
  int64_t memory_bytes = 0;         // per worker; 0 = cluster's, or unlimited
  int candidates = 1;               // plan_candidates: how many of the search's best to rank
};

// Finds the plan minimising the slowest stage's time. Throws ConfigError when no plan fits.
// Pipetrain model: the search's best under its closed form (estimate_plan), its predicted time
// the exact evaluate_plan's.
Plan make_plan(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options);

// Pipetrain model: the search's best plan for each choice of the first stage, at most
// options.candidates of them, ranked by evaluate_plan (fastest first; each plan's predicted time
// is that). The simulator referees among them (sim/referee.h). PipeDream model: make_plan's.
std::vector<Plan> plan_candidates(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options);

// Contiguous split of the layers (topological order) into `stages` single-replica stages
// balancing forward+backward time (minimises the largest stage). Used by `--stages N`.
Plan even_split(const profile::Profile& profile, int stages);

}  // namespace pt::plan
