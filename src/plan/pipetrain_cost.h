#pragma once
// The pipetrain cost model: the time of a plan as the simulator and the runtime realise it.
//
// Per stage s with n replicas (per minibatch of the profile's batch size, amortised over the
// n replicas that take minibatches round-robin):
//   compute_ms   = C / n                              C = Σ forward + backward of its layers
//   input_ms     = 2·In  / (B_in  · n)                activations in, their gradients back out
//   output_ms    = 2·Out / (B_out · n)
//   allreduce_ms = 2(n−1)/n · P / B_ar / n            ring all-reduce once per round of n
//   comm_ms      = input_ms + output_ms + allreduce_ms
//   time_ms      = max(compute_ms, input_ms + output_ms) + allreduce_ms
//                  transfers run beside compute (DESIGN.md); the all-reduce sits between the
//                  last backward and the Step in every schedule, so it does not overlap
// and the pipeline's time per minibatch is the largest time_ms.
// In / Out are the bytes crossing the cut before / after the stage: activations of layers on
// the near side read by a layer on the far side (a tensor skipping stages passes through each).
// Bandwidths are those of the innermost cluster level holding: B_ar the stage's replicas;
// B_in the replicas and the previous stage's highest worker id; B_out the replicas and the
// next stage's lowest worker id (for workers numbered stage by stage: the neighbour worker).
// Memory (1F1B / PipeDream weight stashing): stage s of p holds up to p−s minibatches in flight,
// each with its activations and its own weight version: (p−s)·(Act + P) bytes per worker.
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
  double comm_ms = 0, time_ms = 0;
  int stash_depth = 0;         // minibatches in flight on each replica
  double memory_bytes = 0;     // per worker
};

struct PlanEstimate {
  std::vector<StageEstimate> stages;
  double pipeline_ms_per_minibatch = 0;  // the slowest stage
  int bottleneck = 0;                    // its index
  bool fits_memory = true;               // every stage within options/cluster memory
};

// The one cost function of the pipetrain model; make_plan minimises exactly this.
// Checks that the plan fits the profile and the cluster (ConfigError otherwise).
PlanEstimate evaluate_plan(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                           const PlanOptions& options);

// Bytes per millisecond of cluster level `level`.
inline double level_bytes_per_ms(const Cluster& cluster, int level) {
  return cluster.levels[level].bandwidth_bytes_per_s() / 1000.0;
}
// Innermost level holding workers lo..hi (lo < hi); -1 when lo == hi (no link used).
int level_spanning(const Cluster& cluster, int lo, int hi);

// Milliseconds per byte of a stage's three transfers on the cluster levels their links cross
// (level < 0: the transfer is absent), for a stage of `replicas` replicas: the /n of amortising
// over the replicas and the ring all-reduce's 2(n-1)/n are in them.
struct StageLinks {
  double in_ms_per_byte = 0, out_ms_per_byte = 0, allreduce_ms_per_byte = 0;
};
inline StageLinks stage_links(const Cluster& cluster, int replicas, int level_in, int level_out, int level_ar) {
  StageLinks l;
  double n = replicas;
  if (level_in >= 0) l.in_ms_per_byte = 2.0 / (level_bytes_per_ms(cluster, level_in) * n);
  if (level_out >= 0) l.out_ms_per_byte = 2.0 / (level_bytes_per_ms(cluster, level_out) * n);
  if (level_ar >= 0 && replicas > 1)
    l.allreduce_ms_per_byte = 2.0 * (n - 1) / n / level_bytes_per_ms(cluster, level_ar) / n;
  return l;
}

// One stage's terms from its sums, shared by evaluate_plan and the search (inline: the search
// calls it in its innermost loop with links precomputed per first worker and replica count).
inline StageEstimate pipetrain_stage(double compute_ms, double in_bytes, double out_bytes, double param_bytes,
                                     double act_bytes, int replicas, int depth, const StageLinks& links) {
  StageEstimate e;
  e.compute_ms = compute_ms / replicas;
  e.input_ms = in_bytes * links.in_ms_per_byte;
  e.output_ms = out_bytes * links.out_ms_per_byte;
  e.allreduce_ms = param_bytes * links.allreduce_ms_per_byte;
  e.comm_ms = e.input_ms + e.output_ms + e.allreduce_ms;
  // Activation transfers run beside compute; the all-reduce runs after the stage's last
  // backward and before its Step (as every schedule places it), so it adds to the time.
  e.time_ms = std::max(e.compute_ms, e.input_ms + e.output_ms) + e.allreduce_ms;
  e.stash_depth = depth;
  e.memory_bytes = depth * (act_bytes + param_bytes);
  return e;
}

// Memory limit in force: options first, then the cluster's; 0 = unlimited.
int64_t memory_limit(const Cluster& cluster, const PlanOptions& options);

}  // namespace pt::plan
