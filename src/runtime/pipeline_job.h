#pragma once
// A pipeline job's layout, which both transports share: its options, the schedule of each
// segment, the segments (training, evaluations, checkpoints) and the checks made before any
// worker starts. Below it, worker_runner.h runs one worker's share; above that, threads_job.h
// starts every worker as a thread of this process and gloo_job.h one per process.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/dataset.h"
#include "model/memory_meter.h"
#include "plan/plan.h"
#include "schedule/generators.h"
#include "runtime/checkpoint.h"
#include "runtime/checkpoint_lock.h"
#include "runtime/trainer.h"
#include "runtime/worker.h"
#include "schedule/generators.h"
#include "schedule/trace.h"

namespace pt::runtime {

struct PipelineOptions {
  std::string schedule = "pipedream";
  // train --schedule-file: the schedule to run, bound to the plan and validated
  // (schedule_file.h); it replaces the generator of `schedule` (then "file").
  std::shared_ptr<const schedule::Schedule> schedule_file;
  int microbatches = 4;       // per minibatch (synchronous schedules, 2bw)
  int chunks = 1;             // interleaved
  schedule::ActivationBudget activation_budget;  // zb-h1 and the V schedules (generators.h)
  bool vertical_sync = false; // pipedream
  TrainOptions train;
  bool stash_weights = true;  // off only to show what stashing prevents (tests)
  bool weight_prediction = true;  // pipedream (WorkerOptions::weight_prediction)
  int64_t stale_warmup = WorkerOptions{}.stale_warmup;  // pipedream (WorkerOptions::stale_warmup)
  bool deferred_batch_norm = false;  // WorkerOptions::deferred_batch_norm
  bool record_weight_sums = false;
  std::string trace_source = "measured";  // the trace's label: "emulated" for --compute emulated
  double timeout_s = 30;      // longest wait for a peer (a transfer, an all-reduce) before the job fails
  double rendezvous_timeout_s = 300;  // gloo: longest wait for every worker to start (GlooConfig)
  CheckpointOptions checkpoint;
  // Gradient all-reduce buckets (gradient_buckets.h, --bucket-mb); 0: one, after the backward.
  int64_t bucket_bytes = WorkerOptions{}.bucket_bytes;
  // Where the workers are (train --cluster): with a hierarchical all-reduce the gloo transport
  // all-reduces a group that spans servers as Cluster::allreduce_units says. No levels: one ring.
  plan::Cluster cluster;
  // The command line as every worker must have it (apps/flag_digest.h: flag -> value, files by
  // their contents, per-worker outputs left out), compared at rendezvous with the rest of the
  // job's digest (job_digest.h).
  json command_line = json::object();
};

// What every worker of the job runs with (both transports).
WorkerOptions worker_options(const PipelineOptions& o, const model::OptimizerOptions& sgd);

struct PipelineResult {
  TrainResult train;
  schedule::Trace trace;      // what ran ("measured")
  int workers = 0;
  int stages = 0;
  int reporting = 0;          // the worker whose TrainResult is the job's (reporting_worker)
};

// Builds the model holding the layers given (model::LayerSet): each worker asks for its stages'
// only (docs/runtime.md, "A worker holds only its stage"), and the job first for none, a
// description (names, graph, ties) to check the plan against.
using ModelFactory = std::function<std::shared_ptr<model::LayeredModel>(const model::LayerSet&)>;

// The model of worker `worker` of `probe`: its stages' layers, every allocation of the building
// charged to `account` (model/memory_meter.h), so the worker's measured memory holds its weights.
std::shared_ptr<model::LayeredModel> build_worker_model(const ModelFactory& factory, const schedule::Schedule& probe,
                                                        int worker, const std::shared_ptr<model::MemoryAccount>& account);

// The minibatches run by each schedule repetition: synchronous schedules one at a time;
// asynchronous ones an epoch at a time (the pipeline drains at each epoch's end, where test
// accuracy is measured), in multiples of every stage's replica count, and cut every
// `checkpoint_every` and every `eval_every` minibatches (each rounded up to that multiple) so
// that checkpoints and evaluations see a drained pipeline.
// Training starts at minibatch `first_step` (a resumed checkpoint's step).
struct Segment {
  int64_t first_minibatch = 0;
  int minibatches = 1;
  bool ends_epoch = false;
  int64_t epoch = 0;
  bool checkpoint = false;  // a checkpoint is written after it
  bool evaluate = false;    // test accuracy is measured after it (epoch ends and eval_every)
};
std::vector<Segment> plan_segments(const schedule::Schedule& probe, const plan::Plan& plan, int64_t per_epoch,
                                   int64_t total_steps, int64_t first_step = 0, int64_t checkpoint_every = 0,
                                   int64_t eval_every = 0);

// What a job runs, worked out identically by every worker of every transport.
// CRC-32 of a tensor's bytes (contiguous, on the CPU); 0 for an undefined one.
uint32_t tensor_crc32(const torch::Tensor& t);
// What checkpoints record of the data (checkpoint_manifest.h).
DataIdentity data_identity(const model::DataSplit& data);

struct JobLayout {
  schedule::Schedule probe;  // the schedule of a typical segment: placement, stages, microbatches
  std::vector<Segment> segments;
  int64_t per_epoch = 0;     // minibatches per epoch
  int64_t steps = 0;         // minibatches run, over all segments
  int64_t first_step = 0;    // where training starts: 0, or the resumed checkpoint's step
  model::OptimizerOptions sgd;   // o.train.sgd with total_steps filled in
  std::string run_id;        // written into this run's checkpoints (start_checkpoints)
  std::string resume_from;   // the verified checkpoint resumed (empty: none)
  CheckpointManifest resume_manifest;
  DataIdentity data;         // data_identity(data), once (a CRC over the training set)
  std::shared_ptr<CheckpointLock> lock;  // the checkpoint folder's, held by the leading process
};
// Also starts the run's checkpoints (start_checkpoints): call it once per worker process.
// `leads`: this process leads the job's checkpoints (worker 0's), and holds the folder's lock
// (checkpoint_lock.h) for as long as the layout lives.
JobLayout layout_job(const plan::Plan& plan, const PipelineOptions& o, const model::DataSplit& data,
                     bool leads = true);
// The worker that holds the last stage's replica 0: it reports losses and test accuracy.
int reporting_worker(const schedule::Schedule& s);

// A job's result before its workers report: its shape and the trace's header, one (empty)
// event list per worker; both transports fill in the rest.
PipelineResult result_header(const schedule::Schedule& probe, const PipelineOptions& o);
// The schedule of a typical segment (JobLayout::probe), without the rest of the layout.
schedule::Schedule job_probe(const plan::Plan& plan, const PipelineOptions& o);

// Before anything is written: ConfigError where the schedule would train a parameter that the
// model's layers share (tied_gradients.h) wrong.
void check_ties(const model::LayeredModel& m, const plan::Plan& plan, const PipelineOptions& o);

// Before any worker starts: a resumed checkpoint must be of this model, batch size, seed and data.
void check_resume_fits(const JobLayout& job, const PipelineOptions& o, const model::LayeredModel& m);

// Generates (and validates) the schedule for a segment of `minibatches`.
schedule::Schedule schedule_for(const plan::Plan& plan, const PipelineOptions& o, int minibatches);

// Checks options against the plan and data; UsageError names the flag.
void check_pipeline_options(const PipelineOptions& o, const plan::Plan& plan, const model::DataSplit& data);

}  // namespace pt::runtime
