#pragma once
// Plan: stages (sets of profile layers), replicas per stage, worker ids, predicted times
// (docs/design.md, "Plan"). Workers are numbered stage by stage: stage 0's replicas first.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/json_doc.h"
#include "profile/profile.h"

namespace pt::plan {

struct Stage {
  std::vector<int> layers;   // profile layer indices (a contiguous run for a chain)
  int replicas = 1;
  std::vector<int> workers;  // worker ids of the replicas, size == replicas
  // Activation recomputation: the stage keeps only its input per microbatch in flight and runs
  // its forward again inside the backward (train --recompute sets it on every stage).
  bool recompute = false;
  // PipeDream's NOAM for this plan: the minibatches a replica admits before its first backward
  // (the pipedream schedule's warm-up and weight versions). 0: PipeDream's rule,
  // paper_in_flight. The planner lowers it where the stages after this one return a gradient
  // sooner (planner.h, choose_in_flight).
  int in_flight = 0;
  // Predictions of the cost model that made the plan (0 when hand-written), per minibatch.
  double compute_ms = 0;     // forward + backward of one replica's share
  double comm_ms = 0;        // activation transfers + all-reduce attributed to the stage
  double time_ms = 0;        // the stage's time per minibatch (0: max(compute_ms, comm_ms))
  double stage_time_ms() const { return time_ms > 0 ? time_ms : std::max(compute_ms, comm_ms); }
};

struct Plan {
  // The stages' worker ids, each stage's replicas their own. Under an interleaved or V schedule
  // the stages are model chunks that share workers, which the schedule places (stage s on worker
  // s mod p interleaved, on min(s, 2p - 1 - s) in a V): here `workers` counts the chunks, and the
  // run takes the schedule's count (referee::as_run gives the plan as it runs, as `plan` writes it).
  int workers = 1;
  std::vector<Stage> stages;
  // A file that lists a worker on several stages (an interleaved or V plan as it runs): the
  // stages above are numbered a worker a stage all the same, and the file's placement is kept
  // here, stage by stage, with where it was read, for the schedule that runs the plan's kind to
  // check against its own (schedule/generator_util.h, check_shared_workers).
  std::vector<std::vector<int>> shared_workers;
  std::string shared_workers_source;
  std::string model;          // from the profile, when known
  // Layers that share a parameter (the profile's ties, profile.h), when known: check_plan_fits
  // holds them against a model's own, so a plan made for other ties is refused. (The runtime
  // goes by the model's ties whatever the plan says: tied_gradients.h.)
  std::vector<std::vector<int>> ties;
  int64_t batch_size = 0;     // the profile's batch size (minibatch) when known
  std::string cost_model;     // "pipetrain", "pipedream", "even", "hand"
  // How to run it, when the planner chose (the joint search) or the user wrote it: a schedule
  // kind, microbatches per minibatch and interleaved chunks ("" / 0: the train flags' defaults).
  // `train --plan` follows them unless --schedule, --microbatches or --chunks override.
  std::string schedule;
  int microbatches = 0;
  int chunks = 0;
  // pipedream: a replicated first stage steps after its next forward instead of before it, so
  // the tail of its all-reduce overlaps that forward; its weights lag one more update
  // (simulate --deferred-step sets it too).
  bool deferred_step = false;
  // The gradient all-reduce bucket, MiB, the plan was timed with (the planner chooses it where
  // replicas all-reduce; 0: one bucket after the backward; -1: not set, train's --bucket-mb).
  // `train --plan` follows it unless --bucket-mb overrides.
  double bucket_mb = -1;
  // How its replicas all-reduce ("ring" or "hierarchical"), where the planner timed an all-reduce
  // ("": the cluster's). `train --plan --cluster` and `simulate --plan` follow it unless
  // --allreduce says: a plan made with --allreduce hierarchical had simulated 50% slower from
  // its own file (VGG-16 data parallel on 4x2: 126.2 ms against the 84.1 it predicted).
  std::string allreduce;
  // The memory per worker it was planned to fit (`plan --memory`, or the cluster's
  // memory_bytes_per_worker; 0: none), and what of it the cluster set aside for a worker
  // process besides its tensors (its process_bytes, as calibrate measured them; 0: the cap was
  // the tensors'): `train --plan` says where a worker's measured peak is over it.
  int64_t memory_cap_bytes = 0;
  int64_t memory_cap_process_bytes = 0;
  // What the profile it was planned from measured (profile.h): the precision its layers computed
  // in and the optimizer whose step and state it weighed ("": not known). `train --plan` notes a
  // run that differs, as it notes a --profile's: the plan's times and memory are the profile's.
  std::string precision, optimizer;
  double pipeline_ms_per_minibatch = 0;
  double data_parallel_ms_per_minibatch = 0;
  // The simulator's steady state for the plan under `simulated_schedule` (0: not simulated).
  double simulated_ms_per_minibatch = 0;
  std::string simulated_schedule;
  // Where the joint search chose a schedule whose order it weighs by the profile and the cluster
  // (zb-h1, interleaved-zb, the V schedules): each worker's computes in the order it timed and
  // held to the memory cap, one string a worker of the run ("0F0 0F1 2F0 2B0 2W0 ..."). train and
  // simulate run it for this schedule, microbatches and chunks wherever they run
  // (schedule/given_order.h); empty: each orders its own.
  std::vector<std::string> order;
  std::vector<std::string> notes;  // the planner's remarks (e.g. graph coarsened); not in the JSON

