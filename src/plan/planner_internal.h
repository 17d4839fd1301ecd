#pragma once
// The planner's steps that make_plan, plan_candidates and neighbour_plans share (internal to
// src/plan): the search run on a profile's states, its stages made a Plan, a plan placed and
// predicted by the exact model.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/realised_cost.h"
#include "plan/plan.h"
#include "plan/planner.h"
#include "plan/search.h"
#include "plan/state_space.h"
#include "profile/profile.h"

namespace pt::plan::detail {

const char* name_of(CostModel m);

struct Searched {
  std::shared_ptr<const StateSpace> space;  // shared by the searches of one plan_candidates
  SearchResult result;
};

// The search's states of the profile for the cluster's size and the options' cost model, after
// checking the flags and the cluster.
StateSpace search_space(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options);
// The search on `space`; throws ConfigError, saying why, where no plan fits.
Searched run_search(std::shared_ptr<const StateSpace> space, const profile::Profile& profile, const Cluster& cluster,
                    const PlanOptions& options);
Searched run_search(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options);

// The plan of a searched sequence of stages, with its predictions: the pipetrain model's exact
// evaluation, or the search's own figures for PipeDream's.
Plan to_plan(const std::vector<SearchStage>& stages, double search_ms, const StateSpace& space,
             double data_parallel_ms, const profile::Profile& profile, const Cluster& cluster,
             const PlanOptions& options);

// Data parallelism on every worker of `cluster` by the exact rules (its all-reduce buckets
// overlapping its backward): the baseline a pipetrain plan records, 0 where it does not fit.
// Computed once per cluster, not per candidate: it is the same for all of them.
double exact_data_parallel_ms(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options);

// The exact cost model's predictions, in the plan, with the minibatches in flight the pipedream
// schedule needs (choose_in_flight) where fewer than PipeDream's rule predict no slower; returns
// the estimate they come from. `under_rule`: the plan's estimate under the rule, where the caller
// has it (best_placed: a third of the neighbours' estimates were this one again).
PlanEstimate predict(Plan& plan, const StageSums& sums, const profile::Profile& profile, const Cluster& cluster,
                     const PlanOptions& options, std::optional<PlanEstimate> under_rule = std::nullopt);

// `plan` in the placement the exact model predicts fastest among those that fit the memory
// (ties keep the first order), with its predictions; no stages when none fits (placement.cpp).
Plan best_placed(const Plan& plan, const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options);

}  // namespace pt::plan::detail
