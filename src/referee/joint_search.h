#pragma once
// The joint search (docs/design.md, "One cost model, one referee"): partition, replication,
// placement, schedule, microbatches and recomputation per stage, under a memory cap per worker,
// every configuration replayed by the simulator and its memory from the memory model
// (schedule/memory.h).
//
// Configurations, per schedule kind:
//  - pipedream: the planner's candidates (plan_candidates), and uniform plans; each replica
//    takes whole minibatches of the profile's batch B, so a sample costs ms per minibatch / B;
//  - 1f1b, gpipe, 2bw, mp: uniform plans, d stages of n / d replicas each (a d-stage pipeline
//    copied n / d times, Megatron's and DeepSpeed's hybrid), placed stage-major (a stage's
//    replicas side by side: the all-reduce stays inside a server) or pipeline-major (a copy's
//    stages side by side: activations stay inside); a step takes B per copy (B x n / d) in
//    M = n / d x m microbatches, m = 1, 2, 4, ... while a microbatch keeps a sample;
//  - zb-h1 and interleaved (2 or 4 chunks, or those pinned): single-replica stages on all n workers;
//  - dp: every worker a minibatch of B (weak scaling, PipeDream's baseline), n microbatches.
// Unless --all-workers (PlanOptions::fewer_workers), the uniform plans, zb-h1 and dp are also
// tried on each smaller cluster (plan::smaller_clusters: ids 0..k-1), as pipedream's candidates
// are; at an equal objective the one on fewer workers ranks first. The data-parallel baseline
// stays the one on all n.
// Each is tried without recomputation and, when it does not fit the cap, with recomputation on
// the stages of the workers over it, then on every stage. Configurations over the cap are never
// chosen. The best split of each of a kind's fastest shapes is then climbed, its boundaries moved
// a layer at a time while the simulator finds a move faster (split_climb.h). The objective:
//  - throughput: the simulated time per sample;
//  - time-to-accuracy: the time to train to a given accuracy, the time per sample times the
//    steps it takes: x the steps an asynchronous schedule whose stages' weights lag up to k
//    updates (weight versions kept - 1: PipeDream's first stage of p keeps p, 2BW 2) takes to
//    the accuracy one worker reaches in one step (JointOptions::staleness_steps): measured, by
//    bench/staleness.sh, not derived (no model derives it), or plan --staleness-cost C's 1 + C k.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "metrics/metrics.h"
#include "plan/cluster.h"
#include "plan/plan.h"
#include "plan/planner.h"
#include "profile/profile.h"
#include "schedule/generators.h"
#include "schedule/memory.h"

namespace pt::referee {

// Steps to the same accuracy, relative to synchronous training, of weights k updates stale:
// (k, steps) points, ascending; between them the line through the two around k, beyond the last
// the line through the last two.
using StalenessSteps = std::vector<std::pair<int, double>>;
double staleness_step_multiplier(const StalenessSteps& measured, int k);
// bench/staleness.sh on mnist-cnn, Fashion-MNIST, batch 64 (docs/results.md, "What staleness
// costs in steps"): medians over 3 seeds and 4 accuracy targets of the steps to each target under
// pipedream on 2 stages (k = 1) and 4 stages (k = 3) over 1F1B's on 4. Those runs test every 25
// minibatches, and each test drains pipedream's pipeline: a run that tests seldom stays stale
// longer, so these likely understate its cost (not measured).
inline const StalenessSteps kMeasuredStalenessSteps = {{0, 1.0}, {1, 1.0}, {3, 1.44}};

struct JointOptions {
  std::vector<std::string> schedules;  // the kinds to consider (empty: every kind)
  int microbatches = 0;                // --microbatches: pinned (0: searched)
  int chunks = 0;                      // --chunks: interleaved's chunks per worker pinned (0: 2 and 4)
  std::string objective = "throughput";
  // time-to-accuracy: the steps an asynchronous schedule takes to the same accuracy by how many
  // updates its weights lag. The default is bench/staleness.sh's on mnist-cnn; a model's own is
  // measured the same way.
  StalenessSteps staleness_steps = kMeasuredStalenessSteps;
  int64_t memory_cap = 0;              // per worker (0: none)
  std::string memory_cap_named = "--memory";  // where the cap came from, as a refusal names it
  schedule::MemoryOptions memory;      // as between processes (gloo) or devices
  // Each schedule's best configuration and data parallelism's on every worker (the baseline)
  // get the all-reduce bucket they run fastest with (referee.h, choose_bucket's sizes), and all
  // are ranked again; else every configuration keeps the options' bucket (`plan --bucket-mb`).
  bool own_buckets = false;
};

struct Configuration {
  plan::Plan plan;                     // schedule, microbatches, chunks, recompute and batch set
  metrics::Metrics simulated;
  double ms_per_sample = 0;            // simulated
  double objective_ms_per_sample = 0;  // what the search minimises
  std::vector<schedule::WorkerMemory> memory;
  int64_t peak_memory = 0;             // the fullest worker's, modelled
  int staleness = 0;                   // updates a stage's weights lag at most
  std::string why_not;                 // for all but the chosen
  schedule::ScheduleOptions run;       // the schedule's options it was replayed with
  int replayed_minibatches = 0;        // its replay's, lengthened until it settled (memory is weighed over as many)
  // The workers its schedule runs on: an interleaved or V plan's stages (chunks) share them, and
  // plan.workers counts the stages.
  int workers = 0;
};

struct JointResult {
  std::vector<Configuration> ranked;   // fitting configurations, best first
  int considered = 0, over_cap = 0;    // configurations built, and those left out by the cap
  int not_straight = 0;                 // left out by --straight: a stage replicated
  int async_split_tie = 0;              // left out: an asynchronous schedule splitting a tie
  int ungrouped = 0;                    // interleaved layouts whose microbatch counts tried were no multiple of their workers
  int invalid = 0;                     // generated schedules the validator rejected (a generator's gap)
  // Of those built, the splits the climb tried (split_climb.h), and whether --time-limit stopped it.
  int climbed = 0;
  bool climb_timed_out = false;
  int64_t smallest_peak = 0;           // the least peak memory of any configuration
  // Configurations faster than the first that split a BatchNorm model's batch into microbatches
  // of fewer than profile::kFewBatchNormSamples (few_batch_norm_samples), ranked after it.
  int faster_on_few_batch_norm_samples = 0;
};

// Whether `plan` splits a BatchNorm model's batch into microbatches of fewer than
// profile::kFewBatchNormSamples, which the search ranks after every other unless --microbatches
// pins the split: the BatchNorms normalise each microbatch over its own samples.
bool few_batch_norm_samples(const plan::Plan& plan, const profile::Profile& profile, const JointOptions& joint);

// Every configuration that fits, best first (none when nothing fits: see chosen).
JointResult joint_search(const profile::Profile& profile, const plan::Cluster& cluster, const plan::PlanOptions& plan_options,
                         const JointOptions& options);
// The best configuration; throws ConfigError when none runs or none fits the cap (naming the
// least memory any needs, recomputing everywhere).
const Configuration& chosen(const JointResult& r, const JointOptions& options, const profile::Profile& profile,
                           const plan::Cluster& cluster);

// `plan --top K` for the joint search: schedule, shape, microbatches, recomputation, time per
// sample, peak memory, and why each lost.
std::string format_configurations(const JointResult& r, int k);

}  // namespace pt::referee
