#pragma once
// A worker's compute order given whole: the plan's (plan::Plan::order), which the planner timed
// and held to its memory cap. The zero-bubble kinds order their computes by the profile's
// bytes and times and the cluster's links (generators.h), so the same plan ordered elsewhere
// (train on threads, or without --profile) ran another order than the one planned: regnet's
// interleaved-zb on 2 workers held 37.3 MiB on a worker planned at 33.8, and another over the
// cap the plan was made to fit.
#include <string>
#include <vector>

#include "plan/plan.h"
#include "schedule/schedule.h"

namespace pt::schedule {

// Whether the planner writes a plan's order for `kind` (its order is weighed: takes_action_times
// or takes_activation_budget).
bool order_is_weighed(const std::string& kind);

// Each worker's F, B and W of `s` in order, one string a worker ("0F0 0F1 2F0 2B0 2W0 ...").
std::vector<std::string> compute_order(const Schedule& s);

// The plan's order where the run is the one it was planned for (its schedule, microbatches and
// chunks); empty otherwise, or where it has none. ConfigError naming `source` and the field where
// the plan gives an order to a schedule whose order is not weighed.
std::vector<std::string> plan_order(const plan::Plan& plan, const std::string& source, const std::string& kind,
                                    int microbatches, int chunks);

// Puts each worker's computes of `s` (a generator's, compute-only, its flush after its computes) in
// the order given: the same F, B and W per worker, each B after its F and each W after its B.
// ConfigError naming `source` (e.g. "p.json: field 'order'"), the worker and the action otherwise.
void follow_order(Schedule& s, const std::vector<std::string>& order, const std::string& source);

}  // namespace pt::schedule
