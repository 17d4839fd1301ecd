#pragma once
// The simulator as the planner's referee (docs/design.md, "One cost model, one referee"): the
// search's best candidates, ranked by the exact cost model, are replayed under the schedule they
// will run (the very action lists the runtime executes) and the fastest simulated one wins.
#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "plan/cluster.h"
#include "plan/realised_cost.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "schedule/generators.h"
#include "schedule/memory.h"

namespace pt::referee {

// The all-reduce bucket a plan runs fastest with (issue 33: each bucket's ring pays its steps'
// latency, and a smaller one starts during the backward): the plan simulated with each of
// kBucketChoicesMb and the options' own bucket; the options' unless another is faster. The sizes
// are simulated side by side on the machine's cores; `own_ms`, where the caller has the plan's
// time with the options' own bucket already (the referee's replay of it), is taken for that one.
// Where the options' bucket already runs the plan at its physical limit (limit_ms, which no
// bucket lowers: physical_limit.h), no other is simulated: none can be faster (ResNet-101's 15-1
// on 16 workers runs at its first stage's compute; its four other sizes would be a sixth of
// `plan`'s time).
struct BucketChoice {
  double bucket_mb = 0;
  double ms_per_minibatch = 0;
  std::vector<std::pair<double, double>> tried;  // (MiB, simulated ms per minibatch), the options' first
  bool at_limit = false;  // the options' bucket reached limit_ms: the others were not simulated
  // (MiB, floor ms): sizes not simulated, their floor (replay_floor.h, which counts the buckets'
  // all-reduce tail) above the options' bucket's time.
  std::vector<std::pair<double, double>> ruled_out;
};
inline constexpr double kBucketChoicesMb[] = {0, 1, 4, 25, 100};
// kBucketChoicesMb in words ("0, 1, 4, 25 and 100"), for the commands' help and reports.
std::string bucket_choices_text();

struct Candidate {
  plan::Plan plan;
  plan::PlanEstimate estimate;    // evaluate_plan: the search's closed form, which proposes candidates
  metrics::Metrics simulated;     // steady state under `schedule` (with `bucket`'s where chosen)
  std::string why_not;            // for every candidate but the chosen one
  // choose(own_buckets): the bucket it runs fastest with (tried empty: ranked with the
  // options' bucket).
  BucketChoice bucket;
};

struct Refereed {
  std::string schedule;            // the schedule the candidates were replayed under
  bool uniform = false;  // the candidates were the uniform plans (plan_decision.cpp), not the search's
  // Fastest simulated first (ranks_before); ranked[0] is the choice.
  std::vector<Candidate> ranked;
  int unreplayed = 0;  // plans left out at options.time_limit_s
  bool timed_out = false;  // the time limit stopped the referee (its local search too)
  // The time limit stopped the referee before the choice's window repeated
  // (metrics::Metrics::periodic): `simulate` replays it longer, to another figure.
  bool choice_unrepeated = false;
  bool buckets_chosen = false;  // choose(own_buckets) gave the choice its bucket (not the time limit)
  int over_limit = 0;  // plans not replayed: their floor (replay_floor.h) is above the best's time
  std::vector<plan::Plan> unschedulable;  // candidates the simulator cannot replay (plan.cpp notes them)
  // Data parallelism on every worker, replayed like the candidates: the baseline a plan file
  // records (0 where it does not fit the memory or cannot be replayed).
  double data_parallel_ms = 0;
};

// `schedule_options`: how the plan runs under `kind` (microbatches...); a count of minibatches
// set there is the run, replayed as it is (compare --minibatches); 0: replayed until it settles.
BucketChoice choose_bucket(const plan::Plan& plan, const profile::Profile& profile, const plan::Cluster& cluster,
                           const plan::PlanOptions& options, const std::string& kind, double own_ms = 0,
                           double limit_ms = 0, const schedule::ScheduleOptions& schedule_options = {});

// Whether replayed plan a ranks before b: the faster in simulation, nothing added to either's
// time; at equal time the one on fewer workers (the same throughput for less hardware: GNMT-16
// on 8 workers, 1-1-1-1-1-1 on 6 rather than 2-1-1-1-1-1-1 at the same 24.93 ms, whose first
// stage of input layers computes nothing on 2 replicas), then the one without a deferred step
// (its weights lag one update less).
bool ranks_before(const Candidate& a, const Candidate& b);

// `plan` under `kind`, simulated: ms per minibatch in the steady state, or 0 where its replica
// counts repeat too rarely to replay or the kind cannot run it.
double simulate_plan(const plan::Plan& plan, const profile::Profile& profile, const plan::Cluster& cluster,
                     const plan::PlanOptions& options, const std::string& kind = "pipedream");

// Data parallelism on every worker of `cluster` under `kind`, simulated: ms per minibatch, or 0
// where it does not fit the memory or cannot be replayed.
double simulate_data_parallel(const profile::Profile& profile, const plan::Cluster& cluster,
                              const plan::PlanOptions& options, const std::string& kind = "pipedream");
// The same at the bucket it runs fastest with (choose_bucket), from `at_options_ms`, its time at
// the options' bucket (0 stays 0): the baseline a plan whose own bucket was chosen is weighed
// against (at 25 MiB alone, pipedream 3-1 printed 1.23x over data parallelism where it is 0.85x).
double data_parallel_at_its_bucket(const profile::Profile& profile, const plan::Cluster& cluster,
                                   const plan::PlanOptions& options, const std::string& kind, double at_options_ms);

// The referee's choice: simulates each plan under `kind` (default minibatches: a steady state of
// whole rounds) and climbs from the fastest. Throws ConfigError when no candidate can be scheduled.
// With own_buckets, the first plan and data parallelism are ranked at last each with the bucket
// it runs fastest with (Candidate::bucket; data_parallel_ms is then data parallelism's best);
// else all with the options' bucket.
Refereed choose(const std::vector<plan::Plan>& candidates, const profile::Profile& profile,
                const plan::Cluster& cluster, const plan::PlanOptions& options, const std::string& kind = "pipedream",
                bool own_buckets = false);

// `plan --top K`: one row per candidate with predicted and simulated time, peak memory (the
// memory model's, under `memory`), and why it lost.
std::string format_top(const Refereed& r, const profile::Profile& profile, int k,
                       const schedule::MemoryOptions& memory = {});

// `plan --explain`: the chosen plan's per-stage compute, transfers per link, all-reduce, memory.
std::string format_explain(const Candidate& c, const profile::Profile& profile, const plan::Cluster& cluster,
                           const schedule::MemoryOptions& memory = {});

}  // namespace pt::referee
