#include "plan/pipetrain_cost.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "plan/state_space.h"

namespace pt::plan {

int64_t memory_limit(const Cluster& cluster, const PlanOptions& options) {
  return options.memory_bytes > 0 ? options.memory_bytes : cluster.memory_bytes_per_worker;
}

namespace {

// What both forms need: per stage its sums over the layers the search counts, and the bytes
// across each cut.
struct StageSums {
  std::vector<double> compute, backward, act, param;
  std::vector<double> cut;  // cut[s]: bytes from stage s to s + 1
};

StageSums stage_sums(const Plan& plan, const profile::Profile& profile, const Cluster& cluster, bool exact) {
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
  StageSums sums;
  sums.compute.assign(p, 0), sums.backward.assign(p, 0), sums.act.assign(p, 0), sums.param.assign(p, 0);
  for (int s = 0; s < p; ++s)
    for (int l : plan.stages[s].layers) {
      if (is_outside_search(profile, l)) continue;
      sums.compute[s] += profile::compute_forward_ms(profile, l) + profile::compute_backward_ms(profile, l) +
                         profile::compute_step_ms(profile, l);
      sums.backward[s] += profile::compute_backward_ms(profile, l);
      sums.act[s] += static_cast<double>(profile.layers[l].activation_bytes);
      sums.param[s] += static_cast<double>(profile.layers[l].parameter_bytes);
    }
  // The exact form counts every tensor that crosses; the search does not track Input layers.
  sums.cut = profile::cut_bytes(profile, stage_of, p, exact);
  return sums;
}

// What of a replicated stage's all-reduce remains after the backward of one minibatch, with
// the runtime's buckets: each starts once the backward has produced it and the previous one is
// done (gradient_buckets.h; the simulator replays the same on its links).
double exposed_allreduce_ms(const Plan& plan, int s, const profile::Profile& profile, const Cluster& cluster,
                            int64_t bucket_bytes) {
  const Stage& st = plan.stages[s];
  if (st.replicas < 2) return 0;
  double backward = 0, end = 0;
  for (int l : st.layers) backward += profile::compute_backward_ms(profile, l);
  for (const auto& b : profile::gradient_buckets(profile, st.layers, bucket_bytes))
    end = std::max(end, b.ready_share * backward) + cluster.ring_allreduce_ms(st.workers, static_cast<double>(b.bytes));
  return std::max(0.0, end - backward);
}

PlanEstimate finish(PlanEstimate out, const Cluster& cluster, const PlanOptions& options) {
  int64_t limit = memory_limit(cluster, options);
  out.bottleneck = 0;
  for (size_t s = 0; s < out.stages.size(); ++s) {
    if (limit > 0 && out.stages[s].memory_bytes > static_cast<double>(limit)) out.fits_memory = false;
    if (out.stages[s].time_ms > out.stages[out.bottleneck].time_ms) out.bottleneck = static_cast<int>(s);
  }
  out.pipeline_ms_per_minibatch = out.stages[out.bottleneck].time_ms;
  return out;
}

}  // namespace

PlanEstimate estimate_plan(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                           const PlanOptions& options) {
  StageSums sums = stage_sums(plan, profile, cluster, false);
  int p = plan.num_stages();
  PlanEstimate out;
  for (int s = 0; s < p; ++s) {
    const Stage& st = plan.stages[s];
    int level_in = -1, level_out = -1;
    if (s > 0) {
      auto ws = st.workers;
      ws.insert(ws.end(), plan.stages[s - 1].workers.begin(), plan.stages[s - 1].workers.end());
      level_in = cluster.group_level(ws);
    }
    if (s + 1 < p) {
      const auto& next = plan.stages[s + 1].workers;
      auto ws = st.workers;
      ws.push_back(*std::min_element(next.begin(), next.end()));
      level_out = cluster.group_level(ws);
    }
    double in = s > 0 ? sums.cut[s - 1] : 0;
    out.stages.push_back(pipetrain_stage(sums.compute[s], in, sums.cut[s], sums.param[s], sums.act[s], st.replicas,
                                         p - s,
                                         stage_links(cluster, st.replicas, level_in, level_out,
                                                     cluster.group_level(st.workers)),
                                         sums.backward[s], options.bucket_bytes));
  }
  return finish(out, cluster, options);
}

PlanEstimate evaluate_plan(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                           const PlanOptions& options) {
  StageSums sums = stage_sums(plan, profile, cluster, true);
  int p = plan.num_stages(), W = cluster.workers(), levels = static_cast<int>(cluster.levels.size());
  // Bytes per minibatch through each worker's link per level: [worker * levels + level].
  std::vector<double> egress(static_cast<size_t>(W) * levels, 0), ingress = egress;
  // The input/output shares of each worker's busiest direction, for the table.
  std::vector<double> in_ms(W, 0), out_ms(W, 0);
  for (int s = 0; s + 1 < p; ++s) {
    const auto& from = plan.stages[s].workers;
    const auto& to = plan.stages[s + 1].workers;
    int m = static_cast<int>(from.size()), n = static_cast<int>(to.size());
    // Over a cycle of lcm(m, n) minibatches every pair that talks does so equally often.
    int64_t cycle = std::lcm<int64_t>(m, n);
    double bytes = sums.cut[s] / static_cast<double>(cycle);
    for (int64_t k = 0; k < cycle; ++k) {
      int a = from[replica_for(k, m)], b = to[replica_for(k, n)];
      if (a == b) continue;
      int level = cluster.level_between(a, b);
      double ms = cluster.transfer_ms(level, bytes);
      // Activations a -> b, their gradients b -> a.
      egress[a * levels + level] += bytes, ingress[b * levels + level] += bytes;
      egress[b * levels + level] += bytes, ingress[a * levels + level] += bytes;
      out_ms[a] += ms, in_ms[b] += ms;
    }
  }
  PlanEstimate out;
  for (int s = 0; s < p; ++s) {
    const Stage& st = plan.stages[s];
    StageEstimate e;
    e.compute_ms = sums.compute[s] / st.replicas;
    e.allreduce_ms = exposed_allreduce_ms(plan, s, profile, cluster, options.bucket_bytes) / st.replicas;
    for (int w : st.workers) {
      for (int level = 0; level < levels; ++level) {
        double busiest = std::max(egress[w * levels + level], ingress[w * levels + level]);
        double ms = cluster.transfer_ms(level, busiest);
        if (ms > e.link_ms) e.link_ms = ms, e.busiest_worker = w, e.busiest_level = level;
      }
      e.input_ms = std::max(e.input_ms, in_ms[w]);
      e.output_ms = std::max(e.output_ms, out_ms[w]);
    }
    e.comm_ms = e.link_ms + e.allreduce_ms;
    e.time_ms = std::max(e.compute_ms, e.link_ms) + e.allreduce_ms;
    e.stash_depth = p - s;
    e.memory_bytes = e.stash_depth * (sums.act[s] + sums.param[s]);
    out.stages.push_back(e);
  }
  // A replicated stage's all-reduce holds every replica: no activations go out while it runs,
  // so the next stage, which cannot run ahead of its inputs, stalls for it too (the simulator
  // shows it: VGG-16 15-1 on 2x8 runs 18% slower than compute and links alone predict). The
  // stage before keeps sending forwards into the receivers' queues, so it does not. A stage
  // waits for the longer of its own and its predecessor's all-reduce.
  std::vector<double> own(p);
  for (int s = 0; s < p; ++s) own[s] = out.stages[s].allreduce_ms;
  for (int s = 0; s < p; ++s) {
    StageEstimate& e = out.stages[s];
    e.neighbour_allreduce_ms = s > 0 ? own[s - 1] : 0.0;
    e.time_ms = std::max(e.compute_ms, e.link_ms) + std::max(e.allreduce_ms, e.neighbour_allreduce_ms);
  }
  for (int w = 0; w < W; ++w)
    for (int level = 0; level < levels; ++level) {
      double eg = egress[w * levels + level], in = ingress[w * levels + level];
      if (eg > 0 || in > 0) out.links.push_back({w, level, eg, in, cluster.transfer_ms(level, std::max(eg, in))});
    }
  return finish(out, cluster, options);
}

}  // namespace pt::plan
