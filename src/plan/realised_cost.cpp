#include "plan/realised_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/units.h"
#include "plan/split_ties.h"
#include "plan/state_space.h"

namespace pt::plan {

double buckets_end_ms(const std::vector<profile::GradientBucket>& buckets, double backward_ms, const Cluster& cluster,
                      const std::vector<AllreducePhase>& unit_phases, double stretch) {
  double end = 0;
  for (const auto& b : buckets)
    end = std::max(end, b.ready_share * backward_ms) + stretch * cluster.allreduce_ms(unit_phases, static_cast<double>(b.bytes));
  return end;
}

std::string memory_limit_named(const PlanOptions& options, const Cluster* cluster) {
  if (options.memory_bytes > 0) return "--memory";
  // A file's own figure (checked here, where it is the cap: --memory overrides it) names the file.
  return cluster && !cluster->source.empty() && cluster->source[0] == '\''
             ? str(cluster->source.substr(1, cluster->source.size() - 2), ": field 'memory_bytes_per_worker'")
             : std::string("the cluster's memory_bytes_per_worker");
}

int64_t memory_limit(const Cluster& cluster, const PlanOptions& options) {
  int64_t cap = options.memory_bytes > 0 ? options.memory_bytes : cluster.memory_bytes_per_worker;
  if (cap <= 0 || cap == std::numeric_limits<int64_t>::max()) return cap;
  // A cap the process alone fills: said so (it searched under "1 B per worker").
  if (cap <= cluster.process_bytes)
    throw ConfigError(str(memory_limit_named(options, &cluster), " ", human_bytes(static_cast<double>(cap)), " is no more than the ",
                          human_bytes(static_cast<double>(cluster.process_bytes)),
                          " a worker process holds besides its tensors (the cluster's process_bytes, as calibrate "
                          "measured it): no plan fits"));
  return cap - cluster.process_bytes;
}

namespace {

void check_workers(const Plan& plan, const Cluster& cluster) {
  int W = cluster.workers();
  for (const auto& st : plan.stages)
    for (int w : st.workers)
      if (w < 0 || w >= W)
        throw ConfigError(str("plan uses worker ", w, " but the cluster ", cluster.describe(), " has ", W,
                              " workers (0..", W - 1, ")"));
}

// What both forms need: per stage its sums over the layers the search counts, and the bytes
// across each cut (the exact form counts every tensor that crosses).
StageSums stage_sums(const Plan& plan, const profile::Profile& profile, const Cluster& cluster, bool exact) {
  check_plan_fits(plan, profile, "plan");
  int L = profile.num_layers(), p = plan.num_stages();
  std::vector<int> stage_of(L);
  for (int s = 0; s < p; ++s)
    for (int l : plan.stages[s].layers) stage_of[l] = s;
  StageSums sums;
  sums.compute.assign(p, 0), sums.backward.assign(p, 0), sums.act.assign(p, 0), sums.param.assign(p, 0);
  std::vector<char> outside = outside_search(profile);
  for (int s = 0; s < p; ++s) {
    // Pipedream's step copies the weights only where forwards run ahead of it (Schedule::copies_weights).
    bool copies = pipedream_weight_versions(plan, s, plan.deferred_step) > 1;
    for (int l : plan.stages[s].layers) {
      if (outside[l]) continue;
      sums.compute[s] += profile::compute_forward_ms(profile, l) + profile::compute_backward_ms(profile, l) +
                         profile::compute_step_ms(profile, l, copies);
      sums.backward[s] += profile::compute_backward_ms(profile, l);
      sums.act[s] += static_cast<double>(profile.layers[l].activation_bytes);
      sums.param[s] += static_cast<double>(profile.layers[l].parameter_bytes);
    }
  }
  for (int s = 0; s < p; ++s) {
    sums.compute[s] += host_ms_per_minibatch(cluster);
    sums.param[s] -= static_cast<double>(profile::tied_duplicate_bytes(profile, plan.stages[s].layers));
  }
  // The exact form counts every tensor that crosses; the search does not track Input layers.
  sums.cut = profile::cut_bytes(profile, stage_of, p, exact);
  return sums;
}

// What of a replicated stage's all-reduce remains after the backward of one minibatch, with
// the runtime's buckets: each starts once the backward has produced it and the previous one is
// done (gradient_buckets.h; the simulator replays the same on its links).
// `transfers_ms`: the stage's activation and gradient transfers per round on the links the ring
// uses, summed over its replicas. A ring step waits for every link of the ring, so a transfer
// on any of them stalls it; a transfer falls inside the ring as often as the ring fills the
// round (its length over its length and the rest of the round: one replica's compute, or r
// minibatches at the pipeline's pace if that is longer), so the ring stretches by that share of
// the transfers. VGG-16 7-1 on 8 workers at 1 Gbit/s: the ring takes 808 ms of a
// 1,282 ms round in simulation, and 7 activations of 51 ms each delay it.
double exposed_allreduce_ms(const Plan& plan, int s, const profile::Profile& profile, const Cluster& cluster,
                            int64_t bucket_bytes, double rest_ms, double transfers_ms) {
  const Stage& st = plan.stages[s];
  if (st.replicas < 2) return 0;
  double backward = 0, ring = 0;
  for (int l : st.layers) backward += profile::compute_backward_ms(profile, l);
  auto buckets = profile::gradient_buckets(profile, st.layers, bucket_bytes);
  // Each bucket is an all-reduce of its own, step by step as the simulator books it.
  auto unit = cluster.allreduce_phases(st.workers, 1.0);
  for (const auto& b : buckets) ring += cluster.allreduce_ms(unit, static_cast<double>(b.bytes));
  double stretch = ring > 0 ? 1 + transfers_ms / (ring + rest_ms) : 1;
  return std::max(0.0, buckets_end_ms(buckets, backward, cluster, unit, stretch) - backward);
}

// A tie split over stages is summed by their workers before their step (split_ties.h): its
// time adds to each holding stage's whole, as nothing overlaps it.
void add_tie_exchanges(PlanEstimate& out, const Plan& plan, const profile::Profile& profile, const Cluster& cluster) {
  if (profile.ties.empty()) return;
  std::vector<double> tie_ms = tie_exchange_ms_by_stage(plan, profile, cluster);
  for (size_t s = 0; s < out.stages.size(); ++s) {
    StageEstimate& e = out.stages[s];
    e.tie_ms = tie_ms[s];
    e.comm_ms += tie_ms[s];
    e.time_ms += tie_ms[s];
  }
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
  check_workers(plan, cluster);
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
    out.stages.push_back(realised_stage(sums.compute[s], in, sums.cut[s], sums.param[s], sums.act[s], st.replicas,
                                         p - s,
                                         stage_links(cluster, st.replicas, level_in, level_out, cluster.allreduce_ms_per_byte(st.workers)),
                                         sums.backward[s], options.bucket_bytes));
    out.stages.back().trip_out_ms = s + 1 < p ? cluster.message_ms(level_out, sums.cut[s]) : 0;
  }
  // Each stage's in-flight bound over the round trip from it to the end (in_flight_bound).
  double round_trip = 0;
  int downstream = 0;
  for (int s = p - 1; s >= 0; --s) {
    StageEstimate& e = out.stages[s];
    int n = plan.stages[s].replicas;
    round_trip += e.compute_ms * n + 2 * e.trip_out_ms;
    downstream += n;
    e.in_flight_ms = in_flight_bound(round_trip, downstream, n);
    e.time_ms = std::max(e.time_ms, e.in_flight_ms);
  }
  add_tie_exchanges(out, plan, profile, cluster);
  return finish(out, cluster, options);
}

StageSums exact_stage_sums(const Plan& plan, const profile::Profile& profile, const Cluster& cluster) {
  return stage_sums(plan, profile, cluster, true);
}

PlanEstimate evaluate_plan(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                           const PlanOptions& options) {
  return evaluate_plan(plan, exact_stage_sums(plan, profile, cluster), profile, cluster, options);
}

PlanEstimate evaluate_plan(const Plan& plan, const StageSums& sums, const profile::Profile& profile,
                           const Cluster& cluster, const PlanOptions& options) {
  check_workers(plan, cluster);
  PT_CHECK(sums.compute.size() == plan.stages.size(), "sums of ", sums.compute.size(), " stages for a plan of ",
           plan.stages.size());
  int p = plan.num_stages(), W = cluster.workers(), levels = static_cast<int>(cluster.levels.size());
  // Bytes per minibatch through each worker's link per level: [worker * levels + level].
  std::vector<double> egress(static_cast<size_t>(W) * levels, 0), ingress = egress;
  // Messages per minibatch the same way (each pays the level's latency).
  std::vector<double> egress_messages = egress, ingress_messages = egress;
  // The busier direction of a worker's link at a level, per minibatch.
  auto busy_ms = [&](int w, int level) {
    size_t i = static_cast<size_t>(w) * levels + level;
    return std::max(cluster.transfer_ms(level, egress[i]) + egress_messages[i] * cluster.latency_ms(level),
                    cluster.transfer_ms(level, ingress[i]) + ingress_messages[i] * cluster.latency_ms(level));
  };
  // The input/output shares of each worker's busiest direction, for the table.
  std::vector<double> in_ms(W, 0), out_ms(W, 0);
  // trip_ms[s]: one minibatch's transfer across cut s, alone on the links, averaged over the
  // replica pairs that carry it.
  std::vector<double> trip_ms(p, 0);
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
      double share = 1.0 / static_cast<double>(cycle);
      double ms = cluster.transfer_ms(level, bytes) + share * cluster.latency_ms(level);
      // Activations a -> b, their gradients b -> a.
      egress[a * levels + level] += bytes, ingress[b * levels + level] += bytes;
      egress[b * levels + level] += bytes, ingress[a * levels + level] += bytes;
      egress_messages[a * levels + level] += share, ingress_messages[b * levels + level] += share;
      egress_messages[b * levels + level] += share, ingress_messages[a * levels + level] += share;
      out_ms[a] += ms, in_ms[b] += ms;
      trip_ms[s] += cluster.message_ms(level, sums.cut[s]) * share;
    }
  }
  PlanEstimate out;
  for (int s = 0; s < p; ++s) {
    const Stage& st = plan.stages[s];
    StageEstimate e;
    e.compute_ms = sums.compute[s] / st.replicas;
    for (int w : st.workers) {
      for (int level = 0; level < levels; ++level) {
        double ms = busy_ms(w, level);
        if (ms > e.link_ms) e.link_ms = ms, e.busiest_worker = w, e.busiest_level = level;
      }
      e.input_ms = std::max(e.input_ms, in_ms[w]);
      e.output_ms = std::max(e.output_ms, out_ms[w]);
    }
    e.stash_depth = in_flight(plan, s) + (plan.deferred_step && s == 0 && st.replicas > 1 ? 1 : 0);
    e.memory_bytes = e.stash_depth * (sums.act[s] + sums.param[s]);
    e.trip_out_ms = trip_ms[s];
    out.stages.push_back(e);
  }
  // The pipeline's pace without all-reduces: no round of r minibatches is shorter than r of it.
  double pace = 0;
  for (const auto& e : out.stages) pace = std::max({pace, e.compute_ms, e.link_ms});
  for (int s = 0; s < p; ++s) {
    const Stage& st = plan.stages[s];
    StageEstimate& e = out.stages[s];
    // Per round of r minibatches each replica's links carry r x their per-minibatch bytes. The
    // neighbours' workers take them one at a time each, so at most as many run at once as the
    // larger neighbour has replicas.
    int ring_level = cluster.group_level(st.workers);
    double ring_transfers = 0;
    for (int w : st.workers)
      ring_transfers += ring_level < 0 ? 0.0 : st.replicas * busy_ms(w, ring_level);
    int side_by_side = 1;
    for (int n : {s - 1, s + 1})
      if (n >= 0 && n < p) side_by_side = std::max(side_by_side, std::min(st.replicas, plan.stages[n].replicas));
    ring_transfers /= side_by_side;
    double exposed = exposed_allreduce_ms(plan, s, profile, cluster, options.bucket_bytes,
                                          std::max(sums.compute[s], st.replicas * pace), ring_transfers);
    // A deferred step waits for the all-reduce after the next forward, which hides that much.
    if (plan.deferred_step && s == 0) exposed = std::max(0.0, exposed - (sums.compute[s] - sums.backward[s]));
    e.allreduce_ms = exposed / st.replicas;
    e.comm_ms = e.link_ms + e.allreduce_ms;
    e.time_ms = std::max(e.compute_ms, e.link_ms) + e.allreduce_ms;
  }
  // Little's law: a replica of stage s holds at most NOAM minibatches in flight (the pipedream
  // schedule's warm-up, plan.h's in_flight), each for the time from its forward here to its backward here: the
  // compute of this stage and every later one and the transfers both ways. So the
  // stage finishes at most NOAM x replicas minibatches per such latency. It binds where links are
  // slow: ResNet-50 8-8 on 8x2 at 1 Gbit/s simulates at 79.4 ms per minibatch, which this gives,
  // where compute and links alone give 51.8.
  double latency = 0;
  for (int s = p - 1; s >= 0; --s) {
    StageEstimate& e = out.stages[s];
    latency += sums.compute[s] + (s + 1 < p ? 2 * trip_ms[s] : 0.0);
    e.in_flight_ms = latency / (in_flight(plan, s) * plan.stages[s].replicas);
  }
  // A replicated stage's replicas all-reduce together once per round, holding one minibatch
  // each, but a less replicated neighbour before it hands the round's minibatches out m at a
  // time, and a replica of it cannot send two minibatches closer than its forward: the last
  // replica reaches the all-reduce at least (ceil(r / m) - 1) such forwards after the first, and
  // the others wait. The neighbour goes on computing while the replicas all-reduce, so at best
  // those spacings pass inside the all-reduce: a round lasts at least one replica's compute, its
  // all-reduce and what of the spacings the all-reduce does not cover. (Derived, not fitted: the
  // estimate only proposes candidates, which the simulator ranks; docs/design.md.)
  auto spacings_ms = [&](int s, int r) {
    int m = plan.stages[s - 1].replicas;
    return ((r + m - 1) / m - 1) * (sums.compute[s - 1] - sums.backward[s - 1]);
  };
  for (int s = 0; s < p; ++s) {
    StageEstimate& e = out.stages[s];
    int r = plan.stages[s].replicas;
    if (r > 1 && s > 0 && plan.stages[s - 1].replicas < r) {
      double spacing = std::max(0.0, spacings_ms(s, r) - e.allreduce_ms * r);
      e.round_ms = sums.compute[s] + e.allreduce_ms * r + spacing;
      // Between less replicated neighbours the round's last minibatch also makes the round
      // trip to the next stage before its backward here.
      if (s + 1 < p && plan.stages[s + 1].replicas < r)
        e.round_ms += 2 * trip_ms[s - 1] + 2 * trip_ms[s] + sums.compute[s + 1];
    }
    e.time_ms = std::max({std::max(e.compute_ms, e.link_ms) + e.allreduce_ms, e.in_flight_ms, e.round_ms / r});
  }
  add_tie_exchanges(out, plan, profile, cluster);
  for (int w = 0; w < W; ++w)
    for (int level = 0; level < levels; ++level) {
      size_t i = static_cast<size_t>(w) * levels + level;
      if (egress[i] > 0 || ingress[i] > 0 || egress_messages[i] > 0 || ingress_messages[i] > 0)
        out.links.push_back({w, level, egress[i], ingress[i], busy_ms(w, level), egress_messages[i], ingress_messages[i]});
    }
  return finish(out, cluster, options);
}

