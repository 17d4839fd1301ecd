#include "referee/replay_floor.h"

#include <algorithm>

#include "core/error.h"
#include "plan/physical_limit.h"
#include "schedule/generators.h"
#include "schedule/schedule.h"
#include "sim/cycle_time.h"

namespace pt::referee {

double in_flight_limit_ms(const plan::Plan& plan, const std::vector<sim::StageCost>& costs,
                          const plan::PlanEstimate& exact, const plan::Cluster& cluster) {
  double round_trip = 0, limit = 0;
  for (int s = plan.num_stages() - 1; s >= 0; --s) {
    round_trip += costs[s].forward_ms + costs[s].backward_ms + 2 * cluster.action_ms();
    if (s + 1 < plan.num_stages()) round_trip += 2 * exact.stages[s].trip_out_ms;
    limit = std::max(limit, round_trip / (plan::in_flight(plan, s) * plan.stages[s].replicas));
  }
  return limit;
}

double round_limit_ms(const plan::Plan& plan, const std::vector<sim::StageCost>& costs, const plan::Cluster& cluster) {
  double limit = 0;
  for (int s = 0; s < plan.num_stages(); ++s) {
    const plan::Stage& st = plan.stages[s];
    // A recomputing backward runs the forward again first, its buckets ready later.
    if (st.replicas < 2 || st.recompute) continue;
    const sim::StageCost& c = costs[s];
    double action = cluster.action_ms();
    double end = plan::buckets_end_ms(c.buckets, c.backward_ms, cluster, cluster.allreduce_phases(st.workers, 1.0));
    double round = plan.deferred_step && s == 0
                       ? 2 * action + c.step_ms + std::max(c.forward_ms + c.backward_ms + action, end)
                       : 3 * action + c.forward_ms + c.step_ms + std::max(c.backward_ms, end);
    limit = std::max(limit, round / st.replicas);
  }
  return limit;
}

std::vector<sim::StageCost> stage_costs_of(const plan::Plan& plan, const profile::Profile& profile, int64_t bucket_bytes,
                                           const std::string& kind) {
  schedule::Schedule layers;
  layers.num_stages = plan.num_stages();
  layers.flush = schedule::schedule_flushes(kind);
  if (kind == "pipedream")  // which stages copy their weights (Schedule::copies_weights); 2bw's all do
    for (int s = 0; s < plan.num_stages(); ++s)
      layers.weight_versions.push_back(plan::pipedream_weight_versions(plan, s, plan.deferred_step));
  for (const auto& st : plan.stages) layers.stage_layers.push_back(st.layers);
  return sim::stage_costs(layers, profile, bucket_bytes);
}

double replay_floor_ms(const plan::Plan& plan, const plan::PlanEstimate& exact, const std::vector<sim::StageCost>& costs,
                       const profile::Profile& profile, const plan::Cluster& cluster, const std::string& kind) {
  double floor = plan::physical_limit(plan, exact, profile, cluster).ms();
  if (kind != "pipedream" || costs.size() != plan.stages.size()) return floor;
  return std::max({floor, in_flight_limit_ms(plan, costs, exact, cluster), round_limit_ms(plan, costs, cluster)});
}

double replay_floor_ms(const plan::Plan& plan, const profile::Profile& profile, const plan::Cluster& cluster,
                       const std::string& kind, int64_t bucket_bytes, const schedule::Schedule* schedule) {
  try {
    plan::PlanOptions options;
    options.bucket_bytes = bucket_bytes;
    plan::PlanEstimate exact = plan::evaluate_plan(plan, profile, cluster, options);
    std::vector<sim::StageCost> costs = stage_costs_of(plan, profile, bucket_bytes, kind);
    double floor = replay_floor_ms(plan, exact, costs, profile, cluster, kind);
    return schedule ? std::max(floor, sim::cycle_time_ms(*schedule, costs, cluster, bucket_bytes)) : floor;
  } catch (const ConfigError&) {
    return 0;
  }
}

}  // namespace pt::referee
