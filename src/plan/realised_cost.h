#pragma once
// The realised cost model (`--cost-model pipetrain`, the default; PipeDream's equations are
// pipedream_search.cpp's): the time of a plan as the simulator and the runtime realise it, in
// two forms that share every rule (cluster.h's links, profile.h's compute and cut bytes).
//
// Per stage s with n replicas, per minibatch of the profile's batch size (replicas take
// minibatches round-robin, so each does 1/n of them):
//   compute_ms   = C / n                      C = Σ forward + backward of its layers
//   link_ms      = the busiest link of its replicas: every worker has, per cluster level, a
//                  full-duplex link; activations in and gradients out use one direction each
//   allreduce_ms = ring all-reduce of its parameters among its replicas, once per round of n
//                  minibatches, / n; only what the backward does not hide is charged: the
//                  runtime reduces buckets as the backward completes them (PlanOptions::
//                  bucket_bytes; profile::gradient_buckets). evaluate_plan replays the buckets,
//                  the ring slowed by the stage's own transfers on its links; the closed form
//                  takes max(all-reduce - backward, the last bucket's share)
//   time_ms      = max(compute_ms, link_ms) + allreduce_ms: transfers run beside compute
//                  (docs/design.md); the all-reduce's tail sits between the last backward and the
//                  Step in every schedule. evaluate_plan also takes at least in_flight_ms, a
//                  minibatch's round trip from this stage's forward to its backward over the
//                  minibatches in flight, and a replicated stage's round_ms / n, its
//                  replicas waiting for each other (realised_cost.cpp)
// and the pipeline's time per minibatch is the largest time_ms.
//
// evaluate_plan is exact about links: each minibatch's transfer goes from the replica that ran
// it to the replica that runs it next (cluster.h, replica_for) over the innermost level holding
// the two, and loads that level's link of both workers. It proposes and explains candidates;
// the time `plan` prints is the chosen plan's simulated steady state (one timing model).
//
// estimate_plan is the closed form the search minimises (a dynamic program cannot see which
// replica pairs talk): a stage's activations in cross the innermost level holding its replicas
// and the whole previous stage (for contiguous ranges that is the furthest pair), its
// activations out the level holding its replicas and the next stage's first worker, and its
// link time is the sum of the two (exact when both use one level). Its time also takes the
// in-flight bound (in_flight_bound) over the round trip with each cut's transfer alone on the
// level it crosses; the search keeps that term along its choices (realised_search.cpp). The search's best plans,
// and their neighbours that evaluate_plan ranks best, are replayed, and the simulator's steady
// state alone ranks them (src/referee/referee.h).
//
// Memory (1F1B / PipeDream weight stashing): stage s of p holds up to p−s minibatches in flight
// in the closed form, NOAM (plan.h's in_flight) in evaluate_plan, each with its activations and
// its own weight version: depth·(Act + P) bytes per worker.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "plan/cluster.h"
#include "plan/plan.h"
#include "plan/planner.h"
#include "profile/profile.h"