void choose_in_flight(Plan& plan, const PlanEstimate& e, const profile::Profile& profile) {
  // PipeDream's rule assumes every later stage busy all the time, so that a minibatch's round
  // trip from stage s takes one pace per later worker. A later stage with slack returns the
  // gradient sooner, and then 1F1B's order hurts: a replica holding a ready gradient waits for
  // its next forward first (GNMT-16 1-6-1 on 8 workers at 1 Gbit/s: the middle replicas each
  // wait 6 paces for their second forward, the first stage starves of gradients, and the
  // pipeline runs 20% under its slowest stage; with one in flight in the middle, ...).
  // From the last stage back: a replica needs its forward, the round trip below and its
  // backward covered, one minibatch per r paces; its gradient then leaves after max(its
  // forward + that round trip, the (n - 1) rounds its 1F1B order puts first) + its backward.
  int p = plan.num_stages();
  double pace = e.pipeline_ms_per_minibatch;
  std::vector<int> replicas;
  for (const auto& st : plan.stages) replicas.push_back(st.replicas);
  double span_below = 0;  // from a minibatch's forward start to its gradient leaving, stage s + 1
  int n_below = 0;
  for (int s = p - 1; s >= 0; --s) {
    const Stage& st = plan.stages[s];
    int r = st.replicas;
    double backward = 0;
    for (int l : st.layers) backward += profile::compute_backward_ms(profile, l);
    double both = e.stages[s].compute_ms * r, forward = std::max(0.0, both - backward);
    double below = s + 1 < p ? 2 * e.stages[s].trip_out_ms + span_below : 0;
    // A replicated stage admits a round's forwards only after the round n back all-reduced,
    // which waits for that round's last minibatch, (r - 1) paces after its first.
    double round = r > 1 ? (r - 1) * pace + r * e.stages[s].allreduce_ms : 0.0;
    int n = std::max(1, static_cast<int>(std::ceil((both + below + round) / (r * pace) - 1e-9)));
    if (s + 1 < p) n = std::max(n, least_in_flight(replicas, s, n_below));
    int paper = paper_in_flight(replicas, s);
    n = std::min(n, paper);
    plan.stages[s].in_flight = n == paper ? 0 : n;  // 0: the plan file stays as PipeDream's rule writes it
    span_below = std::max(forward + below, (n - 1) * r * pace) + backward;
    n_below = n;
  }
}

}  // namespace pt::plan
