#pragma once
// The planner: PipeDream's dynamic program over stage boundaries and replication, for a
// hierarchical cluster (SOSP'19 §3.1), with two cost models (see PlanOptions).
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "plan/cluster.h"
#include "plan/plan.h"
#include "profile/profile.h"

namespace pt::plan {

enum class CostModel {
  kRealised,  // default (--cost-model pipetrain): stage times as the simulator and the runtime realise them
  kPipedream,  // PipeDream's optimizer equations, for users migrating from it
};

struct PlanOptions {
  CostModel cost_model = CostModel::kRealised;
  bool activation_transfer = true;  // false: --no-activation-transfer
  bool straight = false;            // one worker per stage, no replication
  int64_t memory_bytes = 0;         // per worker; 0 = cluster's, or unlimited
  int candidates = 1;               // plan_candidates: how many of the search's best to rank
  // How many of the ranked plans are shown with their figures (plan --top K): the referee
  // replays each until its window repeats, as `simulate --plan` of its file does (a runner-up
  // shown from a window settled but not yet repeating read 14.741 ms; its file 15.170).
  int shown = 1;
  // The runtime's all-reduce buckets (train --bucket-mb): evaluate_plan charges what of a
  // replicated stage's all-reduce its backward does not hide. The search's closed form charges
  // it all after the backward.
  int64_t bucket_bytes = Cluster::kDefaultBucketBytes;
  // The referee may replay pipelines with a replicated first stage with its step deferred
  // (plan.h, deferred_step): faster where the all-reduce shows, one more update of staleness.
  bool deferred_step = true;
  // plan_candidates adds the best plan of each smaller cluster (plan --all-workers: not): on
  // slow links a plan on fewer workers, the rest idle, can beat every plan on all of them.
  bool fewer_workers = true;
  // How many of each smaller cluster's best plans the search keeps (SearchResult::suffixes; 0:
  // `candidates`). plan_candidates reads 4 of them: more only weakens the bounds that prune.
  int suffix_candidates = 0;
  // The fewest workers a smaller cluster planned in the search has (0: any). plan_candidates
  // sets it where data parallelism on every worker fits and is a candidate (not --straight): its
  // time, which the referee replays before any plan whose estimate is slower, is below the
  // compute of every plan on fewer workers shared over them, so their physical limits rule
  // them out unreplayed.
  int fewest_workers = 0;
  // The most seconds planning takes, counted from `started` (plan --time-limit): past them the
  // simulator replays no further candidate (at least one is) and no other all-reduce bucket, and
  // the joint search moves no further split boundary (referee/split_climb.h); the plan says so in
  // a note. The planner's search itself always completes. 0: no limit.
  double time_limit_s = 8;
  // When planning began (`pipetrain plan` sets it as it starts); unset, the referee counts from
  // its own start.
  std::chrono::steady_clock::time_point started{};
  // When planning began: `started`, or `from` where it is unset.
  std::chrono::steady_clock::time_point planning_began(std::chrono::steady_clock::time_point from) const {
    return started == std::chrono::steady_clock::time_point{} ? from : started;
  }
  // Seconds since planning_began(from).
  double seconds_planning(std::chrono::steady_clock::time_point from) const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - planning_began(from)).count();
  }
  // When time_limit_s from planning_began(from) ends; never without a limit.
  std::chrono::steady_clock::time_point planning_deadline(std::chrono::steady_clock::time_point from) const {
    // (Past a billion seconds the clock's nanoseconds would overflow: no limit either.)
    if (time_limit_s <= 0 || !(time_limit_s <= 1e9)) return std::chrono::steady_clock::time_point::max();
    return planning_began(from) +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(time_limit_s));
  }
  // Told what the planner is doing on a long search (a line every few seconds); may be empty.
  std::function<void(const std::string&)> progress;
};

// Finds the plan minimising the slowest stage's time. Throws ConfigError when no plan fits.
// Pipetrain model: the search's best under its closed form (estimate_plan), its predicted time
// the exact evaluate_plan's.
Plan make_plan(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options);

// Pipetrain model: the search's best plan for each choice of the first stage, each in the
// placement evaluate_plan predicts fastest of three (workers in stage order, reversed, and spread
// over the innermost level's units), ranked by evaluate_plan (fastest first; each plan's
// predicted time is that): the search's best options.candidates, the best options.candidates
// by evaluate_plan among four times as many, and data parallelism. The simulator referees among
// them (src/referee/referee.h). With options.fewer_workers, also the best of each cluster
// smaller_clusters gives, placed on this one. PipeDream model: make_plan's one plan.
std::vector<Plan> plan_candidates(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options);

// The clusters of fewer workers inside `cluster`, each numbered from worker 0 as in it: fewer
// units at the outermost level (4x4: 4x3, 4x2), then one such unit and fewer inside it (4, 3,
// 2, 1). Empty for one worker.
std::vector<Cluster> smaller_clusters(const Cluster& cluster);