namespace pt::plan {

struct StageEstimate {
  double compute_ms = 0, input_ms = 0, output_ms = 0, allreduce_ms = 0;
  double link_ms = 0;          // the busiest link direction of the stage's workers
  double in_flight_ms = 0;     // evaluate_plan: one minibatch's round trip / minibatches in flight
  double round_ms = 0;         // evaluate_plan: a replicated stage's round, its replicas waiting for each other
  double trip_out_ms = 0;      // evaluate_plan: one minibatch's activations across the cut after this stage,
                               // alone on the links, averaged over the replica pairs (its gradients take as long)
  double tie_ms = 0;           // split ties' gradient exchanges (split_ties.h), after the backward
  double comm_ms = 0;          // link_ms + allreduce_ms + tie_ms
  double time_ms = 0;
  int stash_depth = 0;         // minibatches in flight on each replica
  double memory_bytes = 0;     // per worker
  int busiest_worker = -1, busiest_level = -1;  // evaluate_plan: where link_ms is spent
};

// One worker's link at one level, per minibatch (evaluate_plan only; links carrying nothing are
// left out).
struct LinkUse {
  int worker = 0, level = 0;
  double egress_bytes = 0, ingress_bytes = 0;
  double busy_ms = 0;  // the busier direction, its messages' latency included
  double egress_messages = 0, ingress_messages = 0;
};

struct PlanEstimate {
  std::vector<StageEstimate> stages;
  std::vector<LinkUse> links;
  double pipeline_ms_per_minibatch = 0;  // the slowest stage
  int bottleneck = 0;                    // its index
  bool fits_memory = true;               // every stage within options/cluster memory
};

// The exact form (above). Checks that the plan fits the profile and the cluster (ConfigError
// otherwise); any placement of replicas on workers is allowed.
PlanEstimate evaluate_plan(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                           const PlanOptions& options);
// What the exact form reads of a plan's layers, whichever workers run them: per stage its sums
// over the layers and the bytes across each cut. Checks that the plan fits the profile.
struct StageSums {
  std::vector<double> compute, backward, act, param;
  std::vector<double> cut;  // cut[s]: bytes from stage s to s + 1
};
StageSums exact_stage_sums(const Plan& plan, const profile::Profile& profile, const Cluster& cluster);
// evaluate_plan of `plan` on the sums of a plan with its layers: the planner weighs each
// candidate in several placements and minibatches in flight on one set of sums.
PlanEstimate evaluate_plan(const Plan& plan, const StageSums& sums, const profile::Profile& profile,
                           const Cluster& cluster, const PlanOptions& options);
// The search's closed form (above), which make_plan's search minimises (realised_search.cpp).
PlanEstimate estimate_plan(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                           const PlanOptions& options);

// The host's time per minibatch for a stage's actions under the pipedream schedule (a forward,
// a backward and a step, each Cluster::action_us), charged with its compute.
inline double host_ms_per_minibatch(const Cluster& c) { return 3 * c.action_ms(); }

// Milliseconds per byte of a stage's transfers on the cluster levels their links cross
// (level < 0: the transfer is absent), for a stage of `replicas` replicas whose all-reduce of
// one byte takes `allreduce_ms_of_byte` (Cluster::allreduce_ms): the /n of amortising over the
// replicas is in them.
struct StageLinks {
  double in_ms_per_byte = 0, out_ms_per_byte = 0, allreduce_ms_per_byte = 0;
};
inline StageLinks stage_links(const Cluster& cluster, int replicas, int level_in, int level_out,
                              double allreduce_ms_of_byte) {
  StageLinks l;
  double n = replicas;
  l.in_ms_per_byte = cluster.transfer_ms(level_in, 1.0) / n;
  l.out_ms_per_byte = cluster.transfer_ms(level_out, 1.0) / n;
  l.allreduce_ms_per_byte = allreduce_ms_of_byte / n;
  return l;
}

// One stage's terms from its sums, shared by estimate_plan and the search (inline: the search
// calls it in its innermost loop with links precomputed per first worker and replica count).
// With all-reduce buckets (bucket_bytes > 0) the closed form charges of the all-reduce what the
// backward (backward_ms, one replica's, per minibatch) cannot hide, and at least its share in
// one bucket, the last, which is ready only when the backward ends (evaluate_plan replays the
// buckets exactly).
inline StageEstimate realised_stage(double compute_ms, double in_bytes, double out_bytes, double param_bytes,
                                     double act_bytes, int replicas, int depth, const StageLinks& links,
                                     double backward_ms = 0, int64_t bucket_bytes = 0) {
  StageEstimate e;
  e.compute_ms = compute_ms / replicas;
  e.input_ms = in_bytes * links.in_ms_per_byte;
  e.output_ms = out_bytes * links.out_ms_per_byte;
  e.allreduce_ms = param_bytes * links.allreduce_ms_per_byte;
  if (bucket_bytes > 0 && param_bytes > 0)
    e.allreduce_ms = std::max(e.allreduce_ms - backward_ms / replicas,
                              e.allreduce_ms * std::min(1.0, static_cast<double>(bucket_bytes) / param_bytes));
  e.link_ms = e.input_ms + e.output_ms;
  e.comm_ms = e.link_ms + e.allreduce_ms;
  e.time_ms = std::max(e.compute_ms, e.link_ms) + e.allreduce_ms;
  e.stash_depth = depth;
  e.memory_bytes = depth * (act_bytes + param_bytes);
  return e;
}

// Little's law for a stage on `replicas` of the `downstream` workers from it to the end under
// PipeDream's rule (plan.h, in_flight): each replica keeps ceil(downstream / replicas)
// minibatches in flight, each for `round_trip_ms` from its forward here to its backward here
// (the compute of this stage and every later one, and each cut's transfer both ways), so the
// stage finishes no more than that many per round trip. The search and estimate_plan charge
// it with the transfers alone on the links; evaluate_plan with the replica pairs that talk.
inline double in_flight_bound(double round_trip_ms, int downstream, int replicas) {
  int per_replica = std::max(1, (downstream + replicas - 1) / replicas);
  return round_trip_ms / (per_replica * replicas);
}

// Sets each stage's in_flight (plan.h) from the plan's predicted times `e` (evaluate_plan with
// PipeDream's rule): the fewest minibatches that cover a replica's round trip, its own forward
// and backward and everything after it, at the pipeline's pace; never more than PipeDream's
// rule, and enough that no stage waits for a forward its predecessor has not admitted.
void choose_in_flight(Plan& plan, const PlanEstimate& e, const profile::Profile& profile);

// When the last of a replicated stage's gradient buckets (profile::gradient_buckets) has been
// all-reduced among its replicas, from the start of the backward that makes them ready
// (`backward_ms` long): each bucket starts once ready and once the one before has ended, and
// takes allreduce_ms(unit_phases, its bytes) x `stretch`. With stretch 1 it is the least the
// simulator can take, which books the same ring steps and no shorter.
double buckets_end_ms(const std::vector<profile::GradientBucket>& buckets, double backward_ms, const Cluster& cluster,
                      const std::vector<AllreducePhase>& unit_phases, double stretch = 1);

// What a worker's tensors may take under the memory limit in force (options first, then the
// cluster's; 0 = unlimited): the limit bounds the worker process's peak RSS, so it is the limit
// less what the process holds besides its tensors (Cluster::process_bytes, calibrated). Every
// check of the memory model against a cap compares with this.
int64_t memory_limit(const Cluster& cluster, const PlanOptions& options);
// Where that limit comes from, as a refusal names it: "--memory", or the cluster's field (its
// file's, where a file gave it).
std::string memory_limit_named(const PlanOptions& options, const Cluster* cluster = nullptr);

}  // namespace pt::plan