  int num_stages() const { return static_cast<int>(stages.size()); }
  int stage_of_worker(int worker) const;   // -1 when the worker holds no stage
  int replica_index(int worker) const;     // position of the worker among its stage's replicas
  std::string shape() const;               // PipeDream's notation, e.g. "15-1"
  std::string split() const;               // each stage's layers, e.g. "0-1 | 2-4"
  // Whether `other`'s stages hold the same layers, stage by stage (two splits the search tries).
  bool same_split(const Plan& other) const {
    if (other.stages.size() != stages.size()) return false;
    for (size_t k = 0; k < stages.size(); ++k)
      if (stages[k].layers != other.stages[k].layers) return false;
    return true;
  }
};

inline constexpr int kPlanVersion = 1;
// Bounds on a plan's microbatches and chunks (the schedule generators' too: generators.h).
inline constexpr int kMaxMicrobatches = 4096;
inline constexpr int kMaxChunks = 64;
inline constexpr double kMaxBucketMb = 1 << 20;  // a plan's bucket_mb, MiB

json to_json(const Plan& p);
// The cluster a plan runs on: `cluster` with the plan's all-reduce unless --allreduce was given.
struct Cluster;
Cluster cluster_for_plan(Cluster cluster, const Plan& plan, bool allreduce_given);
// Missing stage "workers" are filled in stage by stage. Checks ids are consistent; ids shared by
// stages are read into `shared_workers` where the plan names a schedule.
Plan plan_from_json(const json& doc, const std::string& source);
Plan read_plan(const std::string& path);
void write_plan(const Plan& p, const std::string& path);  // atomic

// Checks the plan against a profile: every layer in exactly one stage, indices in range,
// each stage's inputs come from itself or earlier stages. Throws ConfigError naming both.
void check_plan_fits(const Plan& p, const profile::Profile& prof, const std::string& plan_source);

// Data parallelism as a plan: one stage of all `layers` layers on `replicas` workers.
Plan data_parallel_plan(int layers, int replicas);

// PipeDream's NOAM (SOSP'19 §3.2): ceil(replicas of stages s.. / replicas of stage s), from
// the replica counts of a plan's stages.
int paper_in_flight(const std::vector<int>& replicas, int s);
// Stage s's minibatches in flight under the pipedream schedule: its in_flight, or the paper's.
int in_flight(const Plan& p, int s);
// Stage s's weight versions under the pipedream schedule: one for each minibatch in flight, and
// one more on a replicated stage 0 whose step waits for its next forward (`deferred_step`).
int pipedream_weight_versions(const Plan& p, int s, bool deferred_step);
// The fewest stage s (not the last) may admit when stage s + 1 admits `next`: that stage runs
// forward k + (next - 1) x its replicas before backward k, and a replica of stage s admits a
// round's forwards only after the round (in flight - 1) back has stepped, that is after every
// backward of that round came back. Fewer, and the two stages' lists wait for each other.
int least_in_flight(const std::vector<int>& replicas, int s, int next);

// Assigns worker ids stage by stage (stage 0 gets 0..r0-1, ...) and sets p.workers.
void assign_workers(Plan& p);

}  // namespace pt::plan