// The plans one step from `plan` (pipetrain model), for the referee's local search: a stage
// boundary moved by one layer, one replica moved from a stage to another, or two neighbouring
// stages merged (their replicas summed, one of them then moved to any other stage). Each in
// the placement evaluate_plan predicts fastest (as plan_candidates), fastest predicted first;
// plans that break the layer order or the memory limit are left out. Under options.straight
// only the boundary moves: the others replicate a stage.
std::vector<Plan> neighbour_plans(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                                  const PlanOptions& options);

// Contiguous split of the layers (topological order) into `stages` single-replica stages
// balancing forward+backward time (minimises the largest stage). Used by `--stages N`.
Plan even_split(const profile::Profile& profile, int stages);
// The same with each stage's time the larger of its compute and its link's: the bytes over its
// two cuts (activations one way, their gradients the other, per minibatch) at `ms_per_byte`.
// The even split is blind to the links: on VGG-16 at 10 Gbit/s it cut a full-resolution
// convolution from its ReLU, 25 MB a microbatch of 2 samples, and the joint search's best 1F1B
// plan under 2 GB ran 4x slower than one worker.
Plan link_aware_split(const profile::Profile& profile, int stages, double ms_per_byte);
// Whether a stage, the `stage`th of a split (from 0), of layers [first, end) fits what it must
// (a memory cap: a stage's memory depends on its place, as 1F1B's first stage holds the most
// microbatches in flight).
using StageFits = std::function<bool(int stage, int first, int end)>;
// The link-aware split (ms_per_byte 0: the even split) among the splits whose every stage
// `fits`: VGG-16 under 100 MB on 4 workers had no 1F1B plan from the balanced splits (their
// smallest 114 MiB), where model parallelism's fit at 95. Throws ConfigError where none fits.
Plan balanced_split_fitting(const profile::Profile& profile, int stages, double ms_per_byte, const StageFits& fits);
// What link_aware_split minimises, of a contiguous split: its largest stage counting the links.
double largest_linked_stage_ms(const profile::Profile& profile, const Plan& split, double ms_per_byte);
// A contiguous split into `stages` whose cuts carry the fewest bytes (the most even such split):
// model parallelism runs its stages one after another, so its time is the compute, the same for
// every split, and the transfers over the cuts. The balanced split, which pipelines want, cut
// AlexNet where 32 MiB cross (mp 138.5 ms a minibatch at 10 Gbit/s, against 92.0 ms cut where
// less does); the joint search tries both, and under a memory cap the fewest bytes among the
// splits whose every stage `fits` (layers [first, end)): AlexNet on 4 workers under 1.1 GB ran
// mp on 3, 508.8 ms a minibatch, where 4 stages that fit cross fewer bytes. Throws ConfigError
// where no split fits.
Plan fewest_bytes_split(const profile::Profile& profile, int stages, const StageFits& fits = nullptr);
// A split for the V schedules (zb-v, v-half, v-min, dualpipev), beside the even one: 2 x
// `workers` contiguous chunks, worker w holding chunk w and chunk 2 workers - 1 - w. From cuts at
// equal shares of the time, chunk boundaries move a layer at a time while that lowers the busiest
// worker's pair (then the sum of the squares of every worker's). Which of the two runs faster
// depends on where the heavier chunks fall along the V, which only the simulator tells: the joint
// planner tries both.
Plan v_split(const profile::Profile& profile, int workers);
// How many bytes `worker` holds over a memory cap where chunk c holds layers [cuts[c], cuts[c+1]) (0: it fits).
using WorkerOver = std::function<int64_t(int worker, const std::vector<int>& cuts)>;
// v_split's search, for any chunks a worker holds (`worker_of_chunk`: [chunk] -> worker): from
// `cuts`, a boundary moves a layer at a time while that lowers the bytes the workers are `over`
// in all (where given), then the busiest worker's time, then the sum of the squares of every
// worker's; a worker's time is its chunks' compute, each chunk's the larger of it and its link's
// as link_aware_split weighs it at `ms_per_byte` (0: compute alone). Under a cap the V and interleaved schedules' workers each hold two chunks far apart,
// which no split stage by stage (balanced_split_fitting) weighs: VGG-16 on 4 workers under 2 GB
// had no zb-v plan from v_split's cuts or the even ones (2.22 GiB the least).
std::vector<int> rebalance_chunks(const profile::Profile& profile, std::vector<int> cuts,
                                  const std::vector<int>& worker_of_chunk, double ms_per_byte,
                                  const WorkerOver& over = nullptr);
// `p`'s stages given layers [cuts[k], cuts[k+1]) and their compute.
void cut_at(Plan& p, const profile::Profile& profile, const std::vector<int>& cuts);

}  // namespace pt::plan
