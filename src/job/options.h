#pragma once
// What a pipeline job is asked to run, whatever the transport: the schedule and its settings,
// training's, checkpoints', the bucket and the cluster. make_job (job.h) turns them, with a
// plan, a model and the data, into the Job every worker runs.
#include <memory>
#include <string>

#include "core/json_doc.h"
#include "model/dataset.h"
#include "plan/cluster.h"
#include "plan/plan.h"
#include "runtime/checkpoint.h"
#include "runtime/trainer.h"
#include "runtime/worker.h"
#include "schedule/generators.h"

namespace pt::job {

// The longest wait for a peer (--timeout of train and calibrate): a week; far beyond it a deadline
// computed from now overflows the clock (calibrate --timeout 1e10 failed at once, saying it had
// waited 1e10 s).
inline constexpr double kMostTimeoutS = 604800;

struct PipelineOptions {
  std::string schedule = "pipedream";
  // train --schedule-file: the schedule to run, bound to the plan and validated
  // (schedule_file.h); it replaces the generator of `schedule` (then "file").
  std::shared_ptr<const schedule::Schedule> schedule_file;
  int microbatches = 4;       // per minibatch (synchronous schedules, 2bw)
  int chunks = 1;             // interleaved
  schedule::ActivationBudget activation_budget;  // zb-h1 and the V schedules (generators.h)
  schedule::ActionTimes action_times;            // interleaved-zb and the V schedules (generators.h)
  std::vector<std::string> order;  // the plan's compute order (schedule/given_order.h); empty: the generator's
  std::string order_source;        // names it in errors
  bool vertical_sync = false; // pipedream
  runtime::TrainOptions train;
  bool stash_weights = true;  // off only to show what stashing prevents (tests)
  bool weight_prediction = true;  // pipedream and 2bw (WorkerOptions::weight_prediction)
  int64_t stale_warmup = runtime::WorkerOptions{}.stale_warmup;  // pipedream (WorkerOptions::stale_warmup)
  bool sum_replica_gradients = false;  // pipedream (WorkerOptions::sum_replica_gradients)
  bool deferred_batch_norm = false;  // WorkerOptions::deferred_batch_norm
  bool record_weight_sums = false;
  bool timed_layers = false;  // the split was timed here (--stages without --profile): each layer ran
  std::string trace_source = "measured";  // the trace's label: "emulated" for --compute emulated
  double timeout_s = 30;      // longest wait for a peer (a transfer, an all-reduce) before the job fails
  double rendezvous_timeout_s = 300;  // gloo: longest wait for every worker to start (GlooConfig)
  runtime::CheckpointOptions checkpoint;
  // Gradient all-reduce buckets (gradient_buckets.h, --bucket-mb); 0: one, after the backward.
  int64_t bucket_bytes = runtime::WorkerOptions{}.bucket_bytes;
  // Where the workers are (train --cluster): with a hierarchical all-reduce the gloo transport
  // all-reduces a group that spans servers as Cluster::allreduce_units says. No levels: one ring.
  plan::Cluster cluster;
  // Where the plan and the cluster came from, to name them in errors ("the plan": made here).
  std::string plan_source = "the plan", cluster_source = "--cluster";
  // The command line as every worker must have it (apps/flag_digest.h: flag -> value, files by
  // their contents, per-worker outputs left out), compared at rendezvous with the rest of the
  // job's digest (job_digest.h).
  json command_line = json::object();
};

// Checks options against the plan and data; UsageError names the flag.
void check_pipeline_options(const PipelineOptions& options, const plan::Plan& plan, const model::DataSplit& data);

// The schedule `options` ask for over a segment of `minibatches` (0: the generator's default),
// generated and validated: the one road from a plan and options to the actions workers run.
schedule::Schedule generate_schedule(const plan::Plan& plan, const PipelineOptions& options, int minibatches);

}  // namespace pt::job
