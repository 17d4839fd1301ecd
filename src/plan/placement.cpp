// Where a searched plan's replicas go: the worker orders tried (as searched, reversed, spread
// over the innermost level's units) and the one the exact model predicts fastest, with the
// minibatches in flight it predicts best (planner_internal.h).
#include <algorithm>
#include <optional>
#include <vector>

#include "plan/realised_cost.h"
#include "plan/planner_internal.h"

namespace pt::plan::detail {
namespace {

// Worker orders the planner tries for a searched plan (the search numbers workers stage by
// stage): as searched and, on clusters of several levels, reversed (the last stage first) and
// spread (consecutive replicas in different units of the innermost level). Stage s takes the
// next `replicas` entries of the order.
std::vector<std::vector<int>> placements(const Cluster& cluster) {
  int W = cluster.workers();
  std::vector<int> order(W);
  for (int w = 0; w < W; ++w) order[w] = w;
  std::vector<std::vector<int>> out = {order};
  // On one level every worker's links are alike: any order predicts the same.
  if (cluster.levels.size() == 1) return out;
  std::reverse(order.begin(), order.end());
  out.push_back(order);
  int per = cluster.levels[0].fan_out, units = W / per;
  if (per > 1) {
    for (int i = 0; i < W; ++i) order[i] = (i % units) * per + i / units;
    out.push_back(order);
  }
  return out;
}

Plan placed(Plan plan, const std::vector<int>& order) {
  size_t next = 0;
  for (auto& st : plan.stages) {
    for (int& w : st.workers) w = order[next++];
    std::sort(st.workers.begin(), st.workers.end());
  }
  return plan;
}

}  // namespace

PlanEstimate predict(Plan& plan, const StageSums& sums, const profile::Profile& profile, const Cluster& cluster,
                     const PlanOptions& options, std::optional<PlanEstimate> under_rule) {
  for (auto& st : plan.stages) st.in_flight = 0;
  PlanEstimate e = under_rule ? std::move(*under_rule) : evaluate_plan(plan, sums, profile, cluster, options);
  Plan fewer = plan;
  choose_in_flight(fewer, e, profile);
  PlanEstimate f = evaluate_plan(fewer, sums, profile, cluster, options);
  if (f.pipeline_ms_per_minibatch <= e.pipeline_ms_per_minibatch * (1 + 1e-9)) plan = std::move(fewer), e = f;
  plan.pipeline_ms_per_minibatch = e.pipeline_ms_per_minibatch;
  for (int s = 0; s < plan.num_stages(); ++s)
    plan.stages[s].compute_ms = e.stages[s].compute_ms, plan.stages[s].comm_ms = e.stages[s].comm_ms,
    plan.stages[s].time_ms = e.stages[s].time_ms;
  return e;
}

// `plan` in the placement the exact model predicts fastest among those that fit the memory
// (ties keep the first order), with its predictions; no stages when none fits. Fewer minibatches
// in flight than PipeDream's rule are never predicted faster (choose_in_flight only lowers them,
// which only lengthens the in-flight term), so a placement's time is its estimate under the rule,
// and predict's second estimate is needed only for the placement chosen, or where the rule's
// stashes do not fit the memory (GNMT's neighbour plans on 4x4: 4 estimates each, not 6).
Plan best_placed(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                 const PlanOptions& options) {
  Plan best;
  std::optional<PlanEstimate> best_e;  // its estimate under the rule, where not predicted yet
  double best_ms = 0;
  bool predicted = false;  // best's in-flight counts and predictions are set
  const StageSums sums = exact_stage_sums(plan, profile, cluster);  // the same in every placement
  for (auto order : placements(cluster)) {
    // A plan on fewer workers (smaller_clusters) takes ids 0..k-1, which are that smaller cluster.
    order.erase(std::remove_if(order.begin(), order.end(), [&](int w) { return w >= plan.workers; }), order.end());
    Plan p = placed(plan, order);
    for (auto& st : p.stages) st.in_flight = 0;
    PlanEstimate e = evaluate_plan(p, sums, profile, cluster, options);
    bool full = !e.fits_memory;
    if (full && !predict(p, sums, profile, cluster, options, e).fits_memory) continue;
    double ms = full ? p.pipeline_ms_per_minibatch : e.pipeline_ms_per_minibatch;
    if (best.stages.empty() || ms < best_ms) {
      best = std::move(p), best_ms = ms, predicted = full;
      if (!full) best_e = std::move(e);
    }
  }
  if (!best.stages.empty() && !predicted) predict(best, sums, profile, cluster, options, std::move(best_e));
  return best;
}

}  // namespace pt::plan::detail
