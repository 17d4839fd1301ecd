#include "plan/pipetrain_cost.h"

#include <algorithm>

#include "core/error.h"
#include "plan/state_space.h"

namespace pt::plan {

int level_spanning(const Cluster& cluster, int lo, int hi) {
  if (lo == hi) return -1;
  int unit = 1;
  for (int k = 0; k < static_cast<int>(cluster.levels.size()); ++k) {
    unit *= cluster.levels[k].fan_out;
    if (lo / unit == hi / unit) return k;
  }
  PT_CHECK(false, "workers ", lo, " and ", hi, " are outside the cluster");
  return -1;
}

int64_t memory_limit(const Cluster& cluster, const PlanOptions& options) {
  return options.memory_bytes > 0 ? options.memory_bytes : cluster.memory_bytes_per_worker;
}

PlanEstimate evaluate_plan(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                           const PlanOptions& options) {
  check_plan_fits(plan, profile, "plan");
  int W = cluster.workers();
  for (const auto& st : plan.stages)
    for (int w : st.workers)
      if (w < 0 || w >= W)
        throw ConfigError(str("plan uses worker ", w, " but the cluster ", cluster.describe(), " has ", W,
                              " workers (0..", W - 1, ")"));
  int L = profile.num_layers(), p = plan.num_stages();
  std::vector<int> stage_of(L);
  for (int s = 0; s < p; ++s)
    for (int l : plan.stages[s].layers) stage_of[l] = s;
  // cross[s]: bytes read across the cut between stages s-1 and s; a layer read by a later
  // stage crosses every cut up to its last reader (each producing layer counted once per cut).
  std::vector<int> last_reader(L, -1);
  for (int r = 0; r < L; ++r)
    for (int in : profile.layers[r].inputs) last_reader[in] = std::max(last_reader[in], stage_of[r]);
  std::vector<double> cross(p + 1, 0);
  for (int l = 0; l < L; ++l) {
    if (is_outside_search(profile, l)) continue;
    for (int s = stage_of[l] + 1; s <= last_reader[l]; ++s)
      cross[s] += static_cast<double>(profile.layers[l].activation_bytes);
  }
  int64_t limit = memory_limit(cluster, options);
  PlanEstimate out;
  for (int s = 0; s < p; ++s) {
    const Stage& st = plan.stages[s];
    double compute = 0, act = 0, param = 0;
    for (int l : st.layers) {
      if (is_outside_search(profile, l)) continue;
      compute += profile.layers[l].forward_ms + profile.layers[l].backward_ms;
      act += static_cast<double>(profile.layers[l].activation_bytes);
      param += static_cast<double>(profile.layers[l].parameter_bytes);
    }
    // Sharing a unit of a level is an equivalence, so the innermost level holding a set is the
    // widest level between its first worker and any other (hand-written placements included).
    auto span = [&](std::vector<int> ws) {
      int level = -1;
      for (int w : ws) level = std::max(level, level_spanning(cluster, std::min(ws[0], w), std::max(ws[0], w)));
      return level;
    };
    int level_ar = span(st.workers);
    int level_in = -1, level_out = -1;
    if (s > 0) {
      const auto& prev = plan.stages[s - 1].workers;
      auto ws = st.workers;
      ws.push_back(*std::max_element(prev.begin(), prev.end()));
      level_in = span(ws);
    }
    if (s + 1 < p) {
      const auto& next = plan.stages[s + 1].workers;
      auto ws = st.workers;
      ws.push_back(*std::min_element(next.begin(), next.end()));
      level_out = span(ws);
    }
    StageEstimate e = pipetrain_stage(compute, cross[s], cross[s + 1], param, act, st.replicas, p - s,
                                      stage_links(cluster, st.replicas, level_in, level_out, level_ar));
    if (limit > 0 && e.memory_bytes > static_cast<double>(limit)) out.fits_memory = false;
    out.stages.push_back(e);
  }
  out.bottleneck = 0;
  for (int s = 0; s < p; ++s)
    if (out.stages[s].time_ms > out.stages[out.bottleneck].time_ms) out.bottleneck = s;
  out.pipeline_ms_per_minibatch = out.stages[out.bottleneck].time_ms;
  return out;
}

}  // namespace pt::plan
