#pragma once
// A pipeline job, worked out once: the plan, the options, one validated schedule per segment
// length, the segments, what every worker runs with, the reporting worker and where a resumed
// run starts (the digest the workers compare is job_digest.h's, of the Job). make_job runs every check a job needs before
// any worker starts; the transports (threads_job.h, gloo_job.h) and the worker runner
// (worker_runner.h) take the Job as given, and the reports read the same schedules.
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "job/options.h"
#include "job/segments.h"
#include "model/dataset.h"
#include "model/layered_model.h"
#include "model/memory_meter.h"
#include "plan/plan.h"
#include "runtime/checkpoint.h"
#include "runtime/trainer.h"
#include "runtime/worker.h"
#include "schedule/trace.h"

namespace pt::job {

struct Job {
  plan::Plan plan;
  PipelineOptions options;
  // The schedule of a typical segment: placement, stages, microbatches (every segment's share them).
  std::shared_ptr<const schedule::Schedule> typical;
  std::vector<Segment> segments;
  int64_t per_epoch = 0;     // minibatches per epoch
  int64_t steps = 0;         // minibatches run, over all segments
  int64_t first_step = 0;    // where training starts: 0, or the resumed checkpoint's step
  runtime::WorkerOptions worker;  // every worker's; its optimizer has total_steps filled in
  int reporting = 0;         // the worker that holds the last stage's replica 0: it reports
  std::string run_id;        // written into this run's checkpoints (start_checkpoints)
  std::string resume_from;   // the verified checkpoint resumed (empty: none)
  runtime::CheckpointManifest resume_manifest;
  runtime::DataIdentity data;  // data_identity(data), once (a CRC over the training set)
  // Where the workers outnumber the host's cores: the core each is pinned to (core_pinning.h,
  // place_workers); empty: none pinned.
  std::vector<int> cores_of_workers;
  // gloo: the reporting worker gathers every worker's trace after training (trace_gather.h), to
  // set the run against its simulation (a request with a profile).
  bool gather_traces = false;

  int workers() const { return typical->num_workers(); }
  // The first and the last step trained (1-based positions in the data's order): pipedream's
  // replicas skip the minibatches of an epoch's end short of a round, which `steps` does not count
  // (resumed after an epoch of 15 of 16, a run of 30 printed 16..45 where it trained 17..47).
  int64_t first_step_trained() const { return (segments.empty() ? first_step : segments.front().first_minibatch) + 1; }
  int64_t last_step_trained() const {
    return segments.empty() ? first_step + steps : segments.back().first_minibatch + segments.back().minibatches;
  }
  const model::OptimizerOptions& optimizer() const { return worker.sgd; }
  // The schedule of a segment, made with the job.
  const schedule::Schedule& schedule_of(const Segment& segment) const;
  // The schedule over `minibatches` (0: the typical one's default), for a report or a
  // prediction: a segment's where the job made one, else generated (and kept) on first use.
  std::shared_ptr<const schedule::Schedule> schedule_over(int minibatches) const;

 private:
  friend Job make_job(const plan::Plan&, const PipelineOptions&, const model::LayeredModel&, const model::DataSplit&,
                      bool);
  mutable std::shared_ptr<std::mutex> mutex_ = std::make_shared<std::mutex>();
  mutable std::map<int, std::shared_ptr<const schedule::Schedule>> schedules_;  // segment length -> schedule
};

// Every check before any worker starts, once: the options against the plan and data, the ties
// the schedule splits (tied_gradients.h), whole replica rounds, the checkpoint folder (started:
// start_checkpoints) and the checkpoint resumed. `described`: the model's description (names,
// graph, ties; model::LayerSet::none()). `leads`: this process leads the job (the threads
// transport, a launcher, or rank 0 of a gloo job started elsewhere): it says the notes and finds
// a checkpoint folder another run holds.
Job make_job(const plan::Plan& plan, const PipelineOptions& options, const model::LayeredModel& described,
             const model::DataSplit& data, bool leads = true);

struct PipelineResult {
  runtime::TrainResult train;
  schedule::Trace trace;      // what ran ("measured")
  int workers = 0;
  int stages = 0;
  int reporting = 0;          // the worker whose TrainResult is the job's (Job::reporting)
  // gloo: the workers shared one host's memory for their transfers (shared_memory_per_worker).
  bool shared_memory = false;
  std::string trace_unwritten;  // gloo: why this worker's part of --trace could not be written
};
// A job's result before its workers report: its shape and the trace's header, one (empty)
// event list per worker; both transports fill in the rest.
PipelineResult result_header(const Job& job);

// What sets an asynchronous run's weight lag, as checkpoints record it: the schedule, each stage's
// layers and replicas, and the flags of its lag ("pipedream on plan 2-1: layers 0-1 | 2-4; weight
// prediction on; ..."); "" for a synchronous schedule, whose split and flags change no weight.
std::string weight_lag(const Job& job);

// Builds the model holding the layers given (model::LayerSet): each worker asks for its stages'
// only (docs/runtime.md, "A worker holds only its stage"), and the job first for none, a
// description (names, graph, ties) to check the plan against.
using ModelFactory = std::function<std::shared_ptr<model::LayeredModel>(const model::LayerSet&)>;

// The model of worker `worker`: its stages' layers, every allocation of the building charged to
// `account` (model/memory_meter.h), so the worker's measured memory holds its weights.
std::shared_ptr<model::LayeredModel> build_worker_model(const ModelFactory& factory, const Job& job, int worker,
                                                        const std::shared_ptr<model::MemoryAccount>& account);

// CRC-32 of a tensor's bytes (contiguous, on the CPU); 0 for an undefined one.
uint32_t tensor_crc32(const torch::Tensor& t);
// CRC-32 of a set's inputs as the model takes them: images kept as bytes are scaled a slice at a
// time, so checkpoints and digests name the same data as when they were held as floats.
uint32_t inputs_crc32(const model::Dataset& d);
// What checkpoints record of the data (checkpoint_manifest.h).
runtime::DataIdentity data_identity(const model::DataSplit& data);

}  // namespace pt::job
